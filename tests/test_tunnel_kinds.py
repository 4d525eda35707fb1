"""A tunnel kind is its own modules plus one row per layer's table (README, "Adding a tunnel
kind"). This test makes one up, `beacon`: its "VPN" writes a state file (the test writes it),
its directive is `beacon { state PATH }`. Its modules are the classes below; it is added by its
rows alone (the registry's, the shell's watcher table, kube's kind table, one finding code) and
then seen by every command: `serve` follows its state (its DNS used, SERVFAIL with the reason at
once while it is down, back when it is up) and counts it under its metric kind, `check` accepts
its directive and runs its lints, `explain` says where its upstreams come from, `render` writes
its block and its VPN container.

`serve` runs in process (tests/support/inprocess.py) against a fake upstream on 127.0.0.x: the
kind is a test's own, so it exists only in this process. OpenVPN and WireGuard, the kinds the
product ships, have their end-to-end tests with real VPNs (test_openvpn_lab.py, test_wireguard_lab.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dns.message
import dns.rcode
import pytest
import yaml

from splitdns import cli, config, corefile, directives
from splitdns.core import liveness, tunnel
from splitdns.core.zone import Zone
from splitdns.directives import _args
from splitdns.errors import ConfigError
from splitdns.kube import tunnels as kube_tunnels
from splitdns.kube.shared import findings, tunnel_kind
from splitdns.kube.shared.findings import Finding
from splitdns.shell import tunnel_watcher
from splitdns.shell import tunnels as shell_tunnels
from tests.helpers import query, reply
from tests.support.hostile import metric
from tests.support.inprocess import FakeUpstream, run, scrape, serving
from tests.support.processes import free_port

# --- the kind's own modules -----------------------------------------------------------------------

RUN_DIR = "/run/beacon"


@dataclass(frozen=True)
class BeaconSpec:  # its directive module: the spec and `parse`
    state: str
    domains: bool = False
    bind_to_tunnel: bool = True  # the test's upstreams are on loopback, so its interface is lo
    interface: str | None = "lo"

    @property
    def dns_origin(self) -> str:
        return "named by the beacon's state file"


def parse(st: corefile.Statement) -> BeaconSpec:
    _args.arity(st, 0, 0, "beacon { state PATH }")
    paths = [opt.args[0] for opt in st.body or () if opt.name == "state" and len(opt.args) == 1]
    if not paths:
        raise ConfigError(st.where, "beacon: say where its state file is: beacon { state PATH }")
    return BeaconSpec(paths[0])


def read_state(text: str) -> tunnel.TunnelState:  # its core module: the state file's words
    """`up` then `server IP:PORT` lines, or `down REASON`."""
    lines = text.splitlines() or ["down empty state file"]
    word, _, rest = lines[0].partition(" ")
    servers = tuple((host, int(port)) for kind, _, where in (ln.partition(" ") for ln in lines[1:])
                    if kind == "server" for host, _, port in [where.rpartition(":")])
    if word == "up":
        return tunnel.TunnelState(tunnel.UP, "the beacon is lit", tunnel.Pushed(servers))
    return tunnel.TunnelState(tunnel.DOWN, rest or "the beacon is out")


class BeaconWatcher(tunnel_watcher.Watcher):  # its shell module: reads the file, nothing else
    log_as = "plugin/beacon"
    spec: BeaconSpec

    def __init__(self, spec: BeaconSpec, on_change: tunnel_watcher.OnChange) -> None:
        super().__init__(spec, on_change, tunnel.not_heard("Beacon"))

    async def run(self) -> None:
        path = Path(self.spec.state)
        while True:  # until cancelled with the server
            with contextlib.suppress(OSError):
                self._set(read_state(path.read_text(encoding="utf-8")))
            await asyncio.sleep(0.05)


@dataclass
class BeaconConfig:  # its kube modules: the client config `check` reads, its lint, its container
    path: str
    servers: list[tuple[str, int]]
    dns: list[str]

    def behind_tunnel(self, address: str) -> bool:
        return address in self.dns

    def server_names(self) -> list[tuple[str, int]]:
        return self.servers


def parse_config(text: str, path: str) -> BeaconConfig:
    conf = BeaconConfig(path, [], [])
    for number, line in enumerate(text.splitlines(), 1):
        word, _, value = line.partition(" ")
        if word == "server":
            conf.servers.append((value.strip(), number))
        elif word == "dns":
            conf.dns.append(value.strip())
    return conf


def lint(inputs: Any) -> list[Finding]:
    return [Finding(c.path, 1, "SD399", "this beacon config names no dns server")
            for c in inputs.tunnel_configs.get("beacon", []) if not c.dns]


def example(plan: Any, opts: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    mount = {"name": "beacon-run", "mountPath": RUN_DIR}
    return ([{"name": "beacon", "image": opts.vpn_image, "volumeMounts": [mount]}],
            [{"name": "beacon-run", "emptyDir": {}}])


# --- its rows --------------------------------------------------------------------------------------

BEACON = directives.Once("beacon", parse, step=directives.TUNNEL_STEP, stored=True, coredns=False,
                         tunnel=directives.Tunnel("beacon", "Beacon", "beacon_light",
                                                  "the DNS servers the beacon's state file names"))
BEACON_KIND = tunnel_kind.Kind(
    BEACON, learned_from="the beacon", upstream_text="the beacon's DNS", default_image="example.org/beacon:1",
    corefile=lambda plan: ["beacon {", f"    state {RUN_DIR}/state", "}"], example=example,
    apply_steps=lambda plan: ["Light the beacon."],
    config=tunnel_kind.ConfigFormat(lambda text: text.startswith("# beacon client"), parse_config,
                                     (".beacon",), "SD301", "server"),
    lints=lint)


@pytest.fixture
def beacon(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The rows. The registry's module derives BY_NAME, SUPPORTED and ORDER from REGISTRY once,
    at import: they are derived again here, as that import would with the row in place."""
    rows = directives.REGISTRY
    at = rows.index(directives.FORWARD)
    rows = (*rows[:at], BEACON, *rows[at:])
    monkeypatch.setattr(directives, "REGISTRY", rows)
    monkeypatch.setattr(directives, "BY_NAME", {d.name: d for d in rows})
    monkeypatch.setattr(directives, "SUPPORTED", tuple(sorted(d.name for d in rows)))
    monkeypatch.setattr(directives, "ORDER", tuple(d.name for d in rows))
    monkeypatch.setitem(shell_tunnels.WATCHERS, "beacon", BeaconWatcher)
    monkeypatch.setitem(kube_tunnels.KINDS, "beacon", BEACON_KIND)
    monkeypatch.setitem(findings.CODES, "SD399", findings.Code(
        "SD399", findings.ERROR, "beacon config without a dns line", "the zone would never answer.",
        "add `dns ADDRESS`."))
    yield


# --- serve -----------------------------------------------------------------------------------------

def _corefile(cluster: str, state: Path, metrics: int, forward: bool) -> str:
    return f""". {{
    forward . {cluster}
    prometheus 127.0.0.1:{metrics}
}}
svc.acme.internal {{
    beacon {{
        state {state}
    }}
    {"forward . beacon { max_fails 1 }" if forward else ""}
}}"""


def _answer(msg: dns.message.Message | None) -> tuple[str, list[str], str]:
    assert msg is not None, "no reply"
    ede = " ".join(o.text or "" for o in msg.options if o.otype == 15)
    return dns.rcode.to_text(msg.rcode()), [rd.to_text() for rr in msg.answer for rd in rr], ede


@pytest.mark.parametrize("forward", [False, True], ids=["alone", "forward-beacon"])
def test_serve_follows_a_made_up_tunnel_kind_by_its_rows(beacon: None, tmp_path: Path, forward: bool) -> None:
    state, mport = tmp_path / "beacon.state", free_port("127.0.0.1")
    name = query("db.svc.acme.internal.")

    async def until(s: Any, rcode: str) -> tuple[tuple[str, list[str], str], float]:
        for _ in range(100):  # the watcher looks every 50 ms; bounded: 5 s
            start = time.perf_counter()
            got = _answer(await s.ask(name))
            if got[0] == rcode:
                return got, time.perf_counter() - start
            await asyncio.sleep(0.05)
        raise AssertionError(f"never {rcode}: last {got}")

    async def scenario() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with FakeUpstream(lambda q: reply(q, f"{q.question[0].name} 60 IN A 192.168.240.10"),
                                "127.0.0.21") as cluster, \
                FakeUpstream(lambda q: reply(q, f"{q.question[0].name} 1 IN A 192.168.240.30"),
                             "127.0.0.22") as vpn, \
                serving(_corefile(cluster.target, state, mport, forward), runtime=True) as s:
            out["before"] = _answer(await s.ask(name))
            state.write_text(f"up\nserver {vpn.addr}:{vpn.port}\n")
            out["up"], _ = await until(s, "NOERROR")
            out["up_metrics"] = await scrape(mport)
            state.write_text("down the beacon went out\n")
            out["down"], _ = await until(s, "SERVFAIL")
            asked, start = len(vpn.names()), time.perf_counter()
            out["still_down"] = [_answer(await s.ask(query(f"n{i}.svc.acme.internal."))) for i in range(5)]
            out["down_took"], out["asked_while_down"] = time.perf_counter() - start, len(vpn.names()) - asked
            out["down_metrics"] = await scrape(mport)
            state.write_text(f"up\nserver {vpn.addr}:{vpn.port}\n")
            out["back"], _ = await until(s, "NOERROR")
            out["log"] = s.log()
        return out

    out = run(scenario)
    assert out["before"][0] == "SERVFAIL" and "no word from Beacon yet" in out["before"][2]
    assert out["up"][1] == ["192.168.240.30"]  # the kind's DNS, not the catch-all's
    assert "the tunnel is down (the beacon went out)" in out["down"][2]
    # Failing fast: five new names answered at once, none of them sent into the dead tunnel.
    assert [r for r, _, _ in out["still_down"]] == ["SERVFAIL"] * 5
    assert out["down_took"] < 1.0 and out["asked_while_down"] == 0
    assert out["back"][1] == ["192.168.240.30"]
    zone = {"zone": "svc.acme.internal.", "kind": "beacon_light"}
    assert metric(out["up_metrics"], "splitdns_tunnel_up", **zone) == 1
    assert metric(out["down_metrics"], "splitdns_tunnel_up", **zone) == 0
    assert metric(out["down_metrics"], "splitdns_tunnel_info", state="down", **zone) == 1
    assert "plugin/beacon: the tunnel is up, DNS 127.0.0.22" in out["log"]


# --- check and render ------------------------------------------------------------------------------

def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(list(argv))
    return code, out.getvalue()


def test_check_and_explain_know_the_kind_and_run_its_lints(beacon: None, tmp_path: Path) -> None:
    core = tmp_path / "Corefile"
    core.write_text(". {\n    forward . 10.96.0.10\n}\nsvc.acme.internal {\n    beacon {\n"
                    "        state /run/beacon/state\n    }\n    forward . beacon\n}\n")
    client = tmp_path / "client.beacon"
    client.write_text("# beacon client\nserver vpn.svc.acme.internal\n")
    code, text = _cli("check", str(core), str(client))
    assert code == 2, text  # errors: the kind's own lint, and its server name behind its tunnel
    assert f"{client}:1: SD399 error this beacon config names no dns server" in text
    assert f"{client}:2: SD301" in text and "server vpn.svc.acme.internal" in text
    assert "takes its upstreams from Beacon" in text
    assert f"{core}:" not in text  # no finding on the Corefile: `beacon` and `forward . beacon` known
    code, text = _cli("explain", "-conf", str(core), "db.svc.acme.internal")
    assert code == 0 and text.splitlines()[-1] == ("  upstreams: the DNS servers the beacon's state file "
                                                   f"names, learned at run time (beacon, {core}:5)"), text


def test_check_refuses_the_kind_without_its_rows(tmp_path: Path) -> None:
    core = tmp_path / "Corefile"
    core.write_text(". {\n    forward . 10.96.0.10\n}\nsvc.acme.internal {\n    beacon {\n"
                    "        state /run/beacon/state\n    }\n}\n")
    code, text = _cli("check", str(core))
    assert code == 2 and "beacon" in text


def test_render_writes_the_kinds_block_and_vpn_container(beacon: None) -> None:
    code, text = _cli("render", "--zone", "svc.acme.internal=beacon", "--cluster-dns", "10.96.0.10",
                      "--image", "example.org/splitdns:1")
    assert code == 0
    docs = [d for d in yaml.safe_load_all(text) if d]
    configmap = next(d for d in docs if d["kind"] == "ConfigMap")
    assert "beacon {\n        state /run/beacon/state\n    }" in configmap["data"]["Corefile"]
    assert "svc.acme.internal. -> in-pod splitdns -> the beacon's DNS -> learned at run time from " \
           "the beacon (--zone svc.acme.internal=beacon)" in configmap["data"]["Corefile"]
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    beacons = [c for c in pod["initContainers"] if c["name"] == "beacon"]
    assert beacons and beacons[0]["image"] == "example.org/beacon:1"  # the kind's default image
    assert {"name": "beacon-run", "emptyDir": {}} in pod["volumes"]
    assert "Light the beacon." in text


# --- the tables stay the only place that knows the kinds ---------------------------------------------

SRC = Path(__file__).resolve().parent.parent / "src" / "splitdns"
TABLES = ("directives/__init__.py", "shell/tunnels.py", "kube/tunnels/__init__.py")
# A kind's name, as a string or one of the tables' constants, or its spec's class.
KIND_NAMED = re.compile(r"[\"'](openvpn|wireguard)[\"']|\b(OPENVPN|WIREGUARD)\b|OpenVPNSpec|WireGuardSpec")


def test_every_tunnel_kind_has_a_row_in_each_layer() -> None:
    kinds = directives.tunnels()
    assert {d.name for d in kinds} == {"openvpn", "wireguard", "openconnect", "strongswan"}
    for d in kinds:
        assert d.tunnel is not None and d.step == directives.TUNNEL_STEP
        assert d.name in shell_tunnels.WATCHERS, f"{d.name}: no watcher in shell/tunnels.py"
        assert kube_tunnels.of(d.tunnel.word).directive is d, f"{d.name}: no row in kube/tunnels/"
    assert set(kube_tunnels.KINDS) == directives.tunnel_words()


def test_no_module_but_a_kinds_own_and_the_tables_names_a_kind() -> None:
    """Where `if kind == "openvpn"` would creep back: any module but the tables and the kinds'
    own modules (named after the kind: core/openvpn.py, kube/tunnels/wireguard_pod.py, ...)."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in TABLES or re.search(r"(openvpn|wireguard|vpn_container)[^/]*\.py$", rel):
            continue
        found += [f"{rel}:{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
                  if KIND_NAMED.search(line)]
    assert not found, "a kind named outside its modules and the tables:\n" + "\n".join(found)


def test_a_tunnel_zone_names_its_own_kind_before_the_first_word() -> None:
    """Before its watcher says anything, /ready?zone= says which tunnel it waits for."""
    loaded = config.loads("corp.example {\n    wireguard {\n        config /etc/wireguard/wg0.conf\n"
                          "    }\n}\nvpn.example {\n    openvpn {\n        state /run/openvpn.json\n"
                          "    }\n}\n")
    zones = {z.name: z for z in (Zone(b) for b in loaded.blocks)}
    for zone in zones.values():
        zone.ready = True
    assert liveness.problems(zones.values(), {"corp.example.", "vpn.example."}, stopping=False) == [
        "corp.example.: the tunnel is down (no word from WireGuard yet)",
        "vpn.example.: the tunnel is down (no word from OpenVPN yet)"]
