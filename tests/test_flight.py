"""A miss's `Flight` (core/flight.py) as transcripts: its states, the steps each allows, and
that it lands exactly once on every path. A clock the test moves, replies the test writes.

A flight lands by leaving its zone's table and giving back its counts (`Zone.pending`, each
forward's `inflight`): landing twice would take a count below what the other flights hold
(and find no table entry), not landing would keep it above. So each path is checked with a
second flight in the air, whose counts must be all that is left.
"""

from __future__ import annotations

import dns.rcode
import pytest

from splitdns.codec import wire
from splitdns.codec.reply import Reply
from splitdns.core.decisions import Forward, Settled
from splitdns.core.exchange import Done, Send
from splitdns.core.flight import ABANDONED, ASKING, BOARDING, SETTLED, Flight, FlightError, ProbeFlight
from splitdns.core.zone import Zone
from tests.support.transcript import Transcript, answering, parse

ONE = ". {\n cache 30\n forward . 192.0.2.1 192.0.2.2 {\n  policy sequential\n }\n}\n"
NEXT = ". {\n forward . 192.0.2.1 {\n  next NXDOMAIN\n }\n forward . 192.0.2.2\n}\n"


def board(t: Transcript, name: str, now: float = 100.0) -> tuple[Zone, Flight]:
    q = parse(name)
    zone = t.zone(name)
    decided = t.begin(q, now)
    assert isinstance(decided, Forward)
    flight = zone.depart(q, decided, t.pending_limit)
    assert isinstance(flight, Flight)
    return zone, flight


def reply_to(flight: Flight, send: Send, rcode: int = dns.rcode.NOERROR) -> Reply:
    got = answering(rcode=rcode)(send, flight.forward.asked)
    assert isinstance(got, Reply)
    return got


def counts(zone: Zone) -> tuple[int, list[int], int]:
    return zone.pending, [f.inflight for f in zone.forwards], len(zone.flights)


def started(t: Transcript, name: str, now: float = 100.0) -> tuple[Zone, Flight, Send]:
    zone, flight = board(t, name, now)
    send = flight.start(now, t.rng, t.router.route)
    assert isinstance(send, Send) and flight.state is ASKING
    return zone, flight, send


# -- illegal steps raise ---------------------------------------------------------------------------

def test_a_flight_not_started_can_be_neither_answered_nor_failed() -> None:
    t = Transcript(ONE)
    _, flight = board(t, "www.example.org.")
    _, other, send = started(t, "other.example.org.")
    assert flight.state is BOARDING
    with pytest.raises(FlightError, match="cannot answer a flight that is boarding"):
        flight.answered(send, reply_to(other, send), 100.0)
    with pytest.raises(FlightError, match="cannot fail a flight that is boarding"):
        flight.failed(send, "timeout after 2s", True, 100.0)
    flight.start(100.0, t.rng, t.router.route)
    with pytest.raises(FlightError, match="cannot start a flight that is asking"):
        flight.start(100.0, t.rng, t.router.route)


def test_a_settled_flight_takes_no_answer_no_failure_and_no_second_landing() -> None:
    t = Transcript(ONE)
    zone, flight, send = started(t, "www.example.org.")
    settled = flight.answered(send, reply_to(flight, send), 100.01)
    assert isinstance(settled, Settled) and flight.state is SETTLED and flight.landed
    assert flight.outcome is settled
    for late in (lambda: flight.answered(send, reply_to(flight, send), 100.02),
                 lambda: flight.failed(send, "timeout after 2s", True, 100.02)):
        with pytest.raises(FlightError, match="a flight that is settled"):
            late()
    with pytest.raises(FlightError, match="cannot land a flight twice: it is settled"):
        flight.abandon()
    with pytest.raises(FlightError, match="cannot start a flight that is settled"):
        flight.start(100.0, t.rng, t.router.route)
    assert counts(zone) == (0, [0], 0) and flight.state is SETTLED


def test_only_the_attempt_under_way_can_be_answered() -> None:
    """A reply to an earlier attempt (the one that timed out, the UDP one before TCP) is not
    the flight's to take: the driver must have stopped waiting for it."""
    t = Transcript(ONE)
    _, flight, first = started(t, "www.example.org.")
    second = flight.failed(first, "timeout after 2s", True, 102.0)
    assert isinstance(second, Send) and second.upstream is not first.upstream
    with pytest.raises(FlightError, match="not the one under way"):
        flight.answered(first, reply_to(flight, first), 102.5)
    with pytest.raises(FlightError, match="not the one under way"):
        flight.failed(first, "timeout after 2s", True, 102.5)
    assert flight.state is ASKING  # the refusal changed nothing: the flight goes on
    assert isinstance(flight.answered(second, reply_to(flight, second), 102.5), Settled)


def test_an_abandoned_flight_takes_nothing_more() -> None:
    t = Transcript(ONE)
    zone, flight, send = started(t, "www.example.org.")
    flight.abandon()
    assert flight.state is ABANDONED and flight.landed and flight.outcome is None
    with pytest.raises(FlightError, match="cannot answer a flight that is abandoned"):
        flight.answered(send, reply_to(flight, send), 100.1)
    with pytest.raises(FlightError, match="cannot land a flight twice: it is abandoned"):
        flight.abandon()
    assert counts(zone) == (0, [0], 0)


# -- every path lands exactly once -----------------------------------------------------------------

def test_answered_lands_once_and_the_next_identical_query_departs_anew() -> None:
    t = Transcript(ONE)
    zone, flight, send = started(t, "www.example.org.")
    started(t, "other.example.org.")
    again = zone.depart(parse("WWW.example.org.", qid=9), flight.forward, t.pending_limit)
    assert again is flight and counts(zone) == (2, [2], 2)  # joined: counted once
    assert isinstance(flight.answered(send, reply_to(flight, send), 100.0), Settled)
    assert counts(zone) == (1, [1], 1)  # the other flight's alone
    late = zone.depart(parse("www.example.org."), flight.forward, t.pending_limit)
    assert isinstance(late, Flight) and late is not flight and late.state is BOARDING


def test_failed_everywhere_lands_once_with_the_reason() -> None:
    t = Transcript(ONE)
    zone, flight, send = started(t, "www.example.org.")
    started(t, "other.example.org.")
    step: Send | Settled = send
    tried = []
    while isinstance(step, Send):
        tried.append(step.upstream.label)
        step = flight.failed(step, "connection refused", False, 101.0)
    assert tried == ["192.0.2.1:53", "192.0.2.2:53"] * 2  # max_connect_attempts: twice each
    assert step.done.reply is None and "connection refused" in (step.done.error or "")
    assert step.entry is None and step.upstream is None
    assert counts(zone) == (1, [1], 1)


def test_a_reply_handed_on_with_next_lands_once_and_gives_back_both_forwards_counts() -> None:
    t = Transcript(NEXT)
    zone, flight, first = started(t, "www.example.org.")
    started(t, "other.example.org.")
    assert counts(zone) == (2, [2, 0], 2)
    second = flight.answered(first, reply_to(flight, first, dns.rcode.NXDOMAIN), 100.01)
    assert isinstance(second, Send) and second.upstream.label == "192.0.2.2:53"
    assert flight.asking is zone.forwards[1] and counts(zone) == (2, [2, 1], 2)
    settled = flight.answered(second, reply_to(flight, second), 100.03)
    assert isinstance(settled, Settled) and settled.done.reply is not None
    assert settled.done.reply.rcode() == dns.rcode.NOERROR
    assert settled.upstream == "192.0.2.2:53" and settled.rtt == pytest.approx(0.02)
    assert counts(zone) == (1, [1, 0], 1)


def test_a_bug_while_settling_leaves_the_flight_to_abandon_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Our own bug (here in storing) stops `answered` midway: the flight has not landed, and
    the driver's report lands it (shell/flights.py's `crashed` and `close`)."""
    t = Transcript(ONE)
    zone, flight, send = started(t, "www.example.org.")
    started(t, "other.example.org.")

    def broken(*args: object) -> None:
        raise RuntimeError("a bug in storing")

    monkeypatch.setattr(zone, "store", broken)
    with pytest.raises(RuntimeError, match="a bug in storing"):
        flight.answered(send, reply_to(flight, send), 100.0)
    assert not flight.landed and counts(zone) == (2, [2], 2)
    flight.abandon()
    assert flight.state is ABANDONED and counts(zone) == (1, [1], 1)


def test_a_flight_cancelled_while_asking_lands_once() -> None:
    """The server stops (or the task is cancelled) while an attempt is out."""
    t = Transcript(NEXT)
    zone, flight, first = started(t, "www.example.org.")
    started(t, "other.example.org.")
    second = flight.answered(first, reply_to(flight, first, dns.rcode.NXDOMAIN), 100.0)
    assert isinstance(second, Send)  # asking the second forward now
    flight.abandon()
    assert counts(zone) == (1, [1, 0], 1)


def test_a_flight_that_settles_at_once_lands_once() -> None:
    """Every upstream down (fail fast): `start` settles without asking."""
    t = Transcript(". {\n forward . 192.0.2.1 {\n  max_fails 1\n }\n}\n")
    zone = t.zone("example.org.")
    zone.forwards[0].upstreams[0].fails = 2
    _, flight = board(t, "www.example.org.")
    settled = flight.start(100.0, t.rng, t.router.route)
    assert isinstance(settled, Settled) and "all upstreams are down" in (settled.done.error or "")
    assert flight.state is SETTLED and counts(zone) == (0, [0], 0)


# -- what a flight counts and names ----------------------------------------------------------------

def test_each_attempt_is_counted_for_its_upstream_with_its_round_trip() -> None:
    t = Transcript(ONE, rtt=0.004)
    zone = t.zone("example.org.")
    first, second = zone.forwards[0].upstreams

    def first_times_out(send: Send, asked: wire.Query) -> Reply | str:
        return "timeout after 2s" if send.upstream is first else answering()(send, asked)

    t.ask(parse("www.example.org."), first_times_out, 100.0)
    timeouts, answers = zone.stats.upstream[(first.label, "timeout")], \
        zone.stats.upstream[(second.label, "NOERROR")]
    assert (timeouts.total, answers.total) == (1, 1)
    assert timeouts.sum == pytest.approx(0.004) and answers.sum == pytest.approx(0.004)
    assert set(zone.stats.upstream) == {(first.label, "timeout"), (second.label, "NOERROR")}


def test_a_failing_upstream_is_named_for_a_probe_only_where_max_fails_can_mark_it_down() -> None:
    for options, probed in (("", True), ("max_fails 0", False)):
        t = Transcript(f". {{\n forward . 192.0.2.1 192.0.2.2 {{\n  {options}\n }}\n}}\n")
        zone, flight, send = started(t, "www.example.org.")
        flight.failed(send, "connection refused", False, 100.0)
        expected = (zone.forwards[0], send.upstream) if probed else None
        assert flight.unwell == expected, options


def test_a_probe_flight_is_in_no_table_and_its_outcome_is_the_exchanges_own() -> None:
    """Readiness and loop probes (`Flights.ask_upstreams`): nobody joins them, nothing is
    stored, `next` does not hand them on."""
    t = Transcript(". {\n cache 30\n forward . 192.0.2.1 {\n  next NXDOMAIN\n }\n forward . 192.0.2.2\n}\n")
    zone = t.zone("example.org.")
    q = parse("www.example.org.")
    forward = zone.probe_forward(q)
    assert isinstance(forward, Forward)
    flight = ProbeFlight(zone, q, forward)
    send = flight.start(100.0, t.rng)
    assert isinstance(send, Send) and counts(zone) == (0, [0, 0], 0)
    settled = flight.answered(send, reply_to(flight, send, dns.rcode.NXDOMAIN), 100.0)
    assert isinstance(settled, Settled) and settled.entry is None and flight.state is SETTLED
    assert settled.done.reply is not None and settled.done.reply.rcode() == dns.rcode.NXDOMAIN
    assert zone.cache is not None and len(zone.cache) == 0
    assert counts(zone) == (0, [0, 0], 0)


def test_the_pending_cap_refuses_before_a_flight_exists() -> None:
    t = Transcript(ONE, pending_limit=1)
    zone, flight = board(t, "one.example.org.")
    q = parse("two.example.org.")
    decided = t.begin(q, 100.0)
    assert isinstance(decided, Forward)
    refused = zone.depart(q, decided, 1)
    assert isinstance(refused, Done) and refused.rcode == dns.rcode.REFUSED
    assert counts(zone) == (1, [1], 1)
    flight.abandon()
    assert isinstance(zone.depart(q, decided, 1), Flight)
