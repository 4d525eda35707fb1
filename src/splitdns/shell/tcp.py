"""DNS over TCP from clients: length-prefixed queries, answered concurrently, bounded.

Bounds as miekg/dns and CoreDNS have them: 3 s to read the first query and each query's
bytes, 10 s idle between queries, `limits tcp_queries` per connection, `tcp_connections`
at once (beyond: closed at accept), and `tcp_buffer` reply bytes a client may leave unread
before it is cut off, so a client that does not read cannot grow our memory.
"""

from __future__ import annotations

import asyncio
import struct
from typing import TYPE_CHECKING

from splitdns.codec import queries, wire

if TYPE_CHECKING:
    from splitdns.shell.server import Listener, Server

TCP_IDLE_TIMEOUT = 10.0      # CoreDNS: idle 10 s, read 3 s
TCP_READ_TIMEOUT = 3.0


async def serve_client(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       listener: Listener) -> None:
    limits = server.config.limits
    if server.tcp_connections >= limits.tcp_connections:
        writer.close()
        return
    server.tcp_connections += 1
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
                server.account_unrouted(listener, "tcp", data, verdict, server.clock())
                continue
            task = asyncio.ensure_future(_answer(server, verdict, listener, writer, peer, len(data)))
            pending.add(task)
            task.add_done_callback(pending.discard)
        if pending:
            await asyncio.wait(pending, timeout=server.upstream_budget())
    finally:
        server.tcp_connections -= 1
        for task in pending:
            task.cancel()
        writer.close()


async def _answer(server: Server, q: wire.Query, listener: Listener, writer: asyncio.StreamWriter,
                  peer: tuple[str, int], size: int) -> None:
    start = server.clock()
    out, zone = await server.answer(q, listener)
    if writer.is_closing():
        return
    writer.write(struct.pack("!H", len(out)) + out)
    if writer.transport.get_write_buffer_size() > server.config.limits.tcp_buffer:
        writer.transport.abort()  # a client that does not read must not grow our memory
    server.account(zone, q, listener, peer, "tcp", size, out, start)
