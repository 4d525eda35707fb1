"""The answer cache of one server block: wire bytes in, wire bytes out, time passed in.

Keyed by question (lower-cased name, type, class, DO and CD bits), never by RRset, so a
reply can only ever fill the entry for the question that was asked (no poisoning of other
names). Stores the reply without OPT and with the offset of every TTL, so a hit is a copy
and a few byte patches (`wire.render`). Never touches a socket or a clock.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping

import dns.rcode

from splitdns.codec import entries, wire
from splitdns.codec.entries import Entry
from splitdns.codec.reply import Reply, read_canonical
from splitdns.core import answers
from splitdns.directives.cache import CacheSpec

SUCCESS, DENIAL, SERVFAIL = entries.SUCCESS, entries.DENIAL, entries.SERVFAIL
STALE_TTL = 30  # RFC 8767 4: the TTL of a stale answer
STALE_RECHECK = 30.0  # RFC 8767 4: after a refresh is tried, the next one waits this long
_NOERROR, _SERVFAIL, _NXDOMAIN = int(dns.rcode.NOERROR), int(dns.rcode.SERVFAIL), int(dns.rcode.NXDOMAIN)
_NOTIMP = int(dns.rcode.NOTIMP)


# Bytes per entry beyond the key's and the entry's own: two bytes-object headers, the
# OrderedDict's slot and node, and what the allocator keeps around them. Set from the RSS of
# a cache kept full by a flood of new names (`python -m bench.cache_cost --flood`), not of one
# filled once: evicting and inserting without end makes the dict rebuild its table at three
# times the entries held, twice the table a fill leaves (the fill costs ~300 bytes an entry,
# of which key and entry ~110). With glibc's mmap threshold pinned as `serve` does, a 64 MiB
# cache grew the process by 53-59 MiB under a flood of a million names, short or long, at 288;
# by 71 MiB at 208 (87-107 MiB without the pin). tracemalloc sees only the objects (120).
ENTRY_OVERHEAD = 288


class Cache:
    # The wall clock minus the clock `now` is read from (monotonic), set by the shell when it
    # starts: RRSIG validity is wall time. Zero leaves every signature judged at `now`.
    wall_offset = 0.0

    def __init__(self, spec: CacheSpec, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.spec = spec
        self.max_bytes = max_bytes
        self.bytes = 0
        self._success: OrderedDict[bytes, Entry] = OrderedDict()
        self._denial: OrderedDict[bytes, Entry] = OrderedDict()
        self._holds: dict[bytes, float] = {}  # stale keys: no upstream refresh before this time
        self._zones = tuple(wire.name_to_wire(zone) for zone in spec.zones)  # `cache TTL ZONES`
        self._no_success = tuple(wire.name_to_wire(z) for z in spec.disable_success_zones)
        self._no_denial = tuple(wire.name_to_wire(z) for z in spec.disable_denial_zones)
        # prefetch: key -> (asks in a row without a gap of prefetch_duration, the last ask)
        self._popularity: dict[bytes, tuple[int, float]] = {}
        self._prefetching: dict[bytes, float] = {}  # key -> no second prefetch before this time
        self.evictions = 0
        self.prefetches = 0

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
        stored, ttl, kind, _ = entries.HEAD.unpack_from(entry)
        age = now - stored
        if age < ttl:
            table.move_to_end(key)
            return entry
        if age >= ttl + self._stale_window(kind):
            self._forget(key, table)
            self._popularity.pop(key, None)
        return None

    def table_of(self, entry: Entry) -> Mapping[bytes, Entry]:
        """Where `entry` is while the cache holds it: memo.py checks it there on every use,
        and through `get` once a second."""
        return self._success if entries.kind(entry) == SUCCESS else self._denial

    def get_stale(self, key: bytes, now: float) -> Entry | None:
        entry = self._success.get(key) or self._denial.get(key)
        if entry is None:
            return None
        stored, ttl, kind, _ = entries.HEAD.unpack_from(entry)
        return entry if ttl <= now - stored < ttl + self._stale_window(kind) else None

    def refresh_after(self, key: bytes) -> float:
        """While stale: no upstream refresh of this key before this time (RFC 8767's recheck)."""
        return self._holds.get(key, 0.0)

    def hold(self, key: bytes, until: float) -> None:
        self._holds[key] = until

    def stale_answer(self, q: wire.Query, now: float) -> bytes | None:
        """An expired answer still inside the serve_stale window, with serve_stale's TTL (RFC
        8767's 30 s unless it names another)."""
        if not self.spec.serve_stale:
            return None
        entry = self.get_stale(q.key, now)
        if entry is None:
            return None
        ttl = self.spec.serve_stale_ttl or STALE_TTL
        return entries.render(entry, min(ttl, self.cap_of(entry)), q)

    def refresh_due(self, key: bytes, now: float) -> bool:
        """Whether a stale entry may be refreshed upstream now: once per STALE_RECHECK at most,
        so a dead upstream is not asked again by every client of a stale name."""
        return self.get_stale(key, now) is None or now >= self.refresh_after(key)

    def hold_refresh(self, key: bytes, now: float) -> None:
        """A refresh of this stale entry starts (or failed): the next waits STALE_RECHECK.
        A successful refresh replaces the entry, and with it this mark."""
        if self.get_stale(key, now) is not None:
            self.hold(key, now + (self.spec.serve_stale_recheck or STALE_RECHECK))

    @property
    def stale_first(self) -> bool:
        """serve_stale `immediate` (the default): answer stale at once, refresh behind."""
        return not self.spec.serve_stale_verify

    def _stale_window(self, kind: int) -> float:
        return 0.0 if entries.KINDS[kind] == entries.SERVFAIL else self.spec.serve_stale

    def put(self, key: bytes, name: bytes, reply: Reply, now: float) -> Entry | None:
        """Store a validated upstream reply if it may be cached; the entry, or None."""
        if reply.flags & wire.TC or (self._zones and not self._covers(name)):
            return None
        kind, ttl = self._classify(reply, name, now)
        if kind is None or ttl <= 0:
            return None  # TTL 0: use once, never cache (RFC 1035 3.2.1, RFC 2181 8)
        entry = entries.make(reply.stored, reply.offsets, kind, ttl, now)
        success, denial = self._success, self._denial
        if kind == SUCCESS:
            table, capacity = success, self.spec.success_capacity
        else:
            table, capacity = denial, self.spec.denial_capacity
        if key in success or key in denial:  # a new name, mostly: nothing to forget
            self._forget(key, success)
            self._forget(key, denial)
        table[key] = entry
        self.bytes += len(key) + len(entry) + ENTRY_OVERHEAD  # _cost
        while len(table) > capacity:
            self._evict(table)
        while self.bytes > self.max_bytes and (self._success or self._denial):
            self._evict(self._success if len(self._success) >= len(self._denial) else self._denial)
        return entry

    def keep(self, q: wire.Query, out: bytes, now: float) -> None:
        """Store a reply made here (a guard's, autopath's), so that the next client of the
        name is a hit on the hot path."""
        reply = read_canonical(out)
        if reply is not None:
            self.put(q.key, q.name, reply, now)

    def _evict(self, table: OrderedDict[bytes, Entry]) -> None:
        key, entry = table.popitem(last=False)  # the least recently used; O(1) on an OrderedDict
        self.bytes -= _cost(key, entry)
        self._holds.pop(key, None)
        self._popularity.pop(key, None)
        self.evictions += 1

    def prefetch_due(self, key: bytes, entry: Entry, now: float) -> bool:
        """Count a hit on a fresh entry; True once when it is popular and nearly expired, so the
        caller asks the upstream again (CoreDNS's `prefetch`). The new reply replaces the entry
        through `put`, and the entry stays popular: its count carries over."""
        spec = self.spec
        asks, last = self._popularity.get(key, (0, now))
        asks = asks + 1 if now - last < spec.prefetch_duration else 1
        self._popularity[key] = (asks, now)
        if asks < spec.prefetch_amount or self._prefetching.get(key, 0.0) > now:
            return False
        stored, ttl = entries.timing(entry)
        left = ttl - (now - stored)
        if left > max(1.0, math.ceil(spec.prefetch_percentage * ttl / 100)):
            return False
        self._prefetching[key] = now + left  # one refresh per entry; a failed one is not retried
        self.prefetches += 1
        return True

    def _covers(self, name: bytes) -> bool:
        return not self._zones or any(wire.is_subdomain(name, zone) for zone in self._zones)

    def _classify(self, reply: Reply, name: bytes, now: float) -> tuple[str | None, float]:
        spec = self.spec
        rcode = reply.rcode_value
        if rcode == _NOERROR and reply.ancount:
            if not reply.plain:
                answered, expired = answers.judge(reply.data, now + self.wall_offset)
                if expired:
                    return None, 0  # CoreDNS's Typify: an expired signature is an error
                if not answered:  # a CNAME chain short of the asked type is NODATA (RFC 2308 5)
                    return self._denial_of(reply, name)
            if spec.disable_success and _under(name, self._no_success):
                return None, 0
            return SUCCESS, min(max(reply.min_ttl or 0, spec.success_min_ttl), spec.success_ttl)
        if rcode in (_SERVFAIL, _NOTIMP):  # CoreDNS's ServerError: kept `servfail` long
            return (SERVFAIL, spec.servfail_ttl) if spec.servfail_ttl > 0 else (None, 0)
        if rcode in (_NOERROR, _NXDOMAIN):
            return self._denial_of(reply, name)
        return None, 0

    def _denial_of(self, reply: Reply, name: bytes) -> tuple[str | None, float]:
        spec = self.spec
        soa = reply.soa_ttl
        if soa is None or (spec.disable_denial and _under(name, self._no_denial)):
            return None, 0  # RFC 2308 5: a negative answer without SOA is not cached
        return DENIAL, _clamp(soa, spec.denial_min_ttl, spec.denial_ttl)

    def cap(self, reply: Reply) -> int:
        """The most TTL a reply the cache did not store may carry (`cache 30`): the denial
        cap for a negative answer, the success cap for the rest (referrals included), as
        CoreDNS rewrites the TTLs of every reply it passes on."""
        spec = self.spec
        negative = reply.rcode() == dns.rcode.NXDOMAIN or (
            reply.rcode() == dns.rcode.NOERROR and not reply.answer and reply.soa_ttl is not None)
        return spec.denial_ttl if negative else spec.success_ttl

    def cap_of(self, entry: Entry) -> int:
        """The cap of an entry's kind: what a stale answer's TTL may not exceed either."""
        return self.spec.success_ttl if entries.kind(entry) == SUCCESS else self.spec.denial_ttl

    def _forget(self, key: bytes, table: OrderedDict[bytes, Entry]) -> None:
        old = table.pop(key, None)
        if old is not None:
            self.bytes -= _cost(key, old)
            self._holds.pop(key, None)
            self._prefetching.pop(key, None)


def _under(name: bytes, zones: tuple[bytes, ...]) -> bool:
    """`disable` without zones covers every name."""
    return not zones or any(wire.is_subdomain(name, zone) for zone in zones)


def _cost(key: bytes, entry: Entry) -> int:
    return len(key) + len(entry) + ENTRY_OVERHEAD


def _clamp(ttl: int, low: int, high: int) -> int:
    return min(max(ttl, low), high)
