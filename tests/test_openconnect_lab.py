"""A real OpenConnect tunnel (ocserv and openconnect) in the namespace lab, our vpnc-script,
and the pod's resolver following it (`openconnect { state FILE; domains }`).

The pod runs a stock openconnect with our hook as its `--script`: the tunnel comes up, the
corp DNS answers through it (dig from the pod, seen at the corp DNS as the gateway's SNAT
address), the hook records what ocserv pushed and leaves the pod's resolv.conf alone. The
resolver answers both zones; openconnect disconnecting (state file removed), dying (the tun
device goes) or reconnecting (the gateway died, or a network blip its dead peer detection saw)
makes the tunnel zone fail fast with the cluster zone untouched, and it answers again when
openconnect is back or has resumed the session, with no restart;
`splitdns verify` tells naming from routing. Figures are printed (run with -s).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import dns.edns
import dns.exception
import dns.message
import dns.query
import dns.rcode
import pytest

from splitdns.core import openconnect as oc
from tests.lab import Lab, configs
from tests.lab.fixtures import lab_session, require_lab
from tests.lab.netns import ns_run, socket_in, wait_for
from tests.lab.openconnect import OpenConnectLab, missing_prerequisite
from tests.support.prerequisites import skip_or_fail
from tests.test_openvpn_lab import ask, fresh
from tests.test_verify_lab import verify_in_pod

pytestmark = pytest.mark.netns


def require_openconnect() -> None:
    require_lab()
    reason = missing_prerequisite()
    if reason is not None:
        skip_or_fail(reason)


@pytest.fixture(scope="module")
def lab() -> Iterator[OpenConnectLab]:
    require_openconnect()
    with lab_session(OpenConnectLab()) as running:
        assert isinstance(running, OpenConnectLab)
        yield running


def dig_corp(lab: Lab, name: str = configs.DB_NAME) -> str:
    """Ask the corp DNS itself from the pod (not the resolver): only the tunnel reaches it.
    dig's stdout: the address, or its complaint that no server could be reached."""
    out = lab.pod_exec(["dig", f"@{configs.CORP_DNS_IP}", name, "+short", "+time=1", "+tries=1"])
    return out.stdout.strip()


CAP_NET_BIND_SERVICE, CAP_NET_ADMIN = 10, 12


def capabilities(pid: int) -> int:
    """The most the process can ever hold: its capability bounding set (/proc/PID/status CapBnd),
    as a bit mask. (charon drops what it no longer needs once started; the bound stays.)"""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    line = next(entry for entry in status if entry.startswith("CapBnd:"))
    return int(line.split()[1], 16)


def probe(lab: Lab, timeout: float = 0.1) -> tuple[int, str, list[str]] | None:
    """A fresh tunnel-zone name asked from this process through a socket in the pod (no
    interpreter to start, so times are measured to ~10 ms; a query that went to a dead tunnel
    costs `timeout`): rcode, EDE text, addresses; None on no answer."""
    query = dns.message.make_query(fresh(configs.PRIVATE_ZONE)[0], "A", use_edns=0)
    with socket_in(lab.pod) as sock:
        sock.setblocking(False)
        try:
            reply = dns.query.udp(query, "127.0.0.1", timeout=timeout, sock=sock)
        except dns.exception.Timeout:
            return None
    ede = " ".join(o.text or "" for o in reply.options if isinstance(o, dns.edns.EDEOption))
    return reply.rcode(), ede, [rr.to_text() for rrset in reply.answer for rr in rrset]


def servfail(lab: Lab) -> dict[str, str] | None:
    got = probe(lab)
    return {"ede": got[1]} if got is not None and got[0] == dns.rcode.SERVFAIL else None


def answered(lab: Lab) -> bool | None:
    got = probe(lab)
    return True if got is not None and got[2] == [configs.CORP_WILDCARD_IP] else None


# The zone's upstream sockets are bound to the tun device: once it is gone, a query that the
# watcher has not caught yet fails at once too, with the kernel's word for it.
NO_DEVICE = "send failed: No such device"


def fails_fast(lab: Lab, cut: Callable[[], None], what: str, reason: str) -> float:
    """Cut the tunnel; wait for the zone's first SERVFAIL (the watcher's `reason`, or the kernel's
    NO_DEVICE when the tun device went first); then 30 fresh names of each zone: the tunnel zone
    fails fast with the watcher's reason, the cluster zone answers as before. Prints the figures,
    returns how long the resolver took to notice (ms, from the start of the cut: a SIGTERM'd
    client's goodbye, or a SIGKILL'd one's device going, is part of it)."""
    baseline = ask(lab, *fresh("default.svc.cluster.local", 30))
    began = time.monotonic()
    cut()
    cut_at = time.monotonic()
    first = wait_for(lambda: servfail(lab), what="fail-fast", timeout=10, interval=0.01)
    noticed = 1000 * (time.monotonic() - began)
    if reason not in first["ede"]:
        # The kernel's NO_DEVICE came first (the bound sockets' device went): the watcher's own
        # word follows within its 200 ms poll, and the names below are asked after it.
        wait_for(lambda: next((r for r in [servfail(lab)] if r and reason in r["ede"]), None),
                 what="the watcher's reason", timeout=5, interval=0.01)
    down = ask(lab, *fresh(configs.PRIVATE_ZONE, 30))
    during = ask(lab, *fresh("default.svc.cluster.local", 30))
    tunnel_ms = [float(r["ms"]) for r in down]  # type: ignore[arg-type]
    cluster_ms = [float(r["ms"]) for r in during]  # type: ignore[arg-type]
    base_ms = [float(r["ms"]) for r in baseline]  # type: ignore[arg-type]
    after = noticed - 1000 * (cut_at - began)
    print(f"\n{what}: noticed {noticed:.0f} ms after the cut began ({after:.0f} ms after it was "
          f"done); tunnel-zone SERVFAIL median "
          f"{statistics.median(tunnel_ms):.2f} ms, max {max(tunnel_ms):.2f} ms; cluster zone median "
          f"{statistics.median(base_ms):.2f} -> {statistics.median(cluster_ms):.2f} ms")
    assert reason in first["ede"] or NO_DEVICE in first["ede"], first
    assert all(r["rcode"] == "SERVFAIL" and "the tunnel is down (" in str(r["ede"])
               and reason in str(r["ede"]) for r in down), down
    assert max(tunnel_ms) < 500
    assert all(r["rcode"] == "NXDOMAIN" for r in during) and max(cluster_ms) < 500
    return noticed


def comes_back(lab: Lab, restore: Callable[[], None], what: str) -> None:
    resolver_pid = lab.procs["resolver"].pid
    restore()
    back_at = time.monotonic()
    wait_for(lambda: answered(lab), what=f"the zone after {what}", timeout=10, interval=0.01)
    print(f"{what}: the zone answered {1000 * (time.monotonic() - back_at):.0f} ms after")
    assert lab.procs["resolver"].pid == resolver_pid  # no restart


def test_the_corp_dns_answers_the_pod_through_the_openconnect_tunnel(lab: OpenConnectLab) -> None:
    assert dig_corp(lab) == configs.DB_IP
    # Through the tunnel and the gateway's SNAT (the corp DNS sees the gateway's address).
    assert any(q.client == configs.CORP_GW_IP and q.name == configs.DB_NAME for q in lab.queries("corp"))
    routes = ns_run(lab.pod, ["ip", "route", "show", "192.168.240.0/24"])
    assert f"dev {lab.iface}" in routes, routes  # the split-include route, set by the stock vpnc-script
    # Up as its container would run it: root, with NET_ADMIN alone (tun device, address, routes).
    assert capabilities(lab.procs["vpn-client"].pid) == 1 << CAP_NET_ADMIN
    tcp = lab.tcp_connect(configs.DB_NAME, configs.DB_PORT)
    assert tcp.ok, tcp.detail


def test_the_resolver_answers_both_zones_following_openconnect(lab: OpenConnectLab) -> None:
    assert lab.dig_short(configs.KUBERNETES_NAME) == configs.KUBERNETES_IP
    assert lab.dig_short(configs.DB_NAME) == configs.DB_IP
    assert lab.dig_short(configs.CATCHALL_NAME) == configs.CATCHALL_IP


def test_the_hook_records_what_ocserv_pushed_and_leaves_resolv_conf_alone(lab: OpenConnectLab) -> None:
    recorded = oc.parse(lab.state_file.read_text(), str(lab.state_file))
    assert recorded.reason == "connect" and recorded.tundev == lab.iface
    assert recorded.servers == (configs.CORP_DNS_IP,)
    assert recorded.default_domains == (f"{configs.PRIVATE_ZONE}.",)
    assert recorded.split_domains == (f"{configs.PRIVATE_ZONE}.",)
    # `ip netns exec` shows the pod its /etc/netns/<pod>/resolv.conf: what a vpnc-script would rewrite.
    assert lab.pod_exec(["cat", "/etc/resolv.conf"]).stdout == lab.pod_spec.resolv_conf


def test_openconnect_stopping_removes_the_state_and_the_tunnel_then_it_comes_back(
        lab: OpenConnectLab) -> None:
    lab.stop_vpn_client()  # SIGTERM, as the kubelet stops the VPN container: `disconnect` runs
    stopped = time.monotonic()
    wait_for(lambda: True if not lab.state_file.exists() else None, what="the state file to go", timeout=5)
    print(f"\nopenconnect stopped: state file gone {1000 * (time.monotonic() - stopped):.0f} ms "
          "after SIGTERM")
    assert ns_run(lab.pod, ["ip", "link", "show", lab.iface], check=False) == ""
    assert "no servers could be reached" in dig_corp(lab)  # no tunnel, no route to the corp DNS
    assert lab.pod_exec(["cat", "/etc/resolv.conf"]).stdout == lab.pod_spec.resolv_conf
    started = time.monotonic()
    lab.start_vpn_client()
    print(f"openconnect started: state file written {1000 * (time.monotonic() - started):.0f} ms "
          "after")
    wait_for(lambda: True if dig_corp(lab) == configs.DB_IP else None, what="the corp DNS again", timeout=5)


def test_openconnect_disconnecting_fails_fast_and_connecting_again_answers(lab: OpenConnectLab) -> None:
    fails_fast(lab, lab.stop_vpn_client, "openconnect disconnected (SIGTERM)", "no state file at")
    comes_back(lab, lab.start_vpn_client, "openconnect connected again")


def test_the_vpn_container_dying_is_noticed_from_the_tun_device(lab: OpenConnectLab) -> None:
    """SIGKILL: no `disconnect` runs, the state file stays; the device going is what tells."""
    fails_fast(lab, lab.kill_vpn_client, "openconnect killed", f"interface {lab.iface} is gone or down")
    assert lab.state_file.exists()
    comes_back(lab, lab.start_vpn_client, "openconnect restarted")


def test_the_gateway_dying_fails_fast_while_openconnect_reconnects(lab: OpenConnectLab) -> None:
    """The session ends under openconnect: it runs `attempt-reconnect` before each try, and the
    hook marks the state file so. (A new ocserv rejects the old session's cookie, so the VPN
    container is restarted to come back, as a crash-looping one would be.)"""
    fails_fast(lab, lab.stop_vpn_server, "ocserv killed", "openconnect lost the gateway and is reconnecting")
    assert oc.parse(lab.state_file.read_text(), "state").reason == "attempt-reconnect"
    lab.kill_vpn_client()
    lab.start_vpn_server()
    comes_back(lab, lab.start_vpn_client, "ocserv and openconnect restarted")


def test_a_network_blip_is_noticed_by_dpd_and_the_session_resumes(lab: OpenConnectLab) -> None:
    """The gateway's TCP port drops everything for a while: openconnect's dead peer detection
    (ocserv's `dpd = 2`) runs attempt-reconnect, the zone fails fast saying so; once packets
    flow again openconnect resumes the session (`reconnect`, same cookie) and the zone answers."""
    vpn, rule = lab.ns("vpn"), ["INPUT", "-p", "tcp", "--dport", "443", "-j", "DROP"]
    ns_run(vpn, ["iptables", "-I", *rule])
    try:
        cut_at = time.monotonic()
        first = wait_for(lambda: next((r for r in [servfail(lab)] if r and "reconnecting" in r["ede"]), None),
                         what="openconnect's dead peer detection", timeout=15, interval=0.05)
        print(f"\nnetwork blip: the zone says openconnect is reconnecting "
              f"{1000 * (time.monotonic() - cut_at):.0f} ms after (DPD): {first['ede']}")
    finally:
        comes_back(lab, lambda: ns_run(vpn, ["iptables", "-D", *rule]), "the network back")
    assert oc.parse(lab.state_file.read_text(), "state").reason == "reconnect"


def verify_separates_naming_from_routing(lab: Lab, tmp_path: Path) -> None:
    """`splitdns verify` in the pod: all good, then (the gateway's SNAT removed) names resolve
    but connections fail, and it says so."""
    code, text, _ = verify_in_pod(lab, tmp_path / "healthy")
    assert code == 0, text
    lab.set_masquerade(False)
    try:
        code, text, data = verify_in_pod(lab, tmp_path / "routing")
    finally:
        lab.set_masquerade(True)
    assert code == 5, text
    assert "Names resolve, connections fail: this is routing" in text
    assert data["verdict"]["code"] == "routing"  # type: ignore[index]


def test_verify_separates_naming_from_routing_through_openconnect(
        lab: OpenConnectLab, tmp_path: Path) -> None:
    verify_separates_naming_from_routing(lab, tmp_path)
