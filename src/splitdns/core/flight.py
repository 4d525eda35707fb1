"""The life of one cache miss upstream: a `Flight`, from departure to landing.

`Zone.depart` puts a query on the flight under way for the same question (CVE-2020-25686),
or on a new one, or refuses it at the pending cap. From there the flight owns the miss:
`start` asks the forward's upstreams (an `Exchange`); each `Send` comes back as `answered`
or `failed`, counted per upstream and rcode, a failing upstream named for a health probe
(`unwell`); a reply whose rcode the forward's `next` lists goes on to the next forward that
covers the name; the outcome is settled (under the client's names, without foreign or
private records, rewritten as the block's directives keep replies: `minimal`, `loadbalance`'s
order; stored) and the flight lands: it leaves the zone's table and its counts, so no client
joins it any more. A flight that cannot
settle (our own bug, a server stop) is `abandon`ed, which lands it too: every flight lands
exactly once.

The state is explicit, and a step it does not allow raises `FlightError`, as h11's state
machine does: a driver that answers a settled flight or lands one twice has a bug that must
not pass unseen. The drivers (shell/misses.py on loop callbacks, the transcript tests) drive
this same object and only move bytes and timers, and shell/flights.py hands its outcome to
every client waiting for it: the flight is to them what dnspython's `_Resolution` is to its
sync and async resolvers.
Sans-io: no sockets, no clock (`now` comes in), no logging (`Settled.notes`).
Tests: tests/test_flight.py, tests/test_misses.py.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import dns.rdatatype

from splitdns.codec import reply as replies
from splitdns.codec import wire
from splitdns.core.decisions import Forward, LogLine, Note, Settled, reshaped, scrub, unrewrite
from splitdns.core.exchange import Done, Exchange, ForwardState, Send, UpstreamState
from splitdns.core.metrics import RCODES, ZoneStats

if TYPE_CHECKING:
    from splitdns.codec.entries import Entry
    from splitdns.directives._reshape import Reshape


class FlightState(enum.IntEnum):
    BOARDING = 0   # departed (in the zone's table), nothing asked yet: `start` is next
    ASKING = 1     # `step` is out: its driver owes `answered` or `failed` for it
    SETTLED = 2    # landed with an outcome (`outcome`)
    ABANDONED = 3  # landed without one: our own bug, or the server stops


BOARDING, ASKING, SETTLED, ABANDONED = FlightState


class FlightError(RuntimeError):
    """A step the flight's state does not allow: a bug of the driver that took it."""


class FlightZone(Protocol):
    """What a flight uses of the zone it departed from (core/zone.py's `Zone`)."""

    stats: ZoneStats
    pending: int
    flights: dict[bytes, Flight]
    reshapes: tuple[Reshape, ...]

    def handed_on(self, fwd: ForwardState, name: bytes, done: Done) -> ForwardState | None: ...
    def without_private(self, done: Done) -> tuple[Done, list[str]]: ...
    def store(self, q: wire.Query, done: Done, now: float) -> Entry | None: ...


class Flight:
    """One upstream exchange under way (or over), shared by every identical query of a zone.
    `query` is the first client's; `asking` the forward whose upstreams are asked now (after
    `next`, a later one than `forward.fwd`); `step` the attempt out while ASKING."""

    __slots__ = ("asking", "exchange", "forward", "outcome", "owner_of", "query", "sent_at", "state",
                 "step", "unwell", "zone")

    def __init__(self, zone: FlightZone, query: wire.Query, forward: Forward) -> None:
        self.zone = zone
        self.query = query
        self.forward = forward
        self.asking = forward.fwd
        self.state = BOARDING
        self.outcome: Settled | None = None
        # Set by `start`, read only once ASKING (a slot left unset costs nothing per miss):
        self.exchange: Exchange
        self.step: Send
        self.sent_at: float  # when `step` was handed out: its round trip is counted from there
        self.owner_of: Callable[[bytes], object] | None
        self.unwell: tuple[ForwardState, UpstreamState] | None  # after `failed`: probe it

    @property
    def landed(self) -> bool:
        return self.state >= SETTLED

    def start(self, now: float, rng: random.Random,
              owner_of: Callable[[bytes], object] | None = None) -> Send | Settled:
        """Ask the first upstream (or settle at once: every upstream down, max_concurrent).
        `owner_of` routes a name to its zone, for `scrub` (the listener's router)."""
        if self.state is not BOARDING:
            raise FlightError(f"cannot start a flight that is {self.state.name.lower()}")
        self.state = ASKING
        self.owner_of = owner_of
        self.exchange = exchange = Exchange(self.asking, now, rng)
        step = exchange.start()
        if isinstance(step, Send):
            self.step, self.sent_at = step, now
            return step
        return self._settle(step, now, None, 0.0)

    def answered(self, step: Send, reply: replies.Reply, now: float) -> Send | Settled:
        """`step`'s upstream sent this reply (matched to the query sent): the next attempt
        (TCP after truncation, failover on an rcode), or the flight settles."""
        if self.state is not ASKING or step is not self.step:
            raise FlightError(self._refusal("answer"))
        rtt = now - self.sent_at
        up = step.upstream
        self.zone.stats.upstream[(up.label, RCODES.get(reply.rcode_value, "other"))].observe(rtt)
        following = self.exchange.answered(step, reply, now)
        if isinstance(following, Send):
            self.step, self.sent_at = following, now
            return following
        return self._settle(following, now, up.label, rtt)

    def failed(self, step: Send, error: str, timed_out: bool, now: float) -> Send | Settled:
        """`step` failed (`error` says why, in a user's words): the next attempt, or the
        flight settles. `unwell` then names the upstream a health probe should watch."""
        if self.state is not ASKING or step is not self.step:
            raise FlightError(self._refusal("fail"))
        up, fwd = step.upstream, self.asking
        self.zone.stats.upstream[(up.label, "timeout" if timed_out else "error")] \
            .observe(now - self.sent_at)
        following = self.exchange.failed(step, error, now)
        # CoreDNS probes a failing upstream only where max_fails can mark it down.
        self.unwell = (fwd, up) if up.fails > 0 and fwd.spec.max_fails > 0 else None
        if isinstance(following, Send):
            self.step, self.sent_at = following, now
            return following
        return self._settle(following, now, None, 0.0)

    def abandon(self) -> None:
        """Land without an outcome: our own bug stopped the flight, or the server stops."""
        if self.state >= SETTLED:
            raise FlightError(f"cannot land a flight twice: it is {self.state.name.lower()}")
        self._land(ABANDONED)

    def _refusal(self, what: str) -> str:
        if self.state is not ASKING:
            return f"cannot {what} a flight that is {self.state.name.lower()}"
        return f"cannot {what} an attempt that is not the one under way"

    def _settle(self, done: Done, now: float, upstream: str | None, rtt: float) -> Send | Settled:
        """The exchange ended: on to the next forward (`next RCODE`), or the outcome, cleaned
        and stored, and the flight lands."""
        zone, forward = self.zone, self.forward
        handed = zone.handed_on(self.asking, forward.asked.name, done)
        while handed is not None:
            if self.asking is not forward.fwd:
                self.asking.inflight -= 1
            handed.inflight += 1
            self.asking = handed
            self.exchange = exchange = Exchange(handed, now, self.exchange.rng)
            step = exchange.start()
            if isinstance(step, Send):
                self.step, self.sent_at = step, now
                return step
            done, upstream, rtt = step, None, 0.0
            handed = zone.handed_on(handed, forward.asked.name, done)
        done = unrewrite(done, forward.rewritten)
        if self.owner_of is not None:
            done = scrub(done, zone, self.owner_of)
        done, removed = zone.without_private(done)
        for reshape in zone.reshapes:  # `minimal`, `loadbalance`'s order: before the cache keeps it
            done = reshaped(done, reshape)
        notes: tuple[Note, ...] = ()
        if removed:
            q = self.query
            name = wire.wire_to_text(q.question[:-4])
            qtype = dns.rdatatype.to_text(dns.rdatatype.RdataType.make(q.qtype))
            notes = (LogLine("warning", f"plugin/private_addresses: removed {', '.join(removed)} "
                             f"from the reply for {name} {qtype} (possible DNS rebinding)"),)
        self.outcome = settled = Settled(done, zone.store(self.query, done, now), notes, upstream, rtt)
        self._land(SETTLED)
        return settled

    def _land(self, state: FlightState) -> None:
        """The flight is over: it leaves the zone's table, and its counts go (once)."""
        zone, fwd = self.zone, self.forward.fwd
        if self.asking is not fwd:
            self.asking.inflight -= 1
        fwd.inflight -= 1
        zone.pending -= 1
        del zone.flights[self.query.key]
        self.state = state


class ProbeFlight(Flight):
    """A flight that asks the upstreams past the cache (readiness, loops: the shell's
    `ask_upstreams`): in no table, so nobody joins it and nothing is counted pending, and its
    outcome is the exchange's own: no `next`, not cleaned, not stored."""

    __slots__ = ()

    def _settle(self, done: Done, now: float, upstream: str | None, rtt: float) -> Send | Settled:
        self.outcome = settled = Settled(done, None, (), upstream, rtt)
        self.state = SETTLED
        return settled

    def _land(self, state: FlightState) -> None:
        self.state = state
