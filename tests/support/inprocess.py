"""The asyncio shell inside the test's own event loop: no subprocess, no `dig`, no waiting on
real time where a fake clock will do.

- `serving(corefile)` starts `splitdns.shell.server.Server` (or, with `runtime=True`, the
  `shell.lifecycle.Runtime` around it: readiness, loop probes, the tunnel watcher) on a free
  127.0.0.1 port, with a `FakeClock` by default, and closes it also when the test fails.
- `FakeUpstream(handle)` is a DNS server on 127.0.0.x (UDP and TCP on one port) whose
  behaviour is a Python function of the query: a reply message, raw bytes (sent as they
  are, garbage included), or None (no reply: a blackhole). It keeps what it was asked.
- `ask(port, query)` sends one query over UDP or TCP and returns the reply (None on timeout).
- `run(scenario)` runs a coroutine with a deadline, so no test can hang.

Only the shell's public surface is used (`Server(config, clock=...)`, `start`, `listeners`,
`drain`, `close`, `Runtime(server)`): these tests check what a client and an upstream see.
The end-to-end tests (a real `splitdns serve`, real `dig`) keep one case per behaviour.
Everything listens and sends on loopback only (assert_loopback).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import socket
import struct
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import dns.exception
import dns.message

from splitdns import config
from splitdns.shell.lifecycle import Runtime
from splitdns.shell.server import Server
from tests.support import user_text
from tests.support.hostile import metrics
from tests.support.processes import assert_loopback, free_port
from tests.support.resolver import http_get

T = TypeVar("T")
Reply = dns.message.Message | bytes | None
Handle = Callable[[dns.message.Message], Reply | Awaitable[Reply]]
Answer = Callable[[dns.message.Message], dns.message.Message]  # a Handle that always answers

SCENARIO_TIMEOUT = 20.0  # no in-process test may run longer than this
MAX_QUERIES = 100_000  # a fake upstream stops answering (and records nothing more) past this


def run(scenario: Callable[[], Coroutine[Any, Any, T]], timeout: float = SCENARIO_TIMEOUT) -> T:
    """Run `scenario()` in a fresh event loop, failing it after `timeout` seconds."""
    async def bounded() -> T:
        return await asyncio.wait_for(scenario(), timeout)

    return asyncio.run(bounded())


class FakeClock:
    """The server's `clock`: time moves only when the test says so (cache TTLs, stale
    windows, refresh holds). The upstream timeouts stay real: they are the event loop's."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Asked:
    """One query a fake upstream received."""
    transport: str  # "udp" or "tcp"
    message: dns.message.Message
    src: tuple[str, int]

    @property
    def name(self) -> str:
        return self.message.question[0].name.to_text().lower() if self.message.question else ""


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, upstream: FakeUpstream) -> None:
        self.upstream = upstream
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.upstream.spawn(self._answer(data, addr))

    async def _answer(self, data: bytes, addr: tuple[str, int]) -> None:
        out = await self.upstream.reply_to(data, "udp", addr)
        if out is not None and self.transport is not None:
            self.transport.sendto(out, addr)


@dataclass
class FakeUpstream:
    """A DNS server on `addr` (UDP and TCP, one port: `port`, else a free one) that answers with
    `handle(query)`.
    `tcp_handle`, when given, answers the queries that come over TCP instead (a server that
    truncates over UDP, say). `handle` may be a coroutine function (a slow upstream)."""

    handle: Handle
    addr: str = "127.0.0.21"
    tcp_handle: Handle | None = None
    port: int = 0
    asked: list[Asked] = field(default_factory=list)
    malformed: int = 0
    _udp: asyncio.DatagramTransport | None = None
    _tcp: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def target(self) -> str:
        """The address as a Corefile's `forward` line takes it."""
        return f"{self.addr}:{self.port}"

    def names(self, transport: str | None = None) -> list[str]:
        return [a.name for a in self.asked if transport in (None, a.transport)]

    async def __aenter__(self) -> FakeUpstream:
        assert_loopback(self.addr)
        loop = asyncio.get_running_loop()
        fixed = self.port  # a port the test needs (53: what a resolv.conf line names), else any free one
        for _ in range(1 if fixed else 20):  # the port must be free for both; another process may take it
            port = fixed or free_port(self.addr)
            try:
                self._udp, _ = await loop.create_datagram_endpoint(
                    lambda: _Udp(self), local_addr=(self.addr, port))
            except OSError:
                continue
            try:
                self._tcp = await asyncio.start_server(self._serve_tcp, self.addr, port)
            except OSError:
                self._udp.close()
                continue
            self.port = port
            return self
        raise OSError(f"no port free for UDP and TCP on {self.addr}")

    async def __aexit__(self, *exc: object) -> None:
        if self._udp is not None:
            self._udp.close()
        if self._tcp is not None:
            self._tcp.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=1)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def reply_to(self, data: bytes, transport: str, src: tuple[str, int]) -> bytes | None:
        if len(self.asked) >= MAX_QUERIES:
            return None
        try:
            query = dns.message.from_wire(data)
        except dns.exception.DNSException:
            self.malformed += 1
            return None
        self.asked.append(Asked(transport, query, src))
        handle = self.tcp_handle if transport == "tcp" and self.tcp_handle is not None else self.handle
        out = handle(query)
        if inspect.isawaitable(out):
            out = await out
        if out is None or isinstance(out, bytes):
            return out
        assert isinstance(out, dns.message.Message)
        wire = out.to_wire(max_size=65535)
        assert isinstance(wire, bytes)
        return wire

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            for _ in range(MAX_QUERIES):
                size = struct.unpack("!H", await reader.readexactly(2))[0]
                out = await self.reply_to(await reader.readexactly(size), "tcp", peer)
                if out is None:
                    continue  # no reply; the client's own timeout ends it
                writer.write(struct.pack("!H", len(out)) + out)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


# --- the client ------------------------------------------------------------------------------


class _Once(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.reply: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        if not self.reply.done():
            self.reply.set_result(data)

    def error_received(self, exc: Exception) -> None:
        if not self.reply.done():
            self.reply.set_exception(exc)


async def ask_wire(port: int, data: bytes, *, tcp: bool = False, timeout: float = 3.0,
                   addr: str = "127.0.0.1") -> bytes | None:
    """Send `data` as one query from a fresh socket; the raw reply, or None on timeout."""
    assert_loopback(addr)
    loop = asyncio.get_running_loop()
    if tcp:
        reader, writer = await asyncio.open_connection(addr, port)
        try:
            writer.write(struct.pack("!H", len(data)) + data)
            async with asyncio.timeout(timeout):
                size = struct.unpack("!H", await reader.readexactly(2))[0]
                return await reader.readexactly(size)
        except (TimeoutError, asyncio.IncompleteReadError):
            return None
        finally:
            writer.close()
    transport, protocol = await loop.create_datagram_endpoint(_Once, remote_addr=(addr, port))
    try:
        transport.sendto(data)
        async with asyncio.timeout(timeout):
            return await protocol.reply
    except TimeoutError:
        return None
    finally:
        transport.close()


async def ask(port: int, query: dns.message.Message, *, tcp: bool = False, timeout: float = 3.0,
              addr: str = "127.0.0.1") -> dns.message.Message | None:
    """One query over UDP (or TCP): the reply read by dnspython, or None on timeout."""
    wire = query.to_wire()
    assert isinstance(wire, bytes)
    data = await ask_wire(port, wire, tcp=tcp, timeout=timeout, addr=addr)
    return None if data is None else dns.message.from_wire(data)


# --- the server --------------------------------------------------------------------------------


@dataclass
class Serving:
    """A started server: its port, the Server (and Runtime), its clock and its log so far."""
    server: Server
    port: int
    clock: FakeClock | Callable[[], float]
    runtime: Runtime | None
    _log: user_text.Tee

    def log(self) -> str:
        """What the server wrote to stderr (its log lines) since it started."""
        return self._log.copy.getvalue()

    async def ask(self, query: dns.message.Message, *, tcp: bool = False,
                  timeout: float = 3.0) -> dns.message.Message | None:
        return await ask(self.port, query, tcp=tcp, timeout=timeout)


@contextlib.asynccontextmanager
async def serving(corefile: str, *, clock: FakeClock | Callable[[], float] | None = None,
                  runtime: bool = False, path: str | None = None,
                  port: int | None = None) -> AsyncIterator[Serving]:
    """Serve `corefile` on `port` (default: a free one on 127.0.0.1) for its blocks that name
    none. `runtime` adds what `splitdns serve` runs around the server: endpoints, readiness and
    loop probes, the tunnel watcher, and, with `path` (the Corefile's file), reloads."""
    port = port or free_port("127.0.0.1")
    loaded = config.loads(corefile, path or "Corefile", default_port=port)
    the_clock: FakeClock | Callable[[], float] = FakeClock() if clock is None else clock
    server = Server(loaded, clock=the_clock)
    life = Runtime(server, path, port) if runtime else None
    tee = user_text.Tee(sys.stderr)
    with contextlib.redirect_stderr(tee):
        try:
            if life is not None:
                await life.start()
            else:
                await server.start()
            yield Serving(server, port, the_clock, life, tee)
        finally:
            if life is not None:
                await life.stop()  # cancels its probes and watchers; drains for at most 0.5 s
            else:
                server.close()
            await asyncio.sleep(0)  # let the cancelled tasks end
            user_text.seen("in-process server log", tee.copy.getvalue())


# --- HTTP endpoints ------------------------------------------------------------------------------


async def http(port: int, path: str) -> tuple[int, str]:
    """GET one of the server's endpoints (/ready, /health, /metrics): status and body. The
    blocking client runs in a thread, so the server in this loop can answer it."""
    return await asyncio.to_thread(http_get, port, path)


async def scrape(port: int) -> dict[str, float]:
    """The server's /metrics as {'name{labels}': value} (hostile.metric sums them)."""
    return await asyncio.to_thread(metrics, port)


def replies_to(clients: list[socket.socket], timeout: float = 0.5) -> list[bytes | None]:
    """Each client's reply, or None where none came within `timeout` seconds."""
    replies: list[bytes | None] = []
    for c in clients:
        c.settimeout(timeout)
        try:
            replies.append(c.recv(4096))
        except TimeoutError:
            replies.append(None)
    return replies


def with_server(conf: config.Config, scenario: Callable[[Server], Awaitable[T]],
                clock: Callable[[], float] = time.monotonic) -> T:
    """`scenario` against a started in-process server, closed after, within 20 s."""

    async def run() -> T:
        srv = Server(conf, clock=clock)
        await srv.start()
        try:
            return await scenario(srv)
        finally:
            srv.close()

    result: T = asyncio.run(asyncio.wait_for(run(), 20))
    return result
