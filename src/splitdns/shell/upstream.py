"""Asking an upstream: one attempt over UDP or TCP (TLS: dot.py), hardened as RFC 5452 asks.

Every UDP attempt gets a new socket connected to the upstream, on a port the kernel picks,
so the kernel drops datagrams from any other address or port and an ICMP
port-unreachable fails the attempt at once instead of after the timeout. A datagram that
does not match the query (ID, QR, opcode, question) or does not parse is dropped and
counted, and we keep waiting for the genuine reply: answering the client on the first
forged packet would let an off-path attacker cut queries short.
"""

from __future__ import annotations

import _socket
import array
import asyncio
import os
import socket
import struct
import weakref

from splitdns.codec import reply as replies
from splitdns.codec import wire
from splitdns.directives.forward import Upstream
from splitdns.shell.attempt import (
    Counters,
    UpstreamError,
    UpstreamTimeout,
    bind_device,
    bound_stream,
    describe,
    stream_reply,
)

__all__ = ["Counters", "QueryIds", "UpstreamError", "UpstreamTimeout", "ask", "bind_device", "describe",
           "stream_reply"]


class QueryIds:
    """Fresh query IDs from the kernel's CSPRNG, read `batch` at a time: `secrets.randbits`
    makes one getrandom(2) per ID, a system call per upstream attempt. Each ID is used once;
    a child of os.fork starts with an empty pool (splitdns does not fork, but a pool must not
    be shared)."""

    def __init__(self, batch: int = 2048) -> None:
        self.batch = batch
        self.forget()
        _POOLS.add(self)

    def forget(self) -> None:
        self._pool = array.array("H")  # the next ID reads a new batch

    def __call__(self) -> int:
        try:
            return self._pool.pop()
        except IndexError:
            self._pool = array.array("H", os.urandom(2 * self.batch))
            return self._pool.pop()


_POOLS: weakref.WeakSet[QueryIds] = weakref.WeakSet()


def _forget_pools() -> None:
    for pool in _POOLS:
        pool.forget()


os.register_at_fork(after_in_child=_forget_pools)


async def ask(sent: bytes, up: Upstream, tcp: bool, timeout: float,
              counters: Counters) -> replies.Reply:
    if timeout <= 0:
        raise UpstreamError("no time left before the deadline")
    if up.tls is not None:
        from splitdns.shell import dot

        return await dot.ask(sent, up, timeout, counters)
    if tcp:
        return await _ask_tcp(sent, up, timeout, counters)
    return await _ask_udp(sent, up, timeout, counters)


_NONBLOCK = getattr(socket, "SOCK_NONBLOCK", 0)


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


async def _ask_udp(sent: bytes, up: Upstream, timeout: float,
                   counters: Counters) -> replies.Reply:
    loop = asyncio.get_running_loop()
    # The C socket type: socket.socket's Python wrapper adds microseconds per miss and
    # offers nothing used here. Non-blocking from birth where the flag exists (Linux): one
    # system call fewer than setblocking's.
    sock = _socket.socket(_family(up.host), socket.SOCK_DGRAM | _NONBLOCK)
    try:
        if not _NONBLOCK:
            sock.setblocking(False)
        try:
            if up.device is not None:  # a tunnel's interface: before connect, once
                bind_device(sock, up.device)
            if up.source is not None:  # forward's source_address
                sock.bind((up.source, 0))
            sock.connect((up.host, up.port))
            sock.send(sent)
        except OSError as err:
            raise UpstreamError(f"send failed: {err.strerror or err}") from None
        result: asyncio.Future[replies.Reply] = loop.create_future()

        def readable() -> None:
            for _ in range(64):  # bounded: a flood of forgeries cannot pin the loop here
                if result.done():
                    return
                try:
                    data = sock.recv(65535)
                except (BlockingIOError, InterruptedError):
                    return
                except OSError as err:
                    result.set_exception(UpstreamError(describe(err)))
                    return
                if not wire.reply_matches(sent, data):
                    counters.mismatched += 1
                    continue
                reply = replies.read_matched(data)
                if reply is None:
                    counters.unparseable += 1
                    continue
                result.set_result(reply)
                return

        def expire() -> None:
            if not result.done():
                result.set_exception(UpstreamTimeout(f"timeout after {timeout:g}s"))

        fd = sock.fileno()
        loop.add_reader(fd, readable)
        timer = loop.call_later(timeout, expire)
        try:
            return await result
        finally:
            timer.cancel()
            loop.remove_reader(fd)
    finally:
        sock.close()


async def _ask_tcp(sent: bytes, up: Upstream, timeout: float,
                   counters: Counters) -> replies.Reply:
    writer = None
    try:
        async with asyncio.timeout(timeout):
            if up.device is not None:  # a tunnel's interface, bound before connect
                reader, writer = await asyncio.open_connection(sock=await bound_stream(up))
            else:
                reader, writer = await asyncio.open_connection(
                    up.host, up.port, local_addr=None if up.source is None else (up.source, 0))
            writer.write(struct.pack("!H", len(sent)) + sent)
            await writer.drain()
            length = struct.unpack("!H", await reader.readexactly(2))[0]
            data = await reader.readexactly(length)
    except TimeoutError:
        raise UpstreamTimeout(f"timeout after {timeout:g}s over TCP") from None
    except asyncio.IncompleteReadError:
        raise UpstreamError("TCP connection closed before a full reply") from None
    except OSError as err:
        raise UpstreamError(f"TCP: {describe(err)}") from None
    finally:
        if writer is not None:
            writer.close()
    return stream_reply(sent, data, counters, "TCP")
