"""Asking a DNS-over-TLS upstream (RFC 7858): verified connections, kept and reused, bounded.

Each upstream has a pool of at most POOL_SIZE connections: an attempt takes an idle one (or
opens one while fewer are open), sends one query, reads one reply, and gives the connection
back; at most POOL_SIZE attempts are under way per upstream, the others wait within their
own timeout. Every query has a fresh random ID and its reply is checked in full, as over
UDP (`wire.reply_matches`, then the reply reader); one that does not match closes the
connection and fails the attempt (inside TLS it cannot be an off-path forgery, so it is a
broken server). An idle connection the server closed is found at the next use and that
query is sent once more on a new connection; one idle longer than `expire` is closed, and
one older than `max_age` (when set) is not used again.

The certificate is verified against the CA (or the system's), for `tls_servername` or the
upstream's address; a server that fails it fails the attempt, and never gets the query.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from dataclasses import dataclass

from splitdns.codec import reply as replies
from splitdns.directives.forward import TlsSettings, Upstream, tls_context
from splitdns.shell.attempt import (
    Counters,
    UpstreamError,
    UpstreamTimeout,
    bound_stream,
    describe,
    stream_reply,
)

POOL_SIZE = 8  # connections (and attempts under way) per upstream


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0
    opened: float = 0.0


class _Stale(Exception):
    """The connection was closed under us: worth one more try on a new one if it was idle."""


class _Pool:
    def __init__(self) -> None:
        self.idle: list[_Connection] = []
        self.slots = asyncio.Semaphore(POOL_SIZE)

    def take(self, now: float, expire: float, max_age: float = 0.0) -> _Connection | None:
        while self.idle:
            conn = self.idle.pop()  # the most recent: the least likely to be closed
            if now - conn.idle_since < expire and not conn.writer.is_closing() and \
                    (not max_age or now - conn.opened < max_age):
                return conn
            conn.writer.close()
        return None

    def give(self, conn: _Connection, now: float) -> None:
        conn.idle_since = now
        self.idle.append(conn)


_POOLS: dict[tuple[Upstream, int], _Pool] = {}  # per upstream and event loop
_CONTEXTS: dict[TlsSettings, ssl.SSLContext] = {}


def pool_of(up: Upstream) -> _Pool:
    key = (up, id(asyncio.get_running_loop()))
    pool = _POOLS.get(key)
    if pool is None:
        pool = _POOLS[key] = _Pool()
    return pool


async def ask(sent: bytes, up: Upstream, timeout: float, counters: Counters) -> replies.Reply:
    assert up.tls is not None
    pool = pool_of(up)
    try:
        async with asyncio.timeout(timeout), pool.slots:
            loop = asyncio.get_running_loop()
            conn = pool.take(loop.time(), up.tls.expire, up.tls.max_age)
            if conn is not None:
                try:
                    return await _exchange(conn, pool, sent, counters)
                except _Stale:
                    pass  # the server closed it while idle: once more, on a new connection
            conn = await _connect(up)
            try:
                return await _exchange(conn, pool, sent, counters)
            except _Stale as err:
                raise UpstreamError(f"TLS connection closed before a full reply ({err})") from None
    except TimeoutError:
        raise UpstreamTimeout(f"timeout after {timeout:g}s over TLS") from None


async def _connect(up: Upstream) -> _Connection:
    assert up.tls is not None
    name = up.tls.servername or up.host
    context = _CONTEXTS.get(up.tls)
    try:
        if context is None:
            context = _CONTEXTS[up.tls] = tls_context(up.tls)
        if up.device is not None:  # a tunnel's interface, bound before connect
            reader, writer = await asyncio.open_connection(sock=await bound_stream(up), ssl=context,
                                                           server_hostname=name)
        else:
            local = None if up.source is None else (up.source, 0)  # forward's source_address
            reader, writer = await asyncio.open_connection(up.host, up.port, ssl=context,
                                                           local_addr=local, server_hostname=name)
    except ssl.SSLCertVerificationError as err:
        raise UpstreamError(f"TLS: the certificate of {up} is not valid for {name}: "
                            f"{err.verify_message}") from None
    except ssl.SSLError as err:
        raise UpstreamError(f"TLS handshake with {up} failed: {err.reason or err}") from None
    except OSError as err:
        raise UpstreamError(f"TLS: {describe(err)}") from None
    return _Connection(reader, writer, opened=asyncio.get_running_loop().time())


async def _exchange(conn: _Connection, pool: _Pool, sent: bytes, counters: Counters) -> replies.Reply:
    kept = False
    try:
        try:
            conn.writer.write(struct.pack("!H", len(sent)) + sent)
            await conn.writer.drain()
            length = struct.unpack("!H", await conn.reader.readexactly(2))[0]
            data = await conn.reader.readexactly(length)
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError) as err:
            raise _Stale(str(err) or type(err).__name__) from None
        reply = stream_reply(sent, data, counters, "TLS")
        pool.give(conn, asyncio.get_running_loop().time())
        kept = True
        return reply
    finally:
        if not kept:  # failed, cancelled or timed out half-way: the stream's state is unknown
            conn.writer.close()
