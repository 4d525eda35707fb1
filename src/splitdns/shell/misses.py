"""The driver of every flight: its upstream attempts on event-loop callbacks, no task,
coroutine or future per miss.

The `Flight` (core/flight.py) decides each attempt, counts it, settles and lands; who waits
for it and what each gets is `Flights`' (flights.py). A `Miss` only does the I/O: each UDP
`Send` is a fresh non-blocking socket connected to the upstream (a port the kernel picks) and
a fresh random ID, waiting in our epoll set (`Misses`) under a `Deadline` (deadlines.py: one
loop timer for the attempts sent in the same millisecond); a datagram that does not match the
query or does not parse is dropped and counted, and the wait goes on (as in `upstream.ask`).
TCP (after a truncated reply) and TLS attempts go through `upstream.ask` in a task, and so
does every attempt where there is no epoll (not Linux). The outcome goes to
`Flights.settled`, our own bug to `Flights.crashed`. Why: bench/README.md, "Misses on
callbacks".
Tests: tests/test_misses.py, tests/test_flight.py.
"""
from __future__ import annotations

import _socket
import asyncio
import random
import select
import socket
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING

from splitdns.codec import reply as replies
from splitdns.codec import wire
from splitdns.core.decisions import Settled
from splitdns.core.exchange import Send
from splitdns.core.flight import Flight
from splitdns.shell import upstream
from splitdns.shell.deadlines import Deadline, Deadlines

if TYPE_CHECKING:
    from splitdns.core.zone import Zone
    from splitdns.shell.flights import Flights
    from splitdns.shell.health_checks import UpstreamHealthChecks

POLLED = 256  # upstream sockets read per wakeup at most; the rest stay ready for the next
UDP_LARGEST = 65535  # whatever an upstream sends is read whole (we ask for 1232 at most)
_EPOLL = hasattr(select, "epoll")
_EPOLLIN = getattr(select, "EPOLLIN", 1)
_NONBLOCK = getattr(socket, "SOCK_NONBLOCK", 0)
_AF_INET, _AF_INET6, _DGRAM = socket.AF_INET, socket.AF_INET6, socket.SOCK_DGRAM | _NONBLOCK


class Misses:
    """The flights of a server in the air, and the epoll set (one reader of the loop) their
    upstream sockets wait in: one epoll_ctl to register, none to leave (close does it). A
    loop reader per socket costs libuv four system calls more (bench/README.md)."""

    def __init__(self, flights: Flights, clock: Callable[[], float], rng: random.Random,
                 counters: upstream.Counters, query_ids: Callable[[], int],
                 health_checks: UpstreamHealthChecks,
                 spawn: Callable[[Coroutine[object, object, None]], None]) -> None:
        self.flights = flights
        flights.driver = self
        self.clock, self.rng, self.counters, self.query_ids = clock, rng, counters, query_ids
        self.health_checks = health_checks
        self.spawn = spawn  # stream attempts run as tasks the server holds (and ends)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.poll: select.epoll | None = None
        self.waiting: dict[int, Miss] = {}  # by socket descriptor
        self.deadlines = Deadlines()  # by when, while some attempt waits for it
        # Every upstream datagram is read into this one buffer and copied out at its size:
        # recv(65535) costs a 64 KiB allocation per reply (bench/README.md, "Figures behind
        # the code").
        self.buffer = memoryview(bytearray(UDP_LARGEST))

    def fly(self, zone: Zone, flight: Flight, owner_of: Callable[[bytes], object] | None) -> None:
        """Carry a new flight's attempts out until it settles. `owner_of`: for its `scrub`."""
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
            if _EPOLL:
                self.poll = select.epoll()
                self.loop.add_reader(self.poll.fileno(), self._ready)
        miss = Miss(self, zone, flight)
        try:
            miss.advance(flight.start(self.clock(), self.rng, owner_of))
        except Exception as err:  # our own bug: the clients still get an answer
            miss.crashed(err)

    def _ready(self) -> None:  # sockets with a datagram or an error queued
        assert self.poll is not None
        waiting = self.waiting
        for fd, _ in self.poll.poll(0, POLLED):
            miss = waiting.get(fd)
            if miss is not None:
                miss.readable()

    def close(self) -> None:
        """The server stops: stop waiting (the flights themselves land in `Flights.close`)."""
        for miss in list(self.waiting.values()):
            miss.hang_up()
        if self.poll is not None and self.loop is not None:
            self.loop.remove_reader(self.poll.fileno())
            self.poll.close()
            self.poll = None
        self.loop = None


class Miss:
    """One flight's upstream attempts on callbacks: the flight decides, this sends, waits
    and reads."""

    __slots__ = ("deadline", "fd", "flight", "loop", "misses", "qlen", "sent", "slot", "sock",
                 "step", "zone")

    def __init__(self, misses: Misses, zone: Zone, flight: Flight) -> None:
        assert misses.loop is not None
        self.misses, self.loop, self.zone, self.flight = misses, misses.loop, zone, flight
        self.qlen = len(flight.forward.asked.question)
        self.sock: _socket.socket | None = None
        self.deadline: Deadline | None = None  # while an attempt waits, and its slot there
        self.fd, self.slot, self.sent = -1, 0, b""
        self.step: Send | None = None

    def advance(self, step: Send | Settled) -> None:
        """Carry out what the flight says next: send an attempt, or hand its outcome over."""
        misses = self.misses
        while isinstance(step, Send):
            up = step.upstream.upstream
            if step.tcp or up.tls is not None or misses.poll is None:
                self.step = step
                misses.spawn(self._ask_stream(step))
                return
            error = self._send(step, up.host, up.port, up.source, up.device) if step.timeout > 0 else \
                "no time left before the deadline"
            if error is None:
                self.step = step
                return
            step = self._failed(step, error, False)
        misses.flights.settled(self.zone, self.flight, step)

    def _send(self, step: Send, host: str, port: int, source: str | None,
              device: str | None) -> str | None:
        """Send the attempt over a fresh socket and start waiting; the error if it failed."""
        misses = self.misses
        self.sent = sent = wire.upstream_query(self.flight.forward.asked, misses.query_ids())
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
        misses = self.misses
        counters = misses.counters
        qlen = self.qlen
        buffer = misses.buffer
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
                self.advance(self.flight.answered(step, reply, misses.clock()))
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
        following = flight.failed(step, error, timed_out, self.misses.clock())
        if flight.unwell is not None:
            self.misses.health_checks.watch(*flight.unwell)
        return following

    async def _ask_stream(self, step: Send) -> None:
        """A TCP or TLS attempt (or any, without epoll), through upstream.ask, back into
        this flight."""
        misses = self.misses
        try:
            sent = wire.upstream_query(self.flight.forward.asked, misses.query_ids())
            try:
                reply = await upstream.ask(sent, step.upstream.upstream, step.tcp, step.timeout,
                                           misses.counters)
            except upstream.UpstreamError as err:
                self.advance(self._failed(step, str(err), isinstance(err, upstream.UpstreamTimeout)))
            else:
                self.advance(self.flight.answered(step, reply, misses.clock()))
        except Exception as err:  # our own bug: the clients still get an answer
            self.crashed(err)

    def crashed(self, err: BaseException) -> None:
        """Our own bug: stop waiting, and let `Flights` count it and answer everyone."""
        self.hang_up()
        self.misses.flights.crashed(self.zone, self.flight, err)
