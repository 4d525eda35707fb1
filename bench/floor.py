"""python-floor: what CPython on uvloop costs before any DNS work, as a benchmark peer.

    python bench/floor.py ADDR PORT UPSTREAM_ADDR:UPSTREAM_PORT

Not a resolver. It is the issue's own reference point made runnable side by side: "a bare
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
"""

from __future__ import annotations

import asyncio
import ipaddress
import secrets
import socket
import sys

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
            if len(reply) < 12:
                return
            tail = reply[2:]
            if tail[1] & 0xF in STORED_RCODES:
                self.replies[query[2:]] = tail
            try:  # noqa: SIM105 (as above)
                self.listen.sendto(query[:2] + tail, peer)
            except OSError:
                pass

        self.loop.add_reader(fd, answered)
        timer = self.loop.call_later(TIMEOUT, finish)


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def serve(addr: str, port: int, upstream: tuple[str, int]) -> None:
    for host in (addr, upstream[0]):
        if not ipaddress.ip_address(host).is_loopback:
            raise SystemExit(f"{host} is not a loopback address")
    listen = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listen.bind((addr, port))
    listen.setblocking(False)
    loop = _new_loop()
    floor = Floor(loop, listen, upstream)
    loop.add_reader(listen.fileno(), floor.readable)
    try:
        loop.run_forever()  # until SIGTERM, as every server of the benchmark
    finally:
        listen.close()
        loop.close()


def main(argv: list[str]) -> None:
    if len(argv) != 3:
        raise SystemExit(__doc__.split("\n\n")[1])
    host, _, up_port = argv[2].rpartition(":")
    serve(argv[0], int(argv[1]), (host, int(up_port)))


if __name__ == "__main__":
    main(sys.argv[1:])
