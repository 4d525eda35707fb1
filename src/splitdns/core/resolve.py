"""The resolver's core: route a query to its zone, answer from cache, decide each upstream step.

Never touches a socket, a clock or the global random generator: `now` and `rng` come in as
arguments, decisions go out as values. `server.py` does the I/O.

The life of a query
-------------------
A query arrives on a listener (an address and port). `wire.parse_query` reads it without
dnspython when it has the common shape; anything else goes through dnspython first and
ends up as the same `wire.Query`, or as an error reply (FORMERR, NOTIMP, REFUSED).

`Router.route` picks the server block: the longest zone that is a whole-label suffix of
the name, so `svc.acme.internal` owns `db.svc.acme.internal` and the apex but never
`svc.acme.internal.example.net`; the root zone `.` catches what nothing else owns; with
no match the answer is REFUSED. Block order in the Corefile does not matter.

The block's cache answers if it holds a fresh entry for the question: the stored wire
bytes get the client's ID, spelling and flags and a counted-down TTL (`wire.render`).
That is the hot path, and it never builds a dnspython message.

On a miss, the block's first `forward` whose FROM covers the name (and no `except`
excludes it) takes the query; if none does, SERVFAIL, as CoreDNS's "no next plugin". A
reply whose rcode that forward's `next` lists goes on to the next covering forward. The
shell merges identical queries already in flight, so one upstream exchange answers them
all. An `Exchange` then walks the upstreams in policy order: each `Send` says which
upstream, over UDP or TCP, and for how long to wait; the shell does it with a fresh
socket and a fresh random ID, drops any reply that fails `wire.reply_matches` and keeps
waiting, and reports back `answered` or `failed`. A truncated UDP reply is asked again
over TCP; a failure moves to the next upstream until the attempts or the overall
deadline run out, and then the client gets SERVFAIL. Upstreams that keep failing are
marked down (more than `max_fails` failures in a row) and skipped until a health probe
gets a reply; when all are down, the query gets SERVFAIL at once with the reason (unlike
CoreDNS, which tries one anyway unless `failfast_all_unhealthy_upstreams`; here
`failfast_all_unhealthy_upstreams off` does that).

A good reply first loses the authority and additional records that another zone owns
(`scrub`: the catch-all's server does not speak for the tunnel's names), then is stored in
the cache (if it may be) and rendered for each waiting client. A UDP reply larger than the
client can take is replaced by a truncated one (TC set), so the client retries over TCP.

An expired entry within serve_stale's window is answered at once with a 30 s TTL (at most
the cap) while one refresh goes upstream; after a refresh is tried, the next waits
STALE_RECHECK (RFC 8767), so a dead upstream is not asked again by every client of a stale name.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import dns.rcode

from splitdns.codec import entries, wire
from splitdns.codec import reply as replies
from splitdns.codec.entries import Entry
from splitdns.config import Block
from splitdns.core.cache import Cache
from splitdns.core.local import Local, Rewritten, revert, steps_of
from splitdns.core.memo import Memo
from splitdns.core.metrics import ZoneStats
from splitdns.core.rebinding import PrivateFilter
from splitdns.core.tunnel import TunnelState
from splitdns.directives import loadbalance
from splitdns.directives.forward import ForwardSpec, Upstream

if TYPE_CHECKING:
    import dns.message
    import dns.rrset

# Extended DNS Error codes (RFC 8914) we use.
EDE_NO_REACHABLE_AUTHORITY = 22
EDE_NOT_READY = 14

STALE_TTL = 30  # RFC 8767 4: the TTL of a stale answer
STALE_RECHECK = 30.0  # RFC 8767 4: after a refresh is tried, the next one waits this long


def _answered(step: Send, reply: replies.Reply) -> str:
    return f"{step.upstream.label} answered {dns.rcode.to_text(dns.rcode.Rcode(reply.rcode()))}"


@dataclass
class UpstreamState:
    """Health bookkeeping for one upstream: consecutive failures, and whether a probe runs."""

    upstream: Upstream
    fails: int = 0
    probing: bool = False
    label: str = field(init=False)  # "host:port", as metrics name it: once, not per attempt
    last_error: str = ""  # why the last attempt or probe failed, for the fail-fast reason
    last_reply: float = float("-inf")  # when it last answered anything (an exchange or a probe)

    def __post_init__(self) -> None:
        self.label = str(self.upstream)

    def __str__(self) -> str:  # what a user reads: "127.0.0.1:5398", never the dataclass's fields
        return self.label

    def down(self, max_fails: int) -> bool:
        return max_fails > 0 and self.fails > max_fails

    def replied(self, now: float) -> None:
        """Any reply at all, of any rcode, means the upstream is alive (CoreDNS)."""
        self.fails = 0
        self.last_reply = now

    def failed(self, error: str, max_fails: int) -> None:
        if max_fails > 0:
            self.fails += 1
        self.last_error = error


@dataclass
class ForwardState:
    spec: ForwardSpec
    upstreams: list[UpstreamState]
    origin: bytes = b""
    excepts: tuple[bytes, ...] = ()
    rotation: int = 0
    inflight: int = 0  # upstream exchanges under way, counted by the shell
    rejected: int = 0  # refused for max_concurrent (coredns_forward_max_concurrent_rejects_total)
    broken: int = 0  # times every upstream was down (coredns_forward_healthcheck_broken_total)

    @classmethod
    def of(cls, spec: ForwardSpec) -> ForwardState:
        return cls(spec, [UpstreamState(u) for u in spec.upstreams], wire.name_to_wire(spec.origin),
                   tuple(wire.name_to_wire(e) for e in spec.excepts))

    def attempts(self) -> int:
        """CoreDNS's max_connect_attempts: by default twice the (current) number of upstreams."""
        if self.spec.max_connect_attempts is None:
            return 2 * len(self.upstreams)
        return self.spec.max_connect_attempts or 10_000

    def set_upstreams(self, upstreams: Iterable[Upstream]) -> bool:
        """New upstreams (pushed by the VPN server); health carries over for the ones kept.
        True if the set changed."""
        old = {state.upstream: state for state in self.upstreams}
        new = [old.get(u) or UpstreamState(u) for u in upstreams]
        changed = [s.upstream for s in new] != [s.upstream for s in self.upstreams]
        self.upstreams = new
        return changed

    def down_reason(self) -> str:
        """Why a query fails fast: every upstream is marked down, and what each last said."""
        why = "; ".join(f"{u.label}: {u.last_error}" if u.last_error else u.label
                        for u in self.upstreams)
        return f"all upstreams are down ({why}); answering at once until a health probe gets a reply"

    def covers(self, name: bytes) -> bool:
        if not wire.is_subdomain(name, self.origin):
            return False
        if not self.excepts:
            return True
        return name == self.origin or not any(wire.is_subdomain(name, e) for e in self.excepts)

    def ordered(self, rng: random.Random) -> list[UpstreamState]:
        ups = list(self.upstreams)
        if self.spec.policy == "random" and len(ups) > 1:
            rng.shuffle(ups)
        elif self.spec.policy == "round_robin":
            shift = self.rotation % len(ups)
            self.rotation += 1
            ups = ups[shift:] + ups[:shift]
        return ups


@dataclass(frozen=True)
class Send:
    upstream: UpstreamState
    tcp: bool
    timeout: float


@dataclass(frozen=True)
class Done:
    """The outcome of an exchange: an upstream reply, or an rcode of our own with a reason."""

    reply: replies.Reply | None = None
    rcode: int = dns.rcode.SERVFAIL
    error: str | None = None
    ede: tuple[int, str] | None = None


@dataclass
class Exchange:
    """One client query's walk over a forward's upstreams (CoreDNS forward.go semantics)."""

    fwd: ForwardState
    now: float
    rng: random.Random
    deadline: float = 0.0
    attempts: int = 0
    order: list[UpstreamState] = field(default_factory=list)
    index: int = 0
    last_error: str = "no upstream answered"
    last_reply: Done | None = None

    def start(self) -> Send | Done:
        limit = self.fwd.spec.max_concurrent
        if limit and self.fwd.inflight > limit:
            # CoreDNS answers REFUSED and does not count it as an upstream failure.
            self.fwd.rejected += 1
            return Done(rcode=dns.rcode.REFUSED, error=f"more than max_concurrent {limit} queries")
        self.deadline = self.now + self.fwd.spec.overall_timeout
        self.order = self.fwd.ordered(self.rng)
        return self._next(self.now)

    def answered(self, step: Send, reply: replies.Reply, now: float) -> Send | Done:
        step.upstream.replied(now)
        if not reply.question:
            # No question: acceptable only as a failure signal (wire.reply_matches).
            self.last_error = _answered(step, reply)
            return self._next(now)
        if reply.flags & wire.TC and not step.tcp:
            return Send(step.upstream, True, self._timeout(now))
        if reply.rcode() in self.fwd.spec.failover:
            self.last_reply = Done(reply)
            self.last_error = _answered(step, reply)
            return self._next(now)
        return Done(reply)

    def failed(self, step: Send, error: str, now: float) -> Send | Done:
        step.upstream.failed(error, self.fwd.spec.max_fails)
        self.last_error = f"{step.upstream.label}: {error}"
        return self._next(now)

    def _timeout(self, now: float) -> float:
        return max(0.0, min(self.fwd.spec.read_timeout, self.deadline - now))

    def _next(self, now: float) -> Send | Done:
        spec = self.fwd.spec
        if now >= self.deadline or self.attempts >= self.fwd.attempts() or not self.order:
            if self.last_reply is not None:
                return self.last_reply
            return Done(error=self.last_error,
                        ede=(EDE_NO_REACHABLE_AUTHORITY, self.last_error))
        skipped = 0
        while True:
            if self.index >= len(self.order):
                self.index = 0
            up = self.order[self.index]
            self.index += 1
            if not up.down(spec.max_fails):
                break
            skipped += 1
            if skipped >= len(self.order):
                self.fwd.broken += 1
                if spec.failfast_all_unhealthy:
                    reason = self.fwd.down_reason()
                    return Done(error=reason, ede=(EDE_NO_REACHABLE_AUTHORITY, reason))
                up = self.rng.choice(self.order)
                break
        self.attempts += 1
        return Send(up, spec.force_tcp, self._timeout(now))


def cache_key(block: Block) -> tuple[object, ...]:
    """What a cache's content depends on: a reload keeps a block's cache only when this is
    the same. Answers from old upstreams, or that an old `private_addresses` let through,
    must not outlive the swap, nor answers to names an old `rewrite` asked for."""
    routes = tuple((f.origin, f.excepts, f.upstreams, f.files, f.tunnel) for f in block.forwards)
    return (block.zones, block.port, block.cache, routes, block.private_addresses, block.openvpn,
            block.rewrite)


class Zone:
    """A server block at run time: its cache and forwards, and how replies are rendered."""

    def __init__(self, block: Block, cache: Cache | None = None, cache_bytes: int = 64 * 1024 * 1024) -> None:
        self.block = block
        if cache is None and block.cache is not None:
            cache = Cache(block.cache, cache_bytes)
        self.cache = cache
        self.pending = 0  # upstream exchanges in flight (identical queries count once)
        self.forwards = [ForwardState.of(spec) for spec in block.forwards]
        self.stats = ZoneStats()
        self.ready = False           # latched once the zone answered through its upstreams
        self.not_ready_reason = "no probe has been answered yet"
        self.loop_error: str | None = None  # set while a forwarding loop is detected
        self.tunnel: TunnelState | None = TunnelState() if block.openvpn else None
        spec = block.private_addresses
        self.private = PrivateFilter(spec) if spec is not None else None
        self.local = Local(block) if steps_of(block) else None  # rewrite, template, hosts
        self.turn: int | None = 0 if block.loadbalance else None  # replies rotated so far

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

    @property
    def name(self) -> str:
        return self.block.zones[0]

    def healthy_now(self) -> tuple[bool, str]:
        """The zone's live state, for /ready?zone=: a loop, or every upstream marked down."""
        if self.loop_error:
            return False, self.loop_error
        if self.tunnel is not None and not self.tunnel.up:
            return False, self.tunnel.describe()
        if not self.ready:
            return False, self.not_ready_reason
        for fwd in self.forwards:
            if fwd.upstreams and all(u.down(fwd.spec.max_fails) for u in fwd.upstreams):
                return False, f"every upstream of forward {fwd.spec.origin} is down"
        return True, "ok"

    def unheard(self, now: float, max_age: float) -> list[tuple[ForwardState, UpstreamState]]:
        """Upstreams in service that have not replied for `max_age` seconds: what a live
        readiness check must probe before it can say the zone is up."""
        return [(fwd, u) for fwd in self.forwards for u in fwd.upstreams
                if fwd.spec.max_fails > 0 and not u.down(fwd.spec.max_fails)
                and now - u.last_reply > max_age]

    def forward_for(self, name: bytes) -> ForwardState | None:
        for fwd in self.forwards:
            if fwd.covers(name):
                return fwd
        return None

    def handed_on(self, fwd: ForwardState, name: bytes, done: Done) -> ForwardState | None:
        """`next RCODE`: the forward after `fwd` (file order) that covers `name`, when the reply's
        rcode is one `fwd` hands on; None when the reply stands (no reply, no such forward)."""
        if done.reply is None or done.reply.rcode() not in fwd.spec.next_rcodes:
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
        return Done(reply, done.rcode, done.error, done.ede), removed

    def tunnel_down(self, q: wire.Query, now: float) -> bytes | None:
        """While the tunnel is not up, the answer at once: stale if allowed, else SERVFAIL
        with an Extended DNS Error saying why. None when the tunnel is up (or no tunnel)."""
        if self.tunnel is None or self.tunnel.up:
            return None
        stale = self.stale(q, now)
        if stale is not None:
            self.stats.served_stale += 1
            return stale
        return wire.error_reply(q, dns.rcode.SERVFAIL, (EDE_NO_REACHABLE_AUTHORITY, self.tunnel.describe()))

    def stale(self, q: wire.Query, now: float) -> bytes | None:
        """An expired answer still inside the serve_stale window, with RFC 8767's 30 s TTL."""
        if self.cache is None or not self.cache.spec.serve_stale:
            return None
        entry = self.cache.get_stale(q.key, now)
        if entry is None:
            return None
        return entries.render(entry, min(STALE_TTL, self.cache.cap_of(entry)), q)

    def refresh_due(self, q: wire.Query, now: float) -> bool:
        """Whether a stale entry may be refreshed upstream now: once per STALE_RECHECK at most,
        so a dead upstream is not asked again by every client of a stale name."""
        if self.cache is None or self.cache.get_stale(q.key, now) is None:
            return True
        return now >= self.cache.refresh_after(q.key)

    def hold_refresh(self, q: wire.Query, now: float) -> None:
        """A refresh of this stale entry starts (or failed): the next waits STALE_RECHECK.
        A successful refresh replaces the entry, and with it this mark."""
        if self.cache is not None and self.cache.get_stale(q.key, now) is not None:
            self.cache.hold(q.key, now + STALE_RECHECK)

    @property
    def stale_first(self) -> bool:
        """serve_stale `immediate` (the default): answer stale at once, refresh behind."""
        return self.cache is not None and not self.cache.spec.serve_stale_verify

    def render(self, q: wire.Query, done: Done, entry: Entry | None, now: float) -> bytes:
        """The reply one client gets for an exchange's outcome (merged clients each get theirs);
        one the cache did not keep (TTL 0, a referral) has each TTL lowered to the cap."""
        if entry is not None:
            return entries.render(entry, entries.remaining(entry, now), q)
        if done.reply is None:
            return wire.error_reply(q, done.rcode, done.ede)
        cap = self.cache.cap(done.reply) if self.cache is not None else None
        return wire.render(done.reply.stored, done.reply.offsets, None, q, cap)


def unrewrite(done: Done, rewritten: Rewritten | None) -> Done:
    """The reply to a query `rewrite` changed, under the names the client asked for."""
    if rewritten is None or done.reply is None:
        return done
    reply = revert(done.reply, rewritten)
    if reply is None:
        return Done(error="the reply to a rewritten query could not be mapped back to the name asked")
    return Done(reply, done.rcode, done.error, done.ede)


def scrub(done: Done, zone: Zone, router: Router) -> Done:
    """The reply without authority and additional records another zone owns.

    An upstream speaks only for its own zone: the catch-all's server must not hand the client
    an NS or address for a name the tunnel or cluster zone owns (Unbound's scrub_sanitize, in
    split-DNS terms). The answer section is kept as it is: it answers the question asked.
    Rare, so the reply is rewritten (`reply.rewrite_with_dnspython`).
    """
    reply = done.reply
    if reply is None or all(router.route(owner) is zone for owner in reply.owners):
        return done

    def ours(rrset: dns.rrset.RRset) -> bool:
        return router.route(rrset.name.canonicalize().to_wire() or b"\x00") is zone

    def drop_foreign(msg: dns.message.Message) -> None:
        msg.authority = [r for r in msg.authority if ours(r)]
        msg.additional = [r for r in msg.additional if ours(r)]

    scrubbed = replies.rewrite_with_dnspython(reply.data, drop_foreign)
    if scrubbed is None:  # dnspython could not rewrite it (a gap in the reader): refuse, not leak
        return Done(error="the upstream reply could not be rewritten without foreign records")
    return Done(scrubbed, done.rcode, done.error, done.ede)


class Router:
    """Which zone owns a name on one listener: longest whole-label suffix, root last."""

    def __init__(self, zones: Iterable[Zone]) -> None:
        self.table: dict[bytes, Zone] = {}
        self.learned: dict[bytes, Zone] = {}
        self.memo = Memo()  # replies rendered through this router: it routed them
        for zone in zones:
            for name in zone.block.zones:
                self.table[wire.name_to_wire(name)] = zone

    def owns(self, zone: Zone) -> bool:
        return any(z is zone for z in self.table.values())

    def learn(self, zone: Zone, names: Iterable[str]) -> None:
        """Route these names to `zone` too (domains the VPN pushed); a block of the Corefile
        that names the same zone keeps it. Replaces what was learned for `zone` before."""
        self.memo.clear()
        for key in [k for k, z in self.learned.items() if z is zone]:
            del self.learned[key]
            del self.table[key]
        for name in names:
            key = wire.name_to_wire(name)
            if key not in self.table:
                self.table[key] = self.learned[key] = zone

    def route(self, name: bytes) -> Zone | None:
        table = self.table
        pos = 0
        while name[pos]:
            zone = table.get(name[pos:])
            if zone is not None:
                return zone
            pos += name[pos] + 1
        return table.get(b"\x00")
