"""The flights of a server's misses and the clients waiting for each: one table, one hand-out.

Every query the hot path does not answer comes here, from the UDP path (udp.py) or a
coroutine (a TCP client, tcp.py), and so do the refreshes behind answers (serve_stale,
prefetch) and the readiness and loop probes (`ask_upstreams`). `Zone.begin` answers or
forwards; `board` puts the client on the flight `Zone.depart` gives (the one under way for
the same question, whichever path started it: CVE-2020-25686), or answers the refusal at the
pending cap. `Flights` owns what follows: the table of flights under way and who waits for
each, handing the outcome to each (`Zone.finish`), our own bug (counted once, SERVFAIL to
every client), a stop (nobody answered), and the counting and logging of every answer. The
attempts themselves are made by the driver (misses.py), which only moves bytes and timers and
reports `settled` or `crashed` here.
Tests: tests/test_misses.py, tests/test_server_inprocess.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Protocol

import dns.rcode
import dns.rdatatype

from splitdns import directives
from splitdns.codec import queries, wire
from splitdns.core.decisions import Answer, Forward, LogLine, Note, QueryError, Settled
from splitdns.core.exchange import Done
from splitdns.core.flight import Flight, ProbeFlight
from splitdns.core.routing import unrouted
from splitdns.core.search import Search
from splitdns.shell import datagrams, error_log, logs, searches

if TYPE_CHECKING:
    from splitdns.codec.entries import Entry
    from splitdns.config import Block, Config
    from splitdns.core.routing import Router
    from splitdns.core.zone import Zone
    from splitdns.shell.listener import Listener

Outcome = tuple[bytes, "Done | None"]  # what a waiting coroutine gets: its reply, and the exchange
Replied = tuple[bytes, "Zone | None", "Done | None", "int | None"]  # `Flights.answer`
DRAIN_POLL = 0.01


class Driver(Protocol):
    """What flies a flight (misses.py's `Misses`): it reports `settled` or `crashed` back."""

    def fly(self, zone: Zone, flight: Flight, owner_of: Callable[[bytes], object] | None) -> None: ...


class Waiter:
    """Someone waiting for a flight's outcome: `query` as it asked, `forward` as `begin`
    decided for it. Each kind says what the outcome, our bug, or a stop means to it."""

    __slots__ = ("forward", "query")

    def __init__(self, query: wire.Query, forward: Forward) -> None:
        self.query, self.forward = query, forward

    def answer(self, flights: Flights, zone: Zone, done: Done, entry: Entry | None, now: float) -> None:
        raise NotImplementedError

    def failed(self, flights: Flights, zone: Zone) -> None:
        """Our own bug stopped the flight (counted by `Flights.crashed`)."""

    def stopped(self) -> None:
        """The server stops: nobody is answered."""


class UdpClient(Waiter):
    """A UDP client: where its answer goes (listener and peer), the size it asked with and
    when it came (for the log)."""

    __slots__ = ("listener", "peer", "size", "start")

    def __init__(self, query: wire.Query, forward: Forward, listener: Listener, peer: datagrams.Peer,
                 size: int, start: float) -> None:
        self.query, self.forward, self.listener, self.peer = query, forward, listener, peer
        self.size, self.start = size, start

    def answer(self, flights: Flights, zone: Zone, done: Done, entry: Entry | None, now: float) -> None:
        q = self.query
        answer = zone.finish(q, self.forward, done, entry, now)
        if answer.notes:
            flights.emit(zone, q, answer.notes)
        flights.send(zone, q, self.listener, self.peer, self.size, self.start, answer.reply, done)

    def failed(self, flights: Flights, zone: Zone) -> None:
        q = self.query
        flights.send(zone, q, self.listener, self.peer, self.size, self.start,
                     wire.error_reply(q, dns.rcode.SERVFAIL))


class Awaiting(Waiter):
    """A coroutine (a TCP client) awaiting its reply and the exchange it came from."""

    __slots__ = ("future",)

    def __init__(self, query: wire.Query, forward: Forward, future: asyncio.Future[Outcome]) -> None:
        self.query, self.forward, self.future = query, forward, future

    def answer(self, flights: Flights, zone: Zone, done: Done, entry: Entry | None, now: float) -> None:
        answer = zone.finish(self.query, self.forward, done, entry, now)
        if answer.notes:
            flights.emit(zone, self.query, answer.notes)
        if not self.future.done():  # cancelled: the client went away meanwhile
            self.future.set_result((answer.reply, done))

    def failed(self, flights: Flights, zone: Zone) -> None:
        if not self.future.done():
            self.future.set_result((wire.error_reply(self.query, dns.rcode.SERVFAIL), None))

    def stopped(self) -> None:
        self.future.cancel()


class Refresh(Waiter):
    """A refresh behind an answer already sent (serve_stale, prefetch): only its error is news."""

    __slots__ = ()

    def answer(self, flights: Flights, zone: Zone, done: Done, entry: Entry | None, now: float) -> None:
        notes = zone.refreshed(self.forward, done)
        if notes:
            flights.emit(zone, self.query, notes)


class Probe(Waiter):
    """A readiness or loop probe past the cache: it wants the exchange's own outcome."""

    __slots__ = ("future",)

    def __init__(self, query: wire.Query, forward: Forward, future: asyncio.Future[Done]) -> None:
        self.query, self.forward, self.future = query, forward, future

    def answer(self, flights: Flights, zone: Zone, done: Done, entry: Entry | None, now: float) -> None:
        if not self.future.done():
            self.future.set_result(done)

    def failed(self, flights: Flights, zone: Zone) -> None:
        if not self.future.done():
            self.future.set_result(Done(error="internal error"))

    def stopped(self) -> None:
        self.future.cancel()


class Flights:
    """The flights under way of one server, each with its waiting clients (`table`), and the
    accounting of every answer that is not a hot-path hit."""

    def __init__(self, config: Callable[[], Config], clock: Callable[[], float],
                 spawn: Callable[[Coroutine[object, object, None]], None]) -> None:
        self.config = config
        self.clock = clock
        self.spawn = spawn  # a search walk's tries run as a task the server holds (and ends)
        self.table: dict[Flight, list[Waiter]] = {}
        self.internal_errors = 0
        self.driver: Driver  # set by the driver (misses.py), which reports back here

    # -- boarding ----------------------------------------------------------------------------

    def board(self, zone: Zone, forward: Forward, waiter: Waiter,
              owner_of: Callable[[bytes], object] | None) -> None:
        """Put the waiter on the flight for its question: the one under way, else a new one
        the driver flies; the refusal at the pending cap is its answer at once. `owner_of`
        routes names to zones (the listener's router), for the flight's `scrub`."""
        flight = zone.depart(waiter.query, forward, self.config().limits.pending)
        if isinstance(flight, Done):
            waiter.answer(self, zone, flight, None, self.clock())
            return
        waiting = self.table.get(flight)
        if waiting is not None:
            waiting.append(waiter)
            return
        self.table[flight] = [waiter]
        self.driver.fly(zone, flight, owner_of)

    async def answer(self, q: wire.Query, listener: Listener) -> Replied:
        """A coroutine's reply to a query (a TCP client), the zone that gave it, the upstream
        exchange it came from (None when none) and `Answer.hit` (None: not a cache hit)."""
        zone = listener.router.route(q.name)
        if zone is None:
            return unrouted(q), None, None, None
        try:
            decided = zone.begin(q, self.clock())
            if isinstance(decided, Search):
                return await searches.search(self, zone, q, decided, listener.router), zone, None, None
            if isinstance(decided, Answer):
                self.carry_out(zone, q, decided, listener.router)
                return decided.reply, zone, None, decided.hit
            future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
            self.board(zone, decided, Awaiting(q, decided, future), listener.router.route)
        except Exception as err:  # our own bug: the client still gets an answer, we a log line
            self.internal_error(err)
            return wire.error_reply(q, dns.rcode.SERVFAIL), zone, None, None
        out, done = await future
        return out, zone, done, None

    async def reply_to(self, zone: Zone, q: wire.Query, decided: Answer | Forward, router: Router) -> bytes:
        """The reply to what the zone decided: the answer now, or its flight's outcome."""
        if isinstance(decided, Answer):
            self.carry_out(zone, q, decided, router)
            return decided.reply
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self.board(zone, decided, Awaiting(q, decided, future), router.route)
        out, _ = await future
        return out

    def carry_out(self, zone: Zone, q: wire.Query, answer: Answer, router: Router) -> None:
        """What goes with an answer: its log lines, and the refresh behind it."""
        if answer.notes:
            self.emit(zone, q, answer.notes)
        if answer.refresh is not None:
            self.refresh(zone, answer.refresh, q, router)

    def refresh(self, zone: Zone, forward: Forward, q: wire.Query, router: Router) -> None:
        """Ask upstream behind an answer already sent (serve_stale, prefetch)."""
        try:
            self.board(zone, forward, Refresh(q, forward), router.route)
        except Exception as err:  # our own bug: the answer went out already
            self.internal_error(err)

    async def ask_upstreams(self, zone: Zone, name: str, qtype: int) -> Done:
        """Ask a name through the zone's upstreams, bypassing the cache (readiness, loops)."""
        q = wire.question_query(wire.name_to_wire(name), qtype)
        forward = zone.probe_forward(q)
        if isinstance(forward, Done):
            return forward
        flight = ProbeFlight(zone, q, forward)
        future: asyncio.Future[Done] = asyncio.get_running_loop().create_future()
        self.table[flight] = [Probe(q, forward, future)]
        self.driver.fly(zone, flight, None)
        return await future

    # -- what the driver reports -------------------------------------------------------------

    def settled(self, zone: Zone, flight: Flight, settled: Settled) -> None:
        """The flight settled (and landed: no client joins it from now on): each waiting
        client gets its answer to the outcome."""
        if settled.notes:
            self.emit(zone, flight.query, settled.notes)
        table = self.table
        waiters = table[flight]
        del table[flight]  # no client joins it from now on
        now = self.clock()
        done, entry = settled.done, settled.entry
        for waiter in waiters:
            try:
                waiter.answer(self, zone, done, entry, now)
            except Exception as err:  # our own bug with this client: the others still get theirs
                self.internal_error(err)
                waiter.failed(self, zone)

    def crashed(self, zone: Zone, flight: Flight, err: BaseException) -> None:
        """Our own bug stopped the flight: counted and logged once, the flight lands, and
        every client still waiting gets SERVFAIL."""
        self.internal_error(err)
        if not flight.landed:
            flight.abandon()
        for waiter in self.table.pop(flight, ()):
            waiter.failed(self, zone)

    def close(self) -> None:
        """The server stops: every flight lands, nobody is answered (as a cancelled task)."""
        table, self.table = self.table, {}
        for flight, waiters in table.items():
            if not flight.landed:
                flight.abandon()
            for waiter in waiters:
                waiter.stopped()

    async def landed(self, budget: float) -> None:
        """Wait until every flight under way has landed, for `budget` seconds at most."""
        for _ in range(int(budget / DRAIN_POLL)):
            if not self.table:
                return
            await asyncio.sleep(DRAIN_POLL)

    # -- sending, accounting and logging -----------------------------------------------------

    def send(self, zone: Zone | None, q: wire.Query, listener: Listener, peer: datagrams.Peer,
             size: int, start: float, out: bytes, via: Done | None = None, hit: int | None = None) -> None:
        """Send one UDP client its reply (truncated to what it takes over UDP), counted and
        logged; `via`: the exchange's outcome it came from (which upstream answered, for `log`)."""
        if len(out) > q.max_udp:
            out = wire.truncated(q, (out[2] << 8) | out[3])
        sock = listener.udp
        if sock is None:
            return  # closed by a reload or a stop while we waited upstream
        try:  # noqa: SIM105 (contextlib.suppress costs a context manager per reply)
            sock.sendto(out, peer)
        except OSError:
            pass  # a full buffer or a vanished client: UDP promises nothing, and neither do we
        self.account(zone, q, listener, peer, "udp", size, out, start, via, hit)

    def internal_error(self, err: BaseException) -> None:
        self.internal_errors += 1
        logs.error(f"internal error while resolving: {type(err).__name__}: {err}")

    def account(self, zone: Zone | None, q: wire.Query, listener: Listener, addr: datagrams.Peer,
                proto: str, size: int, out: bytes, start: float, via: Done | None = None,
                hit: int | None = None) -> None:
        """Count and log one answer sent; `hit`: `Answer.hit` (a cache hit, of a denial when 1)."""
        if zone is None:
            listener.unrouted.answered(proto, listener.family, q.qtype, out, self.clock() - start,
                                       size, "")
            return
        if hit is None:
            zone.stats.answered(proto, listener.family, q.qtype, out, self.clock() - start, size)
        else:
            zone.stats.hit(proto, listener.family, q.qtype, out, self.clock() - start, size, hit)
        if zone.log is not None:
            self.log_query(zone.block, q, addr, proto, size, out, start, via)

    def account_unrouted(self, listener: Listener, proto: str, data: bytes, out: bytes,
                         start: float) -> None:
        """A reply the query reader gave at once (FORMERR, NOTIMP, REFUSED for a class)."""
        listener.unrouted.answered(proto, listener.family, queries.question_type(data), out,
                                   self.clock() - start, len(data), "")

    def log_query(self, block: Block, q: wire.Query, addr: datagrams.Peer, proto: str,
                  size: int, out: bytes, start: float, via: Done | None = None) -> None:
        rules = block[directives.LOG]
        assert rules is not None
        spec = rules.rule_for(q.name, out[3] & 0xF)
        if spec is None:
            return
        seconds = self.clock() - start
        upstream = (via.upstream, via.seconds) if via is not None and via.upstream else None
        if spec.template is not None:
            logs.emit(logs.templated_line(q, addr, proto, size, out, seconds, spec.template, upstream))
        else:
            logs.emit(logs.query_line(q, addr, proto, size, out, seconds, spec.json, upstream))

    @staticmethod
    def emit(zone: Zone, q: wire.Query, notes: tuple[Note, ...]) -> None:
        """Write what a decision says to log: process log lines, and `errors` lines where the
        zone says its block writes them (`Zone.errors`, beside `Zone.log`)."""
        for note in notes:
            if isinstance(note, LogLine):
                getattr(logs, note.level)(note.text)
            elif isinstance(note, QueryError) and (errors := zone.errors) is not None:
                name = wire.wire_to_text(q.question[:-4])
                error_log.write(errors, note.rcode, name, _type_text(q.qtype), note.reason, zone.name)

    def upstream_budget(self) -> float:
        return upstream_budget(self.config())


def upstream_budget(config: Config) -> float:
    """The longest any query may wait on upstreams: the largest overall forward deadline."""
    return max((f.overall_timeout for b in config.blocks for f in b.forwards), default=5.0) + 1


def _type_text(qtype: int) -> str:
    return dns.rdatatype.to_text(dns.rdatatype.RdataType.make(qtype))
