"""What every upstream attempt shares, over UDP, TCP or TLS: how it fails, what it drops,
and how a reply read off a stream is checked."""

from __future__ import annotations

import _socket
import asyncio
import socket

from splitdns.codec import reply as replies
from splitdns.codec import wire
from splitdns.directives.targets import Upstream

# Linux's value where Python does not name it (it is 25 on every architecture).
SO_BINDTODEVICE = getattr(socket, "SO_BINDTODEVICE", 25)


class UpstreamError(Exception):
    """An attempt failed: timeout, refused, reset, or a TCP reply that did not match."""


class UpstreamTimeout(UpstreamError):
    """An attempt got no reply in its time (or had no time left before the deadline)."""


class Counters:
    """Evidence of spoofing or brokenness, for metrics: replies we dropped."""

    def __init__(self) -> None:
        self.mismatched = 0
        self.unparseable = 0


def describe(err: OSError) -> str:
    if isinstance(err, ConnectionRefusedError):
        return "connection refused (nothing listens there)"
    return err.strerror or str(err)


def stream_reply(sent: bytes, data: bytes, counters: Counters, transport: str) -> replies.Reply:
    """A reply read off a stream (TCP, TLS), matched to its query and read, or the reason not."""
    if not wire.reply_matches(sent, data):
        counters.mismatched += 1
        raise UpstreamError(f"{transport} reply does not match the query")
    reply = replies.read_matched(data)
    if reply is None:
        counters.unparseable += 1
        raise UpstreamError(f"{transport} reply does not parse")
    return reply


def bind_device(sock: _socket.socket, device: str) -> None:
    """Bind a fresh socket to `device` (a tunnel's interface), before it connects: the kernel
    then sends by that interface or not at all. No capability is needed on a socket that was
    never bound to a device (Linux 5.7 and later); binding it again would be refused."""
    sock.setsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, device.encode())


async def bound_stream(up: Upstream) -> socket.socket:
    """A TCP socket to `up`, bound to its device (and its source address) before it connects,
    for asyncio.open_connection(sock=...). OSError when the device is gone or unreachable."""
    assert up.device is not None
    sock = socket.socket(socket.AF_INET6 if ":" in up.host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        bind_device(sock, up.device)
        if up.source is not None:
            sock.bind((up.source, 0))
        await asyncio.get_running_loop().sock_connect(sock, (up.host, up.port))
    except BaseException:
        sock.close()
        raise
    return sock
