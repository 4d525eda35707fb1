"""The miss path: carries out what the zone decides (core/zone.py), and logs and counts.

`Zone.begin` says answer or forward; identical queries wait on one flight (`Zone.depart`
says which), the `Flight` (core/flight.py) decides each upstream attempt, counts it and
settles, and `Zone.finish` says what each client gets. Here the attempts are made with
`upstream.ask` in a task: TCP clients, refreshes, probes. UDP misses are carried on loop
callbacks instead (misses.py); both share `flights`, so identical queries of either path
merge.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Coroutine

import dns.rcode
import dns.rdatatype

from splitdns import directives
from splitdns.codec import queries, wire
from splitdns.codec.entries import Entry
from splitdns.config import Block, Config
from splitdns.core import search
from splitdns.core.decisions import Answer, Forward, LogLine, Note, QueryError, Settled
from splitdns.core.exchange import Done, Send
from splitdns.core.flight import Flight, ProbeFlight
from splitdns.core.loop import LoopProbes
from splitdns.core.routing import Router, unrouted
from splitdns.core.search import Search
from splitdns.core.zone import Zone
from splitdns.shell import datagrams, error_log, logs, upstream
from splitdns.shell.health_checks import UpstreamHealthChecks
from splitdns.shell.listener import Listener


class Resolution:
    """Every query that is not a hot-path hit, for every listener of a server."""

    def __init__(self, config: Callable[[], Config], clock: Callable[[], float], rng: random.Random,
                 counters: upstream.Counters, query_ids: Callable[[], int]) -> None:
        self.config = config
        self.clock = clock
        self.rng = rng
        self.counters = counters
        self.query_ids = query_ids
        # Each flight's outcome: a future of the task that asks, or a callback miss (misses.py)
        self.flights: dict[Flight, Awaitable[tuple[Done, Entry | None]]] = {}
        self.tasks: set[asyncio.Task[None]] = set()  # queries and refreshes
        self.health_check_tasks: set[asyncio.Task[None]] = set()  # end with the server
        self.loop_probes: LoopProbes = {}  # shared by every zone of the server (loop.py)
        self.internal_errors = 0
        self.health_checks = UpstreamHealthChecks(
            clock, counters, lambda coro: spawn_into(self.health_check_tasks, coro), query_ids)

    async def answer(self, q: wire.Query, listener: Listener) -> tuple[bytes, Zone | None]:
        """The reply for a query, from cache or upstream (the full path, any transport)."""
        out, zone, _ = await self.answer_via(q, listener)
        return out, zone

    async def answer_via(self, q: wire.Query,
                         listener: Listener) -> tuple[bytes, Zone | None, Done | None]:
        """`answer`, and the upstream exchange's outcome the reply came from (None when none)."""
        try:
            return await self._resolve(q, listener.router)
        except Exception as err:  # our own bug: the client still gets an answer, we a log line
            self.internal_error(err)
            return wire.error_reply(q, dns.rcode.SERVFAIL), None, None

    def internal_error(self, err: BaseException) -> None:
        self.internal_errors += 1
        logs.error(f"internal error while resolving: {type(err).__name__}: {err}")

    async def _resolve(self, q: wire.Query, router: Router,
                       searching: bool = True) -> tuple[bytes, Zone | None, Done | None]:
        zone = router.route(q.name)
        if zone is None:
            return unrouted(q), None, None
        decided = zone.begin(q, self.clock(), searching)
        if isinstance(decided, Search):
            return await self.search(zone, q, decided, router), zone, None
        out, done = await self._carry(zone, q, decided, router)
        return out, zone, done

    async def _carry(self, zone: Zone, q: wire.Query, decided: Answer | Forward,
                     router: Router) -> tuple[bytes, Done | None]:
        """The reply to what the zone decided: the answer, or the flight's outcome."""
        if isinstance(decided, Answer):
            self.carry_out(zone, q, decided, router)
            return decided.reply, None
        done, entry = await self._flight(zone, q, decided, router)
        answer = zone.finish(q, decided, done, entry, self.clock())
        self.emit(zone, q, answer.notes)
        return answer.reply, done

    async def search(self, zone: Zone, q: wire.Query, walk: Search, router: Router) -> bytes:
        """`autopath`: the client's walk, one try after the other through whichever zone owns
        each (none starts a walk of its own), until one is not NXDOMAIN (core/search.py)."""
        assert zone.autopath is not None and walk.first is not None
        first = None
        if walk.start == 0:
            first, _ = await self._carry(zone, q, walk.first, router)
            if not search.is_nxdomain(first):
                zone.autopath.ended(walk, q, 0, self.clock())
                return first
        for index in range(max(walk.start, 1), len(walk.tries) + 1):
            tried = walk.tries[index - 1]
            out, _, _ = await self._resolve(tried, router, searching=False)
            if not search.is_nxdomain(out):
                now = self.clock()
                zone.autopath.ended(walk, q, index, now)
                reply = search.answer(q, out, tried)
                if zone.cache is not None:
                    zone.cache.keep(q, reply, now)
                return reply
        if first is None:  # began later on a paired query's path, and every try is gone now
            first, _ = await self._carry(zone, q, walk.first, router)
        return first

    def carry_out(self, zone: Zone, q: wire.Query, answer: Answer, router: Router) -> None:
        """What goes with an answer: its log lines, and the refresh behind it."""
        if answer.notes:
            self.emit(zone, q, answer.notes)
        if answer.refresh is not None:
            self.refresh(zone, answer.refresh, q, router)

    def refresh(self, zone: Zone, forward: Forward, q: wire.Query, router: Router) -> None:
        """Ask upstream behind an answer already sent (serve_stale, prefetch)."""
        self.spawn(self._refresh(zone, forward, q, router))

    async def ask_upstreams(self, zone: Zone, name: str, qtype: int) -> Done:
        """Ask a name through the zone's upstreams, bypassing the cache (readiness, loops)."""
        q = wire.question_query(wire.name_to_wire(name), qtype)
        forward = zone.probe_forward(q)
        if isinstance(forward, Done):
            return forward
        flight = ProbeFlight(zone, q, forward)
        try:
            return (await self._fly(flight, None)).done
        finally:
            if not flight.landed:
                flight.abandon()

    async def _refresh(self, zone: Zone, forward: Forward, q: wire.Query, router: Router) -> None:
        done, _ = await self._flight(zone, q, forward, router)
        self.emit(zone, q, zone.refreshed(forward, done))

    async def _flight(self, zone: Zone, q: wire.Query, forward: Forward,
                      router: Router) -> tuple[Done, Entry | None]:
        """The query's upstream exchange: its own, or the one under way for the same question
        (CVE-2020-25686), whose outcome every waiting client shares."""
        flight = zone.depart(q, forward, self.config().limits.pending)
        if isinstance(flight, Done):
            return flight, None
        waiting = self.flights.get(flight)
        if waiting is not None:
            return await asyncio.shield(waiting)
        future: asyncio.Future[tuple[Done, Entry | None]] = asyncio.get_running_loop().create_future()
        self.flights[flight] = future
        try:
            settled = await self._fly(flight, router.route)
            self.emit(zone, q, settled.notes)
            future.set_result((settled.done, settled.entry))
        except BaseException as err:
            future.set_exception(err)
            future.exception()  # mark retrieved: waiters may be none
            raise
        finally:
            if not flight.landed:  # our own bug, or cancelled (the server stops)
                flight.abandon()
            del self.flights[flight]
        return settled.done, settled.entry

    async def _fly(self, flight: Flight, owner_of: Callable[[bytes], object] | None) -> Settled:
        """Carry the flight's attempts out with `upstream.ask` until it settles."""
        asked = flight.forward.asked
        step = flight.start(self.clock(), self.rng, owner_of)
        while isinstance(step, Send):
            sent = wire.upstream_query(asked, self.query_ids())
            try:
                reply = await upstream.ask(sent, step.upstream.upstream, step.tcp, step.timeout,
                                           self.counters)
            except upstream.UpstreamError as err:
                step = flight.failed(step, str(err), isinstance(err, upstream.UpstreamTimeout),
                                     self.clock())
                if flight.unwell is not None:
                    self.health_checks.watch(*flight.unwell)
            else:
                step = flight.answered(step, reply, self.clock())
        return step

    # -- accounting and logging ----------------------------------------------------------------

    def account(self, zone: Zone | None, q: wire.Query, listener: Listener, addr: datagrams.Peer,
                proto: str, size: int, out: bytes, start: float, via: Done | None = None) -> None:
        if zone is None:
            listener.unrouted.answered(proto, listener.family, q.qtype, out, self.clock() - start,
                                       size, "")
            return
        zone.stats.answered(proto, listener.family, q.qtype, out, self.clock() - start, size)
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

    def spawn(self, coro: Coroutine[object, object, None]) -> None:
        spawn_into(self.tasks, coro)

    def upstream_budget(self) -> float:
        return upstream_budget(self.config())


def spawn_into(tasks: set[asyncio.Task[None]], coro: Coroutine[object, object, None]) -> None:
    """Run `coro` as a task that `tasks` holds until it ends: the loop keeps only a weak
    reference, and a stop must be able to wait for or cancel what is running."""
    task = asyncio.get_running_loop().create_task(coro)
    tasks.add(task)
    task.add_done_callback(tasks.discard)


def upstream_budget(config: Config) -> float:
    """The longest any query may wait on upstreams: the largest overall forward deadline."""
    return max((f.overall_timeout for b in config.blocks for f in b.forwards), default=5.0) + 1


def _type_text(qtype: int) -> str:
    return dns.rdatatype.to_text(dns.rdatatype.RdataType.make(qtype))
