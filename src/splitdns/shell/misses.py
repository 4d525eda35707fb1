"""A UDP query the hot path did not answer, carried on event-loop callbacks: no task,
coroutine or future per miss.

Every decision is the zone's (core/zone.py), as on the coroutine path (resolution.py):
`begin` answers or forwards, `depart` joins the flight under way or starts one (or refuses
at the pending cap), `settle` hands on (`next`) or cleans and stores the outcome, `land`
ends the flight and `finish` gives each waiting client its answer. What is particular here
is only how the I/O is done. A `Miss` drives the sans-io `Exchange`: each UDP `Send` is a
fresh non-blocking socket connected to the upstream (a port the kernel picks) and a fresh
random ID; the socket waits in our epoll set (`Misses`), with a deadline (`Deadline`: one
loop timer for the attempts sent in the same millisecond with the same timeout). A
datagram that does not match the query or does not parse is dropped and counted, and the
wait goes on (as in `upstream.ask`). TCP (after a truncated reply) and TLS attempts go
through `upstream.ask` in a task, back into the `Miss`. Both paths share the resolution's
table of flights: a client of either joins the other's flight (a coroutine awaits a `Miss`,
a callback waits on a coroutine's future). Why: bench/README.md, "Misses on callbacks".
"""

from __future__ import annotations

import _socket
import asyncio
import math
import select
import socket
from collections.abc import Generator
from typing import TYPE_CHECKING

import dns.rcode

from splitdns.codec import reply as replies
from splitdns.codec import wire
from splitdns.codec.entries import Entry
from splitdns.core import metrics
from splitdns.core.decisions import Answer, Flight, Forward, HandOn
from splitdns.core.exchange import Done, Exchange, Send
from splitdns.shell import datagrams, upstream

if TYPE_CHECKING:
    from splitdns.core.zone import Zone
    from splitdns.shell.listener import Listener
    from splitdns.shell.resolution import Resolution

POLLED = 256  # upstream sockets read per wakeup at most; the rest stay ready for the next
UDP_LARGEST = 65535  # whatever an upstream sends is read whole (we ask for 1232 at most)
_EPOLL = hasattr(select, "epoll")
_EPOLLIN = getattr(select, "EPOLLIN", 1)
_NONBLOCK = getattr(socket, "SOCK_NONBLOCK", 0)
_AF_INET, _AF_INET6, _DGRAM = socket.AF_INET, socket.AF_INET6, socket.SOCK_DGRAM | _NONBLOCK
_RCODES = metrics.RCODES
Outcome = tuple[Done, Entry | None]
# A client waiting for an outcome: its query, what `begin` decided for it, where it came
# from and when.
Waiter = tuple[wire.Query, Forward, "Listener", datagrams.Peer, int, float]


class Deadline:
    """When the attempts sent in the same millisecond with the same timeout expire: one loop
    timer for all of them (a `call_at` and its `cancel` per attempt cost ~1.9 us, more than
    the epoll registration). An attempt that ends leaves its slot empty, so an answered miss
    is not kept alive by a straggler of its turn; the timer goes when the last one ends."""

    __slots__ = ("at", "live", "members", "timer")

    def __init__(self, at: float) -> None:
        self.at = at
        self.members: list[Miss | None] = []
        self.live = 0
        self.timer: asyncio.TimerHandle | None = None


class Misses:
    """The UDP misses of a server, and the epoll set (one reader of the loop) their upstream
    sockets wait in: one epoll_ctl to register, none to leave (close does it). A loop reader
    per socket costs libuv four system calls more (bench/README.md). Without epoll (not
    Linux) every miss takes the coroutine path."""

    def __init__(self, resolution: Resolution) -> None:
        self.resolution = resolution
        self.loop: asyncio.AbstractEventLoop | None = None
        self.poll: select.epoll | None = None
        self.waiting: dict[int, Miss] = {}  # by socket descriptor
        self.deadlines: dict[float, Deadline] = {}  # by when, while some attempt waits for it
        # Every upstream datagram is read into this one buffer and copied out at its size:
        # recv(65535) costs a 64 KiB allocation per reply, about 1 us more than this.
        self.buffer = memoryview(bytearray(UDP_LARGEST))

    def take(self, q: wire.Query, listener: Listener, peer: datagrams.Peer, size: int,
             now: float, routed: Zone | None = None) -> bool:
        """Carry out what the zone decides for this UDP query; False leaves it to the
        coroutine path (no zone, or no epoll here). `routed`: the zone the hot path routed
        `q` to, whose `known` step found nothing (the walk goes on from there)."""
        zone = routed or listener.router.route(q.name)
        if zone is None or not _EPOLL:
            return False
        res = self.resolution
        try:
            decided = zone.begin(q, now) if routed is None else zone.walk(q, now)
            if isinstance(decided, Answer):
                res.carry_out(zone, q, decided, listener.router)
                reply(zone, q, listener, peer, size, now, decided.reply, res)
                return True
            waiter = (q, decided, listener, peer, size, now)
            flight = zone.depart(q, decided, res.config().limits.pending)
        except Exception as err:  # our own bug: the client still gets an answer, we a log line
            res.internal_error(err)
            reply(zone, q, listener, peer, size, now, wire.error_reply(q, dns.rcode.SERVFAIL), res)
            return True
        if isinstance(flight, Done):  # refused at the pending cap
            answer_each(zone, (waiter,), flight, None, res)
            return True
        waiting = res.flights.get(flight)
        if waiting is None:
            self._start(zone, flight, waiter, now)
        elif type(waiting) is Miss:
            waiting.waiters.append(waiter)
        else:  # a coroutine's exchange: its outcome answers this client too
            assert isinstance(waiting, asyncio.Future)
            waiting.add_done_callback(lambda f: _joined(zone, waiter, f, res))
        return True

    def _start(self, zone: Zone, flight: Flight, waiter: Waiter, now: float) -> None:
        res = self.resolution
        if self.poll is None:
            self.loop = asyncio.get_running_loop()
            self.poll = select.epoll()
            self.loop.add_reader(self.poll.fileno(), self._ready)
        miss = Miss(self, zone, flight, [waiter], waiter[2])
        res.flights[flight] = miss
        try:
            miss.exchange = exchange = Exchange(flight.asking, now, res.rng)
            miss.advance(exchange.start())
        except Exception as err:  # our own bug: the clients still get an answer
            miss.crashed(err)

    def _ready(self) -> None:  # sockets with a datagram or an error queued
        assert self.poll is not None
        waiting = self.waiting
        for fd, _ in self.poll.poll(0, POLLED):
            miss = waiting.get(fd)
            if miss is not None:
                miss.readable()

    def wait(self, miss: Miss, timeout: float) -> tuple[Deadline, int]:
        """The deadline `miss`'s attempt waits under, and its slot there. Deadlines are
        rounded up to the millisecond (uvloop's clock counts milliseconds anyway), so the
        attempts of one batch of queries share one."""
        assert self.loop is not None
        at = math.ceil((self.loop.time() + timeout) * 1000) / 1000
        deadline = self.deadlines.get(at)
        if deadline is None:
            deadline = self.deadlines[at] = Deadline(at)
            deadline.timer = self.loop.call_at(at, self._expire, deadline)
        deadline.members.append(miss)
        deadline.live += 1
        return deadline, len(deadline.members) - 1

    def release(self, deadline: Deadline, slot: int) -> None:
        """An attempt ended before its deadline: the last one takes the timer with it."""
        deadline.members[slot] = None
        deadline.live -= 1
        if not deadline.live:
            assert deadline.timer is not None
            deadline.timer.cancel()
            if self.deadlines.get(deadline.at) is deadline:
                del self.deadlines[deadline.at]

    def _expire(self, deadline: Deadline) -> None:
        if self.deadlines.get(deadline.at) is deadline:
            del self.deadlines[deadline.at]
        for miss in deadline.members:
            if miss is not None:
                miss.expire()

    def in_flight(self) -> list[Miss]:
        return [m for m in self.resolution.flights.values() if type(m) is Miss]

    def close(self) -> None:
        """The server stops: stop waiting, answer nobody (as a cancelled task would)."""
        for miss in list(self.waiting.values()):
            miss.hang_up()
            if miss.future is not None and not miss.future.done():
                miss.future.cancel()
        if self.poll is not None and self.loop is not None:
            self.loop.remove_reader(self.poll.fileno())
            self.poll.close()
            self.poll = None


class Miss:
    """One flight's upstream exchange on callbacks, and the UDP clients waiting for it."""

    __slots__ = ("began", "deadline", "exchange", "fd", "flight", "future", "listener", "loop", "misses",
                 "outcome", "qlen", "res", "sent", "slot", "sock", "step", "waiters", "zone")

    def __init__(self, misses: Misses, zone: Zone, flight: Flight, waiters: list[Waiter],
                 listener: Listener) -> None:
        assert misses.loop is not None
        self.misses, self.res, self.loop = misses, misses.resolution, misses.loop
        self.zone, self.flight, self.waiters, self.listener = zone, flight, waiters, listener
        self.qlen = len(flight.forward.asked.question)
        self.sock: _socket.socket | None = None
        self.deadline: Deadline | None = None  # while an attempt waits, and its slot there
        self.slot = 0
        self.fd, self.sent, self.began = -1, b"", 0.0
        self.future: asyncio.Future[Outcome] | None = None  # for a coroutine that joined
        self.outcome: Outcome | None = None  # once settled
        self.exchange: Exchange | None = None
        self.step: Send | None = None

    def __await__(self) -> Generator[object, None, Outcome]:
        """A coroutine of the same question awaits the outcome (resolution's `_flight`).
        `asyncio.shield` starts it a turn of the loop later: if the miss settled meanwhile,
        the outcome is there."""
        if self.future is None:
            self.future = self.loop.create_future()
            if self.outcome is not None:
                self.future.set_result(self.outcome)
        return self.future.__await__()

    def advance(self, step: Send | Done) -> None:
        """Carry out the exchange's next step: send an attempt, or settle its outcome."""
        res = self.res
        while not isinstance(step, Done):
            up = step.upstream.upstream
            if step.tcp or up.tls is not None:
                self.step = step
                res.spawn(self._ask_stream(step))
                return
            self.began = res.clock()
            error = self._send(step, up.host, up.port) if step.timeout > 0 else \
                "no time left before the deadline"
            if error is None:
                self.step = step
                return
            step = self._failed(step, error, False)
        self._settle(step)

    def _send(self, step: Send, host: str, port: int) -> str | None:
        """Send the attempt over a fresh socket and start waiting; the error if it failed."""
        self.sent = sent = wire.upstream_query(self.flight.forward.asked, self.res.query_ids())
        sock = _socket.socket(_AF_INET6 if ":" in host else _AF_INET, _DGRAM)
        try:
            if not _NONBLOCK:
                sock.setblocking(False)
            sock.connect((host, port))
            sock.send(sent)
        except OSError as err:
            sock.close()
            return f"send failed: {err.strerror or err}"
        self.sock = sock
        self.fd = fd = sock.fileno()
        misses = self.misses
        assert misses.poll is not None
        misses.poll.register(fd, _EPOLLIN)
        misses.waiting[fd] = self
        self.deadline, self.slot = misses.wait(self, step.timeout)
        return None

    def readable(self) -> None:
        """The upstream socket has datagrams: the reply, or forgeries to drop and count."""
        sock, step = self.sock, self.step
        if sock is None or step is None:
            return
        counters = self.res.counters
        qlen = self.qlen
        buffer = self.misses.buffer
        try:
            for _ in range(64):  # bounded: a flood of forgeries cannot pin the loop here
                try:
                    data = bytes(buffer[:sock.recv_into(buffer)])
                except (BlockingIOError, InterruptedError):
                    return
                except OSError as err:
                    self.hang_up()
                    self.advance(self._failed(step, upstream.describe(err), False))
                    return
                if not wire.reply_matches(self.sent, data, qlen):
                    counters.mismatched += 1
                    continue
                reply = replies.read_matched(data, qlen)
                if reply is None:
                    counters.unparseable += 1
                    continue
                self.hang_up()
                self._answered(step, reply)
                return
        except Exception as err:  # our own bug: the clients still get an answer
            self.crashed(err)

    def expire(self) -> None:
        step = self.step
        if self.sock is None or step is None:
            return
        try:
            self.hang_up()
            self.advance(self._failed(step, f"timeout after {step.timeout:g}s", True))
        except Exception as err:  # our own bug: the clients still get an answer
            self.crashed(err)

    def hang_up(self) -> None:
        deadline, sock = self.deadline, self.sock
        if deadline is not None:
            self.deadline = None
            self.misses.release(deadline, self.slot)
        if sock is not None:
            del self.misses.waiting[self.fd]
            sock.close()  # which takes it out of the epoll set
            self.sock = None

    def _answered(self, step: Send, reply: replies.Reply) -> None:
        now = self.res.clock()
        self.zone.stats.upstream[(step.upstream.label, _RCODES.get(reply.rcode_value, "other"))] \
            .observe(now - self.began)
        assert self.exchange is not None
        self.advance(self.exchange.answered(step, reply, now))

    def _failed(self, step: Send, error: str, timed_out: bool) -> Send | Done:
        res = self.res
        now = res.clock()
        self.zone.stats.upstream[(step.upstream.label, "timeout" if timed_out else "error")] \
            .observe(now - self.began)
        assert self.exchange is not None
        following = self.exchange.failed(step, error, now)
        res.health_checks.watch(self.flight.asking, step.upstream)
        return following

    async def _ask_stream(self, step: Send) -> None:
        """A TCP or TLS attempt, through upstream.ask, back into this exchange."""
        res = self.res
        try:
            sent = wire.upstream_query(self.flight.forward.asked, res.query_ids())
            self.began = res.clock()
            try:
                reply = await upstream.ask(sent, step.upstream.upstream, step.tcp, step.timeout,
                                           res.counters)
            except upstream.UpstreamError as err:
                self.advance(self._failed(step, str(err), isinstance(err, upstream.UpstreamTimeout)))
            else:
                self._answered(step, reply)
        except Exception as err:  # our own bug: the clients still get an answer
            self.crashed(err)

    def _settle(self, done: Done) -> None:
        """The zone settles the exchange's outcome: the next forward (`next`), or the outcome
        every waiting client gets."""
        zone, res, flight = self.zone, self.res, self.flight
        step = zone.settle(flight, done, res.clock(), self.listener.router.route)
        if isinstance(step, HandOn):  # the next forward line asks its upstreams
            self.exchange = exchange = Exchange(step.fwd, res.clock(), res.rng)
            self.advance(exchange.start())
            return
        if step.notes:
            res.emit(zone.block, flight.query, step.notes)
        self.outcome = outcome = (step.done, step.entry)
        self._land()  # no client joins from now on
        waiters, self.waiters = self.waiters, []  # answered once, even if a bug stops us midway
        answer_each(zone, waiters, step.done, step.entry, res)
        if self.future is not None:
            self.future.set_result(outcome)

    def _land(self) -> None:
        if self.res.flights.get(self.flight) is self:
            self.zone.land(self.flight)
            del self.res.flights[self.flight]

    def crashed(self, err: BaseException) -> None:
        """Our own bug: count and log it, stop waiting, answer SERVFAIL to everyone."""
        self.res.internal_error(err)
        self.hang_up()
        self._land()
        self.outcome = self.outcome or (Done(error="internal error"), None)  # for a late await
        waiters, self.waiters = self.waiters, []
        for q, _, listener, peer, size, start in waiters:
            reply(self.zone, q, listener, peer, size, start, wire.error_reply(q, dns.rcode.SERVFAIL),
                  self.res)
        if self.future is not None and not self.future.done():
            self.future.set_exception(err)
            self.future.exception()  # retrieved: the waiting coroutine may be gone


def answer_each(zone: Zone, waiters: tuple[Waiter, ...] | list[Waiter], done: Done,
                entry: Entry | None, res: Resolution) -> None:
    """Each waiting client's answer to an outcome, as the zone finishes it."""
    now = res.clock()
    for q, forward, listener, peer, size, start in waiters:
        answer = zone.finish(q, forward, done, entry, now)
        if answer.notes:
            res.emit(zone.block, q, answer.notes)
        reply(zone, q, listener, peer, size, start, answer.reply, res)


def _joined(zone: Zone, waiter: Waiter, future: asyncio.Future[Outcome], res: Resolution) -> None:
    """A coroutine's exchange this UDP client joined has ended."""
    if future.cancelled():
        return  # the server stops: as for the coroutine's own client, no answer
    try:
        if future.exception() is not None:  # our own bug there, counted there
            q, _, listener, peer, size, start = waiter
            reply(zone, q, listener, peer, size, start, wire.error_reply(q, dns.rcode.SERVFAIL), res)
            return
        done, entry = future.result()
        answer_each(zone, (waiter,), done, entry, res)
    except Exception as err:  # our own bug: count it, as the coroutine path does
        res.internal_error(err)


def reply(zone: Zone, q: wire.Query, listener: Listener, peer: datagrams.Peer, size: int,
          start: float, out: bytes, res: Resolution) -> None:
    """Send one client its reply (truncated to what it takes over UDP), counted and logged."""
    if len(out) > q.max_udp:
        out = wire.truncated(q, (out[2] << 8) | out[3])
    sock = listener.udp
    if sock is None:
        return  # closed by a reload or a stop while we waited upstream
    try:  # noqa: SIM105 (contextlib.suppress costs a context manager per reply)
        sock.sendto(out, peer)
    except OSError:
        pass
    res.account(zone, q, listener, peer, "udp", size, out, start)
