"""`splitdns verify leaks`: where a tunnel zone's queries leave, shown from the resolver's counters.

For each tunnel zone of the Corefile, fresh names (nobody has them: no cache can answer) are
asked through the resolver, and its /metrics are read before and after each one: which
upstream it asked (coredns_proxy_request_duration_seconds), whether it answered at once without
asking (splitdns_fail_fast_answers), and which interface that upstream's sockets are bound to
(splitdns_upstream_interface_info). A query sent on a socket bound to the tunnel's interface
left by the tunnel or not at all; one sent unbound went where the routing table says, which
is read here too (/proc/net/route) to say where that is now.

Phases: the tunnel as it is; with `--down CMD`, again after CMD has taken the tunnel (or its
route) away; with `--up CMD`, once more after CMD brought it back.
"""

from __future__ import annotations

import ipaddress
import json
import secrets
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from splitdns import config
from splitdns.commands.verify import checks
from splitdns.errors import ConfigError

EXIT_OK, EXIT_USAGE, EXIT_LEAK = 0, 1, 8
LABEL = "splitdns-leak-"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass
class Options:
    conf: str
    server: str = "127.0.0.1"
    port: int = 53
    names: int = 3
    down: str | None = None
    up: str | None = None
    settle: float = 2.0
    out: str | None = None
    route_file: str = "/proc/net/route"


@dataclass(frozen=True)
class Query:
    """One name and where it went, as the resolver's counters tell it."""

    zone: str
    name: str
    outcome: str                    # the rcode, or why no reply came
    ms: float
    sent_to: tuple[str, ...]        # upstreams asked ("host:port"), one per attempt
    bound_to: tuple[str, ...]       # the interface each was bound to; "" = the routing table chose
    failed_fast: int                # answered at once, nothing sent (tunnel down, upstreams down)
    routes: tuple[str, ...]         # for unbound attempts: the interface the routing table picks now

    @property
    def leak(self) -> bool:
        return any(not dev for dev in self.bound_to)

    def where(self) -> str:
        if not self.sent_to:
            return "not sent: answered at once" if self.failed_fast else "not sent"
        parts = []
        for to, dev, route in zip(self.sent_to, self.bound_to, self.routes, strict=True):
            parts.append(f"to {to} bound to {dev}: by {dev} or not at all" if dev else
                         f"to {to} NOT bound: where the routing table says ({route})")
        return "; ".join(parts)


@dataclass
class Phase:
    title: str
    tunnels: dict[str, str] = field(default_factory=dict)  # zone -> "up" / "down"
    # zone -> its upstreams not bound to any interface, each with where the routing table sends it
    unbound: dict[str, list[str]] = field(default_factory=dict)
    queries: list[Query] = field(default_factory=list)
    command: str = ""


def tunnel_zones(cfg: config.Config) -> list[str]:
    return [b.zones[0] for b in cfg.blocks if b.tunnel is not None]


def metrics_url(cfg: config.Config) -> str | None:
    if not cfg.prometheus:
        return None
    ep = cfg.prometheus[0]
    return f"http://{ep.host if ep.host not in ('', '0.0.0.0', '::') else '127.0.0.1'}:{ep.port}/metrics"


def section(cfg: config.Config, server: str, port: int) -> list[str]:
    """The tunnel as it is, two names per tunnel zone: `splitdns verify`'s artifact section
    (empty without a tunnel zone; a line saying why when the counters cannot be read)."""
    zones, url = tunnel_zones(cfg), metrics_url(cfg)
    if not zones:
        return []
    if url is None:
        return ["not checked: the Corefile has no `prometheus` directive, whose counters this reads"]
    try:
        phase = _phase("the tunnel as it is", zones, url, Options(conf="", server=server, port=port, names=2))
    except RuntimeError as err:
        return [f"not checked: {err}"]
    return summary([phase], [q for q in phase.queries if q.leak]).splitlines()


def run(opts: Options) -> int:
    try:
        cfg = config.load(opts.conf, read_files=False)
    except ConfigError as err:
        print(f"splitdns verify leaks: {err}", file=sys.stderr)
        return EXIT_USAGE
    zones = tunnel_zones(cfg)
    if not zones:
        print(f"splitdns verify leaks: {opts.conf} has no tunnel zone (openvpn or wireguard): "
              "nothing can leak from one", file=sys.stderr)
        return EXIT_USAGE
    url = metrics_url(cfg)
    if url is None:
        print(f"splitdns verify leaks: {opts.conf} has no `prometheus` directive; this check reads "
              "the resolver's counters, so add one (e.g. `prometheus 127.0.0.1:9153`)", file=sys.stderr)
        return EXIT_USAGE
    try:
        phases = [_phase("the tunnel as it is", zones, url, opts)]
        for title, command in (("after --down", opts.down), ("after --up", opts.up)):
            if command:
                _run_command(command)
                time.sleep(opts.settle)  # let the watcher see it (it polls every 200 ms)
                phases.append(_phase(title, zones, url, opts, command))
    except (OSError, RuntimeError) as err:
        print(f"splitdns verify leaks: {err}", file=sys.stderr)
        return EXIT_USAGE
    leaks = [q for p in phases for q in p.queries if q.leak]
    print(summary(phases, leaks))
    loose = any(p.unbound for p in phases)
    if opts.out:
        base = Path(opts.out)
        base.parent.mkdir(parents=True, exist_ok=True)
        base.with_suffix(".md").write_text(markdown(phases, leaks), encoding="utf-8")
        base.with_suffix(".json").write_text(json.dumps(
            {"leaks": len(leaks), "unbound": loose, "phases": [{**asdict(p), "queries": [
                {**asdict(q), "where": q.where(), "leak": q.leak} for q in p.queries]} for p in phases]},
            indent=2) + "\n", encoding="utf-8")
        print(f"artifact: {base.with_suffix('.md')}\nartifact: {base.with_suffix('.json')}")
    return EXIT_LEAK if leaks or loose else EXIT_OK


def _run_command(command: str) -> None:
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"`{command}` failed ({done.returncode}): {done.stderr.strip()}")


def _phase(title: str, zones: list[str], url: str, opts: Options, command: str = "") -> Phase:
    phase = Phase(title, command=command)
    routes = _routes(opts.route_file)
    for zone in zones:
        before = scrape(url)
        phase.tunnels[zone] = "up" if _value(before, "splitdns_tunnel_up", zone=zone) else "down"
        for _ in range(opts.names):
            name = f"{LABEL}{secrets.token_hex(5)}.{zone}".replace("..", ".")
            started = time.perf_counter()
            asked = checks.ask(name, opts.server, opts.port, timeout=checks.RESOLVER_TIMEOUT)
            ms = (time.perf_counter() - started) * 1000
            after = scrape(url)
            phase.queries.append(_query(zone, name, asked.outcome, ms, before, after, routes))
            before = after
        loose = [f"{dict(ls)['to']} ({_route_of(dict(ls)['to'], routes)})" for (n, ls), _ in before.items()
                 if n == "splitdns_upstream_interface_info" and dict(ls).get("zone") == zone
                 and not dict(ls).get("interface")]
        if loose:
            phase.unbound[zone] = loose
    return phase


def scrape(url: str) -> Samples:
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(url, timeout=5) as reply:  # the Corefile's own endpoint
            text = reply.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as err:
        raise RuntimeError(f"cannot read the resolver's counters at {url}: "
                           f"{getattr(err, 'reason', None) or err}") from None
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _value(samples: Samples, name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


def _query(zone: str, name: str, outcome: str, ms: float, before: Samples, after: Samples,
           routes: list[tuple[int, int, str]]) -> Query:
    sent: list[str] = []
    for (metric, labels), value in after.items():
        if metric != "coredns_proxy_request_duration_seconds_count" or dict(labels).get("zone") != zone:
            continue
        sent += [dict(labels)["to"]] * int(value - before.get((metric, labels), 0.0))
    devices = {dict(ls)["to"]: dict(ls)["interface"] for (n, ls), _ in after.items()
               if n == "splitdns_upstream_interface_info" and dict(ls).get("zone") == zone}
    fast = _value(after, "splitdns_fail_fast_answers_total", zone=zone) - \
        _value(before, "splitdns_fail_fast_answers_total", zone=zone)
    bound = tuple(devices.get(to, "") for to in sent)
    return Query(zone, name, outcome, ms, tuple(sent), bound, int(fast),
                 tuple(_route_of(to, routes) for to in sent))


def _routes(path: str) -> list[tuple[int, int, str]]:
    """The main IPv4 table (/proc/net/route): (destination, mask, interface)."""
    try:
        lines = Path(path).read_text(encoding="ascii", errors="replace").splitlines()[1:]
    except OSError:
        return []
    out = []
    for line in lines:
        f = line.split()
        if len(f) >= 8 and int(f[3], 16) & 1:  # RTF_UP
            # The kernel prints each address as a host-order integer of its network-order bytes.
            dest, mask = (int.from_bytes(struct.pack("=I", int(x, 16)), "big") for x in (f[1], f[7]))
            out.append((dest, mask, f[0]))
    return out


def _route_of(to: str, routes: list[tuple[int, int, str]]) -> str:
    host = to.rsplit(":", 1)[0].strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "unknown"
    if address.version != 4 or not routes:
        return "route unknown"
    n = int(address)
    best = max(((m, dev) for d, m, dev in routes if n & m == d), default=None)
    return f"by {best[1]} now" if best else "no route now"


def summary(phases: list[Phase], leaks: list[Query]) -> str:
    sent = sum(1 for p in phases for q in p.queries if q.sent_to)
    loose = sorted({z for p in phases for z in p.unbound})
    if leaks or loose:
        head = (f"leaks: {len(leaks)} of the tunnel zones' queries were sent unbound; "
                + (f"the upstreams of {', '.join(loose)} are NOT bound to the tunnel's interface, so its "
                   "queries and health probes go where the routing table says" if loose else
                   "they may leave by any interface"))
    else:
        head = (f"no leak: every query sent ({sent}) was bound to its tunnel's interface; the others "
                "were answered without being sent")
    lines = [head]
    for p in phases:
        lines.append(f"  {p.title}: " + ", ".join(f"{z} tunnel {s}" for z, s in p.tunnels.items()))
        lines += [f"    {z} NOT bound: {', '.join(ups)}" for z, ups in p.unbound.items()]
        lines += [f"    {q.name} {q.outcome} in {q.ms:.0f} ms: {q.where()}" for q in p.queries]
    return "\n".join(lines)


def markdown(phases: list[Phase], leaks: list[Query]) -> str:
    out = ["# splitdns verify leaks", "", summary(phases, leaks).splitlines()[0], ""]
    for p in phases:
        out += [f"## {p.title}", ""] + ([f"Ran `{p.command}` first.", ""] if p.command else [])
        out += [f"- {z}: tunnel {s}" for z, s in p.tunnels.items()]
        out += ["", "| name | answer | ms | where it left |", "|---|---|---|---|"]
        out += [f"| {q.name} | {q.outcome} | {q.ms:.0f} | {q.where()} |" for q in p.queries]
        out.append("")
    return "\n".join(out)
