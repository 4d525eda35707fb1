"""`autopath`: the search walk a client would do, done here in one trip (sans-io).

A query for NAME.<first search domain> is the first try of a client's walk. The zone decides
it as always (`Zone.walk`), and hands the shell a `Search`: the tries that follow it, in the
pod's search-list order, ending with NAME itself. The shell resolves each through the
server's zones (cache, guards, upstreams: whatever owns it) until one is not NXDOMAIN;
`answer` makes the client's reply from it: a CNAME from the asked name to the name that
answered, then that answer's records, as CoreDNS's autopath does. When every try is NXDOMAIN
the first reply stands and the client walks on (every try is then in some zone's cache).

A and AAAA of one name take the same path: the try a walk ended on is remembered for a few
seconds (`paths`), and the walk of the other type for the same name starts there, so a name
created between the two queries cannot give one an answer from `svc.cluster.local` and the
other from the catch-all. No sockets, no clock (`now` comes in), no logging.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from splitdns.codec import wire
from splitdns.core.decisions import Answer, Forward
from splitdns.core.names import NameGuard, under

NXDOMAIN = 3
MAX_NAME = 255
PATH_SECONDS = 5.0  # how long the other type of a name follows the path the first took
MAX_PATHS = 4096


@dataclass(slots=True)
class Search:
    """The rest of a client's walk: `tries`, after the query itself (`first`, decided by the
    zone as any query: an `Answer` or a `Forward`). `start`: the try a paired query of the
    other type ended on lately, to begin there."""

    first: Answer | Forward | None
    tries: tuple[wire.Query, ...]
    base: bytes
    start: int = 0


class AutoPath:
    """A zone's `autopath`: its zones and the pod's search list, in wire form."""

    __slots__ = ("paths", "saved", "search", "successes", "zones")

    def __init__(self, zones: tuple[str, ...], search: tuple[str, ...]) -> None:
        self.zones = tuple(wire.name_to_wire(z) for z in zones)
        self.search = tuple(wire.name_to_wire(s) for s in search)
        self.paths: dict[bytes, tuple[int, float]] = {}  # base + class -> (try, until)
        self.successes = 0  # walks that ended on an answer (CoreDNS's autopath_success_total)
        self.saved = 0      # queries the clients did not have to send

    def tries(self, q: wire.Query, now: float) -> Search | None:
        """The walk after `q`, when `q` is a first try: NAME under the first search domain
        (strictly), in one of the zones. None for any other query."""
        if not self.search or not any(wire.is_subdomain(q.name, z) for z in self.zones):
            return None
        rest = under(q.name, self.search[0])
        if not rest:
            return None
        base = b"".join(bytes((len(x),)) + x for x in rest)
        tail = q.question[-4:]
        tries = []
        for suffix in (*self.search[1:], b"\x00"):
            name = base + suffix
            if len(name) <= MAX_NAME:
                tries.append(wire.Query(q.id, q.flags, name + tail, name, q.qtype, q.edns,
                                        q.payload, q.do, q.cookie))
        remembered = self.paths.get(base + tail[2:])
        start = remembered[0] if remembered is not None and remembered[1] > now else 0
        return Search(None, tuple(tries), base, start)

    def ended(self, search: Search, q: wire.Query, index: int, now: float) -> None:
        """A walk ended on try `index` (0: the query itself): count it, remember its path."""
        if len(self.paths) >= MAX_PATHS:
            self.paths.clear()
        self.paths[search.base + q.question[-2:]] = (index, now + PATH_SECONDS)
        if index:
            self.successes += 1
            self.saved += index  # the tries the client would have sent itself, one each


class Searching(Protocol):
    """What the search step reads of a zone (core/zone.py's `Zone`)."""

    @property
    def autopath(self) -> AutoPath | None: ...
    @property
    def guard(self) -> NameGuard | None: ...


class Walk(Protocol):
    """What the search step reads and sets of a query's walk (core/zone.py's `_Walk`)."""

    search: Search | None

    @property
    def searching(self) -> bool: ...
    @property
    def rewritten(self) -> object: ...


def made_here(zone: Searching, q: wire.Query, now: float) -> bool:
    """Whether the zone makes its answer to `q` itself (a guard's, an autopath walk's): a
    prefetch must not ask upstream for it, nor replace it with the first try's denial."""
    return (zone.guard is not None and zone.guard.decide(q, count=False) is not None) or \
        (zone.autopath is not None and zone.autopath.tries(q, now) is not None)


def search_step(zone: Searching, q: wire.Query, now: float, walk: Walk) -> None:
    """The zone's step for `autopath` (where CoreDNS's plugin.cfg has it, after `rewrite`): a
    client's first try starts a walk, which follows the query's own decision (`Zone.walk`)."""
    if walk.searching and walk.rewritten is None and zone.autopath is not None:
        walk.search = zone.autopath.tries(q, now)


def is_nxdomain(reply: bytes) -> bool:
    return len(reply) > 3 and reply[3] & 0xF == NXDOMAIN


def answer(q: wire.Query, found: bytes, tried: wire.Query) -> bytes:
    """The client's reply: `found` (the reply to `tried`) under `q`'s question, with a CNAME
    from `q`'s name to the owner of the first answer record (its TTL), as CoreDNS's
    autopath `cnamer`. NODATA and errors keep their sections, under the asked name."""
    import dns.flags
    import dns.message
    import dns.name
    import dns.rdata
    import dns.rdataclass
    import dns.rdatatype
    import dns.rrset

    msg = dns.message.from_wire(found, ignore_trailing=True)
    asked = dns.name.from_wire(q.question, 0)[0]
    if msg.answer:
        first = msg.answer[0]
        if first.name != asked:
            cname = dns.rrset.RRset(asked, dns.rdataclass.IN, dns.rdatatype.CNAME)
            cname.add(dns.rdata.from_text(dns.rdataclass.IN, dns.rdatatype.CNAME, first.name.to_text()),
                      first.ttl)
            msg.answer.insert(0, cname)
    msg.question = [dns.rrset.RRset(asked, dns.rdataclass.IN, dns.rdatatype.RdataType.make(q.qtype))]
    msg.id = q.id
    msg.flags &= ~dns.flags.AA  # we speak for no zone here
    return msg.to_wire(max_size=65535)
