"""A cache entry: one plain bytes object holding a header, the TTL offsets, then the reply.

Why one bytes object (memory and the garbage collector's work): bench/README.md, "Where
splitdns's time goes" (cache entries). The reply is stored without OPT and with ID zero
(reply.py). Pure: no sockets, no clock.
"""

from __future__ import annotations

import struct

from splitdns.codec import wire

Entry = bytes
HEAD = struct.Struct("!ddBH")  # stored at, TTL, kind, number of TTL offsets; then the offsets
SUCCESS, DENIAL, SERVFAIL = "success", "denial", "servfail"
KINDS = (SUCCESS, DENIAL, SERVFAIL)


def make(reply: bytes, offsets: tuple[int, ...], kind: str, ttl: float, now: float) -> Entry:
    count = len(offsets)
    return HEAD.pack(now, ttl, KINDS.index(kind), count) + struct.pack(f"!{count}H", *offsets) + reply


def ttl(entry: Entry) -> float:
    value: float = HEAD.unpack_from(entry)[1]
    return value


def kind(entry: Entry) -> str:
    return KINDS[entry[16]]


def offsets(entry: Entry) -> tuple[int, ...]:
    """Where each TTL sits in `reply(entry)`."""
    count = HEAD.unpack_from(entry)[3]
    return struct.unpack_from(f"!{count}H", entry, HEAD.size)


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
    start = HEAD.size + 2 * count
    return wire.render(memoryview(entry)[start:], struct.unpack_from(f"!{count}H", entry, HEAD.size),
                       ttl_now, q)
