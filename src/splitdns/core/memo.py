"""Replies to the exact queries the cache answered within the current second.

What a hit saves this way: bench/README.md, "Where splitdns's time goes" (cache hits). The
table maps a query's bytes after its ID to the reply's bytes after its ID (the shell writes
the tail after the query's own ID). Every use checks that the cache still holds the same entry
in the same second of its life; the first use in a new second goes through the cache's own `get`
(freshness, LRU place) and patches the TTL. So the memo never answers what the cache would not;
and it belongs to one listener, which starts it afresh when its routes change (a reload, a zone
learned from the VPN). It knows of a zone only that it has a cache (`Cached`). Pure: no
sockets, no clock.
Tests: tests/test_memo.py, tests/test_zone.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from splitdns.codec import entries, wire
from splitdns.core import metrics

if TYPE_CHECKING:
    from splitdns.codec.entries import Entry
    from splitdns.core.cache import Cache


class Cached(Protocol):
    """What the memo needs of a zone: its cache (to check an entry is still the one held)."""

    @property
    def cache(self) -> Cache | None: ...


Z = TypeVar("Z", bound=Cached)

MEMO_ENTRIES = 4096      # the hot set of a pod; a flood of new names only empties it
MEMO_QUERY_BYTES = 512   # longer queries (EDNS options) are answered the ordinary way


class Remembered(Generic[Z]):
    __slots__ = ("duration", "entry", "held_in", "key", "offsets", "sizes", "span", "stored",
                 "tail", "tally", "ttl", "turn", "turn_span", "turns", "zone")

    def __init__(self, zone: Z, key: bytes, entry: Entry, ttl: int | None, qtype: int,
                 reply: bytes, now: float, held_in: Mapping[bytes, Entry] | None = None,
                 turns: tuple[bytes, ...] | None = None, qsize: int = 0, denial: int = 0) -> None:
        self.zone = zone
        self.key = key        # the cache key of the question
        self.entry = entry    # the cache entry the reply was rendered from
        self.ttl = ttl        # the TTL the reply carries (None: the entry's own, never counted down)
        if held_in is None:
            assert zone.cache is not None
            self.held_in = zone.cache.table_of(entry)
            # The entry's timing, read once: the once-a-second recheck is on the query path.
            self.stored, self.duration = entries.timing(entry)
            self.offsets = entries.offsets(entry)
            self.span = self.same_ttl_span(now)
        else:  # made by the block itself (local.py): good while `held_in` holds it
            self.held_in = held_in
            self.stored, self.duration, self.offsets, self.span = 0.0, math.inf, (), math.inf
        self.tail = reply[2:]  # the reply without its ID
        # `loadbalance`: the reply's rotations without their IDs, handed out in turn after
        # `reply` (one of them); None when the reply is not balanced.
        self.turns = tuple(t[2:] for t in turns) if turns is not None and len(turns) > 1 else None
        self.turn = turns.index(reply) if self.turns is not None and turns is not None else 0
        self.turn_span = self.span  # `Memo._next_turn`'s span
        if self.turns is not None:
            self.span = -math.inf  # every use takes `Memo._next_turn`
        # zone, type, rcode, a denial entry; and apart, the sizes (metrics.hit_sizes)
        self.tally: tuple[Z, int, int, int] = (zone, qtype, self.tail[1] & 0xF, denial)
        self.sizes = metrics.hit_sizes(qsize, len(reply))

    def same_ttl_span(self, now: float) -> float:
        """While the entry's age stays below this, `entries.remaining` gives what it gives
        now and the entry is fresh (the cache's test is the same: age < duration)."""
        return min(int(now - self.stored) + 1, self.duration)

    def rotate(self) -> None:
        turns = self.turns
        assert turns is not None
        self.turn = turn = (self.turn + 1) % len(turns)
        self.tail = turns[turn]


class Memo(Generic[Z]):
    def __init__(self, limit: int = MEMO_ENTRIES) -> None:
        self.limit = limit
        self.table: dict[bytes, Remembered[Z]] = {}

    def __len__(self) -> int:
        return len(self.table)

    def find(self, after_id: bytes, now: float) -> Remembered[Z] | None:
        """What is remembered for a query's bytes after its ID, if the cache would give the same
        reply now, else None; the reply is the query's ID + `tail`."""
        seen = self.table.get(after_id)
        if seen is None:
            return None
        if now - seen.stored < seen.span and seen.held_in.get(seen.key) is seen.entry:
            # Still held and the same second of its life: the cache would render the same
            # bytes. (Its LRU position is refreshed by the full check, once a second.)
            return seen
        turns = seen.turns
        if turns is not None:  # loadbalance: the next rotation, checked as above
            if now - seen.stored < seen.turn_span and seen.held_in.get(seen.key) is seen.entry:
                seen.turn = turn = (seen.turn + 1) % len(turns)
                seen.tail = turns[turn]
                return seen
            return self._next_turn(after_id, seen, now)
        cache = seen.zone.cache
        if cache is None or cache.get(seen.key, now) is not seen.entry:
            del self.table[after_id]  # replaced, evicted or expired: render anew
            return None
        ttl = max(0, int(seen.duration - int(now - seen.stored)))  # entries.remaining
        if ttl != seen.ttl:
            # A second older: the same reply with the new TTL at the same places (the client's
            # header and question have the entry's lengths), not a render from scratch, which
            # every hot name would otherwise pay once a second.
            if seen.tail[0] & wire.TC >> 8:
                del self.table[after_id]  # a truncated reply carries no records to patch
                return None
            seen.tail = _with_ttl(seen.tail, seen.offsets, ttl)
            seen.ttl = ttl
        seen.span = seen.same_ttl_span(now)
        return seen

    def _next_turn(self, after_id: bytes, seen: Remembered[Z], now: float) -> Remembered[Z] | None:
        """`loadbalance`, once a second: the next rotation of a remembered reply, after the
        checks `find` makes then (fresh, still held, through the cache's `get`, the TTLs
        patched). A balanced reply's `span` is never reached, so an unbalanced hit pays
        nothing for rotations."""
        if seen.held_in.get(seen.key) is not seen.entry or now - seen.stored >= seen.duration:
            del self.table[after_id]
            return None
        if seen.ttl is not None:
            ttl = max(0, int(seen.duration - int(now - seen.stored)))  # entries.remaining
            if ttl != seen.ttl:
                cache = seen.zone.cache
                if cache is None or cache.get(seen.key, now) is not seen.entry:
                    del self.table[after_id]
                    return None
                assert seen.turns is not None
                seen.turns = tuple(_with_ttl(t, seen.offsets, ttl) for t in seen.turns)
                seen.ttl = ttl
            seen.turn_span = seen.same_ttl_span(now)
        seen.rotate()
        return seen

    def remember(self, data: bytes, zone: Z, key: bytes, entry: Entry, ttl: int | None, qtype: int,
                 reply: bytes, now: float, held_in: Mapping[bytes, Entry] | None = None,
                 turns: tuple[bytes, ...] | None = None, *, denial: int) -> None:
        """Remember the reply to these query bytes. `held_in`: the table of answers the
        block made itself (local.py), for an entry that is not the cache's. `turns`: the
        `loadbalance` rotations `reply` is one of, handed out in turn from the next.
        `denial`: `Known.denial` of the entry, for the hits' tally."""
        if len(data) > MEMO_QUERY_BYTES:
            return
        if len(self.table) >= self.limit:
            self.table.clear()  # cheaper than an LRU here; the hot names come back within a second
        self.table[data[2:]] = Remembered(zone, key, entry, ttl, qtype, reply, now, held_in, turns,
                                             len(data), denial)

    def clear(self) -> None:
        self.table.clear()


def _with_ttl(tail: bytes, offsets: tuple[int, ...], ttl: int) -> bytes:
    buf = bytearray(tail)
    packed = ttl.to_bytes(4, "big")
    for off in offsets:
        buf[off - 2:off + 2] = packed  # offsets count from the ID, which the tail lacks
    return bytes(buf)
