"""python-floor: what CPython on uvloop costs before any DNS work, as a benchmark peer.

    python bench/floor.py ADDR PORT UPSTREAM_ADDR:UPSTREAM_PORT [--io-uring]

Not a resolver. It is the targets' reference point made runnable side by side: "a bare
Python+uvloop loop answering from a dict of wire bytes" for hits, and "a fresh socket per
query" for misses. A query's bytes after its ID are the key; a repeat is answered with the
stored reply under the query's ID. Anything else goes to the upstream on a new connected
UDP socket (a fresh port) with a random ID, and the reply, if its ID matches, is relayed and
stored. The system calls per miss are the ones splitdns's hardening needs; everything else
splitdns does is missing here: no TTL decay or expiry, no check of the reply's question, no
merging of duplicates, no retry, no truncation, no TCP, no metrics, no logs.

So splitdns ÷ floor is the price of doing the job correctly in Python, and floor ÷ Unbound
says whether a target is reachable in CPython on this machine at all (bench/README.md).
Loopback only: it refuses any other address, as the harness does before starting it.

With --io-uring (the peer python-floor-uring, not in the default set) a miss makes the same
kernel work through io_uring instead: a linked chain socket -> connect -> send -> recv per
miss, one io_uring_enter per wakeup for all of them, replies read off the completion ring.
It asks what the system calls themselves cost. splitdns does not use io_uring: the
RuntimeDefault seccomp profiles of containerd 2, Docker 25 and CRI-O refuse io_uring_setup,
and splitdns's manifests ask for RuntimeDefault (bench/README.md).
"""

from __future__ import annotations

import asyncio
import ctypes
import ipaddress
import mmap
import secrets
import socket
import struct
import sys
import time

BATCH = 64            # datagrams read per wakeup, as splitdns
DATAGRAM_BYTES = 4096
TIMEOUT = 2.0         # seconds an upstream exchange may take before its socket is closed
MAX_PENDING = 1000    # exchanges in flight; beyond, a query is dropped (file descriptors)
STORED_RCODES = (0, 3)  # NOERROR, NXDOMAIN


class Floor:
    def __init__(self, loop: asyncio.AbstractEventLoop, listen: socket.socket,
                 upstream: tuple[str, int]) -> None:
        self.loop = loop
        self.listen = listen
        self.upstream = upstream
        self.replies: dict[bytes, bytes] = {}  # query bytes after the ID -> reply after the ID
        self.pending = 0

    def readable(self) -> None:
        recvfrom, sendto, replies = self.listen.recvfrom, self.listen.sendto, self.replies
        for _ in range(BATCH):
            try:
                data, peer = recvfrom(DATAGRAM_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                continue
            tail = replies.get(data[2:])
            if tail is not None:
                try:  # noqa: SIM105 (contextlib.suppress would cost a context manager per reply)
                    sendto(data[:2] + tail, peer)
                except OSError:
                    pass
            elif len(data) >= 12 and self.pending < MAX_PENDING:
                self.forward(data, peer)

    def forward(self, query: bytes, peer: tuple[str, int]) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setblocking(False)
        ident = secrets.randbits(16).to_bytes(2, "big")
        try:
            sock.connect(self.upstream)
            sock.send(ident + query[2:])
        except OSError:
            sock.close()
            return
        self.pending += 1
        fd = sock.fileno()
        timer: asyncio.TimerHandle | None = None

        def finish() -> None:
            self.pending -= 1
            self.loop.remove_reader(fd)
            sock.close()

        def answered() -> None:
            try:
                reply = sock.recv(DATAGRAM_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # e.g. ICMP port unreachable: give up on this one
                reply = b""
            if reply and reply[:2] != ident:
                return  # not ours: keep waiting, as the connected port only filters the address
            assert timer is not None
            timer.cancel()
            finish()
            self.relay(query, peer, reply)

        self.loop.add_reader(fd, answered)
        timer = self.loop.call_later(TIMEOUT, finish)

    def relay(self, query: bytes, peer: tuple[str, int], reply: bytes) -> None:
        """Store the upstream's reply (NOERROR, NXDOMAIN) and send it under the client's ID."""
        if len(reply) < 12:
            return
        tail = reply[2:]
        if tail[1] & 0xF in STORED_RCODES:
            self.replies[query[2:]] = tail
        try:  # noqa: SIM105 (as above)
            self.listen.sendto(query[:2] + tail, peer)
        except OSError:
            pass


class UringFloor(Floor):
    """Floor whose misses go through io_uring (x86-64 Linux >= 5.19). Slot i of the ring's
    table of direct descriptors is miss i's socket, so the chain names it before it exists;
    user_data = generation << 16 | slot << 2 | step tells a late completion of a slot's
    earlier use from the current one."""

    SETUP, ENTER, REGISTER = 425, 426, 427
    OP_CANCEL, OP_CONNECT, OP_CLOSE, OP_SEND, OP_RECV, OP_SOCKET = 14, 16, 19, 26, 27, 45
    FIXED, LINK, SKIP_SUCCESS = 1, 4, 64
    RECV, CLOSE, CANCEL = 1, 2, 3
    SQE = struct.Struct("<BBHiQQIIQHHIQQ")  # struct io_uring_sqe, 64 bytes
    SEND_AREA = 512  # bytes per slot for the query sent; a longer one is dropped

    def __init__(self, loop: asyncio.AbstractEventLoop, listen: socket.socket,
                 upstream: tuple[str, int]) -> None:
        super().__init__(loop, listen, upstream)
        libc = ctypes.CDLL(None, use_errno=True)
        self.syscall = libc.syscall
        self.syscall.restype = ctypes.c_long
        params = (ctypes.c_char * 120)()  # struct io_uring_params
        self.fd = self.syscall(self.SETUP, 4096, params)
        if self.fd < 0:
            raise SystemExit(f"io_uring_setup: errno {ctypes.get_errno()}")
        p = memoryview(params).cast("B").cast("I")
        sq, cq = p[10:20], p[20:30]
        size = max(sq[6] + p[0] * 4, cq[5] + p[1] * 16)
        rw = mmap.PROT_READ | mmap.PROT_WRITE
        self.ring = mmap.mmap(self.fd, size, mmap.MAP_SHARED, rw, offset=0)
        self.sqes = mmap.mmap(self.fd, p[0] * 64, mmap.MAP_SHARED, rw, offset=0x10000000)
        self.u32, self.u64 = memoryview(self.ring).cast("I"), memoryview(self.ring).cast("Q")
        self.i32 = memoryview(self.ring).cast("i")
        for i in range(p[0]):
            self.u32[sq[6] // 4 + i] = i
        self.sq_tail, self.sq_mask = sq[1] // 4, self.u32[sq[2] // 4]
        self.cq_head, self.cq_tail, self.cq_mask, self.cqes = \
            cq[0] // 4, cq[1] // 4, self.u32[cq[2] // 4], cq[5]
        self.tail = self.submitted = self.u32[self.sq_tail]
        files = struct.pack("<IIQQQ", MAX_PENDING, 1, 0, 0, 0)  # a sparse table of sockets
        if self.syscall(self.REGISTER, self.fd, 13, files, len(files)) < 0:
            raise SystemExit(f"io_uring_register: errno {ctypes.get_errno()}")
        self.free = list(range(MAX_PENDING))
        self.generation = [0] * MAX_PENDING
        self.waiting: dict[int, tuple[bytes, tuple[str, int], bytes, float]] = {}
        host, port = upstream
        self.address = ctypes.create_string_buffer(
            struct.pack("<H", socket.AF_INET) + struct.pack("!H", port) +
            socket.inet_aton(host) + bytes(8), 16)
        self.address_at = ctypes.addressof(self.address)
        self.sent = mmap.mmap(-1, MAX_PENDING * self.SEND_AREA)
        self.received = mmap.mmap(-1, MAX_PENDING * DATAGRAM_BYTES)
        self.sent_at = ctypes.addressof(ctypes.c_char.from_buffer(self.sent))
        self.received_at = ctypes.addressof(ctypes.c_char.from_buffer(self.received))
        loop.add_reader(self.fd, self.reap)
        loop.call_later(0.5, self.sweep)

    def readable(self) -> None:
        super().readable()
        self.submit()

    def push(self, opcode: int, flags: int, fd: int, off: int, addr: int, length: int,
             user_data: int, file_index: int) -> None:
        self.SQE.pack_into(self.sqes, (self.tail & self.sq_mask) * 64, opcode, flags, 0, fd,
                           off, addr, length, 0, user_data, 0, 0, file_index, 0, 0)
        self.tail += 1
        if self.tail - self.submitted >= 1024:
            self.submit()

    def submit(self) -> None:
        if self.tail != self.submitted:
            self.u32[self.sq_tail] = self.tail & 0xFFFFFFFF
            done = self.syscall(self.ENTER, self.fd, self.tail - self.submitted, 0, 0, None, 0)
            if done < 0:
                raise OSError(ctypes.get_errno(), "io_uring_enter")
            self.submitted += done

    def forward(self, query: bytes, peer: tuple[str, int]) -> None:
        if not self.free or len(query) > self.SEND_AREA:
            return
        slot = self.free.pop()
        self.generation[slot] = (self.generation[slot] + 1) & 0xFFFF
        tag = self.generation[slot] << 16 | slot << 2
        ident = secrets.randbits(16).to_bytes(2, "big")
        base = slot * self.SEND_AREA
        self.sent[base:base + len(query)] = ident + query[2:]
        self.waiting[slot] = (query, peer, ident, time.monotonic())
        self.pending += 1
        at = self.sent_at + base
        self.push(self.OP_SOCKET, self.LINK | self.SKIP_SUCCESS, socket.AF_INET,
                  socket.SOCK_DGRAM, 0, 0, tag, slot + 1)
        self.push(self.OP_CONNECT, self.FIXED | self.LINK | self.SKIP_SUCCESS, slot, 16,
                  self.address_at, 0, tag, 0)
        self.push(self.OP_SEND, self.FIXED | self.LINK | self.SKIP_SUCCESS, slot, 0, at,
                  len(query), tag, 0)
        self.arm(slot, tag)

    def arm(self, slot: int, tag: int) -> None:
        self.push(self.OP_RECV, self.FIXED, slot, 0, self.received_at + slot * DATAGRAM_BYTES,
                  DATAGRAM_BYTES, tag | self.RECV, 0)

    def reap(self) -> None:
        head, tail = self.u32[self.cq_head], self.u32[self.cq_tail]
        while head != tail:
            at = self.cqes + (head & self.cq_mask) * 16
            user_data, result = self.u64[at >> 3], self.i32[(at >> 2) + 2]
            head = (head + 1) & 0xFFFFFFFF
            slot = user_data >> 2 & 0x3FFF
            if user_data & 3 != self.RECV or slot not in self.waiting or \
                    self.generation[slot] != user_data >> 16:
                continue  # a failed link, close or cancel: the receive's completion ends it
            query, peer, ident, _ = self.waiting[slot]
            reply = self.received[slot * DATAGRAM_BYTES:slot * DATAGRAM_BYTES + result] \
                if result >= 0 else b""
            if reply and reply[:2] != ident:
                self.arm(slot, user_data & ~3)  # not ours: keep waiting
                continue
            del self.waiting[slot]
            self.pending -= 1
            self.push(self.OP_CLOSE, self.SKIP_SUCCESS, 0, 0, 0, 0, user_data & ~3 | self.CLOSE,
                      slot + 1)
            self.free.append(slot)
            self.relay(query, peer, reply)
        self.u32[self.cq_head] = head
        self.submit()

    def sweep(self) -> None:
        """Cancel the receives older than TIMEOUT: their completions free the slots."""
        old = time.monotonic() - TIMEOUT
        for slot, (_, _, _, began) in list(self.waiting.items()):
            if began < old:
                tag = self.generation[slot] << 16 | slot << 2
                self.push(self.OP_CANCEL, self.SKIP_SUCCESS, -1, 0, tag | self.RECV, 0,
                          tag | self.CANCEL, 0)
        self.submit()
        self.loop.call_later(0.5, self.sweep)


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def serve(addr: str, port: int, upstream: tuple[str, int], io_uring: bool = False) -> None:
    for host in (addr, upstream[0]):
        if not ipaddress.ip_address(host).is_loopback:
            raise SystemExit(f"{host} is not a loopback address")
    listen = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listen.bind((addr, port))
    listen.setblocking(False)
    loop = _new_loop()
    floor = (UringFloor if io_uring else Floor)(loop, listen, upstream)
    loop.add_reader(listen.fileno(), floor.readable)
    try:
        loop.run_forever()  # until SIGTERM, as every server of the benchmark
    finally:
        listen.close()
        loop.close()


def main(argv: list[str]) -> None:
    io_uring = "--io-uring" in argv
    argv = [a for a in argv if a != "--io-uring"]
    if len(argv) != 3:
        raise SystemExit(__doc__.split("\n\n")[1])
    host, _, up_port = argv[2].rpartition(":")
    serve(argv[0], int(argv[1]), (host, int(up_port)), io_uring)


if __name__ == "__main__":
    main(sys.argv[1:])
