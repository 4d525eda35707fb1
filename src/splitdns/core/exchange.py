"""One client query's walk over a forward's upstreams, and the upstreams' health.

`Exchange` decides each attempt (`Send`: which upstream, UDP or TCP, how long to wait) and
the outcome (`Done`), as CoreDNS's forward does; the shell performs each attempt and reports
back `answered` or `failed`. `ForwardState` and `UpstreamState` keep what outlives one
query: the order (policy), the failures in a row (max_fails), the counters for metrics.
Sans-io: no sockets, no clock; `now` and `rng` come in as arguments.
Tests: tests/test_resolve.py, tests/test_flight.py.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field

import dns.rcode

from splitdns.codec import reply as replies
from splitdns.codec import wire
from splitdns.directives.forward import ForwardSpec, Upstream

# Extended DNS Error codes (RFC 8914) we use.
EDE_NO_REACHABLE_AUTHORITY = 22
EDE_NOT_READY = 14


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
    probe_failures: int = 0  # health probes that failed (coredns_forward_healthcheck_failures_total)
    said_down: bool = False  # what the log last said of it, so "down" and "back" are said once each

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

    def news(self, max_fails: int) -> bool | None:
        """True when it is down and the log has not said so yet, False when it is back and the log
        said it was down, else None; what it returns counts as said."""
        down = self.down(max_fails)
        if down == self.said_down:
            return None
        self.said_down = down
        return down

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
    failed_fast: int = 0  # of those, exchanges answered SERVFAIL at once (failfast_all_unhealthy)
    zone: str = ""  # the zone of the block it belongs to, for the log lines of its upstreams

    @classmethod
    def of(cls, spec: ForwardSpec, zone: str = "") -> ForwardState:
        return cls(spec, [UpstreamState(u) for u in spec.upstreams], wire.name_to_wire(spec.origin),
                   tuple(wire.name_to_wire(e) for e in spec.excepts), zone=zone)

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
        """The upstreams in the order an exchange asks them: the list itself when that is its
        own order (an exchange only reads it, and `set_upstreams` replaces it, never changes
        it), so the common miss copies nothing."""
        ups = self.upstreams
        policy = self.spec.policy
        if policy == "random" and len(ups) > 1:
            ups = list(ups)
            rng.shuffle(ups)
        elif policy == "round_robin" and ups:
            shift = self.rotation % len(ups)
            self.rotation += 1
            ups = ups[shift:] + ups[:shift]
        return ups


# Send, Done and Exchange: slotted, not frozen, for the cost of building one per miss
# (core/decisions.py). Values all the same: the shell reads them and never changes them.
@dataclass(slots=True)
class Send:
    upstream: UpstreamState
    tcp: bool
    timeout: float


@dataclass(slots=True)
class Done:
    """The outcome of an exchange: an upstream reply, or an rcode of our own with a reason."""

    reply: replies.Reply | None = None
    rcode: int = dns.rcode.SERVFAIL
    error: str | None = None
    ede: tuple[int, str] | None = None
    upstream: str = ""    # who gave `reply` ("host:port"), for the `log` line
    seconds: float = 0.0  # how long the exchange took until that reply


@dataclass(slots=True)
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
    allowed: int = 0  # attempts, at most (max_connect_attempts for the upstreams at the start)

    def start(self) -> Send | Done:
        limit = self.fwd.spec.max_concurrent
        if limit and self.fwd.inflight > limit:
            # CoreDNS answers REFUSED and does not count it as an upstream failure.
            self.fwd.rejected += 1
            return Done(rcode=dns.rcode.REFUSED, error=f"more than max_concurrent {limit} queries")
        self.deadline = self.now + self.fwd.spec.overall_timeout
        self.order = self.fwd.ordered(self.rng)
        self.allowed = self.fwd.attempts()
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
            self.last_reply = Done(reply, upstream=step.upstream.label, seconds=now - self.now)
            self.last_error = _answered(step, reply)
            return self._next(now)
        return Done(reply, upstream=step.upstream.label, seconds=now - self.now)

    def failed(self, step: Send, error: str, now: float) -> Send | Done:
        step.upstream.failed(error, self.fwd.spec.max_fails)
        self.last_error = f"{step.upstream.label}: {error}"
        return self._next(now)

    def _timeout(self, now: float) -> float:
        return max(0.0, min(self.fwd.spec.read_timeout, self.deadline - now))

    def _next(self, now: float) -> Send | Done:
        spec = self.fwd.spec
        if now >= self.deadline or self.attempts >= self.allowed or not self.order:
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
                    self.fwd.failed_fast += 1
                    reason = self.fwd.down_reason()
                    return Done(error=reason, ede=(EDE_NO_REACHABLE_AUTHORITY, reason))
                up = self.rng.choice(self.order)
                break
        self.attempts += 1
        return Send(up, spec.force_tcp, self._timeout(now))
