"""WireGuard: the `DNS =` line, our resolvconf shim as wg-quick calls it, and the tunnel state.

The shim is the real script run by `sh` with the exact arguments and stdin wg-quick
(wireguard-tools 1.0.20210914) gives resolvconf; the resolver runs in process (the lab with a
real wireguard-go is tests/test_wireguard_lab.py).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import dns.message
import dns.rcode
import pytest

from splitdns import cli, config, directives
from splitdns.commands import wireguard_shim
from splitdns.core import tunnel
from splitdns.core import wireguard as wg
from splitdns.errors import ConfigError
from tests.helpers import query, reply
from tests.support.inprocess import Answer, FakeUpstream, Serving, http, run, serving
from tests.support.processes import free_port

CONFIG = """[Interface]
PrivateKey = yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=
Address = 10.99.0.2/32
DNS = 192.168.240.1, 192.168.240.2 svc.acme.internal,corp.acme.internal  # trailing comment
MTU = 1380

[Peer]
PublicKey = xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=
# DNS = 10.0.0.9 is a comment and [Peer] has no DNS anyway
AllowedIPs = 192.168.240.0/24
Endpoint = 203.0.113.1:51820
"""


def test_the_dns_line_splits_as_wg_quick_splits_it() -> None:
    dns = wg.from_config(CONFIG)
    assert dns.servers == ("192.168.240.1", "192.168.240.2")
    assert dns.search == ("svc.acme.internal", "corp.acme.internal")
    pushed = dns.pushed()
    assert pushed.servers == (("192.168.240.1", 53), ("192.168.240.2", 53))
    assert pushed.domains == ("svc.acme.internal.", "corp.acme.internal.") == pushed.search
    assert wg.from_config("[Peer]\nDNS = 192.0.2.1\n") == wg.Dns()


def test_what_wg_quick_pipes_into_resolvconf() -> None:
    dns = wg.from_resolvconf("nameserver 192.168.240.1\nnameserver fd00::53\nsearch svc.acme.internal\n"
                             "nameserver not-an-ip\n# comment\n")
    assert dns.servers == ("192.168.240.1", "fd00::53") and dns.search == ("svc.acme.internal",)


def test_an_interface_order_prefix_is_the_same_interface() -> None:
    assert wg.interface_of("wg0", "wg0") and wg.interface_of("tun.wg0", "wg0")
    assert not wg.interface_of("wg01", "wg0") and not wg.interface_of("awg0", "wg0")
    assert not wg.interface_of("a/b.wg0", "wg0") and not wg.interface_of(".wg0", "wg0")


# -- the state, one look at a time ---------------------------------------------------------------

NOW = 1_800_000_000.0
UP_DNS = wg.from_resolvconf("nameserver 192.168.240.1\nsearch svc.acme.internal\n")


def look(**fields: object) -> tunnel.TunnelState:
    seen = wg.Seen("wg0", **{"shim": True, "recorded": UP_DNS, "recorded_at": NOW - 600, **fields})  # type: ignore[arg-type]
    return wg.state_of(seen, NOW)


def test_up_while_the_shim_holds_the_dns_and_the_interface_is_there() -> None:
    state = look(link=True)
    assert state.up and state.pushed.servers == (("192.168.240.1", 53),)


def test_down_when_wg_quick_took_its_dns_back() -> None:
    state = look(recorded=None, link=True)
    assert not state.up and "wg-quick has not handed wg0's DNS to resolvconf" in state.describe()


def test_down_when_the_interface_is_gone_though_the_file_stayed() -> None:
    """wg-quick killed (or the VPN container gone) without its `down`: the file stays behind."""
    state = look(link=False)
    assert not state.up and "interface wg0 is gone or down" in state.describe()


def test_a_handshake_older_than_reject_after_time_is_down_a_fresh_one_up() -> None:
    old = wg.Handshakes(NOW - 2, (NOW - 2 - 250, 0.0))
    state = look(link=True, handshakes=old)
    assert not state.up and "the last handshake on wg0 was 250 s ago" in state.describe()
    assert wg.wants_traffic(wg.Seen("wg0", handshakes=old), NOW)
    assert look(link=True, handshakes=wg.Handshakes(NOW - 2, (NOW - 2 - 100,))).up
    # Never handshaken yet: the first query through the tunnel starts the handshake.
    assert look(link=True, handshakes=wg.Handshakes(NOW - 2, (0.0,))).up


def test_traffic_is_sent_once_the_session_is_due_for_a_new_handshake_not_before() -> None:
    """An idle tunnel without PersistentKeepalive: past REKEY_AFTER_TIME a query makes WireGuard
    handshake again, before the age reaches the limit."""
    def due(age: float, max_age: float = 195.0) -> bool:
        seen = wg.Seen("wg0", handshakes=wg.Handshakes(NOW - 1, (NOW - 1 - age,)))
        return wg.wants_traffic(seen, NOW, max_age)
    assert not due(100) and due(130) and due(300)
    assert due(10, max_age=30)  # a short limit: as soon as it is worth a try
    assert not wg.wants_traffic(wg.Seen("wg0", handshakes=wg.Handshakes(NOW - 1, (0.0,))), NOW)
    assert not wg.wants_traffic(wg.Seen("wg0", handshakes=wg.Handshakes(NOW - 100, (NOW - 400,))), NOW)


def test_a_report_the_watcher_stopped_writing_or_that_predates_up_says_nothing() -> None:
    old = (NOW - 1000.0,)
    assert look(link=True, handshakes=wg.Handshakes(NOW - 60, old)).up  # the watcher stopped
    assert look(link=True, recorded_at=NOW - 1, handshakes=wg.Handshakes(NOW - 3, old)).up
    failed = look(link=True, handshakes=wg.Handshakes(NOW - 1, (), "Unable to access interface: "
                                                                  "Operation not permitted"))
    assert not failed.up and "wg show wg0: Unable to access interface" in failed.describe()


def test_the_config_file_alone_is_a_static_source() -> None:
    seen = wg.Seen("wg0", config=wg.from_config(CONFIG), link=True)
    assert wg.state_of(seen, NOW).pushed.servers[0] == ("192.168.240.1", 53)
    no_dns = wg.state_of(wg.Seen("wg0", config=wg.from_config("[Interface]\nMTU = 1420\n"), link=True), NOW)
    assert not no_dns.up and "has no DNS = address" in no_dns.describe()


def test_the_watchers_file() -> None:
    report = wg.from_watch("1800000000\nxTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=\t1799999990\n"
                           "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=\t0\n")
    assert report == wg.Handshakes(1_800_000_000.0, (1_799_999_990.0, 0.0))
    gone = wg.from_watch("1800000000\nerror: Unable to access interface: No such device\n")
    assert gone is not None and gone.error == "Unable to access interface: No such device"
    assert wg.from_watch("") is None and wg.from_watch("garbage\n") is None


# -- the directive ---------------------------------------------------------------------------------

def block(body: str) -> config.Block:
    return config.loads(f"svc.acme.internal {{\n wireguard {{\n{body}\n }}\n}}\n", read_files=False).blocks[0]


def test_the_directive_and_its_defaults() -> None:
    b = block("  config /etc/wireguard/corp.conf\n  resolvconf /run/splitdns\n  domains")
    spec = b[directives.WIREGUARD]
    assert spec is not None and spec.interface == "corp" and spec.domains
    assert spec.recorded == "/run/splitdns/corp" and spec.max_age == 195
    assert b.forwards[0].tunnel and b.forwards[0].failfast_all_unhealthy  # fails fast by default
    other = block("  resolvconf /run/splitdns/\n  interface tun0\n  max_handshake_age 1m")
    spec = other[directives.WIREGUARD]
    assert spec is not None and spec.handshakes == "/run/splitdns/tun0.handshakes" and spec.max_age == 60


@pytest.mark.parametrize(("body", "error"), [
    ("  domains", "wireguard: say where the tunnel's DNS comes from"),
    ("  config wg0.conf", "config: give an absolute path"),
    ("  resolvconf /run\n  interface wg0/../x", "is not an interface name wg-quick accepts"),
    ("  resolvconf /run\n  keepalive 25", "wireguard: unknown option 'keepalive'"),
    ("  resolvconf /run\n  max_handshake_age 0s", "max_handshake_age: must be more than 0"),
])
def test_directive_errors_say_what_and_where(body: str, error: str) -> None:
    with pytest.raises(ConfigError, match=r"Corefile:\d+: ") as err:
        block(body)
    assert error in str(err.value)


def test_one_tunnel_per_block_and_forward_names_its_directive() -> None:
    with pytest.raises(ConfigError, match="this block already follows a tunnel"):
        config.loads(". {\n openvpn {\n  state /run/x\n }\n wireguard {\n  resolvconf /run\n }\n}\n",
                     read_files=False)
    with pytest.raises(ConfigError, match=r"forward \. wireguard needs a `wireguard` directive"):
        config.loads(". {\n forward . wireguard\n}\n", read_files=False)
    text = ". {\n forward . wireguard {\n  max_fails 3\n }\n wireguard {\n  resolvconf /run\n }\n}\n"
    b = config.loads(text, read_files=False).blocks[0]
    assert b.forwards[0].tunnel and b.forwards[0].max_fails == 3


# -- the shim, as wg-quick runs it -------------------------------------------------------------------

def shim(tmp_path: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    script = tmp_path / "bin" / "resolvconf"
    if not script.exists():
        assert cli.main(["wireguard-shim", str(script.parent)]) == 0
    env = {"PATH": os.environ["PATH"], "SPLITDNS_RESOLVCONF_DIR": str(tmp_path / "run")}
    return subprocess.run([str(script), *args], input=stdin, env=env, capture_output=True, text=True,
                          timeout=10, check=False)


def test_the_shim_records_what_wg_quick_hands_it_and_forgets_it_at_down(tmp_path: Path) -> None:
    lines = "nameserver 192.168.240.1\nsearch svc.acme.internal\n"
    assert shim(tmp_path, "-a", "tun.wg0", "-m", "0", "-x", stdin=lines).returncode == 0
    assert (tmp_path / "run" / "tun.wg0").read_text() == lines
    assert shim(tmp_path, "-l", "tun.wg0").stdout == lines  # what `wg-quick save` reads back
    assert shim(tmp_path, "-d", "tun.wg0", "-f").returncode == 0
    assert not (tmp_path / "run" / "tun.wg0").exists()
    assert shim(tmp_path, "-d", "wg9", "-f").returncode == 0  # -f: not there is fine
    bad = shim(tmp_path, "-a", "../etc/passwd", stdin=lines)
    assert bad.returncode == 2 and "bad interface name" in bad.stderr
    assert shim(tmp_path, "--frobnicate").returncode == 2
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == []  # no temporary file left


def test_the_shim_command_says_where_it_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["wireguard-shim", str(tmp_path)]) == 0
    assert os.access(tmp_path / "resolvconf", os.X_OK)
    assert f"put {tmp_path} first on wg-quick's PATH" in capsys.readouterr().out
    (tmp_path / "file").write_text("")
    assert cli.main(["wireguard-shim", str(tmp_path / "file")]) == 1
    assert "cannot write" in capsys.readouterr().err
    assert wireguard_shim.SCRIPT.startswith("#!/bin/sh\n")


# -- the resolver follows it, in process -------------------------------------------------------------

# wg-quick hands over addresses only (a resolv.conf line has no port), so the corp DNS stand-in
# listens on port 53, on a loopback address of its own.
CORP = "127.0.32.53"


def answering(address: str) -> Answer:
    return lambda q: reply(q, f"{q.question[0].name} 60 IN A {address}")


def rdata(msg: dns.message.Message | None) -> list[str]:
    return [] if msg is None else [rd.to_text() for rrset in msg.answer for rd in rrset]


def ede(msg: dns.message.Message | None) -> str:
    return "" if msg is None else " ".join(o.text or "" for o in msg.options if o.otype == 15)


def corefile(cluster: str, run_dir: Path, interface: str, ready: int) -> str:
    return f""". {{
    ready 127.0.0.1:{ready}
    forward . {cluster}
}}
svc.acme.internal {{
    wireguard {{
        resolvconf {run_dir}
        interface {interface}
        domains
    }}
}}"""


class Timed:
    """One query's reply and how long it took."""

    def __init__(self, reply: dns.message.Message | None, elapsed: float) -> None:
        self.reply, self.elapsed = reply, elapsed
        self.rcode = None if reply is None else reply.rcode()


async def timed(s: Serving, name: str) -> Timed:
    started = time.monotonic()
    out = await s.ask(query(name), timeout=3)
    return Timed(out, time.monotonic() - started)


async def until(s: Serving, name: str, want: list[str] | int, seconds: float = 3.0) -> Timed:
    """Ask `name` until the answer is `want` (addresses, or an rcode), for at most `seconds`."""
    end = time.monotonic() + seconds
    while True:
        got = await timed(s, name)
        if (rdata(got.reply) == want) if isinstance(want, list) else got.rcode == want:
            return got
        if time.monotonic() > end:
            raise AssertionError(f"{name}: not {want} within {seconds} s (last: {rdata(got.reply)}, "
                                 f"{ede(got.reply)})")
        await asyncio.sleep(0.05)


async def http_until(port: int, path: str, status: int, seconds: float = 3.0) -> int:
    """GET `path` until it reads `status` (readiness probes run once a second), at most `seconds`."""
    end = time.monotonic() + seconds
    got = (await http(port, path))[0]
    while got != status and time.monotonic() < end:
        await asyncio.sleep(0.1)
        got = (await http(port, path))[0]
    return got


def test_the_tunnel_zone_follows_wg_quick_through_the_shim(tmp_path: Path) -> None:
    """`lo` stands for the tunnel's interface: it exists, it is up, no privilege needed. Each step
    is what wg-quick runs; the handshake file is what `resolvconf --watch` writes."""
    ready, run_dir = free_port("127.0.0.1"), tmp_path / "run"
    results: dict[str, object] = {}

    async def scenario() -> None:
        async with FakeUpstream(answering("192.0.2.10"), "127.0.0.21") as cluster, \
                FakeUpstream(answering("192.168.240.10"), CORP, port=53) as corp, \
                serving(corefile(cluster.target, run_dir, "lo", ready), runtime=True,
                        clock=time.monotonic) as s:
            r = results
            r["before"] = await timed(s, "db.svc.acme.internal.")
            r["ready_before"] = (await http(ready, "/ready?zone=svc.acme.internal"))[0]
            assert shim(tmp_path, "-a", "lo", "-m", "0", "-x",
                        stdin=f"nameserver {CORP}\nsearch corp.example\n").returncode == 0
            r["up"] = await until(s, "db.svc.acme.internal.", ["192.168.240.10"])
            r["search_domain"] = await until(s, "www.corp.example.", ["192.168.240.10"])  # `domains`
            r["ready_up"] = await http_until(ready, "/ready?zone=svc.acme.internal", 200)
            # The watcher in the VPN container: the last handshake is 250 s old.
            now = time.time()
            (run_dir / "lo.handshakes").write_text(f"{now:.0f}\nPEERKEY=\t{now - 250:.0f}\n")
            asked = len(corp.asked)
            r["stale"] = await until(s, "new.svc.acme.internal.", dns.rcode.SERVFAIL)
            r["ready_stale"] = (await http(ready, "/ready?zone=svc.acme.internal"))[0]
            r["cluster_meanwhile"] = await timed(s, "kubernetes.default.svc.cluster.local.")
            await asyncio.sleep(0.3)
            r["poked"] = [a.name for a in corp.asked[asked:]]  # traffic to revive the handshake
            (run_dir / "lo.handshakes").write_text(f"{time.time():.0f}\nPEERKEY=\t{time.time() - 3:.0f}\n")
            r["back"] = await until(s, "again.svc.acme.internal.", ["192.168.240.10"])
            # wg-quick down: the shim forgets the DNS; the zone answers at once, and says why.
            assert shim(tmp_path, "-d", "lo", "-f").returncode == 0
            r["down"] = await until(s, "gone.svc.acme.internal.", dns.rcode.SERVFAIL)
            r["down_again"] = await timed(s, "more.svc.acme.internal.")
            r["ready_down"] = (await http(ready, "/ready?zone=svc.acme.internal"))[0]
            r["ready_all"] = (await http(ready, "/ready"))[0]
            r["log"] = s.log()

    run(scenario)
    r = results
    before, up, stale, down = (r[k] for k in ("before", "up", "stale", "down"))
    assert isinstance(before, Timed) and isinstance(stale, Timed) and isinstance(down, Timed)
    assert before.rcode == dns.rcode.SERVFAIL and before.elapsed < 0.5
    assert "wg-quick has not handed lo's DNS to resolvconf" in ede(before.reply)
    assert r["ready_before"] == 503 and r["ready_up"] == 200
    assert isinstance(up, Timed) and up.rcode == dns.rcode.NOERROR
    assert "the last handshake on lo was 250 s ago" in ede(stale.reply) and stale.elapsed < 0.5
    assert r["ready_stale"] == 503
    meanwhile = r["cluster_meanwhile"]
    assert isinstance(meanwhile, Timed) and rdata(meanwhile.reply) == ["192.0.2.10"]
    assert "." in r["poked"]  # type: ignore[operator]
    assert isinstance(r["back"], Timed) and r["back"].rcode == dns.rcode.NOERROR
    down_again = r["down_again"]
    assert isinstance(down_again, Timed) and down_again.rcode == dns.rcode.SERVFAIL
    assert down_again.elapsed < 0.5 and "wg-quick has not handed lo's DNS" in ede(down_again.reply)
    assert r["ready_down"] == 503 and r["ready_all"] == 200  # the pod stays in its Services
    assert "plugin/wireguard: the tunnel is up, DNS 127.0.32.53:53" in str(r["log"])


def test_a_vanished_interface_is_down_though_wg_quick_never_ran_its_down(tmp_path: Path) -> None:
    """wg-quick (or the VPN container) killed: the shim's file stays, the interface is gone."""
    ready, run_dir = free_port("127.0.0.1"), tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "wgnone9").write_text(f"nameserver {CORP}\n")

    async def scenario() -> tuple[Timed, int]:
        async with FakeUpstream(answering("192.0.2.10"), "127.0.0.21") as cluster, \
                serving(corefile(cluster.target, run_dir, "wgnone9", ready), runtime=True) as s:
            got = await until(s, "db.svc.acme.internal.", dns.rcode.SERVFAIL)
            return got, (await http(ready, "/ready?zone=svc.acme.internal"))[0]

    got, zone_ready = run(scenario)
    assert "interface wgnone9 is gone or down" in ede(got.reply) and zone_ready == 503


def test_a_wg_quick_config_shared_with_the_pod_is_a_source_too(tmp_path: Path) -> None:
    conf = tmp_path / "lo.conf"
    conf.write_text(CONFIG.replace("192.168.240.1, 192.168.240.2", CORP))
    text = f""". {{
    forward . 127.0.0.21:9
}}
svc.acme.internal {{
    wireguard {{
        config {conf}
    }}
}}"""

    async def scenario() -> Timed:
        async with FakeUpstream(answering("192.168.240.10"), CORP, port=53), \
                serving(text, runtime=True) as s:
            return await until(s, "db.svc.acme.internal.", ["192.168.240.10"])

    assert run(scenario).rcode == dns.rcode.NOERROR
