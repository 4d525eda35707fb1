"""Corefile checks (codes SD1xx): loops, missing catch-all, the tunnel owning too much, zones and
forwards that do not mean what they look like, bind mix-ups, directives the resolver lacks.
Tests: tests/test_corefile_compat.py, tests/test_render.py, tests/test_wireguard_check.py.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from splitdns import config, corefile, directives
from splitdns.codec.wire import is_subdomain, name_to_wire, suffixes
from splitdns.core import names
from splitdns.directives import bind, forward
from splitdns.errors import ConfigError
from splitdns.kube.check import zone_names
from splitdns.kube.shared.findings import Finding
from splitdns.kube.shared.lenient_corefile import Block, Forward
from splitdns.kube.shared.sources import CLUSTER, POD, CorefileSource

IsTunnel = Callable[[str], str | None]  # upstream address -> why it is the tunnel, or None


@dataclass(frozen=True)
class PodResolvConf:
    """What the pod's resolv.conf says, as far as the manifests tell."""

    policy: str
    nameservers: tuple[str, ...]

    @property
    def points_at_loopback(self) -> bool:
        return self.policy == "None" and any(_loopback(ns) for ns in self.nameservers)


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def check(src: CorefileSource, resolver: str, pods: list[PodResolvConf],
          is_tunnel: IsTunnel) -> list[Finding]:
    model = src.model
    if model.error is not None:
        return [Finding(src.file, src.line(model.error.where), "SD100", model.error.message)]
    out: list[Finding] = []

    def add(where_line: int, code: str, message: str) -> None:
        out.append(Finding(src.file, where_line, code, message))

    for name, where in model.unset.items():
        add(src.line(where), "SD113", f"environment variable {name} is not set here: its value comes from "
                                      "the pod's environment when `splitdns serve` starts (unset there, "
                                      "serve refuses the Corefile)")

    for block in model.blocks:
        for name, err in block.errors:
            if resolver == "coredns" and _coredns_accepts(name, block):
                continue
            add(src.line(err.where), "SD100", err.message)
    cluster = src.context == CLUSTER
    effective = "coredns" if cluster else resolver
    for block in model.blocks:
        _directives(block, effective, src, add)
        _forwards(block, src, pods, add, cluster)
        _tunnel(block, src, is_tunnel, cluster, add)
        _uncovered(block, src, add)
        _unbound(block, src, add)
    _zones(model.blocks, src, add)
    _slips(model.blocks, src, add)
    _duplicates(model.blocks, src, add)
    _binds(model.blocks, src, add)
    # A block whose key is broken (SD100 above) might be the `.` one: no guess about it.
    if src.context == POD and model.blocks and all(b.zones for b in model.blocks) \
            and not any(b.is_root for b in model.blocks):
        add(src.line(model.blocks[0].where), "SD103",
            "no `.` block: names outside " + ", ".join(z for b in model.blocks for z in b.zones)
            + " get REFUSED (fine for a stub-only server or a piece to import; not as the pod's only "
            "nameserver)")
    if effective == "splitdns":
        # serve stops at its first error; the lines above already report what it would say
        # there, so only an error on a line nothing named yet is news.
        named = {f.line for f in out if f.severity == "error"}
        out.extend(f for f in _resolver_verdict(src) if f.line not in named)
    return out


# Server keys CoreDNS serves and splitdns does not (DNS over TLS, HTTPS, gRPC, QUIC).
_COREDNS_SCHEMES = ("tls://", "https://", "grpc://", "quic://", "https3://")


def _coredns_accepts(what: str, block: Block) -> bool:
    """Whether CoreDNS takes what splitdns refused here: `forward` to hostnames or https://
    upstreams; `bind` to interface names; server keys of the schemes CoreDNS serves."""
    if what in ("forward", "bind"):
        return True
    return what == "keys" and any(k.text.startswith(_COREDNS_SCHEMES) for k in block.keys)


def _resolver_verdict(src: CorefileSource) -> list[Finding]:
    """Whatever else the resolver itself would refuse (argument errors, duplicate zones...)."""
    if any(errs for b in src.model.blocks for errs in b.errors):
        return []
    try:
        built = config.build(list(_server_blocks(src)), src.file, config.DEFAULT_PORT, read_files=False)
    except ConfigError as err:
        if src.model.deferred(err.where):
            return []  # that line's meaning is the pod's environment's to give
        return [Finding(src.file, src.line(err.where), "SD100", err.message)]
    return [Finding(src.file, src.line(b.where), "SD115", why) for b in built.blocks
            if (why := names.schema_off(b, None)) is not None]


def _server_blocks(src: CorefileSource) -> Iterator[corefile.ServerBlock]:
    for block in src.model.blocks:
        yield corefile.ServerBlock(block.keys, block.statements)


Add = Callable[[int, str, str], None]


def _directives(block: Block, resolver: str, src: CorefileSource, add: Add) -> None:
    for st in block.statements:
        name = st.name
        coredns_has = name in directives.COREDNS_PLUGINS
        gone = config.retired(name)
        if gone:
            add(src.line(st.where), "SD100", gone)
        elif not coredns_has and name not in directives.SUPPORTED:
            # Neither resolver knows it: a typo, so no advice to switch resolvers.
            known = directives.COREDNS_PLUGINS | set(directives.SUPPORTED)
            guess = config.near_miss(name, tuple(sorted(known)))
            hint = f"; did you mean `{guess}`?" if guess else ""
            add(src.line(st.where), "SD112", f"`{name}` is not a directive splitdns or CoreDNS knows{hint}")
        elif resolver == "coredns":
            if not coredns_has:
                add(src.line(st.where), "SD110", f"`{name}` is splitdns's own directive; CoreDNS refuses "
                                                 "to start on it")
        elif name not in directives.SUPPORTED:
            what = ("a CoreDNS plugin that splitdns does not implement" if name in directives.COREDNS_ONLY
                    else "not supported by this splitdns build")
            add(src.line(st.where), "SD110",
                f"`{name}` is {what}; it supports: {', '.join(directives.SUPPORTED)}")


def _forwards(block: Block, src: CorefileSource, pods: list[PodResolvConf], add: Add, cluster: bool) -> None:
    core = block.to_config_block()
    zones = [name_to_wire(z) for z in block.zones]
    # The earlier forward lines of the block by FROM: looked up by each suffix of a later FROM,
    # so that a block of thousands of forward lines is checked in linear time, not pair by pair.
    covering: dict[bytes, tuple[list[Forward], list[Forward]]] = {}
    order = {id(f): i for i, f in enumerate(block.forwards)}
    for fwd in block.forwards:
        line = src.line(fwd.statement.where)
        spec = fwd.spec
        files = spec.files if not cluster else ()
        if files and not spec.upstreams and not spec.tunnel and all(
                Path(path).is_file() and forward.read_resolv_conf(fwd.statement, path) is None
                for path in files):
            # serve refuses such a line (as CoreDNS does): an error here too, not a warning. A
            # file absent here is the pod's to hold, and this machine cannot tell what it says.
            add(line, "SD100", f"forward: {', '.join(files)} has no usable nameserver line")
            files = ()
        for path in files:
            looping = [p for p in pods if p.points_at_loopback]
            # What `serve` would read from the file on this machine, under serve's own rule.
            here = forward.read_resolv_conf(fwd.statement, path) or []
            mine = next((up for up in here if config.forwards_to_itself(core, up)), None)
            if mine is not None:
                add(line, "SD101", config.self_forward_message(spec, mine, core))
            elif looping:
                add(line, "SD101", f"forward {spec.origin} {path}: the pod has dnsPolicy None with "
                                   f"nameserver {looping[0].nameservers[0]}, so {path} names this resolver "
                                   "itself")
            elif not pods:
                add(line, "SD102", f"forward {spec.origin} {path}: what the file holds depends on the pod's "
                                   "dnsPolicy (under None it is 127.0.0.1, this resolver)")
        for up in spec.upstreams:
            if config.forwards_to_itself(core, up):
                add(line, "SD101", config.self_forward_message(spec, up, core))
        origin = name_to_wire(spec.origin)
        parent = _covering(origin, covering, order)
        if parent is not None:
            add(line, "SD106", f"forward {spec.origin} comes after forward {parent.spec.origin} (line "
                               f"{src.line(parent.statement.where)}), which already covers it: "
                               "this line never gets a query")
        if not spec.next_rcodes:  # `next` hands some replies on to the lines after it
            kept = covering.setdefault(origin, ([], []))
            if not spec.excepts and not kept[0]:
                kept[0].append(fwd)  # the first without `except` covers all the later ones can
            elif spec.excepts:
                kept[1].append(fwd)
        if zones and not any(is_subdomain(origin, z) or is_subdomain(z, origin) for z in zones):
            add(line, "SD108", f"forward {spec.origin} is outside the block's zones "
                               f"({', '.join(block.zones)}): it never matches")


def _covering(origin: bytes, covering: dict[bytes, tuple[list[Forward], list[Forward]]],
              order: dict[int, int]) -> Forward | None:
    """The first earlier forward line whose FROM covers `origin` (its `except` aside), or None."""
    found: list[Forward] = []
    for suffix in suffixes(origin):
        plain, excepting = covering.get(suffix, ([], []))
        found += plain
        found += [f for f in excepting
                  if not any(is_subdomain(origin, name_to_wire(e)) for e in f.spec.excepts)]
    return min(found, key=lambda f: order[id(f)], default=None)


def _tunnel(block: Block, src: CorefileSource, is_tunnel: IsTunnel, cluster: bool, add: Add) -> None:
    if not block.is_root:
        return
    code = "SD105" if cluster else "SD104"
    scope = "the cluster's CoreDNS sends every pod's lookups" if cluster else "every lookup of the pod goes"
    st, kind = block.tunnel_statement, block.tunnel_kind
    if st is not None and kind is not None:
        add(src.line(st.where), code,
            f"the `.` block takes its upstreams from {kind.display}: {scope} into the tunnel")
    for fwd in block.forwards:
        if fwd.spec.origin != ".":
            continue
        for up in fwd.spec.upstreams:
            why = is_tunnel(up.host) or (_private_address(up.host) if cluster else None)
            if why:
                add(src.line(fwd.statement.where), code,
                    f"forward . {up.host}: {why}; {scope} into the tunnel")


# RFC 1918, shared address space (CGNAT, where cloud VPNs hand out tunnel addresses) and ULA.
_PRIVATE_NETWORKS = tuple(ipaddress.ip_network(n) for n in
                          ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7"))


def _private_address(host: str) -> str | None:
    """Why a cluster-wide `forward .` to `host` is the trap: a private address is neither the node's
    resolver (/etc/resolv.conf) nor a public one, and a workload's tunnel DNS is one."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if any(ip in net for net in _PRIVATE_NETWORKS):
        return (f"{host} is a private address, not the node's resolver (/etc/resolv.conf): a "
                "workload's tunnel DNS, as far as check can tell")
    return None


_NOT_ANSWERING = frozenset({"errors", "log", "cache", "health", "ready", "prometheus", "reload", "loop",
                            "bind", "forward", "loadbalance", "minimal", "rewrite", "limits",
                            "private_addresses", "debug", "pprof", "any", "metadata", "trace"})


def _uncovered(block: Block, src: CorefileSource, add: Add) -> None:
    """SD117: a `.` block whose forward lines all take narrower names, with nothing else that could
    answer the rest (SERVFAIL, as `explain` says). Only `.`: a zone block forwarding only a part
    of its zone may mean it; a catch-all that answers no public name never does."""
    if not block.is_root or not block.forwards or block.tunnel \
            or any(st.name not in _NOT_ANSWERING for st in block.statements) \
            or any(f.spec.origin == "." for f in block.forwards):
        return
    froms = ", ".join(f.spec.origin for f in block.forwards)
    add(src.line(block.forwards[0].statement.where), "SD117",
        f"the `.` block forwards only {froms}: every other name (every public one) gets SERVFAIL; "
        "add `forward . UPSTREAM` after them")


def _slips(blocks: list[Block], src: CorefileSource, add: Add) -> None:
    """SD116: a zone one typing slip away from the cluster domain or an earlier block's zone."""
    first: dict[str, Block] = {}
    for b in blocks:
        for zone in b.zones:
            first.setdefault(zone, b)
    for slip, meant in zone_names.near_misses(list(first)):
        block = first[slip]
        if meant == zone_names.CLUSTER_DOMAIN:
            why = "the cluster domain"
        else:
            why = f"the zone of block {first[meant].name} (line {src.line(first[meant].where)})"
        add(src.line(block.where), "SD116", f"zone {slip} is one typing slip away from {meant}, {why}: "
                                            f"did you mean {meant.rstrip('.')}?")


def _unbound(block: Block, src: CorefileSource, add: Add) -> None:
    st = block.tunnel_statement
    if st is None:
        return
    for opt in st.body or ():
        if opt.name == "bind_to_tunnel" and [a.lower() for a in opt.args] == ["off"]:
            add(src.line(opt.where), "SD114", f"{st.name} {{ bind_to_tunnel off }}: the queries of "
                                              f"{', '.join(block.zones)} may leave by any interface")


def _zones(blocks: list[Block], src: CorefileSource, add: Add) -> None:
    names: list[tuple[str, int]] = []
    for b in blocks:
        names += [(z, src.line(b.where)) for z in b.zones]
        names += [(f.spec.origin, src.line(f.statement.where)) for f in b.forwards]
    for name, line in names:
        if name.startswith("*.") or ".*." in name:
            add(line, "SD107", f"{name}: `*` is a literal label here, not a wildcard; the zone "
                               f"{name.split('*.', 1)[1]} already covers every name below it")
    seen = {n for n, _ in names if n != "."}
    for name, line in names:
        # Each place a suffix starts inside a label, looked up: linear in the text, where comparing
        # every pair of names took minutes on a Corefile of 20,000 blocks.
        for start in range(1, len(name) - 1):
            other = name[start:]
            if name[start - 1] != "." and other in seen:
                add(line, "SD107", f"{name} ends with the text {other} but not on a label boundary: "
                                   f"{other} does not cover it, it is a zone of its own")


def _duplicates(blocks: list[Block], src: CorefileSource, add: Add) -> None:
    """The same zone and port in two blocks, which serve refuses: found here whatever else is
    wrong, since serve's own check stops at its first error."""
    seen: dict[tuple[str, int, str], Block] = {}
    for b in blocks:
        for zone in b.zones:
            # once per listening address, as serve checks it (no bind: loopback)
            others = [seen.setdefault((zone, b.port, host), b) for host in (b.bind or bind.LOOPBACK)]
            first = next((f for f in others if f is not b), None)
            if first is not None:
                add(src.line(b.where), "SD100", f"cannot serve dns://{zone}:{b.port} - it is already "
                                                f"defined at {src.file}:{src.line(first.where)}")


def _binds(blocks: list[Block], src: CorefileSource, add: Add) -> None:
    by_port: dict[int, list[Block]] = {}
    for b in blocks:
        by_port.setdefault(b.port, []).append(b)
    for port, group in by_port.items():
        if len({b.bind is None for b in group}) > 1:
            for b in group:
                if b.bind is None:
                    add(src.line(b.where), "SD109", f"block {b.name} has no bind while other blocks of "
                                                    f"port {port} have one")
