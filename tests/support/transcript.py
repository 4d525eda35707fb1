"""Transcripts of the core: a listener's zones driven as the shell drives them, minus the I/O.

`Transcript.ask` drives what the shell drives (shell/flights.py, shell/misses.py):
`Zone.begin`, `Zone.depart`, the `Flight` (core/flight.py) and `Zone.finish`. Each `Send`
goes to `upstream(send, asked)`, a function of the test that returns a reply or the text of
a failure (one that starts with "timeout" is a timeout), `rtt` seconds after it was sent.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import dns.message
import dns.rcode

from splitdns import config
from splitdns.codec import wire
from splitdns.codec.reply import Reply
from splitdns.core.decisions import Answer, Forward, Settled
from splitdns.core.exchange import Done, Send
from splitdns.core.loop import LoopGuard
from splitdns.core.routing import Router
from splitdns.core.zone import Zone
from tests.helpers import indexed, query, reply
from tests.helpers import wire as to_wire

Upstreamer = Callable[[Send, wire.Query], "Reply | str"]


def parse(name: str, rdtype: str = "A", qid: int = 0x1234) -> wire.Query:
    q = wire.parse_query(to_wire(query(name, rdtype, qid=qid)))
    assert q is not None
    return q


def answering(address: str = "192.0.2.80", ttl: int = 10, rcode: int = dns.rcode.NOERROR,
              log: list[str] | None = None) -> Upstreamer:
    """An upstream that answers every question with one A record (or an rcode alone)."""
    def upstream(send: Send, asked: wire.Query) -> Reply:
        if log is not None:
            log.append(send.upstream.label)
        name = wire.wire_to_text(asked.name)
        msg = dns.message.make_query(name, asked.qtype)
        msg.id = asked.id
        records = (f"{name} {ttl} IN A {address}",) if rcode == dns.rcode.NOERROR else ()
        return indexed(reply(msg, *records, rcode=rcode))
    return upstream


def failing(why: str = "timeout after 2s", log: list[str] | None = None) -> Upstreamer:
    def upstream(send: Send, asked: wire.Query) -> str:
        if log is not None:
            log.append(send.upstream.label)
        return why
    return upstream


@dataclass
class Transcript:
    """One listener's zones, driven as the shell drives them."""

    corefile: str
    pending_limit: int = 1000
    rtt: float = 0.0  # how long after its attempt each reply (or failure) comes
    notes: list[object] = field(default_factory=list)

    def __post_init__(self) -> None:
        blocks = config.loads(self.corefile, "Corefile", env={}).blocks
        self.loop_probes: dict[bytes, LoopGuard] = {}
        self.router = Router(Zone(b, loop_probes=self.loop_probes) for b in blocks)
        self.rng = random.Random(7)

    def zone(self, name: str) -> Zone:
        zone = self.router.route(wire.name_to_wire(name))
        assert zone is not None
        return zone

    def begin(self, q: wire.Query, now: float) -> Answer | Forward:
        zone = self.router.route(q.name)
        assert zone is not None
        decided = zone.begin(q, now)
        if isinstance(decided, Answer):
            self.notes.extend(decided.notes)
        return decided

    def fly(self, zone: Zone, q: wire.Query, forward: Forward, upstream: Upstreamer,
            now: float) -> Settled | Done:
        """The query's flight, as the shell drives it: depart, start, each attempt's reply or
        failure (a "timeout ..." failure is a timeout) until it settles."""
        flight = zone.depart(q, forward, self.pending_limit)
        if isinstance(flight, Done):
            return flight
        step = flight.start(now, self.rng, self.router.route)
        while isinstance(step, Send):
            got = upstream(step, forward.asked)
            now += self.rtt
            if isinstance(got, str):
                step = flight.failed(step, got, got.startswith("timeout"), now)
            else:
                step = flight.answered(step, got, now)
        self.notes.extend(step.notes)
        return step

    def ask(self, q: wire.Query, upstream: Upstreamer, now: float) -> bytes:
        """A client's query from start to reply; a refresh behind an answer runs at once."""
        zone = self.router.route(q.name)
        assert zone is not None
        decided = self.begin(q, now)
        if isinstance(decided, Answer):
            if decided.refresh is not None:
                refreshed = self.fly(zone, q, decided.refresh, upstream, now)
                done = refreshed if isinstance(refreshed, Done) else refreshed.done
                self.notes.extend(zone.refreshed(decided.refresh, done))
            return decided.reply
        outcome = self.fly(zone, q, decided, upstream, now)
        done, entry = (outcome, None) if isinstance(outcome, Done) else (outcome.done, outcome.entry)
        answer = zone.finish(q, decided, done, entry, now)
        self.notes.extend(answer.notes)
        return answer.reply
