"""Names a zone answers here, never asking upstream, from what it knows of the pod: which
names the Kubernetes DNS schema rules out (`k8s_schema`), which are a private name with a
search suffix appended (the pod's search list, from `autopath`), and AAAA where the tunnel
carries no IPv6 (`filter_aaaa`). What applies to a zone is decided once, at load; a query
then costs a few suffix comparisons.

Never synthesizes NXDOMAIN for a name that could exist, nor for an empty non-terminal (RFC
8020: NXDOMAIN denies the whole subtree), with one deliberate exception: a name under a zone
the Corefile sends elsewhere (a tunnel zone, the cluster zone) with a search suffix appended
is a search walk's try, answered NXDOMAIN so that it never reaches the cluster DNS, the
catch-all or a cloud resolver; the client's next try is the real name.
No sockets, no clock, no logging.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from splitdns import directives
from splitdns.codec import wire

if TYPE_CHECKING:
    from splitdns.config import Block
    from splitdns.core.cache import Cache
    from splitdns.core.decisions import Answer

SOA_TTL = 5  # CoreDNS's kubernetes plugin: its SOA's TTL and minimum
SERIAL = 1
_SOA_TIMES = struct.pack("!IIII", 7200, 1800, 86400, SOA_TTL)
_RR = struct.Struct("!HHIH")
T_SOA, T_AAAA, CLASS_IN = 6, 28, 1
NOERROR, NXDOMAIN = 0, 3
# A Namespace or Service name: an RFC 1123 label (Kubernetes validates both so; Services
# that start with a digit are allowed since RelaxedServiceNameValidation).
_K8S_LABEL = re.compile(rb"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
LEAK, IMPOSSIBLE, NO_IPV6 = "leak", "impossible", "no_ipv6"


def labels(name: bytes) -> list[bytes]:
    """A wire name's labels, left to right."""
    out, pos = [], 0
    while name[pos]:
        out.append(name[pos + 1:pos + 1 + name[pos]])
        pos += name[pos] + 1
    return out


def under(name: bytes, zone: bytes) -> list[bytes] | None:
    """The labels of `name` left of `zone` (empty at the apex), None when not under it."""
    if zone == b"\x00":
        return labels(name)
    if not name.endswith(zone):
        return None
    cut = len(name) - len(zone)
    found, pos = [], 0
    while pos < cut:
        found.append(name[pos + 1:pos + 1 + name[pos]])
        pos += name[pos] + 1
    return found if pos == cut else None


def schema_allows(rest: list[bytes]) -> bool:
    """Whether the labels left of the cluster domain can name a record of the Kubernetes DNS
    schema (1.0.1) or a pod record, or an empty non-terminal on the way to one."""
    if not rest:
        return True
    top, depth = rest[-1], len(rest)
    if top == b"dns-version":
        return depth == 1  # its TXT record
    if top == b"pod":  # <ip>.<ns>.pod.<zone>: not in the schema, served by CoreDNS's `pods`
        return depth == 1 or (depth <= 3 and _K8S_LABEL.fullmatch(rest[-2]) is not None)
    if top != b"svc":
        return False
    if depth == 1:
        return True
    if _K8S_LABEL.fullmatch(rest[-2]) is None:  # the namespace
        return False
    if depth == 2:
        return True
    if _K8S_LABEL.fullmatch(rest[-3]) is None:  # the service
        return False
    if depth <= 4:  # <service>, <hostname>.<service> (or _<proto>.<service>, on the way to SRV)
        return True
    # _<port>._<proto>.<service>: the only name three labels under a namespace
    return depth == 5 and rest[0].startswith(b"_") and rest[1].startswith(b"_")


class NameGuard:
    """What one zone answers here. `clusters`: the cluster domains `k8s_schema` guards (wire);
    `suffixes`: the pod's search domains, `protected`: the names no suffixed form of which
    may leave (tunnel zones and the Corefile's other zones; shared, so pushed domains join
    it); `no_ipv6`: `filter_aaaa`; `soa`: the owner of the SOA its denials carry."""

    __slots__ = ("clusters", "counts", "no_ipv6", "own", "protected", "soa", "suffixes")

    def __init__(self, soa: bytes, clusters: Iterable[bytes] = (), suffixes: Iterable[bytes] = (),
                 protected: set[bytes] | None = None, no_ipv6: bool = False,
                 own: Iterable[bytes] = (), counts: dict[str, int] | None = None) -> None:
        self.soa = soa
        self.clusters = tuple(clusters)
        self.suffixes = tuple(suffixes) if protected is not None else ()
        self.protected = protected if protected is not None else set()
        self.own = frozenset(own)  # the zone's own names: a try that stays here leaks nothing
        self.no_ipv6 = no_ipv6
        self.counts = counts if counts is not None else {LEAK: 0, IMPOSSIBLE: 0, NO_IPV6: 0}

    @property
    def active(self) -> bool:
        return bool(self.clusters or self.suffixes or self.no_ipv6)

    def decide(self, q: wire.Query, count: bool = True) -> bytes | None:
        """The reply to give here, or None to go on to the upstreams; counted unless `count`
        is off (a question, not an answer)."""
        name = q.name
        kind = out = None
        for suffix in self.suffixes:
            rest = under(name, suffix)
            if rest and self._protected(b"".join(bytes((len(x),)) + x for x in rest) + b"\x00"):
                kind, out = LEAK, denial(q, NXDOMAIN, self._owner(suffix))
                break
        if kind is None:
            for zone in self.clusters:
                rest = under(name, zone)
                if rest is not None and not schema_allows(rest):
                    kind, out = IMPOSSIBLE, denial(q, NXDOMAIN, zone)
                    break
        if kind is None and self.no_ipv6 and q.qtype == T_AAAA:
            kind, out = NO_IPV6, denial(q, NOERROR, self.soa)
        if kind is not None and count:
            self.counts[kind] += 1
        return out

    def _protected(self, name: bytes) -> bool:
        protected, own = self.protected, self.own
        return any(s in protected and s not in own for s in wire.suffixes(name) if s != b"\x00")

    def _owner(self, suffix: bytes) -> bytes:
        """The SOA of a denial for a suffixed name: the zone's own, but the search domain's
        where the zone is the root (we speak for no one there)."""
        return suffix if self.soa == b"\x00" else self.soa


def soa_record(owner: bytes) -> bytes:
    """`owner 5 IN SOA ns.dns.owner hostmaster.owner 1 7200 1800 86400 5`, as CoreDNS's
    kubernetes plugin writes its zone's."""
    rdata = b"\x02ns\x03dns" + owner + b"\x0ahostmaster" + owner + struct.pack("!I", SERIAL) + _SOA_TIMES
    return owner + _RR.pack(T_SOA, CLASS_IN, SOA_TTL, len(rdata)) + rdata


def denial(q: wire.Query, rcode: int, owner: bytes) -> bytes:
    """An authoritative NXDOMAIN or NODATA for `q`, with the SOA of `owner` (RFC 2308)."""
    flags = wire.QR | wire.AA | wire.RA | (q.flags & (wire.RD | wire.CD)) | rcode
    header = wire.HEADER.pack(q.id, flags, 1, 0, 1, 1 if q.edns else 0)
    out = header + q.question + soa_record(owner)
    if q.edns:
        out += wire.opt_record(q.do, wire.cookie_option(q.cookie) if q.cookie else b"")
    return out


@dataclass
class Pod:
    """What the server knows of its pod: the search list every client walks (`autopath`'s
    resolv.conf) and the names no suffixed try of which may leave their zone (`protected`,
    wire form: every zone the Corefile names but the root, and the domains a VPN pushed)."""

    search: tuple[str, ...]
    protected: set[bytes] = field(default_factory=set)

    @property
    def cluster_domain(self) -> str | None:
        """The cluster domain the search list names (`<ns>.svc.D svc.D D`), if it has that shape."""
        for entry in self.search:
            parts = entry.rstrip(".").split(".")
            if len(parts) > 2 and parts[1] == "svc":
                return ".".join(parts[2:]) + "."
        return None


def pod_of(blocks: Iterable[Block]) -> Pod | None:
    """The pod's knowledge from a Corefile's blocks: None without an `autopath` that read its
    resolv.conf (then no guard needs it)."""
    blocks = tuple(blocks)
    spec = next((s for b in blocks if (s := b[directives.AUTOPATH]) is not None and s.read), None)
    if spec is None:
        return None
    protected = {wire.name_to_wire(z) for b in blocks for z in b.zones if z != "."}
    return Pod(spec.search, protected)


def schema_off(block: Block, pod: Pod | None) -> str | None:
    """Why the block's `k8s_schema` does nothing, or None when it guards."""
    if not block.uses(directives.K8S_SCHEMA):
        return None
    made = [d.name for d in (directives.REWRITE, directives.TEMPLATE, directives.HOSTS) if block.uses(d)]
    if made:
        return (f"the block also has {', '.join(made)}, which may answer names the Kubernetes "
                "schema does not have; k8s_schema stays off")
    zones = schema_zones(block)
    if "." in zones:
        return "k8s_schema needs the cluster domain (k8s_schema cluster.local) in a root block"
    domain = pod.cluster_domain if pod is not None else None
    if domain is not None and domain not in zones:
        return (f"the pod's search list names the cluster domain {domain}, which k8s_schema does "
                f"not guard ({', '.join(zones)}); it stays off")
    return None


def schema_zones(block: Block) -> tuple[str, ...]:
    spec = block[directives.K8S_SCHEMA]
    return (spec.zones or block.zones) if spec is not None else ()


def guard_for(block: Block, tunnel: bool, pod: Pod | None,
              counts: dict[str, int] | None = None) -> NameGuard | None:
    """The guards that apply to a zone, decided once: None when none does (no step then)."""
    soa = wire.name_to_wire(block.zones[0])
    clusters = () if schema_off(block, pod) else tuple(wire.name_to_wire(z) for z in schema_zones(block))
    leaks = pod is not None and not tunnel
    guard = NameGuard(soa, clusters,
                      (wire.name_to_wire(s) for s in pod.search) if pod is not None else (),
                      pod.protected if leaks and pod is not None else None,
                      block.uses(directives.FILTER_AAAA),
                      (wire.name_to_wire(z) for z in block.zones), counts)
    return guard if guard.active else None


class Guarded(Protocol):
    """What the guard step reads of a zone (core/zone.py's `Zone`)."""

    @property
    def guard(self) -> NameGuard | None: ...
    @property
    def cache(self) -> Cache | None: ...


class Walked(Protocol):
    """What the guard step reads of a query's walk (core/zone.py's `_Walk`)."""

    @property
    def rewritten(self) -> object: ...


def guard_step(zone: Guarded, q: wire.Query, now: float, walk: Walked) -> Answer | None:
    """The zone's step for `k8s_schema`, `filter_aaaa` and the leak guard (in the registry's
    order, after the tunnel's state: a tunnel that is down fails AAAA as it fails A, so a
    client retries both): the answer made here, kept in the cache for the next client."""
    from splitdns.core.decisions import Answer

    if zone.guard is None or walk.rewritten is not None:
        return None
    out = zone.guard.decide(q)
    if out is None:
        return None
    if zone.cache is not None:
        zone.cache.keep(q, out, now)
    return Answer(out)
