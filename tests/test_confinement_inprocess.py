"""A tunnel zone's sockets bound to the tunnel's interface, and its canary, in process
(tests/support/inprocess.py): the real `Server` and `Runtime` on 127.0.0.1, the VPN's DNS a
fake upstream on 127.0.0.x, `splitdns openvpn-hook` telling the interface. `lo` stands for the
tunnel's interface (the servers are on loopback); an interface that does not exist stands for a
tunnel that is gone. The leak itself (a route through eth0) is the namespace lab's:
test_confinement_lab.py. Also: binding needs no capability (uid 65532, none at all)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import dns.message
import dns.rcode
import pytest

from splitdns.commands import openvpn_hook
from splitdns.core import confinement
from tests.helpers import query, reply
from tests.support.hostile import metric
from tests.support.inprocess import FakeUpstream, http, run, scrape, serving
from tests.support.processes import free_port

ZONE = "svc.acme.internal"
GONE = "nosuchtun0"  # an interface that is not there: the tunnel's, once it went


def corp_dns(q: dns.message.Message) -> dns.message.Message:
    """The VPN's DNS: the zone's names, NXDOMAIN for the ones nobody has (the canary's)."""
    name = str(q.question[0].name)
    if name.startswith(confinement.CANARY_LABEL):
        return reply(q, rcode=dns.rcode.NXDOMAIN)
    return reply(q, f"{name} 30 IN A 192.168.240.10")


def corefile(cluster: str, state: Path, ready: int, metrics: int, options: str = "",
             forward: str = "") -> str:
    return f""". {{
    forward . {cluster}
    ready 127.0.0.1:{ready}
    prometheus 127.0.0.1:{metrics}
}}
{ZONE} {{
    {forward}
    openvpn {{
        state {state}
        {options}
    }}
}}"""


def up(state: Path, vpn: FakeUpstream, dev: str) -> None:
    """What OpenVPN's --up runs: its environment names the interface (`dev`)."""
    assert openvpn_hook.run(str(state), {"script_type": "up", "dev": dev,
                                         "dns_server_1_address_1": vpn.addr,
                                         "dns_server_1_port_1": str(vpn.port)}) == 0


async def until_ready(port: int, want: int, seconds: float = 5.0) -> tuple[int, str]:
    got = (0, "")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:  # bounded
        got = await http(port, f"/ready?zone={ZONE}")
        if got[0] == want:
            return got
        await asyncio.sleep(0.1)
    return got


async def timed(ask: object, name: str, tcp: bool = False) -> tuple[int | None, float, str]:
    started = time.monotonic()
    out = await ask(query(name), tcp=tcp)  # type: ignore[operator]
    elapsed = time.monotonic() - started
    ede = "" if out is None else " ".join(o.text or "" for o in out.options if o.otype == 15)
    return (None if out is None else out.rcode()), elapsed, ede


def test_bound_to_the_tunnel_queries_and_the_canary_go_through_it(tmp_path: Path) -> None:
    """Up on `lo`: the zone answers, its canary (a random name, NXDOMAIN) passes, `/ready?zone=`
    says 200 only then, and the metrics name the interface. Without binding (the feature gone)
    there would be no interface in splitdns_upstream_interface_info and no canary."""
    state, ready, prom = tmp_path / "openvpn.json", free_port("127.0.0.1"), free_port("127.0.0.1")
    out: dict[str, object] = {}

    async def scenario() -> None:
        async with FakeUpstream(corp_dns, "127.0.0.21") as cluster, \
                FakeUpstream(corp_dns, "127.0.0.22") as vpn, \
                serving(corefile(cluster.target, state, ready, prom), runtime=True,
                        clock=time.monotonic) as s:
            out["before"] = await http(ready, f"/ready?zone={ZONE}")
            up(state, vpn, "lo")
            out["ready"] = await until_ready(ready, 200)
            out["db"] = await timed(s.ask, f"db.{ZONE}.")
            out["metrics"] = await scrape(prom)
            out["asked"] = vpn.names()
            out["log"] = s.log()

    run(scenario)
    assert out["before"][0] == 503  # type: ignore[index]
    assert out["ready"][0] == 200  # type: ignore[index]
    assert out["ready"][1].startswith(f"OK\n{ZONE}.: the tunnel canary {confinement.CANARY_LABEL}")  # type: ignore[index]
    assert "was answered by 127.0.0.22:" in out["ready"][1] and out["ready"][1].endswith(" through lo\n")  # type: ignore[index]
    assert out["db"][0] == dns.rcode.NOERROR  # type: ignore[index]
    canaries = [n for n in out["asked"] if n.startswith(confinement.CANARY_LABEL)]  # type: ignore[attr-defined]
    assert len(canaries) == 1 and canaries[0].endswith(f".{ZONE}.")
    values = out["metrics"]
    assert isinstance(values, dict)
    assert metric(values, "splitdns_tunnel_canary_passed", zone=f"{ZONE}.") == 1
    assert metric(values, "splitdns_tunnel_canaries_total", zone=f"{ZONE}.", result="passed") == 1
    assert metric(values, "splitdns_upstream_interface_info", zone=f"{ZONE}.", interface="lo") == 1
    assert f"the tunnel canary {canaries[0]} was answered by 127.0.0.22" in str(out["log"])


def test_a_failed_canary_is_asked_again_until_it_passes(tmp_path: Path) -> None:
    """The tunnel's DNS answers SERVFAIL at first: the canary fails, `/ready?zone=` says so and
    the zone's answers are not held; once the DNS is well, the next attempt passes."""
    state, ready, prom = tmp_path / "openvpn.json", free_port("127.0.0.1"), free_port("127.0.0.1")
    sick, out = [True], {}

    def flaky(q: dns.message.Message) -> dns.message.Message:
        name = str(q.question[0].name)
        return reply(q, rcode=dns.rcode.SERVFAIL) if sick[0] and name.startswith(
            confinement.CANARY_LABEL) else corp_dns(q)

    async def scenario() -> None:
        async with FakeUpstream(corp_dns, "127.0.0.21") as cluster, \
                FakeUpstream(flaky, "127.0.0.22") as vpn, \
                serving(corefile(cluster.target, state, ready, prom), runtime=True,
                        clock=time.monotonic) as s:
            up(state, vpn, "lo")
            out["failed"] = await until_ready(ready, 503)
            for _ in range(50):  # bounded: 5 s
                out["failed"] = await http(ready, f"/ready?zone={ZONE}")
                if "failed" in out["failed"][1]:
                    break
                await asyncio.sleep(0.1)
            out["db"] = await timed(s.ask, f"db.{ZONE}.")
            sick[0] = False
            out["passed"] = await until_ready(ready, 200, seconds=8.0)
            out["metrics"] = await scrape(prom)

    run(scenario)
    assert out["failed"][0] == 503 and "failed through lo: answered SERVFAIL" in out["failed"][1]
    assert out["db"][0] == dns.rcode.NOERROR  # the canary holds no query
    assert out["passed"][0] == 200
    values = out["metrics"]
    assert metric(values, "splitdns_tunnel_canaries_total", zone=f"{ZONE}.", result="failed") >= 1
    assert metric(values, "splitdns_tunnel_canaries_total", zone=f"{ZONE}.", result="passed") == 1


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_bound_to_an_interface_that_is_gone_nothing_leaves_and_the_zone_fails_fast(
        tmp_path: Path, tcp: bool) -> None:
    """The VPN's DNS is reachable (on loopback) by the routing table, but not by the tunnel's
    interface: not one query reaches it, the zone answers SERVFAIL at once and says why, the
    canary fails and `/ready?zone=` says so. `bind_to_tunnel off` (last) reaches it: the
    switch is what keeps the queries in."""
    state, ready, prom = tmp_path / "openvpn.json", free_port("127.0.0.1"), free_port("127.0.0.1")
    forward = "forward . openvpn {\n        force_tcp\n    }" if tcp else ""
    out: dict[str, object] = {}

    async def scenario() -> None:
        async with FakeUpstream(corp_dns, "127.0.0.21") as cluster, \
                FakeUpstream(corp_dns, "127.0.0.22") as vpn:
            async with serving(corefile(cluster.target, state, ready, prom, forward=forward),
                               runtime=True, clock=time.monotonic) as s:
                up(state, vpn, GONE)
                out["first"] = await timed(s.ask, f"db.{ZONE}.", tcp)
                out["again"] = await timed(s.ask, f"other.{ZONE}.", tcp)
                out["ready"] = await until_ready(ready, 503)
                await asyncio.sleep(0.3)
                out["ready_later"] = await http(ready, f"/ready?zone={ZONE}")
                out["asked"] = vpn.names()
            async with serving(corefile(cluster.target, state, ready, prom, "bind_to_tunnel off",
                                        forward), runtime=True, clock=time.monotonic) as s:
                for _ in range(50):  # the state file is polled every 200 ms; bounded: 5 s
                    out["off"] = await timed(s.ask, f"db.{ZONE}.", tcp)
                    if out["off"][0] == dns.rcode.NOERROR:  # type: ignore[index]
                        break
                    await asyncio.sleep(0.1)
                out["asked_off"] = vpn.names()

    run(scenario)
    for key in ("first", "again"):
        rcode, elapsed, _ = out[key]  # type: ignore[misc]
        assert rcode == dns.rcode.SERVFAIL and elapsed < 0.5, (key, out[key])
    assert "No such device" in out["first"][2]  # type: ignore[index]
    assert out["asked"] == []  # not one query, not one canary: nothing left by another way
    status, body = out["ready_later"]  # type: ignore[misc]
    assert status == 503 and f"the tunnel canary {confinement.CANARY_LABEL}" in body and "failed" in body
    assert out["off"][0] == dns.rcode.NOERROR  # type: ignore[index]
    assert f"db.{ZONE}." in out["asked_off"]  # type: ignore[operator]


PROBE = """\
import socket, sys
from splitdns.shell.attempt import bind_device
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
bind_device(s, "lo")
try:
    bind_device(s, "lo")
except PermissionError:
    print("re-bind refused")
s.connect(("127.0.0.1", int(sys.argv[1])))
s.send(b"bound")
print("sent")
"""


def test_binding_needs_no_capability(tmp_path: Path) -> None:
    """As the image runs (uid 65532, no capability at all, no_new_privs): the first bind of a
    fresh socket works (Linux 5.7+), a second is refused, which is why we bind once, before
    connect. The datagram is caught on loopback."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv (util-linux) to drop to uid 65532")
    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    catcher = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    catcher.bind(("127.0.0.1", 0))
    catcher.settimeout(3)
    src = Path(__file__).resolve().parents[1] / "src"
    site = [p for p in sys.path if p.endswith("site-packages")]
    try:
        done = subprocess.run(
            ["setpriv", "--reuid=65532", "--regid=65532", "--clear-groups", "--inh-caps=-all",
             "--bounding-set=-all", "--no-new-privs", python, "-c", PROBE, str(catcher.getsockname()[1])],
            capture_output=True, text=True, timeout=30,
            env={"PYTHONPATH": os.pathsep.join([str(src), *site]), "PYTHONDONTWRITEBYTECODE": "1"})
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["re-bind", "refused", "sent"]
        assert catcher.recv(64) == b"bound"
    finally:
        catcher.close()
