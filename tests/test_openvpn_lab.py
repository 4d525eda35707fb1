"""The tunnel zone follows a real OpenVPN 2.6 tunnel, in the namespace lab.

Real OpenVPN server and client, real pushes (`dhcp-option` and 2.6's `dns` style), both
learning paths (the management interface with --management-up-down, and the hook as --up and
--down script). Its figures are printed (run with -s): how fast the tunnel
zone answers while the tunnel is down, the cluster zone's latency meanwhile, and how long the
zone takes to follow a new pushed address.
"""

from __future__ import annotations

import json
import secrets
import signal
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from splitdns.shell import openvpn
from tests.lab import Lab, PodSpec, configs
from tests.lab.fixtures import require_lab
from tests.lab.netns import signal_proc, wait_for
from tests.lab.ready import wait_log

pytestmark = pytest.mark.netns

MANAGEMENT_CLIENT = "management-up-down\nmanagement-hold\n"

# Sends each name to the pod's resolver and prints one JSON line per answer (runs in the pod).
ASK = """\
import json, sys, time
import dns.edns, dns.exception, dns.message, dns.query, dns.rcode
for name in sys.argv[1:]:
    q = dns.message.make_query(name, "A", use_edns=0)
    t = time.perf_counter()
    try:
        r = dns.query.udp(q, "127.0.0.1", timeout=3)
    except dns.exception.Timeout:
        print(json.dumps({"name": name, "rcode": "TIMEOUT", "ms": 3000, "ede": "", "a": []}))
        continue
    ms = (time.perf_counter() - t) * 1000
    ede = " ".join(o.text or "" for o in r.options if isinstance(o, dns.edns.EDEOption))
    a = [x.to_text() for rr in r.answer for x in rr]
    print(json.dumps({"name": name, "rcode": dns.rcode.to_text(r.rcode()), "ms": ms, "ede": ede, "a": a}))
"""


def ask(lab: Lab, *names: str) -> list[dict[str, object]]:
    out = lab.pod_exec([sys.executable, "-c", ASK, *names], timeout=60)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def fresh(zone: str, n: int = 1) -> list[str]:
    return [f"t{secrets.token_hex(4)}.{zone}" for _ in range(n)]


@pytest.fixture
def lab_factory() -> Iterator[list[Lab]]:
    require_lab()
    labs: list[Lab] = []
    yield labs
    for lab in labs:
        lab.down()


def start(labs: list[Lab], pod: PodSpec, pushes: tuple[str, ...] = configs.DHCP_PUSHES) -> Lab:
    lab = Lab(pod, pushes=pushes)
    labs.append(lab)
    return lab.up()


def answer_of(lab: Lab, name: str = configs.DB_NAME) -> str:
    return lab.dig_short(name, "+tries=1", "+time=2")


def drop_tunnel(lab: Lab) -> float:
    """The VPN server dies, the client notices (SIGUSR1: as on ping-restart, without the 10 s)."""
    lab.stop_vpn_server()
    signal_proc(lab.procs["vpn-client"], signal.SIGUSR1)
    return time.monotonic()


def test_management_interface_learns_the_push_fails_fast_and_follows_a_new_address(
        lab_factory: list[Lab]) -> None:
    lab = start(lab_factory, PodSpec(corefile=configs.TUNNEL_COREFILE, vpn_extra=MANAGEMENT_CLIENT))
    # Learned from >UPDOWN:ENV (dhcp-option DNS 192.168.240.1): no address in the Corefile. A
    # fresh name, so that db itself is not cached when the pushed address changes below.
    wait_for(lambda: answer_of(lab, fresh(configs.PRIVATE_ZONE)[0]) == configs.CORP_WILDCARD_IP or None,
             what="the tunnel zone", timeout=10)
    baseline = ask(lab, *fresh("default.svc.cluster.local", 30))

    dropped = drop_tunnel(lab)
    first = wait_for(lambda: next((r for r in ask(lab, *fresh(configs.PRIVATE_ZONE))
                                   if r["rcode"] == "SERVFAIL"), None), what="fail-fast", timeout=10)
    noticed = time.monotonic() - dropped
    assert "the tunnel is down" in str(first["ede"]), first
    down = ask(lab, *fresh(configs.PRIVATE_ZONE, 30))
    during = ask(lab, *fresh("default.svc.cluster.local", 30))
    tunnel_ms = [float(r["ms"]) for r in down]  # type: ignore[arg-type]
    cluster_ms = [float(r["ms"]) for r in during]  # type: ignore[arg-type]
    base_ms = [float(r["ms"]) for r in baseline]  # type: ignore[arg-type]
    print(f"\ntunnel down: noticed {noticed * 1000:.0f} ms after the drop; tunnel-zone SERVFAIL "
          f"median {statistics.median(tunnel_ms):.2f} ms, max {max(tunnel_ms):.2f} ms; cluster zone "
          f"median {statistics.median(base_ms):.2f} -> {statistics.median(cluster_ms):.2f} ms, "
          f"max {max(base_ms):.2f} -> {max(cluster_ms):.2f} ms")
    assert all(r["rcode"] == "SERVFAIL" and "tunnel is down" in str(r["ede"]) for r in down)
    assert max(tunnel_ms) < 500  # at once (tens of ms, printed above), never the 2 s timeout
    assert all(r["rcode"] == "NXDOMAIN" for r in during)  # answered by the cluster DNS, as before
    assert max(cluster_ms) < 500

    # The tunnel comes back, and the server now pushes another DNS address.
    lab.start_vpn_server(tuple(p.replace(configs.CORP_DNS_IP, configs.CORP_DNS2_IP)
                               for p in configs.DHCP_PUSHES))
    log = lab.procs["vpn-client"].log
    connected = log.read_text().count("Initialization Sequence Completed")
    wait_for(lambda: log.read_text().count("Initialization Sequence Completed") > connected or None,
             what="the client to reconnect", timeout=15)
    up_at = time.monotonic()
    # A fresh name gets an answer again (the second DNS has no wildcard: NXDOMAIN is an answer).
    wait_for(lambda: ask(lab, *fresh(configs.PRIVATE_ZONE))[0]["rcode"] != "SERVFAIL" or None,
             what="the zone to follow", timeout=1.0)
    followed = time.monotonic() - up_at
    print(f"followed the new pushed DNS {followed * 1000:.0f} ms after the tunnel came back")
    assert answer_of(lab) == configs.DB_IP_VIA_DNS2  # the second private DNS answered


def test_openvpn_26_dns_options_are_understood(lab_factory: list[Lab]) -> None:
    lab = start(lab_factory, PodSpec(corefile=configs.TUNNEL_COREFILE, vpn_extra=MANAGEMENT_CLIENT),
                pushes=configs.DNS_PUSHES)
    wait_for(lambda: answer_of(lab) == configs.DB_IP or None, what="the tunnel zone", timeout=10)
    assert answer_of(lab, configs.KUBERNETES_NAME) == configs.KUBERNETES_IP


def test_the_hook_state_file_path(lab_factory: list[Lab], tmp_path: Path) -> None:
    state = tmp_path / "openvpn.json"
    hook = f"{sys.executable} -m splitdns openvpn-hook --state {state}"
    corefile = configs.TUNNEL_COREFILE.replace("management 127.0.0.1:7505", f"state {state}")
    pod = PodSpec(corefile=corefile, vpn_management=False,
                  vpn_extra=f'script-security 2\nup "{hook}"\ndown "{hook}"\n')
    lab = start(lab_factory, pod)
    wait_for(lambda: answer_of(lab) == configs.DB_IP or None, what="the tunnel zone", timeout=10)
    assert json.loads(state.read_text())["servers"] == [[configs.CORP_DNS_IP, 53]]
    dropped = drop_tunnel(lab)
    wait_for(lambda: json.loads(state.read_text())["status"] == "down" or None, what="the down script",
             timeout=10)
    written = time.monotonic() - dropped
    # The server reads the file every openvpn.POLL seconds: a query inside that window still
    # goes to the dead upstream and waits out its timeout (3 s, longer than the wait below).
    # Once it has seen the file, every answer must come at once.
    wait_log(lab.procs["resolver"], "plugin/openvpn: the tunnel is down (down script ran",
             timeout=openvpn.POLL + 2)
    first = wait_for(lambda: next((r for r in ask(lab, *fresh(configs.PRIVATE_ZONE))
                                   if r["rcode"] == "SERVFAIL"), None), what="fail-fast", timeout=2)
    print(f"\nhook path: down state written {1000 * written:.0f} ms after the drop, tunnel zone "
          f"failing fast {1000 * (time.monotonic() - dropped):.0f} ms after it "
          f"({first['ms']:.2f} ms per answer): {first['ede']}")
    assert "down script ran" in str(first["ede"]) and float(first["ms"]) < 100  # type: ignore[arg-type]


def test_a_pushed_dns_that_is_ourselves_is_caught_by_the_loop_guard(lab_factory: list[Lab]) -> None:
    pushes = ("route 192.168.240.0 255.255.255.0", "dhcp-option DNS 127.0.0.1")
    corefile = configs.TUNNEL_COREFILE.replace("    openvpn {", "    loop\n    openvpn {")
    pod = PodSpec(corefile=corefile, vpn_extra=MANAGEMENT_CLIENT, tunnel_zone_works=False)
    lab = start(lab_factory, pod, pushes=pushes)
    reply = wait_for(lambda: next((r for r in ask(lab, *fresh(configs.PRIVATE_ZONE))
                                   if "loop" in str(r["ede"])), None), what="the loop guard", timeout=10)
    assert reply["rcode"] == "SERVFAIL" and float(reply["ms"]) < 100  # type: ignore[arg-type]
    assert answer_of(lab, configs.KUBERNETES_NAME) == configs.KUBERNETES_IP  # others untouched
    assert lab.procs["resolver"].running()
    assert "pushed 127.0.0.1:53" in lab.procs["resolver"].log.read_text()


def test_management_client_reconnects_when_openvpn_restarts(lab_factory: list[Lab]) -> None:
    from tests.lab.netns import stop_all

    lab = start(lab_factory, PodSpec(corefile=configs.TUNNEL_COREFILE, vpn_extra=MANAGEMENT_CLIENT))
    wait_for(lambda: answer_of(lab, fresh(configs.PRIVATE_ZONE)[0]) == configs.CORP_WILDCARD_IP or None,
             what="the tunnel zone", timeout=10)
    stop_all([lab.procs.pop("vpn-client")], grace=1.0)  # the VPN container restarts
    gone = wait_for(lambda: next((r for r in ask(lab, *fresh(configs.PRIVATE_ZONE))
                                  if r["rcode"] == "SERVFAIL"), None), what="fail-fast", timeout=5)
    assert "management interface" in str(gone["ede"]) or "tunnel is down" in str(gone["ede"])
    lab._start("vpn-client", "pod", ["openvpn", "--config", str(lab.dir / "client.ovpn")])
    back = time.monotonic()
    wait_for(lambda: answer_of(lab, fresh(configs.PRIVATE_ZONE)[0]) == configs.CORP_WILDCARD_IP or None,
             what="the tunnel zone after OpenVPN restarted", timeout=15)
    print(f"\nOpenVPN restarted: the zone answered again {time.monotonic() - back:.2f} s after its exec")
