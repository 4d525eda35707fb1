"""A UDP query the hot path did not answer, carried on event-loop callbacks: no task,
coroutine or future per miss.

Every decision is the core's, as on the coroutine path (resolution.py): `Zone.begin` answers
or forwards, `Zone.depart` joins the flight under way or starts one (or refuses at the
pending cap), the `Flight` (core/flight.py) decides each attempt, counts it, settles and
lands, and `Zone.finish` gives each waiting client its answer. A `Miss` only does the I/O:
each UDP `Send` is a fresh non-blocking socket connected to the upstream (a port the kernel
picks) and a fresh random ID, waiting in our epoll set (`Misses`) under a `Deadline`
(deadlines.py: one loop timer for the attempts sent in the same millisecond); a datagram
that does not match the query or does not parse is dropped and counted, and the wait goes
on (as in `upstream.ask`). TCP (after a truncated reply) and TLS attempts go through
`upstream.ask` in a task. Both paths share the resolution's table of flights: a client of
either joins the other's flight (a coroutine awaits a `Miss`, a callback waits on a
coroutine's future). Why: bench/README.md, "Misses on callbacks".
"""
from __future__ import annotations

import _socket
import asyncio
import select
import socket
from collections.abc import Generator
from typing import TYPE_CHECKING

import dns.rcode

from splitdns.codec import reply as replies
from splitdns.codec import wire
from splitdns.codec.entries import Entry
from splitdns.core.decisions import Answer, Forward, Settled
from splitdns.core.exchange import Done, Send
from splitdns.core.flight import Flight
from splitdns.core.search import Search
from splitdns.shell import datagrams, upstream
from splitdns.shell.deadlines import Deadline, Deadlines

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
Outcome = tuple[Done, Entry | None]


class Waiter:
    """A UDP client waiting for an outcome: its query, what `begin` decided for it, where its
    answer goes (listener and peer), the size it asked with and when it came (for the log)."""

    __slots__ = ("forward", "listener", "peer", "query", "size", "start")

    def __init__(self, query: wire.Query, forward: Forward, listener: Listener, peer: datagrams.Peer,
                 size: int, start: float) -> None:
        self.query, self.forward, self.listener, self.peer = query, forward, listener, peer
        self.size, self.start = size, start

    def answer(self, zone: Zone, out: bytes, res: Resolution, via: Done | None = None) -> None:
        reply(zone, self.query, self.listener, self.peer, self.size, self.start, out, res, via)


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
        self.deadlines = Deadlines()  # by when, while some attempt waits for it
        # Every upstream datagram is read into this one buffer and copied out at its size:
        # recv(65535) costs a 64 KiB allocation per reply (bench/README.md, "Figures behind
        # the code").
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
            if isinstance(decided, Search):  # autopath: several exchanges in turn, as a task
                res.spawn(_searched(zone, q, decided, listener, peer, size, now, res))
                return True
            if isinstance(decided, Answer):
                res.carry_out(zone, q, decided, listener.router)
                reply(zone, q, listener, peer, size, now, decided.reply, res)
                return True
            waiter = Waiter(q, decided, listener, peer, size, now)
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
            self._start(zone, flight, waiter)
        elif type(waiting) is Miss:
            waiting.waiters.append(waiter)
        else:  # a coroutine's exchange: its outcome answers this client too
            assert isinstance(waiting, asyncio.Future)
            waiting.add_done_callback(lambda f: _joined(zone, waiter, f, res))
        return True

    def _start(self, zone: Zone, flight: Flight, waiter: Waiter) -> None:
        res = self.resolution
        if self.poll is None:
            self.loop = asyncio.get_running_loop()
            self.poll = select.epoll()
            self.loop.add_reader(self.poll.fileno(), self._ready)
        miss = Miss(self, zone, flight, [waiter], waiter.listener)
        res.flights[flight] = miss
        try:
            miss.advance(flight.start(res.clock(), res.rng, waiter.listener.router.route))
        except Exception as err:  # our own bug: the clients still get an answer
            miss.crashed(err)

    def _ready(self) -> None:  # sockets with a datagram or an error queued
        assert self.poll is not None
        waiting = self.waiting
        for fd, _ in self.poll.poll(0, POLLED):
            miss = waiting.get(fd)
            if miss is not None:
                miss.readable()

    def in_flight(self) -> list[Miss]:
        return [m for m in self.resolution.flights.values() if type(m) is Miss]

    def close(self) -> None:
        """The server stops: stop waiting, answer nobody (as a cancelled task would)."""
        for miss in self.in_flight():
            miss.cancel()
        if self.poll is not None and self.loop is not None:
            self.loop.remove_reader(self.poll.fileno())
            self.poll.close()
            self.poll = None


class Miss:
    """One flight's upstream attempts on callbacks, and the UDP clients waiting for it: the
    flight (core/flight.py) decides, this sends, waits and reads."""

    __slots__ = ("deadline", "fd", "flight", "future", "listener", "loop", "misses", "outcome", "qlen",
                 "res", "sent", "slot", "sock", "step", "waiters", "zone")

    def __init__(self, misses: Misses, zone: Zone, flight: Flight, waiters: list[Waiter],
                 listener: Listener) -> None:
        assert misses.loop is not None
        self.misses, self.res, self.loop = misses, misses.resolution, misses.loop
        self.zone, self.flight, self.waiters, self.listener = zone, flight, waiters, listener
        self.qlen = len(flight.forward.asked.question)
        self.sock: _socket.socket | None = None
        self.deadline: Deadline | None = None  # while an attempt waits, and its slot there
        self.fd, self.slot, self.sent = -1, 0, b""
        self.future: asyncio.Future[Outcome] | None = None  # for a coroutine that joined
        self.outcome: Outcome | None = None  # once settled
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

    def advance(self, step: Send | Settled) -> None:
        """Carry out what the flight says next: send an attempt, or answer its outcome."""
        res = self.res
        while isinstance(step, Send):
            up = step.upstream.upstream
            if step.tcp or up.tls is not None:
                self.step = step
                res.spawn(self._ask_stream(step))
                return
            error = self._send(step, up.host, up.port, up.source, up.device) if step.timeout > 0 else \
                "no time left before the deadline"
            if error is None:
                self.step = step
                return
            step = self._failed(step, error, False)
        self._settled(step)

    def _send(self, step: Send, host: str, port: int, source: str | None,
              device: str | None) -> str | None:
        """Send the attempt over a fresh socket and start waiting; the error if it failed."""
        self.sent = sent = wire.upstream_query(self.flight.forward.asked, self.res.query_ids())
        sock = _socket.socket(_AF_INET6 if ":" in host else _AF_INET, _DGRAM)
        try:
            if not _NONBLOCK:
                sock.setblocking(False)
            if device is not None:  # a tunnel's interface: before connect, once
                upstream.bind_device(sock, device)
            if source is not None:  # forward's source_address
                sock.bind((source, 0))
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
        self.deadline, self.slot = misses.deadlines.wait(self.loop, self, step.timeout)
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
                self.advance(self.flight.answered(step, reply, self.res.clock()))
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
            self.misses.deadlines.release(deadline, self.slot)
        if sock is not None:
            del self.misses.waiting[self.fd]
            sock.close()  # which takes it out of the epoll set
            self.sock = None

    def _failed(self, step: Send, error: str, timed_out: bool) -> Send | Settled:
        flight = self.flight
        following = flight.failed(step, error, timed_out, self.res.clock())
        if flight.unwell is not None:
            self.res.health_checks.watch(*flight.unwell)
        return following

    async def _ask_stream(self, step: Send) -> None:
        """A TCP or TLS attempt, through upstream.ask, back into this flight."""
        res = self.res
        try:
            sent = wire.upstream_query(self.flight.forward.asked, res.query_ids())
            try:
                reply = await upstream.ask(sent, step.upstream.upstream, step.tcp, step.timeout,
                                           res.counters)
            except upstream.UpstreamError as err:
                self.advance(self._failed(step, str(err), isinstance(err, upstream.UpstreamTimeout)))
            else:
                self.advance(self.flight.answered(step, reply, res.clock()))
        except Exception as err:  # our own bug: the clients still get an answer
            self.crashed(err)

    def _settled(self, settled: Settled) -> None:
        """The flight settled (and landed: no client joins from now on): every waiting client
        gets its answer to the outcome."""
        zone, res = self.zone, self.res
        if settled.notes:
            res.emit(zone, self.flight.query, settled.notes)
        self.outcome = outcome = (settled.done, settled.entry)
        del res.flights[self.flight]
        waiters, self.waiters = self.waiters, []  # answered once, even if a bug stops us midway
        answer_each(zone, waiters, settled.done, settled.entry, res)
        if self.future is not None:
            self.future.set_result(outcome)

    def _abandon(self) -> None:
        """The flight lands without an outcome (if it has not landed yet)."""
        if not self.flight.landed:
            self.flight.abandon()
        if self.res.flights.get(self.flight) is self:
            del self.res.flights[self.flight]

    def cancel(self) -> None:
        """The server stops: stop waiting, land the flight, answer nobody."""
        self.hang_up()
        self._abandon()
        if self.future is not None and not self.future.done():
            self.future.cancel()

    def crashed(self, err: BaseException) -> None:
        """Our own bug: count and log it, stop waiting, answer SERVFAIL to everyone."""
        self.res.internal_error(err)
        self.hang_up()
        self._abandon()
        self.outcome = self.outcome or (Done(error="internal error"), None)  # for a late await
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            waiter.answer(self.zone, wire.error_reply(waiter.query, dns.rcode.SERVFAIL), self.res)
        if self.future is not None and not self.future.done():
            self.future.set_exception(err)
            self.future.exception()  # retrieved: the waiting coroutine may be gone


def answer_each(zone: Zone, waiters: tuple[Waiter, ...] | list[Waiter], done: Done,
                entry: Entry | None, res: Resolution) -> None:
    """Each waiting client's answer to an outcome, as the zone finishes it."""
    now = res.clock()
    for waiter in waiters:
        answer = zone.finish(waiter.query, waiter.forward, done, entry, now)
        if answer.notes:
            res.emit(zone, waiter.query, answer.notes)
        waiter.answer(zone, answer.reply, res, done)


def _joined(zone: Zone, waiter: Waiter, future: asyncio.Future[Outcome], res: Resolution) -> None:
    """A coroutine's exchange this UDP client joined has ended."""
    if future.cancelled():
        return  # the server stops: as for the coroutine's own client, no answer
    try:
        if future.exception() is not None:  # our own bug there, counted there
            waiter.answer(zone, wire.error_reply(waiter.query, dns.rcode.SERVFAIL), res)
            return
        done, entry = future.result()
        answer_each(zone, (waiter,), done, entry, res)
    except Exception as err:  # our own bug: count it, as the coroutine path does
        res.internal_error(err)


def reply(zone: Zone, q: wire.Query, listener: Listener, peer: datagrams.Peer, size: int,
          start: float, out: bytes, res: Resolution, via: Done | None = None) -> None:
    """Send one client its reply (truncated to what it takes over UDP), counted and logged;
    `via`: the exchange's outcome it came from (which upstream answered, for `log`)."""
    if len(out) > q.max_udp:
        out = wire.truncated(q, (out[2] << 8) | out[3])
    sock = listener.udp
    if sock is None:
        return  # closed by a reload or a stop while we waited upstream
    try:  # noqa: SIM105 (contextlib.suppress costs a context manager per reply)
        sock.sendto(out, peer)
    except OSError:
        pass
    res.account(zone, q, listener, peer, "udp", size, out, start, via)


async def _searched(zone: Zone, q: wire.Query, walk: Search, listener: Listener, peer: datagrams.Peer,
                    size: int, start: float, res: Resolution) -> None:
    try:
        out = await res.search(zone, q, walk, listener.router)
    except Exception as err:  # our own bug: the client still gets an answer, we a log line
        res.internal_error(err)
        out = wire.error_reply(q, dns.rcode.SERVFAIL)
    reply(zone, q, listener, peer, size, start, out, res)
