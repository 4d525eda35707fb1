"""DNS over TCP from clients: length-prefixed queries, answered concurrently, bounded.

Bounds as miekg/dns and CoreDNS have them: 3 s to read the first query and each query's
bytes, 10 s idle between queries, `limits tcp_queries` per connection, `tcp_connections`
at once (beyond: closed at accept), and `tcp_buffer` reply bytes a client may leave unread
before it is cut off, so a client that does not read cannot grow our memory.
Tests: tests/test_hostile_clients.py, tests/test_misses.py.
"""

from __future__ import annotations

import asyncio
import struct

from splitdns.codec import queries, wire
from splitdns.shell.flights import Flights
from splitdns.shell.listener import Listener

TCP_IDLE_TIMEOUT = 10.0      # CoreDNS: idle 10 s, read 3 s
TCP_READ_TIMEOUT = 3.0


class Connections:
    """Client TCP connections held at once, by every listener of a server."""

    def __init__(self) -> None:
        self.held = 0


async def serve_client(flights: Flights, connections: Connections, listener: Listener,
                       reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    limits = flights.config().limits
    if connections.held >= limits.tcp_connections:
        writer.close()
        return
    connections.held += 1
    pending: set[asyncio.Task[None]] = set()
    peer = writer.get_extra_info("peername") or ("?", 0)
    try:
        for count in range(limits.tcp_queries):
            try:
                async with asyncio.timeout(TCP_IDLE_TIMEOUT if count else TCP_READ_TIMEOUT):
                    header = await reader.readexactly(2)
                async with asyncio.timeout(TCP_READ_TIMEOUT):
                    data = await reader.readexactly(struct.unpack("!H", header)[0])
            except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                break
            verdict = queries.read(data)
            if verdict is None:
                break
            if isinstance(verdict, bytes):
                writer.write(struct.pack("!H", len(verdict)) + verdict)
                flights.account_unrouted(listener, "tcp", data, verdict, flights.clock())
                continue
            task = asyncio.ensure_future(_answer(flights, verdict, listener, writer, peer, len(data)))
            pending.add(task)
            task.add_done_callback(pending.discard)
        if pending:
            await asyncio.wait(pending, timeout=flights.upstream_budget())
    finally:
        connections.held -= 1
        for task in pending:
            task.cancel()
        writer.close()


async def _answer(flights: Flights, q: wire.Query, listener: Listener,
                  writer: asyncio.StreamWriter, peer: tuple[str, int], size: int) -> None:
    start = flights.clock()
    out, zone, via, hit = await flights.answer(q, listener)
    if writer.is_closing():
        return
    writer.write(struct.pack("!H", len(out)) + out)
    if writer.transport.get_write_buffer_size() > flights.config().limits.tcp_buffer:
        writer.transport.abort()  # a client that does not read must not grow our memory
    flights.account(zone, q, listener, peer, "tcp", size, out, start, via, hit)
