"""No leak, in the namespace lab: the tunnel zone's queries leave by the tunnel or not at all.

A real OpenVPN tunnel in the pod, the resolver run as the image runs it (uid 65532, no
capability at all). The pod's default route through eth0 is the leak path: it reaches the
private DNS's address once the tunnel's route is gone. A counter in the pod's OUTPUT chain
(iptables, inside the pod's namespace) counts the private zone's DNS packets that leave by
eth0, another those by tun0:

- the tunnel's route removed: bound to tun0, the queries still go through the tunnel and are
  answered; 0 packets on eth0;
- tun0 down (OpenVPN still says CONNECTED, so only the binding stands in the way): the zone
  answers SERVFAIL at once; 0 packets on eth0;
- tun0 back: answered again;
- the same with `bind_to_tunnel off` (reloaded): the queries leave by eth0, counted. This is
  the test failing the way it would without the feature.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lab import Lab, PodSpec, configs
from tests.lab.fixtures import require_lab
from tests.lab.netns import ns_run, stop_all, wait_for

pytestmark = pytest.mark.netns

READY, METRICS = 8181, 9153
MANAGEMENT_CLIENT = "management-up-down\nmanagement-hold\n"
ZONE = configs.PRIVATE_ZONE
PRIVATE_NET = "192.168.240.0/24"


def corefile(binding: str = "") -> str:
    return f""".:53 {{
    errors
    forward . {configs.CLUSTER_DNS_IP}
    ready 127.0.0.1:{READY}
    prometheus 127.0.0.1:{METRICS}
    reload 2s 1s
}}
{ZONE}:53 {{
    errors
    openvpn {{
        management 127.0.0.1:{configs.MANAGEMENT_PORT}
        {binding}
    }}
}}
"""


class UnprivilegedLab(Lab):
    """The resolver as the image runs it: uid 65532, no capability, port 53 allowed to it by the
    pod's sysctl (as the rendered pod sets it). The interpreter is the system's (a venv under
    /root is not readable by that uid), with this checkout's code and packages on its path."""

    def _start_resolver(self) -> None:
        ns_run(self.pod, ["sysctl", "-qw", "net.ipv4.ip_unprivileged_port_start=53"])
        src = Path(__file__).resolve().parents[1] / "src"
        path = os.pathsep.join([str(src), *(p for p in sys.path if p.endswith("site-packages"))])
        python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
        self.corefile.chmod(0o644)
        self._start("resolver", "pod", [
            "env", f"PYTHONPATH={path}", "PYTHONDONTWRITEBYTECODE=1",
            "setpriv", "--reuid=65532", "--regid=65532", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--no-new-privs",
            python, "-m", "splitdns", "serve", "-conf", str(self.corefile)])


COUNTERS = [("eth0", "udp"), ("eth0", "tcp"), ("tun0", "udp"), ("tun0", "tcp")]


def add_counters(lab: Lab) -> None:
    for dev, proto in COUNTERS:
        ns_run(lab.pod, ["iptables", "-A", "OUTPUT", "-o", dev, "-d", PRIVATE_NET, "-p", proto,
                         "--dport", "53", "-m", "comment", "--comment", f"noleak-{dev}"])


def packets(lab: Lab) -> dict[str, int]:
    """Private-zone DNS packets that left the pod, by interface."""
    out = ns_run(lab.pod, ["iptables", "-L", "OUTPUT", "-v", "-x", "-n"])
    counts = {"eth0": 0, "tun0": 0}
    for line in out.splitlines():
        m = re.match(r"\s*(\d+)\s+\d+.*/\* noleak-(\w+) \*/", line)
        if m:
            counts[m.group(2)] += int(m.group(1))
    return counts


ASK = """\
import json, sys, time
import dns.edns, dns.exception, dns.message, dns.query, dns.rcode
for name in sys.argv[1:]:
    q = dns.message.make_query(name, "A", use_edns=0)
    t = time.perf_counter()
    try:
        r = dns.query.udp(q, "127.0.0.1", timeout=6)
        out = {"rcode": dns.rcode.to_text(r.rcode()),
               "ede": " ".join(o.text or "" for o in r.options if isinstance(o, dns.edns.EDEOption))}
    except dns.exception.Timeout:
        out = {"rcode": "TIMEOUT", "ede": ""}
    print(json.dumps({**out, "name": name, "ms": (time.perf_counter() - t) * 1000}))
"""


def ask(lab: Lab, n: int = 3) -> list[dict[str, object]]:
    names = [f"leak{secrets.token_hex(4)}.{ZONE}" for _ in range(n)]  # fresh: never cached
    out = lab.pod_exec([sys.executable, "-c", ASK, *names], timeout=60)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def http(lab: Lab, port: int, path: str) -> tuple[int, str]:
    code = ("import sys, urllib.request, urllib.error\n"
            "try:\n    r = urllib.request.urlopen(sys.argv[1], timeout=5); print(r.status); "
            "print(r.read().decode())\n"
            "except urllib.error.HTTPError as e:\n    print(e.code); print(e.read().decode())\n")
    out = lab.pod_exec([sys.executable, "-c", code, f"http://127.0.0.1:{port}{path}"])
    status, _, body = out.stdout.partition("\n")
    return int(status or 0), body


def metric_lines(lab: Lab, name: str) -> list[str]:
    return [line for line in http(lab, METRICS, "/metrics")[1].splitlines()
            if line.startswith(name + "{") and f'zone="{ZONE}."' in line]


def verify_leaks(lab: Lab, *args: str) -> tuple[int, str]:
    out = lab.pod_exec([sys.executable, "-m", "splitdns", "verify", "leaks", "-conf", str(lab.corefile),
                        "--names", "2", "--settle", "3", "--out", str(lab.dir / "leaks"), *args], timeout=90)
    return out.returncode, out.stdout + out.stderr


def until(what: str, check: object, timeout: float = 15.0) -> None:
    wait_for(lambda: True if check() else None, what=what, timeout=timeout, interval=0.3)  # type: ignore[operator]


@pytest.fixture
def lab() -> Iterator[Lab]:
    require_lab()
    running = UnprivilegedLab(PodSpec(corefile=corefile(), vpn_extra=MANAGEMENT_CLIENT))
    try:
        yield running.up()
    finally:
        running.down()


def test_a_tunnel_zone_never_leaves_by_eth0(lab: Lab) -> None:
    t0 = time.monotonic()
    pid = lab.procs["resolver"].pid
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    assert status["Uid"].split()[0] == "65532" and int(status["CapEff"].strip(), 16) == 0

    # Up: the canary proved the path through tun0; the zone's upstream is bound to it.
    until("/ready?zone= to say 200", lambda: http(lab, READY, f"/ready?zone={ZONE}")[0] == 200)
    assert any(line.endswith(" 1.0") for line in metric_lines(lab, "splitdns_tunnel_canary_passed"))
    assert any('interface="tun0"' in line for line in metric_lines(lab, "splitdns_upstream_interface_info"))
    log = lab.log("resolver").read_text()
    assert re.search(rf"the tunnel canary splitdns-canary-\w+\.{ZONE}\. was answered by "
                     rf"{configs.CORP_DNS_IP}:53 through tun0", log), log[-2000:]
    add_counters(lab)

    # The tunnel's route removed; the default route through eth0 now reaches the private DNS.
    ns_run(lab.pod, ["ip", "route", "del", PRIVATE_NET])
    assert "dev eth0" in ns_run(lab.pod, ["ip", "route", "get", configs.CORP_DNS_IP])
    routeless = ask(lab)
    assert [a["rcode"] for a in routeless] == ["NOERROR"] * 3, routeless  # through tun0 regardless
    after_route = packets(lab)
    assert after_route["eth0"] == 0 and after_route["tun0"] >= 3, after_route

    # tun0 down; OpenVPN still says CONNECTED: fail fast, nothing on eth0.
    ns_run(lab.pod, ["ip", "link", "set", "tun0", "down"])
    gone = ask(lab)
    assert [a["rcode"] for a in gone] == ["SERVFAIL"] * 3, gone
    assert all(float(a["ms"]) < 500 for a in gone), gone  # type: ignore[arg-type]
    assert packets(lab)["eth0"] == 0

    # The tunnel back: answered again, still nothing on eth0.
    ns_run(lab.pod, ["ip", "link", "set", "tun0", "up"])
    ns_run(lab.pod, ["ip", "route", "replace", PRIVATE_NET, "via", configs.VPN_SERVER_TUN_IP, "dev", "tun0"])
    until("the zone to answer again", lambda: ask(lab, 1)[0]["rcode"] == "NOERROR", timeout=20)
    assert packets(lab)["eth0"] == 0
    bound_seconds = time.monotonic() - t0

    # `splitdns verify leaks` says the same from the resolver's counters, around the same outage.
    code, report = verify_leaks(lab, "--down", "ip link set tun0 down", "--up", f"ip link set tun0 up && "
                                f"ip route replace {PRIVATE_NET} via {configs.VPN_SERVER_TUN_IP} dev tun0")
    assert code == 0 and report.startswith("no leak:"), report
    print(f"\nsplitdns verify leaks, bound:\n{report}")
    assert "bound to tun0: by tun0 or not at all" in report and "after --down" in report, report
    assert packets(lab)["eth0"] == 0

    # The resolver restarts while the tunnel stays up: it attaches late (no UPDOWN block) and
    # still finds the interface (OpenVPN's log history, else the interface holding its address).
    stop_all([lab.procs.pop("resolver")], grace=1.0)
    lab._start_resolver()
    until("/ready?zone= after the restart", lambda: http(lab, READY, f"/ready?zone={ZONE}")[0] == 200)
    assert any('interface="tun0"' in line for line in metric_lines(lab, "splitdns_upstream_interface_info"))

    # The same with binding off (reloaded): the queries leave by eth0.
    lab.corefile.write_text(corefile("bind_to_tunnel off"))
    until("the reload to unbind the zone", lambda: any(
        'interface=""' in line for line in metric_lines(lab, "splitdns_upstream_interface_info")), timeout=30)
    until("the zone to answer unbound", lambda: ask(lab, 1)[0]["rcode"] == "NOERROR", timeout=20)
    ns_run(lab.pod, ["ip", "route", "del", PRIVATE_NET])
    before = packets(lab)["eth0"]
    leaked = ask(lab)
    leaked_packets = packets(lab)["eth0"] - before
    print(f"\nno leak: bound, {after_route['tun0']} private DNS packets by tun0 and 0 by eth0; tun0 down: "
          f"SERVFAIL in {max(float(a['ms']) for a in gone):.0f} ms at most "  # type: ignore[arg-type]
          f"({bound_seconds:.1f} s)\nbind_to_tunnel off: {leaked_packets} packets by eth0 for 3 names "
          f"({', '.join(str(a['rcode']) for a in leaked)})")
    assert leaked_packets >= 3, (leaked, packets(lab))
    code, report = verify_leaks(lab)
    assert code == 8 and f"{ZONE}. NOT bound: {configs.CORP_DNS_IP}:53 (by eth0 now)" in report, report
