"""The Python a cache miss costs before any system call: the core's decisions and the codec.

    python -m bench.miss_cost [--misses N] [--laps L] [--steps]

In process, no sockets, no event loop: each miss makes the calls the UDP miss path makes
(shell/udp.py, shell/misses.py) around its I/O, from the client's query to the client's
reply: read the query, route it, miss the cache, `begin`, `depart`, the flight's `start`
(its exchange's first `Send`), the upstream query, the reply's match and read, the flight's
`answered` (the upstream's latency counted, the outcome cleaned and stored, the flight
landed), `finish` (render), the counters. The upstream's reply to each new name is made
beforehand by dnspython, as a minimal one (NSD with `minimal-responses`, as bench.run's
upstream): the answer and the OPT record.

What it tells: the part of a miss's CPU time that no change to the shell (callbacks,
epoll, timers) can remove. With python-floor's user and system time a query (bench.misses
prints both), it bounds the miss q/CPU-s a Python splitdns can reach on this machine.
The figure is the fastest of L laps of N misses, each lap on a fresh zone (a cold cache
that fills as dnsperf's new names fill it); `--steps` adds each call's cost on one warm
miss (timeit), which do not add up to the lap's: a lap also pays for growing the cache.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import timeit
from collections.abc import Callable

import dns.message
import dns.rrset

from splitdns import config
from splitdns.codec import reply as replies
from splitdns.codec import wire
from splitdns.core.decisions import Forward, Settled
from splitdns.core.exchange import Send
from splitdns.core.flight import Flight
from splitdns.core.routing import Router
from splitdns.core.zone import Zone

COREFILE = ".:53 {\n cache 3600 {\n  success 200000\n }\n forward . 127.0.0.2:53\n}\n"
QUERY_ID = 4242
UPSTREAM_ID = 7


def prepared(count: int) -> list[tuple[bytes, bytes]]:
    """Each new name's client query (EDNS, as dnsperf sends) and its upstream's reply."""
    out = []
    for i in range(count):
        msg = dns.message.make_query(f"n{i}.bench.example.", "A", use_edns=0)
        msg.id = QUERY_ID
        data = msg.to_wire()
        q = wire.parse_query(data)
        assert q is not None
        sent = dns.message.from_wire(wire.upstream_query(q, UPSTREAM_ID))
        answer = dns.message.make_response(sent)
        answer.answer.append(dns.rrset.from_text(sent.question[0].name, 3600, "IN", "A", "192.0.2.1"))
        out.append((data, answer.to_wire()))
    return out


class Lap:
    """One zone, as a server holds it, and a clock that never moves (no entry expires)."""

    def __init__(self) -> None:
        self.zone = Zone(config.loads(COREFILE, "Corefile").blocks[0])
        self.router = Router([self.zone])
        self.rng = random.Random(1)
        self.now = 1000.0

    def miss(self, data: bytes, upstream_reply: bytes) -> bytes:
        now, router = self.now, self.router
        q = wire.parse_query(data)
        assert q is not None
        zone = router.route(q.name)
        assert zone is not None and zone.cache is not None
        if zone.cache.get(q.key, now) is not None:
            raise SystemExit("a name was asked twice: the figures would mix hits in")
        decided = zone.walk(q, now)
        flight = zone.depart(q, decided, 1000)  # type: ignore[arg-type]
        step = flight.start(now, self.rng, router.route)  # type: ignore[union-attr]
        sent = wire.upstream_query(flight.forward.asked, UPSTREAM_ID)  # type: ignore[union-attr]
        qlen = len(q.question)
        if not wire.reply_matches(sent, upstream_reply, qlen):
            raise SystemExit("the prepared reply does not match the query sent")
        reply = replies.read_matched(upstream_reply, qlen)
        assert reply is not None
        settled = flight.answered(step, reply, now)  # type: ignore[arg-type, union-attr]
        answer = zone.finish(q, decided, settled.done, settled.entry, now)  # type: ignore[arg-type, union-attr]
        zone.stats.answered("udp", "ipv4", q.qtype, answer.reply, 0.0001)
        return answer.reply


def laps(misses: list[tuple[bytes, bytes]], count: int) -> list[float]:
    """Microseconds of process CPU a miss, per lap."""
    figures = []
    for _ in range(count):
        lap = Lap()
        start = time.process_time()
        for data, upstream_reply in misses:
            lap.miss(data, upstream_reply)
        figures.append((time.process_time() - start) / len(misses) * 1e6)
    return figures


def steps(sample: tuple[bytes, bytes]) -> list[tuple[str, float]]:
    """Each call of one miss, timed alone on a warm zone (microseconds, fastest of 5)."""
    lap = Lap()
    data, upstream_reply = sample
    now, zone, router = lap.now, lap.zone, lap.router
    q = wire.parse_query(data)
    assert q is not None and zone.cache is not None
    decided = zone.walk(q, now)
    assert isinstance(decided, Forward)
    sent = wire.upstream_query(q, UPSTREAM_ID)
    reply = replies.read_matched(upstream_reply, len(q.question))
    assert reply is not None

    def flight() -> Flight:
        departed = zone.depart(q, decided, 1000)
        assert isinstance(departed, Flight)
        return departed

    def departed() -> None:
        flight().abandon()

    def started() -> None:
        f = flight()
        f.start(now, lap.rng, router.route)
        f.abandon()

    def answered() -> Settled:
        f = flight()
        step = f.start(now, lap.rng, router.route)
        assert isinstance(step, Send)
        settled = f.answered(step, reply, now)
        assert isinstance(settled, Settled)
        return settled

    settled = answered()
    assert settled.entry is not None
    calls: list[tuple[str, Callable[[], object]]] = [
        ("read the query (wire.parse_query)", lambda: wire.parse_query(data)),
        ("route", lambda: router.route(q.name)),
        ("cache lookup (a miss)", lambda: zone.cache.get(b"\x01x" + q.key, now)),  # type: ignore[union-attr]
        ("begin", lambda: zone.walk(q, now)),
        ("depart + abandon", departed),
        ("depart + start + abandon", started),
        ("upstream query", lambda: wire.upstream_query(q, UPSTREAM_ID)),
        ("match the reply", lambda: wire.reply_matches(sent, upstream_reply, len(q.question))),
        ("read the reply", lambda: replies.read_matched(upstream_reply, len(q.question))),
        ("depart + start + answered (settle, land)", answered),
        ("finish (render)", lambda: zone.finish(q, decided, settled.done, settled.entry, now)),
        ("count the answer", lambda: zone.stats.answered("udp", "ipv4", 1, upstream_reply, 0.0001)),
    ]
    number = 20_000
    return [(label, min(timeit.repeat(call, number=number, repeat=5)) / number * 1e6)
            for label, call in calls]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.miss_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--misses", type=int, default=20_000, help="new names a lap (20000)")
    p.add_argument("--laps", type=int, default=7, help="laps; the fastest is the figure (7)")
    p.add_argument("--steps", action="store_true", help="each call's cost on a warm miss too")
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    if a.misses < 1 or a.laps < 1:
        p.error("--misses and --laps must be at least 1")
    misses = prepared(a.misses)
    figures = laps(misses, a.laps)
    print(f"core + codec: {min(figures):.2f} us of CPU a miss (fastest of {a.laps} laps of "
          f"{a.misses} new names; median {statistics.median(figures):.2f} us)")
    if a.steps:
        for label, micros in steps(misses[0]):
            print(f"  {label:42s} {micros:6.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
