"""The UDP path: datagrams read in batches, cache hits answered inside the read callback.

Cache hits and the block's own answers are rendered from wire bytes with no task and no
dnspython, and sent with one sendmmsg per batch; a repeat within the same second is a memo
lookup (memo.py). Anything else the zone decides (`Zone.walk`): an answer sent at once, or a
client that boards a flight (flights.py), whose attempts the driver makes on loop callbacks
(misses.py), with no task. Why it is shaped so, with the figures: bench/README.md, "Where
splitdns's time goes" and "Misses on callbacks".
Tests: tests/test_datagrams.py, tests/test_misses.py, tests/test_zone.py (hot path = `Zone.begin`).
"""

from __future__ import annotations

import operator
import struct
from collections import Counter
from collections.abc import Callable, Iterable

import dns.rcode

from splitdns.codec import queries, wire
from splitdns.core import metrics
from splitdns.core.decisions import Answer
from splitdns.core.memo import Remembered
from splitdns.core.routing import unrouted
from splitdns.core.search import Search
from splitdns.core.zone import Zone
from splitdns.shell import datagrams, logs, searches
from splitdns.shell.flights import Flights, UdpClient
from splitdns.shell.listener import Listener, Tally

_TALLY = operator.attrgetter("tally")


class UdpPath:
    def __init__(self, clock: Callable[[], float], flights: Flights) -> None:
        self.clock = clock
        self.flights = flights

    def readable(self, listener: Listener) -> None:
        """One batch per wakeup (datagrams.BATCH): then the loop's other work gets a turn,
        also when every datagram takes the slow path (garbage, misses)."""
        now = self.clock()
        batch = listener.reader(now)
        assert batch is not None and listener.udp is not None
        try:
            count = batch.receive()
        except OSError as err:
            logs.error(f"{listener.label}: {err.strerror}; reading one datagram at a time from now on")
            listener.batch = datagrams.OneByOne(listener.udp)
            return
        listener.last_count = count
        if not count:
            return
        repeats: list[Remembered[Zone]] = []  # memo hits
        rendered: list[Tally] = []  # cache hits rendered anew
        try:
            for i in batch.answer_known(listener.memo.find, now, repeats):
                try:
                    self._datagram(listener, batch, i, rendered, now)
                except Exception as err:  # our own bug: lose this datagram, not the batch
                    self.flights.internal_error(err)
        finally:
            batch.send()  # the replies first, the bookkeeping after
            if repeats or rendered:
                self._count_hits(repeats, rendered, listener, now)

    def _datagram(self, listener: Listener, batch: datagrams.Batch | datagrams.OneByOne,
                  i: int, hits: list[Tally], now: float) -> None:
        """A datagram the memo did not know: a hit rendered anew, an error reply, or a miss."""
        data = batch.datagram(i)
        q = wire.parse_query(data)
        zone = None
        if q is not None:
            zone = listener.router.route(q.name)
            if zone is not None and self._answer_hit(zone, q, data, listener, batch, i, hits, now):
                return
        verdict = queries.read(data) if q is None else q
        if verdict is None:
            return
        if isinstance(verdict, bytes):
            batch.reply(i, verdict)
            self.flights.account_unrouted(listener, "udp", data, verdict, now)
            return
        self._miss(verdict, listener, batch.peer(i), len(data), now, zone)

    def _miss(self, q: wire.Query, listener: Listener, peer: datagrams.Peer, size: int,
              now: float, routed: Zone | None) -> None:
        """What the zone decides for a query the hot path did not answer: an answer sent now,
        or a client on a flight. `routed`: the zone the hot path routed `q` to, whose `known`
        step found nothing (the walk goes on from there)."""
        flights = self.flights
        zone = routed or listener.router.route(q.name)
        if zone is None:
            flights.send(None, q, listener, peer, size, now, unrouted(q))
            return
        try:
            decided = zone.begin(q, now) if routed is None else zone.walk(q, now)
            if isinstance(decided, Search):  # autopath: several exchanges in turn, as a task
                flights.spawn(searches.searched(flights, zone, q, decided, listener, peer, size, now))
                return
            if isinstance(decided, Answer):
                flights.carry_out(zone, q, decided, listener.router)
                flights.send(zone, q, listener, peer, size, now, decided.reply, hit=decided.hit)
                return
            flights.board(zone, decided, UdpClient(q, decided, listener, peer, size, now),
                          listener.router.route)
        except Exception as err:  # our own bug: the client still gets an answer, we a log line
            flights.internal_error(err)
            flights.send(zone, q, listener, peer, size, now, wire.error_reply(q, dns.rcode.SERVFAIL))

    def _answer_hit(self, zone: Zone, q: wire.Query, data: bytes, listener: Listener,
                    batch: datagrams.Batch | datagrams.OneByOne, i: int,
                    hits: list[Tally], now: float) -> bool:
        """The hot path: what the zone knows at once (`Zone.known`: a fresh cache entry, or
        an answer the block made before), sent from wire bytes. False on a miss. The reply is
        remembered (memo.py) when the zone says the memo may send it again."""
        known = zone.known(q, now)
        if known is None:
            return False
        out, turns = known.reply, known.turns
        if len(out) > q.max_udp:
            out = wire.truncated(q, struct.unpack_from("!H", out, 2)[0])
            turns = None
        batch.reply(i, out)
        hits.append((zone, q.qtype, out[3] & 0xF, known.denial))
        zone.stats.udp_hit_sizes[metrics.hit_sizes(len(data), len(out))] += 1
        if zone.log is not None:
            self.flights.log_query(zone.block, q, batch.peer(i), "udp", len(data), out, now)
        if known.refresh is not None:
            self.flights.refresh(zone, known.refresh, q, listener.router)
        if known.replayable:
            listener.memo.remember(data, zone, q.key, known.entry, known.ttl, q.qtype, out, now,
                                   known.held, turns, denial=known.denial)
        return True

    def _count_hits(self, repeats: list[Remembered[Zone]], rendered: list[Tally],
                    listener: Listener, start: float) -> None:
        """After the batch went out: each reply waited from the read to the send. Hits of
        one kind (zone, type, rcode, denial) are counted at once: a batch is mostly a few hot
        names, and at a pod's rates a single one (no Counter for it: this delays the next read).
        Their sizes are counted apart, a dict increment each, so that names of many sizes do
        not make many kinds."""
        elapsed = self.clock() - start
        family = listener.family
        kinds: Iterable[tuple[Tally, int]]
        if len(repeats) + len(rendered) == 1:
            kinds = (((repeats[0].tally if repeats else rendered[0]), 1),)
        else:
            hits = Counter(map(_TALLY, repeats))
            hits.update(rendered)
            kinds = hits.items()
        for (zone, qtype, rcode, denial), times in kinds:
            zone.stats.hits(family, qtype, rcode, denial, elapsed, times)
        for seen in repeats:  # a dict increment each: cheaper than a Counter of (zone, sizes)
            seen.zone.stats.udp_hit_sizes[seen.sizes] += 1
