"""A cache entry: one plain bytes object holding a header, the TTL offsets, then the reply.

Why one bytes object (memory and the garbage collector's work): bench/README.md, "Where
splitdns's time goes" (cache entries). The reply is stored without OPT and with ID zero
(reply.py). Pure: no sockets, no clock.
Tests: tests/test_cache.py, tests/test_memo.py.
"""

from __future__ import annotations

import struct

from splitdns.codec import wire

Entry = bytes
HEAD = struct.Struct("!ddBH")  # stored at, TTL, kind, number of TTL offsets; then the offsets
KIND_AT = 16  # where HEAD's kind byte stands: nonzero for a denial or SERVFAIL entry
SUCCESS, DENIAL, SERVFAIL = "success", "denial", "servfail"
KINDS = (SUCCESS, DENIAL, SERVFAIL)


# The packing of n TTL offsets, made once for the common counts (a format string per call
# costs the struct module's cache lookup, on every miss and every render).
_OFFSETS = tuple(struct.Struct(f"!{n}H") for n in range(33))


def _offsets_of(count: int) -> struct.Struct:
    return _OFFSETS[count] if count < len(_OFFSETS) else struct.Struct(f"!{count}H")


def make(reply: bytes, offsets: tuple[int, ...], kind: str, ttl: float, now: float) -> Entry:
    count = len(offsets)
    packing = _OFFSETS[count] if count < len(_OFFSETS) else _offsets_of(count)
    return HEAD.pack(now, ttl, KINDS.index(kind), count) + packing.pack(*offsets) + reply


def ttl(entry: Entry) -> float:
    value: float = HEAD.unpack_from(entry)[1]
    return value


def kind(entry: Entry) -> str:
    return KINDS[entry[KIND_AT]]


def offsets(entry: Entry) -> tuple[int, ...]:
    """Where each TTL sits in `reply(entry)`."""
    count = HEAD.unpack_from(entry)[3]
    return _offsets_of(count).unpack_from(entry, HEAD.size)


def reply(entry: Entry) -> bytes:
    return entry[HEAD.size + 2 * HEAD.unpack_from(entry)[3]:]


def remaining(entry: Entry, now: float) -> int:
    """TTL to serve: counts down from the stored duration; 0 once stale."""
    stored, duration = HEAD.unpack_from(entry)[:2]
    return max(0, int(duration - int(now - stored)))


def timing(entry: Entry) -> tuple[float, float]:
    """When the entry was stored, and for how long it is fresh (its TTL)."""
    stored, duration = HEAD.unpack_from(entry)[:2]
    return stored, duration


def render(entry: Entry, ttl_now: int | None, q: wire.Query) -> bytes:
    """The reply for `q` with every TTL set to `ttl_now` (None keeps the upstream's)."""
    count = HEAD.unpack_from(entry)[3]
    return wire.render(memoryview(entry)[HEAD.size + 2 * count:],
                       _offsets_of(count).unpack_from(entry, HEAD.size), ttl_now, q)
