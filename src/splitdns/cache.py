"""The answer cache of one server block: wire bytes in, wire bytes out, time passed in.

Keyed by question (lower-cased name, type, class, DO and CD bits), never by RRset, so a
reply can only ever fill the entry for the question that was asked (no poisoning of other
names). Stores the reply without OPT and with the offset of every TTL, so a hit is a copy
and a few byte patches (`wire.render`). Never touches a socket or a clock.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TypeVar

import dns.rcode

from splitdns import wire
from splitdns.directives.cache import CacheSpec
from splitdns.reply import Reply

SUCCESS, DENIAL, SERVFAIL = "success", "denial", "servfail"


class Entry:
    """One cached reply. Lean on purpose: 100k of them are the cache's memory (bench/)."""

    __slots__ = ("kind", "offsets", "refresh_after", "stale", "stored", "ttl", "wire")

    def __init__(self, stored: bytes, offsets: tuple[int, ...], kind: str, ttl: float,
                 now: float, stale: float) -> None:
        self.wire = stored
        self.offsets = _shared(offsets)
        self.kind = kind
        self.ttl = _shared(ttl)
        self.stored = now
        self.stale = stale        # the serve_stale window: the spec's own float, not a copy
        self.refresh_after = 0.0  # while stale: no upstream refresh before this (RFC 8767 recheck)

    @property
    def expires(self) -> float:
        return self.stored + self.ttl

    @property
    def stale_until(self) -> float:
        return self.stored + self.ttl + self.stale

    def remaining(self, now: float) -> int:
        """TTL to serve: counts down from the stored duration; 0 once stale."""
        return max(0, int(self.ttl - int(now - self.stored)))


ENTRY_OVERHEAD = 400  # bytes per entry beyond the reply itself: key, Entry, dict slot (measured)


class Cache:
    def __init__(self, spec: CacheSpec, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.spec = spec
        self.max_bytes = max_bytes
        self.bytes = 0
        self._success: OrderedDict[bytes, Entry] = OrderedDict()
        self._denial: OrderedDict[bytes, Entry] = OrderedDict()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._success) + len(self._denial)

    def sizes(self) -> dict[str, int]:
        return {"success": len(self._success), "denial": len(self._denial)}

    def get(self, key: bytes, now: float) -> Entry | None:
        """A fresh entry, or None. Expired entries stay for serve_stale, then go.

        A hit moves the entry to the back of the eviction order (least recently used goes
        first), so a hot set survives a flood of names asked once."""
        table = self._success
        entry = table.get(key)
        if entry is None:
            table = self._denial
            entry = table.get(key)
            if entry is None:
                return None
        age = now - entry.stored
        if age < entry.ttl:
            table.move_to_end(key)
            return entry
        if age >= entry.ttl + entry.stale:
            self._forget(key, entry)
        return None

    def get_stale(self, key: bytes, now: float) -> Entry | None:
        entry = self._success.get(key) or self._denial.get(key)
        if entry is not None and entry.expires <= now < entry.stale_until:
            return entry
        return None

    def put(self, key: bytes, name: bytes, reply: Reply, now: float) -> Entry | None:
        """Store a validated upstream reply if it may be cached; the entry, or None."""
        if reply.flags & wire.TC or not self._covers(name):
            return None
        kind, ttl = self._classify(reply)
        if kind is None:
            return None
        stale = self.spec.serve_stale if kind != SERVFAIL else 0.0
        entry = Entry(reply.stored, reply.offsets, kind, ttl, now, stale)
        table = self._denial if kind != SUCCESS else self._success
        capacity = self.spec.denial_capacity if kind != SUCCESS else self.spec.success_capacity
        for old_table in (self._success, self._denial):
            old = old_table.pop(key, None)
            if old is not None:
                self.bytes -= _cost(key, old)
        table[key] = entry
        self.bytes += _cost(key, entry)
        while len(table) > capacity:
            self._evict(table)
        while self.bytes > self.max_bytes and (self._success or self._denial):
            self._evict(self._success if len(self._success) >= len(self._denial) else self._denial)
        return entry

    def _evict(self, table: OrderedDict[bytes, Entry]) -> None:
        key, entry = table.popitem(last=False)  # the least recently used; O(1) on an OrderedDict
        self.bytes -= _cost(key, entry)
        self.evictions += 1

    def _covers(self, name: bytes) -> bool:
        if not self.spec.zones:
            return True
        text = _wire_to_text(name)
        return any(zone == "." or text == zone or text.endswith("." + zone)
                   for zone in self.spec.zones)

    def _classify(self, reply: Reply) -> tuple[str | None, float]:
        spec = self.spec
        rcode = reply.rcode()
        if rcode == dns.rcode.SERVFAIL:
            return (SERVFAIL, spec.servfail_ttl) if spec.servfail_ttl > 0 else (None, 0)
        if rcode == dns.rcode.NOERROR and reply.answer:
            if spec.disable_success:
                return None, 0
            return SUCCESS, _clamp(reply.min_ttl or 0, spec.success_min_ttl, spec.success_ttl)
        if rcode in (dns.rcode.NOERROR, dns.rcode.NXDOMAIN):
            soa = reply.soa_ttl
            if soa is None or spec.disable_denial:
                return None, 0  # RFC 2308: a negative answer without SOA is not cached
            return DENIAL, _clamp(soa, spec.denial_min_ttl, spec.denial_ttl)
        return None, 0

    def _forget(self, key: bytes, entry: Entry) -> None:
        if (self._success if entry.kind == SUCCESS else self._denial).pop(key, None) is not None:
            self.bytes -= _cost(key, entry)


_T = TypeVar("_T")
_SHARED: dict[object, object] = {}
SHARED_VALUES = 8192


def _shared(value: _T) -> _T:
    """One object for equal values held by many entries: the offsets tuple of every reply of
    the same shape (names of the same length), the TTL of every name a zone serves with the
    same TTL. Most entries share both, and save 56 + 28 bytes each."""
    seen = _SHARED.get(value)
    if seen is not None:
        return seen  # type: ignore[return-value]
    if len(_SHARED) < SHARED_VALUES:
        _SHARED[value] = value
    return value


def _cost(key: bytes, entry: Entry) -> int:
    return len(key) + len(entry.wire) + ENTRY_OVERHEAD


def _clamp(ttl: int, low: int, high: int) -> int:
    return min(max(ttl, low), high)


def _wire_to_text(name: bytes) -> str:
    labels, pos = [], 0
    while name[pos]:
        labels.append(name[pos + 1:pos + 1 + name[pos]].decode("ascii", "replace"))
        pos += name[pos] + 1
    return ".".join(labels) + "." if labels else "."
