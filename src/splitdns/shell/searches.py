"""`autopath`'s search walks: the tries of a client's walk, one after the other through
whichever zone owns each, carried out over the flights (flights.py) as a coroutine, since each
try waits for the one before. What to try and what to answer is the core's (core/search.py).
Tests: tests/test_autopath.py, tests/test_autopath_ported.py, tests/test_search_walk_lab.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import dns.rcode

from splitdns.codec import wire
from splitdns.core import search as walks
from splitdns.core.decisions import Answer, Forward
from splitdns.core.routing import unrouted
from splitdns.core.search import Search

if TYPE_CHECKING:
    from splitdns.core.exchange import Done
    from splitdns.core.routing import Router
    from splitdns.core.zone import Zone
    from splitdns.shell import datagrams
    from splitdns.shell.listener import Listener


class Flights(Protocol):
    """What a walk needs of the server's flights (flights.py)."""

    def clock(self) -> float: ...

    async def reply_to(self, zone: Zone, q: wire.Query, decided: Answer | Forward, router: Router) -> bytes:
        ...

    def internal_error(self, err: BaseException) -> None: ...

    def send(self, zone: Zone | None, q: wire.Query, listener: Listener, peer: datagrams.Peer,
             size: int, start: float, out: bytes, via: Done | None = None, hit: int | None = None) -> None:
        ...


async def search(flights: Flights, zone: Zone, q: wire.Query, walk: Search, router: Router) -> bytes:
    """`autopath`: the client's walk, one try after the other through whichever zone owns
    each (none starts a walk of its own), until one is not NXDOMAIN (core/search.py)."""
    assert zone.autopath is not None and walk.first is not None
    first = None
    if walk.start == 0:
        first = await flights.reply_to(zone, q, walk.first, router)
        if not walks.is_nxdomain(first):
            zone.autopath.ended(walk, q, 0, flights.clock())
            return first
    for index in range(max(walk.start, 1), len(walk.tries) + 1):
        tried = walk.tries[index - 1]
        out = await _try(flights, tried, router)
        if not walks.is_nxdomain(out):
            now = flights.clock()
            zone.autopath.ended(walk, q, index, now)
            reply = walks.answer(q, out, tried)
            if zone.cache is not None:
                zone.cache.keep(q, reply, now)
            return reply
    if first is None:  # began later on a paired query's path, and every try is gone now
        first = await flights.reply_to(zone, q, walk.first, router)
    return first


async def _try(flights: Flights, q: wire.Query, router: Router) -> bytes:
    """One try of a walk, answered by the zone that owns it, which starts no walk of its own."""
    zone = router.route(q.name)
    if zone is None:
        return unrouted(q)
    decided = zone.begin(q, flights.clock(), searching=False)
    assert not isinstance(decided, Search)
    return await flights.reply_to(zone, q, decided, router)


async def searched(flights: Flights, zone: Zone, q: wire.Query, walk: Search, listener: Listener,
                   peer: datagrams.Peer, size: int, start: float) -> None:
    """A UDP client's search walk (a task): its reply sent when the walk ends."""
    try:
        out = await search(flights, zone, q, walk, listener.router)
    except Exception as err:  # our own bug: the client still gets an answer, we a log line
        flights.internal_error(err)
        out = wire.error_reply(q, dns.rcode.SERVFAIL)
    flights.send(zone, q, listener, peer, size, start, out)

