"""Many datagrams per system call: recvmmsg(2) and sendmmsg(2) through ctypes.

Why (a hit's cost under load is mostly its system calls): bench/README.md, "Where splitdns's
time goes" (cache hits). Python's socket module has neither call, so they go through ctypes into
libc, with the structures as Linux lays them out (glibc and musl, 64-bit). Elsewhere, or where
the call fails on the socket, `open_batch` falls back to `OneByOne`: recvfrom and sendto, the
same interface, the same behaviour.

A reply goes back to the sockaddr its query came from without that address becoming a
Python object: the send header points at the receive header's address buffer. Only a
query answered later (a cache miss) or logged asks for the address as a tuple.
Tests: tests/test_datagrams.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import socket
import struct
import sys
from collections.abc import Callable
from typing import Protocol, TypeVar

BATCH = 64            # datagrams per system call; dnsperf's 100 in flight fill about 20
DATAGRAM_BYTES = 4096  # a query is at most 4096 bytes here, as with recvfrom(4096)
ADDRESS_BYTES = 28     # sizeof(struct sockaddr_in6), the larger of the two families
MSG_DONTWAIT = 0x40
MSG_PEEK = 0x2
PEERS_KEPT = 1024     # decoded sender addresses kept; a scan of many ports only empties it
MAX_INTERRUPTED = 8  # sendmmsg retries after EINTR per run: a signal storm must not hold the loop
NOTHING_WAITING = (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR)  # a receive that found nothing

Peer = tuple[str, int] | tuple[str, int, int, int]  # as socket.recvfrom gives it


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class _MsgHdr(ctypes.Structure):
    _fields_ = [("msg_name", ctypes.c_void_p), ("msg_namelen", ctypes.c_uint32),
                ("msg_iov", ctypes.c_void_p), ("msg_iovlen", ctypes.c_size_t),
                ("msg_control", ctypes.c_void_p), ("msg_controllen", ctypes.c_size_t),
                ("msg_flags", ctypes.c_int)]


class _MMsgHdr(ctypes.Structure):
    _fields_ = [("msg_hdr", _MsgHdr), ("msg_len", ctypes.c_uint32)]


def _libc_calls() -> tuple[Callable[..., int], Callable[..., int]] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        receive, send = libc.recvmmsg, libc.sendmmsg
    except (OSError, AttributeError):
        return None
    # No argtypes: converting the arguments through them cost a third of an empty recvmmsg
    # (bench/README.md, "Figures behind the code"). The pointers are passed as c_void_p built
    # once; the other arguments are small ints, which ctypes passes as C ints (neither call is
    # variadic).
    receive.restype = send.restype = ctypes.c_int
    return receive, send


_CALLS = _libc_calls()


class _Headers:
    """`count` mmsghdr, each with one iovec of DATAGRAM_BYTES and an address buffer: their
    own, or the very buffers of `replying_to`, so that header i sends what was written over
    datagram i to its sender (a reply keeps the query's ID where it already is).

    The fields touched per datagram are reached through typed memoryviews over the same
    memory (a ctypes attribute costs several times a list index)."""

    def __init__(self, count: int, namelen: int, replying_to: _Headers | None = None) -> None:
        self.raw = bytearray(_STRIDE * count)
        headers = (_MMsgHdr * count).from_buffer(self.raw)
        self.data: bytearray = replying_to.data if replying_to is not None else \
            bytearray(DATAGRAM_BYTES * count)
        self.names: bytearray = replying_to.names if replying_to is not None else \
            bytearray(ADDRESS_BYTES * count)
        iovecs = (_IoVec * count)()
        data_array = (ctypes.c_char * len(self.data)).from_buffer(self.data)
        names_array = (ctypes.c_char * len(self.names)).from_buffer(self.names)
        data_at, names_at = ctypes.addressof(data_array), ctypes.addressof(names_array)
        for i in range(count):
            iovecs[i].iov_base = data_at + i * DATAGRAM_BYTES
            iovecs[i].iov_len = DATAGRAM_BYTES
            hdr = headers[i].msg_hdr
            hdr.msg_name = names_at + i * ADDRESS_BYTES
            # The kernel writes back the length it used, always that of the socket's family
            # (16, or 28 for AF_INET6, v4-mapped senders included): it never needs resetting.
            hdr.msg_namelen = namelen
            hdr.msg_iov = ctypes.addressof(iovecs) + i * ctypes.sizeof(_IoVec)
            hdr.msg_iovlen = 1
        # The kernel reads these through raw addresses; the exported views also pin the
        # bytearrays against resizing.
        self._keep = (headers, iovecs, data_array, names_array)
        self.address = ctypes.addressof(headers)
        self.u32 = memoryview(self.raw).cast("I")
        self.iov_sizes = memoryview(iovecs).cast("B").cast("L")
        self.data_view = memoryview(self.data)


_STRIDE = ctypes.sizeof(_MMsgHdr)
_LEN = _MMsgHdr.msg_len.offset
_IOV_LEN = _IoVec.iov_len.offset


def _layout_fits() -> bool:
    """The typed views index whole fields: every offset must be a multiple of its size."""
    size_t = ctypes.sizeof(ctypes.c_size_t)
    return (size_t == ctypes.sizeof(ctypes.c_ulong) and _STRIDE % 4 == 0 and _LEN % 4 == 0 and
            ctypes.sizeof(_IoVec) % size_t == 0 and _IOV_LEN % size_t == 0)


class Known(Protocol):
    """What `answer_known`'s finder returns for a datagram it knows the reply to."""

    @property
    def tail(self) -> bytes:
        """The reply without its first two bytes (they stay the query's: its ID)."""
        ...


K = TypeVar("K", bound=Known)


class Batch:
    """The datagrams one recvmmsg read, and their replies, sent by sendmmsg.

    The reply to datagram i is written over it, so read a datagram before replying to it.
    Consecutive replies go out in one sendmmsg."""

    def __init__(self, sock: socket.socket, size: int = BATCH) -> None:
        assert _CALLS is not None
        self._receive, self._send = _CALLS
        self.sock = sock
        self.fd = sock.fileno()
        self.size = size
        namelen = 16 if sock.family == socket.AF_INET else ADDRESS_BYTES
        self.inbox = _Headers(size, namelen)
        self.outbox = _Headers(size, namelen, replying_to=self.inbox)
        self._len_at = [(i * _STRIDE + _LEN) // 4 for i in range(size)]
        self._iov_len_at = [(i * ctypes.sizeof(_IoVec) + _IOV_LEN) // ctypes.sizeof(ctypes.c_size_t)
                            for i in range(size)]
        self._inbox_at = ctypes.c_void_p(self.inbox.address)
        self._outbox_at = [ctypes.c_void_p(self.outbox.address + i * _STRIDE) for i in range(size)]
        self._count = 0
        self._queued = bytearray(size)  # 1: the outbox slot holds a reply not yet sent
        self._unsent = False            # some slot is queued: a quick test for the common "none"
        # Senders already decoded: a pod has a few clients, each a few sockets.
        self._peers: dict[bytes, Peer] = {}

    def receive(self) -> int:
        """Read what is waiting, up to `size` datagrams, without blocking; their number.
        Send the replies to the previous ones first: their addresses are about to go."""
        self.send()
        got = self._receive(self.fd, self._inbox_at, self.size, MSG_DONTWAIT, None)
        if got < 0:
            self._count = 0
            code = ctypes.get_errno()
            if code in NOTHING_WAITING:
                return 0
            # Not "nothing waiting": left alone, the socket would stay readable and the loop
            # spin. The caller reads one by one from now on.
            raise OSError(code, f"recvmmsg: {os.strerror(code)}")
        self._count = got
        return got

    def answer_known(self, find: Callable[[bytes, float], K | None], now: float,
                     found: list[K]) -> list[int]:
        """Reply to each datagram whose bytes after the first two (a query's ID) `find`
        knows the reply to, and append what it found to `found`; return the indices of the
        others, in order, for the caller. The cache-hit loop: one call for the batch."""
        view, lengths, sizes, queued = self.inbox.data_view, self.inbox.u32, \
            self.outbox.iov_sizes, self._queued
        len_at, iov_len_at = self._len_at, self._iov_len_at
        others: list[int] = []
        for i in range(self._count):
            start = i * DATAGRAM_BYTES
            known = find(bytes(view[start + 2:start + lengths[len_at[i]]]), now)
            if known is None:
                others.append(i)
                continue
            tail = known.tail
            found.append(known)
            if len(tail) > DATAGRAM_BYTES - 2:  # it would spill into the next slot
                self.reply(i, bytes(view[start:start + 2]) + tail)
                continue
            view[start + 2:start + 2 + len(tail)] = tail
            sizes[iov_len_at[i]] = len(tail) + 2
            queued[i] = 1
            self._unsent = True
        return others

    def datagram(self, i: int) -> bytes:
        start = i * DATAGRAM_BYTES
        return bytes(self.inbox.data_view[start:start + self.inbox.u32[self._len_at[i]]])

    def peer(self, i: int) -> Peer:
        """The sender of datagram i, as socket.recvfrom would give it."""
        raw = bytes(self.inbox.names[i * ADDRESS_BYTES:(i + 1) * ADDRESS_BYTES])
        peer = self._peers.get(raw)
        if peer is None:
            if len(self._peers) >= PEERS_KEPT:
                self._peers.clear()
            peer = self._peers[raw] = _sockaddr(raw)
        return peer

    def reply(self, i: int, data: bytes) -> None:
        """Queue `data` for the sender of datagram i; `send` sends the queue."""
        size = len(data)
        if size > DATAGRAM_BYTES:  # larger than any UDP reply we make; sent on its own
            with contextlib.suppress(OSError):
                self.sock.sendto(data, self.peer(i))
            return
        start = i * DATAGRAM_BYTES
        self.outbox.data_view[start:start + size] = data
        self.outbox.iov_sizes[self._iov_len_at[i]] = size
        self._queued[i] = 1
        self._unsent = True

    def send(self) -> None:
        """Send the queued replies, a sendmmsg per run of consecutive slots. Like sendto's,
        a reply the kernel refuses is dropped."""
        if not self._unsent:
            return
        queued, count = self._queued, self._count
        first = queued.find(1, 0, count)
        while first >= 0:
            end = queued.find(0, first, count)
            end = count if end < 0 else end
            self._send_slots(first, end)
            first = queued.find(1, end, count)
        queued[:count] = bytes(count)
        self._unsent = False

    def _send_slots(self, done: int, end: int) -> None:
        interrupted = 0
        while done < end:
            sent = self._send(self.fd, self._outbox_at[done], end - done, 0)
            if sent > 0:
                done += sent
                continue
            code = ctypes.get_errno() if sent < 0 else 0
            if code in (errno.EAGAIN, errno.EWOULDBLOCK):
                return  # the send buffer is full: the rest are lost, as with sendto
            if code == errno.EINTR and interrupted < MAX_INTERRUPTED:
                interrupted += 1
                continue
            done += 1  # this one failed (e.g. a vanished client); the next may not


class OneByOne:
    """The same interface over recvfrom and sendto, where recvmmsg cannot be used."""

    def __init__(self, sock: socket.socket, size: int = BATCH) -> None:
        self.sock = sock
        self.size = size
        self.inbox: list[tuple[bytes, Peer]] = []

    def receive(self) -> int:
        inbox = self.inbox
        inbox.clear()
        recvfrom = self.sock.recvfrom
        for _ in range(self.size):
            try:
                inbox.append(recvfrom(DATAGRAM_BYTES))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                continue  # e.g. an ICMP error queued on the socket: not ours to act on
        return len(inbox)

    def answer_known(self, find: Callable[[bytes, float], K | None], now: float,
                     found: list[K]) -> list[int]:
        others: list[int] = []
        for i, (data, peer) in enumerate(self.inbox):
            known = find(data[2:], now)
            if known is None:
                others.append(i)
                continue
            try:  # noqa: SIM105 (a context manager per reply costs more than the send's Python)
                self.sock.sendto(data[:2] + known.tail, peer)
            except OSError:
                pass
            found.append(known)
        return others

    def datagram(self, i: int) -> bytes:
        return self.inbox[i][0]

    def peer(self, i: int) -> Peer:
        return self.inbox[i][1]

    def reply(self, i: int, data: bytes) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendto(data, self.inbox[i][1])

    def send(self) -> None:
        """Replies went out as they came."""


def open_batch(sock: socket.socket, size: int = BATCH) -> Batch | OneByOne:
    """A `Batch` where recvmmsg works on this socket (Linux, the layout above, no seccomp
    filter refusing it), else `OneByOne`. `sock` must be non-blocking."""
    if _CALLS is None or not sys.platform.startswith("linux") or not _layout_fits():
        return OneByOne(sock, size)
    batch = Batch(sock, size)
    # A peek at one datagram: EAGAIN (or one waiting) says the call works; a waiting
    # query stays queued for the loop.
    got = batch._receive(batch.fd, batch._inbox_at, 1, MSG_DONTWAIT | MSG_PEEK, None)
    if got < 0 and ctypes.get_errno() not in NOTHING_WAITING:
        return OneByOne(sock, size)
    return batch


def _sockaddr(raw: bytes) -> Peer:
    family = int.from_bytes(raw[:2], "little" if struct.pack("=H", 1)[0] else "big")
    port = int.from_bytes(raw[2:4], "big")
    if family == socket.AF_INET6:
        flowinfo, = struct.unpack_from("!I", raw, 4)
        scope, = struct.unpack_from("=I", raw, 24)
        return socket.inet_ntop(socket.AF_INET6, raw[8:24]), port, flowinfo, scope
    return socket.inet_ntop(socket.AF_INET, raw[4:8]), port
