"""A server block at run time, and every decision about a query it owns (`begin` .. `finish`).

`begin` walks the block's per-query steps in the registry's order (as CoreDNS's plugin.cfg
orders its plugins): `cache`, then `rewrite`, `template` and `hosts` (local.py), `loop`,
a tunnel's directive (its state), `forward`. `loadbalance` wraps every answer, `private_addresses`
and `minimal` act on the upstream's reply as its flight settles (flight.py), `errors`
and `log` are lines the shell writes.
Sans-io: no sockets, no clock (`now` comes in), no logging (decisions carry `Note`s); it
keeps the zone's state (cache, flights, counts, health), which only its methods change.
Tests: tests/test_zone.py, tests/test_resolve.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import dns.rcode

from splitdns import directives
from splitdns.codec import entries, wire
from splitdns.core import local
from splitdns.core.cache import Cache
from splitdns.core.decisions import (
    Answer,
    Forward,
    Known,
    LogLine,
    Note,
    QueryError,
)
from splitdns.core.exchange import EDE_NO_REACHABLE_AUTHORITY, Done, ForwardState
from splitdns.core.flight import Flight
from splitdns.core.local import Local, Rewritten, steps_of
from splitdns.core.loop import LoopGuard, LoopProbes
from splitdns.core.metrics import ZoneStats
from splitdns.core.names import NameGuard, Pod, guard_for, guard_step
from splitdns.core.rebinding import PrivateFilter
from splitdns.core.search import AutoPath, Search, made_here, search_step
from splitdns.core.tunnel import TunnelState, not_heard
from splitdns.directives import loadbalance

if TYPE_CHECKING:
    from splitdns.codec.entries import Entry
    from splitdns.config import Block

STALE_REFRESH = "refreshing a stale answer"
PREFETCH = "prefetching a popular answer"

Step = Callable[["Zone", wire.Query, float, "_Walk"], "Answer | Forward | None"]


class _Walk:
    """What the steps of one `begin` learn on the way (a miss, a rewrite, the forward, the
    search walk that follows the query)."""

    __slots__ = ("fwd", "fwd_chosen", "rewritten", "search", "searching")

    def __init__(self, searching: bool) -> None:
        self.rewritten: Rewritten | None = None
        self.fwd: ForwardState | None = None
        self.fwd_chosen = False  # `fwd` is the forward for the query (the tunnel step chose it)
        self.searching = searching  # a client's query, not a try of a walk already under way
        self.search: Search | None = None


class Zone:
    """A server block at run time: its cache, forwards, loop guard and tunnel state."""

    def __init__(self, block: Block, cache: Cache | None = None, cache_bytes: int = 64 * 1024 * 1024,
                 loop_probes: LoopProbes | None = None) -> None:
        self.block = block
        spec_of_cache = block[directives.CACHE]
        if cache is None and spec_of_cache is not None:
            cache = Cache(spec_of_cache, cache_bytes)
        self.cache = cache
        self.pending = 0  # upstream exchanges in flight (identical queries count once)
        self.flights: dict[bytes, Flight] = {}
        self.forwards = [ForwardState.of(spec, block.zones[0]) for spec in block.forwards]
        self.stats = ZoneStats()
        self.ready = False           # latched once the zone answered through its upstreams
        self.not_ready_reason = "no probe has been answered yet"
        self.loop = LoopGuard(self.name, self.stats, self.upstream_list, loop_probes)
        kind, vpn = block.tunnel, block.tunnel_spec
        self.tunnel: TunnelState | None = None
        if kind is not None and kind.tunnel is not None:
            self.tunnel = not_heard(kind.tunnel.display)
        self.learns_domains = vpn is not None and vpn.domains  # routes the domains pushed to it
        self.loops_probed = block.uses(directives.LOOP)
        spec = block[directives.PRIVATE_ADDRESSES]
        self.private = PrivateFilter(spec) if spec is not None else None
        self.local = Local(block) if steps_of(block) else None  # rewrite, template, hosts
        self.turn: int | None = 0 if block.uses(directives.LOADBALANCE) else None  # rotations so far
        spec_of_path = block[directives.AUTOPATH]
        self.autopath = AutoPath(spec_of_path.zones or block.zones, spec_of_path.search) \
            if spec_of_path is not None else None
        self.guard: NameGuard | None = guard_for(block, self.tunnel is not None, None, self.stats.guarded)
        # How each reply the block keeps is rewritten (`minimal`, `loadbalance`'s order).
        self.reshapes = tuple(d.reshape for d in directives.REGISTRY
                              if d.reshape is not None and block.uses(d))
        self.steps = steps_for(self)
        self.prefetching = bool(cache is not None and cache.spec.prefetch_amount)
        # The one place that says when the memo may send an answer again without asking the
        # zone: never where `log` must see every query; a cached answer not where `prefetch`
        # must count every ask (the block's own answers are never prefetched).
        self.replay_local = not block.uses(directives.LOG)
        self.replay_cached = self.replay_local and not self.prefetching
        # Which lines the block writes: a line per query (`log`), a line per failed query
        # (`errors`); the shell writes them, the zone says whether.
        self.log = block[directives.LOG]
        self.errors = block[directives.ERRORS]

    @property
    def name(self) -> str:
        return self.block.zones[0]

    def know_pod(self, pod: Pod | None) -> None:
        """What the server knows of its pod (the search list, the names that must not leave
        their zone), given after every load: which guards apply here is decided now."""
        self.guard = guard_for(self.block, self.tunnel is not None, pod, self.stats.guarded)
        self.steps = steps_for(self)

    def upstream_list(self) -> str:
        return ", ".join(str(u.upstream) for f in self.forwards for u in f.upstreams)

    # -- a query: begin, depart (then its flight: flight.py), finish ---------------------------

    def begin(self, q: wire.Query, now: float, searching: bool = True) -> Answer | Forward | Search:
        """The answer now, or the upstream exchange to make: what the zone knows at once
        (`known`), else the rest of the block's steps in order (`walk`). `searching` False:
        `q` is a try of a search walk under way (search.py), which starts none of its own."""
        known = self.known(q, now)
        if known is not None:
            return Answer(known.reply, known.refresh, hit=known.denial)
        return self.walk(q, now, searching)

    def known(self, q: wire.Query, now: float) -> Known | None:
        """The step the UDP hot path runs for every datagram, and `begin` first: a fresh cache
        entry, or an answer the block made before and keeps (`rewrite`, `template` and `hosts`
        come right after the cache in the registry's order, and would give it again). None is
        a miss, counted here, since every miss passes here once; a hit is counted where it
        is sent (`ZoneStats.hits`: the hot path a batch at a time)."""
        cache = self.cache
        entry = cache.get(q.key, now) if cache is not None else None
        held = None
        if entry is not None:
            ttl: int | None = entries.remaining(entry, now)
            out = entries.render(entry, ttl, q)
        else:
            if cache is not None:
                self.stats.cache_misses += 1
            if self.local is None:
                return None
            held = self.local.answers
            entry = held.get(q.key)
            if entry is None:
                return None
            ttl = None
            out = local.render(entry, q, cache)
        turns = None
        if self.turn is not None:  # loadbalance: every rotation once, then each in turn
            turns = loadbalance.rotations(out)
            out = turns[self.next_turn(len(turns))]
        refresh = None
        if held is None and self.prefetching:
            refresh = self.prefetch(q, entry, now)
        return Known(out, entry, ttl, held, turns, refresh,
                     self.replay_local if held is not None else self.replay_cached,
                     1 if entry[entries.KIND_AT] else 0)

    def walk(self, q: wire.Query, now: float, searching: bool = True) -> Answer | Forward | Search:
        """The block's steps after what `known` answers, in the registry's order; a `Search`
        when `autopath` goes on with the client's walk after this query's own decision."""
        walk = _Walk(searching)
        for step in self.steps:
            decided = step(self, q, now, walk)
            if decided is not None:
                if self.turn is not None and isinstance(decided, Answer):
                    decided = Answer(self.balanced(decided.reply), decided.refresh, decided.notes)
                if walk.search is not None:
                    walk.search.first = decided
                    return walk.search
                return decided
        raise AssertionError("the forward step decides every query")  # steps_for ends with it

    def _local_step(self, q: wire.Query, now: float, walk: _Walk) -> Answer | None:
        assert self.local is not None
        made = self.local.decide(q)
        if isinstance(made, bytes):
            return Answer(local.render(made, q, self.cache))
        walk.rewritten = made
        return None

    def _loop_step(self, q: wire.Query, now: float, walk: _Walk) -> Answer | None:
        looping = self.loop.returned(q)
        if looping is not None:
            reply, line = looping.probe_returned(q)
            return Answer(reply, notes=(LogLine("error", line),))
        if self.loop.error is not None:
            return Answer(self.loop.refusal(q))
        return None

    def _tunnel_step(self, q: wire.Query, now: float, walk: _Walk) -> Answer | None:
        walk.fwd = self.forward_for(q.name if walk.rewritten is None else walk.rewritten.query.name)
        walk.fwd_chosen = True
        if walk.fwd is None or not walk.fwd.spec.tunnel:
            return None
        down = self.tunnel_down(q, now)
        return None if down is None else Answer(down)

    def _forward_step(self, q: wire.Query, now: float, walk: _Walk) -> Answer | Forward:
        rewritten = walk.rewritten
        fwd = walk.fwd if walk.fwd_chosen else \
            self.forward_for(q.name if rewritten is None else rewritten.query.name)
        if fwd is None:
            return Answer(wire.error_reply(q, dns.rcode.SERVFAIL),
                          notes=(QueryError(dns.rcode.SERVFAIL, "no next plugin found"),))
        asked = q if rewritten is None else rewritten.query
        stale = self.stale(q, now)
        if stale is not None:  # so the cache exists; `immediate`, or `verify` within the recheck
            assert self.cache is not None
            due = self.cache.refresh_due(q.key, now)
            if self.cache.stale_first or not due:
                self.stats.served_stale += 1
                refresh = None
                if due:
                    self.cache.hold_refresh(q.key, now)
                    refresh = Forward(fwd, asked, rewritten, why=STALE_REFRESH)
                return Answer(stale, refresh)
        return Forward(fwd, asked, rewritten, stale)

    def prefetch(self, q: wire.Query, entry: Entry, now: float) -> Forward | None:
        """A popular entry close to its expiry: the exchange to refresh it in the background."""
        assert self.cache is not None
        if not self.cache.prefetch_due(q.key, entry, now) or made_here(self, q, now):
            return None  # a guard's or an autopath walk's answer: asking upstream would undo it
        rewritten = None
        if self.local is not None:  # ask upstream what a miss would ask (rewrite)
            made = self.local.decide(q)
            if isinstance(made, bytes):
                return None  # answered by the block itself now: nothing to fetch
            rewritten = made
        asked = q if rewritten is None else rewritten.query
        fwd = self.forward_for(asked.name)
        if fwd is None:
            return None
        self.stats.prefetches += 1
        return Forward(fwd, asked, rewritten, why=PREFETCH)

    def probe_forward(self, q: wire.Query) -> Forward | Done:
        """A probe of the zone's upstreams (readiness, loops): past the cache and local steps."""
        fwd = self.forward_for(q.name)
        if fwd is None:
            return Done(error=f"no forward in zone {self.name} covers {wire.wire_to_text(q.name)}")
        return Forward(fwd, q)

    def depart(self, q: wire.Query, forward: Forward, limit: int) -> Flight | Done:
        """The flight this query waits for: the one under way for the same question, else a
        new one (flight.py: it lands itself); REFUSED when `limit` exchanges are pending
        already (a dead upstream must not let one zone hold unbounded memory)."""
        flight = self.flights.get(q.key)
        if flight is not None:
            return flight
        if self.pending >= limit:
            return Done(rcode=dns.rcode.REFUSED, error=f"more than {self.pending} queries "
                        "pending upstream in this zone (limits pending)")
        flight = self.flights[q.key] = Flight(self, q, forward)
        forward.fwd.inflight += 1
        self.pending += 1
        return flight

    def finish(self, q: wire.Query, forward: Forward, done: Done, entry: Entry | None,
               now: float) -> Answer:
        """One waiting client's answer to the outcome (merged clients each get theirs)."""
        notes: tuple[Note, ...] = ()
        if done.error is not None:
            notes = (QueryError(done.rcode, done.error),)
            if forward.stale is not None and self.cache is not None:
                self.cache.hold_refresh(q.key, now)  # verify mode: stale at once for a while
                self.stats.served_stale += 1
                return Answer(self.balanced(forward.stale), notes=notes)
        return Answer(self.balanced(self.render(q, done, entry, now)), notes=notes)

    @staticmethod
    def refreshed(forward: Forward, done: Done) -> tuple[Note, ...]:
        """What a refresh behind an answer logs: its error, if it failed."""
        if done.error is None:
            return ()
        return (QueryError(done.rcode, f"{forward.why}: {done.error}"),)

    # -- the parts -------------------------------------------------------------------------------

    def balanced(self, out: bytes) -> bytes:
        """`loadbalance`: the reply with its addresses rotated one place more than the last."""
        if self.turn is None:
            return out
        self.turn += 1
        return loadbalance.rotated(out, self.turn - 1)

    def next_turn(self, count: int) -> int:
        """Which of `count` precomputed rotations the next reply gets."""
        assert self.turn is not None
        self.turn += 1
        return (self.turn - 1) % count

    def forward_for(self, name: bytes) -> ForwardState | None:
        for fwd in self.forwards:
            if fwd.covers(name):
                return fwd
        return None

    def handed_on(self, fwd: ForwardState, name: bytes, done: Done) -> ForwardState | None:
        """`next RCODE`: the forward after `fwd` (file order) that covers `name`, when the reply's
        rcode is one `fwd` hands on; None when the reply stands (no reply, no such forward)."""
        if not fwd.spec.next_rcodes or done.reply is None or done.reply.rcode() not in fwd.spec.next_rcodes:
            return None
        later = self.forwards[self.forwards.index(fwd) + 1:]
        return next((f for f in later if f.covers(name)), None)

    def store(self, q: wire.Query, done: Done, now: float) -> Entry | None:
        """Cache an exchange's reply if it may be cached; done once per upstream exchange."""
        if self.cache is None or done.reply is None:
            return None
        return self.cache.put(q.key, q.name, done.reply, now)

    def without_private(self, done: Done) -> tuple[Done, list[str]]:
        """`private_addresses`: the reply without A/AAAA records into private networks, and
        the addresses removed. Before the cache, so what is stored is already clean."""
        if self.private is None or done.reply is None:
            return done, []
        filtered = self.private.apply(done.reply)
        if filtered is None:
            return done, []
        reply, removed = filtered
        if reply is None:  # dnspython could not rewrite it (a gap in the reader): refuse, not leak
            return Done(error="an upstream reply with a private address could not be rewritten"), []
        self.stats.private_removed += len(removed)
        return Done(reply, done.rcode, done.error, done.ede, done.upstream, done.seconds), removed

    def tunnel_down(self, q: wire.Query, now: float) -> bytes | None:
        """While the tunnel is not up, the answer at once: stale if allowed, else SERVFAIL
        with an Extended DNS Error saying why. None when the tunnel is up (or no tunnel)."""
        if self.tunnel is None or self.tunnel.up:
            return None
        stale = self.stale(q, now)
        if stale is not None:
            self.stats.served_stale += 1
            return stale
        self.stats.failed_fast_tunnel += 1
        return wire.error_reply(q, dns.rcode.SERVFAIL, (EDE_NO_REACHABLE_AUTHORITY, self.tunnel.describe()))

    def stale(self, q: wire.Query, now: float) -> bytes | None:
        """An expired answer still inside the serve_stale window (RFC 8767), or None."""
        return None if self.cache is None else self.cache.stale_answer(q, now)

    def render(self, q: wire.Query, done: Done, entry: Entry | None, now: float) -> bytes:
        """The reply one client gets for an exchange's outcome (merged clients each get theirs);
        one the cache did not keep (TTL 0, a referral) has each TTL lowered to the cap."""
        if entry is not None:
            return entries.render(entry, entries.remaining(entry, now), q)
        if done.reply is None:
            return wire.error_reply(q, done.rcode, done.ede)
        cap = self.cache.cap(done.reply) if self.cache is not None else None
        return wire.render(done.reply.stored, done.reply.offsets, None, q, cap)


# What each step the registry names does in `walk`. `directives.CACHE_STEP` is `known`, which
# runs before the walk (it must be the first step: a test holds the registry to it), and
# `directives.REPLY_STEP` shapes answers (flight.py, local.py, `balanced`). `rewrite`,
# `template` and `hosts` are one step, where the block's first of them stands (local.py runs
# them, in the same order).
_STEPS: dict[str, Step] = {
    directives.LOCAL_STEP: Zone._local_step,
    directives.SEARCH_STEP: search_step,
    directives.GUARD_STEP: guard_step,
    directives.LOOP_STEP: Zone._loop_step,
    directives.TUNNEL_STEP: Zone._tunnel_step,
    directives.FORWARD_STEP: Zone._forward_step,
}
# In every block: a loop can be found without the `loop` directive (the VPN pushed this
# server), and `forward` decides the rest (SERVFAIL without one).
_ALWAYS = (directives.LOOP_STEP, directives.FORWARD_STEP)


def steps_for(zone: Zone) -> tuple[Step, ...]:
    """The zone's steps, in the registry's order: each once, only those its block uses."""
    block = zone.block
    guarded = zone.guard is not None  # the guards that apply were chosen at load (names.py)
    chosen = [_STEPS[d.step] for d in directives.REGISTRY if d.step in _STEPS
              and (d.step in _ALWAYS or (d.step == directives.GUARD_STEP and guarded)
                   or (d.step != directives.GUARD_STEP and block.uses(d)))]
    return tuple(dict.fromkeys(chosen))

