"""One wakeup of the UDP listener, timed in process: what a cache hit costs the server at a
pod's pace (one query per wakeup) and under a queue (a batch per wakeup).

    python -m bench.wakeup [--rounds N] [--queue B] [--directive TEXT]... [--addresses N] [--qtype T]
                           [--zones N]

No dnsperf and no scheduler between client and server: a client socket sends, the read
callback is called directly, the replies are drained and checked, over real loopback
sockets. This isolates the read path from the machine's noise far better than a dnsperf
run, so it is the tool for an A/B of a change to it: run the two versions alternately
(ABBA), ten or more each, and compare the medians. It is not a throughput figure: the
event loop's own cost per wakeup (epoll, the callback dispatch) is not in it.

The names are answered first by an upstream in the same process (192.0.2.1 for every A
query), then from the cache, then from the memo; only memo hits are timed. Loopback only.
`--directive` adds a line to the server block (`loadbalance`, `template IN AAAA { rcode
NOERROR }`, ...) to time the hits of a block that uses it; `--addresses` makes the upstream
answer that many A records, `--qtype` asks another type (AAAA for such a template).
`--zones N` serves N blocks (`z0.example` ...) and asks name i in block i mod N, as the
zones curve of `make bench` does: what a hit costs as the number of zones grows.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import time
from typing import cast

import dns.message
import dns.rrset

from splitdns import config
from splitdns.shell.datagrams import BATCH
from splitdns.shell.server import Server

NAMES = 200
PACE = 1e-3  # seconds between wakeups at a pod's pace: 1000 queries a second


class Upstream(asyncio.DatagramProtocol):
    addresses = 1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)  # uvloop's is not a subclass

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        query = dns.message.from_wire(data)
        reply = dns.message.make_response(query)
        reply.answer.append(dns.rrset.from_text(query.question[0].name, 3600, "IN", "A",
                                                *(f"192.0.2.{i + 1}" for i in range(self.addresses))))
        self.transport.sendto(reply.to_wire(), addr)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _drain(client: socket.socket) -> int:
    got = 0
    while True:
        try:
            client.recv(4096)
        except BlockingIOError:
            return got
        got += 1


async def measure(rounds: int, queue: int, directives: tuple[str, ...] = (),
                  qtype: str = "A", zones: int = 1) -> dict[str, float]:
    """Median microseconds per hit: at a pod's pace, and with `queue` queries per wakeup."""
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(Upstream, local_addr=("127.0.0.1", 0))
    up_port = transport.get_extra_info("sockname")[1]
    port = _free_port()
    extra = "".join(f" {line}\n" for line in directives)
    origins = ["."] if zones == 1 else [f"z{z}.example." for z in range(zones)]
    srv = Server(config.loads("".join(f"{origin}:{port} {{\n bind 127.0.0.1\n cache 3600\n{extra}"
                                      f" forward . 127.0.0.1:{up_port}\n}}\n" for origin in origins)))
    await srv.start()
    client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        client.bind(("127.0.0.1", 0))
        client.setblocking(False)
        suffix = ["example"] if zones == 1 else [f"z{i % zones}.example" for i in range(NAMES)]
        queries = [dns.message.make_query(f"name{i}.{suffix[i % len(suffix)]}", qtype).to_wire()
                   for i in range(NAMES)]
        for _ in range(3):  # a miss, a hit rendered from the cache, a memo hit
            for data in queries:
                client.sendto(data, ("127.0.0.1", port))
                await asyncio.sleep(0.001)
            await asyncio.sleep(0.2)
            _drain(client)
        listener = srv.listeners[0]
        assert listener.udp is not None
        loop.remove_reader(listener.udp.fileno())  # from here on only this code calls it
        return {"pace": _per_hit(srv, client, queries, port, rounds, 1, PACE),
                f"queue of {queue}": _per_hit(srv, client, queries, port, rounds, queue, 0.0)}
    finally:
        client.close()
        srv.close()
        transport.close()


def _per_hit(srv: Server, client: socket.socket, queries: list[bytes], port: int, rounds: int,
             queue: int, gap: float) -> float:
    listener = srv.listeners[0]
    samples: list[float] = []
    last = 0.0
    for r in range(rounds):
        while time.perf_counter() - last < gap:  # bounded: gap is microseconds
            pass
        last = time.perf_counter()
        for j in range(queue):
            client.sendto(queries[(r * queue + j) * 7 % NAMES], ("127.0.0.1", port))
        spent, got = 0.0, 0
        for _ in range(queue + 2):  # the first read after a pause takes one datagram
            start = time.perf_counter()
            srv._udp_readable(listener)
            spent += time.perf_counter() - start
            got += _drain(client)
            if got == queue:
                break
        if got != queue:
            raise SystemExit(f"{queue - got} of {queue} replies missing in round {r}")
        samples.append(spent / queue * 1e6)
    return statistics.median(samples)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.wakeup", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3000)
    p.add_argument("--queue", type=int, default=20, help="queries per wakeup under a queue (20)")
    p.add_argument("--directive", action="append", default=[], help="a line to add to the block")
    p.add_argument("--addresses", type=int, default=1, help="A records in each upstream answer (1)")
    p.add_argument("--qtype", default="A", help="the type asked (A)")
    p.add_argument("--zones", type=int, default=1,
                   help="server blocks, name i in block i mod N, as the zones curve (1: the root)")
    a = p.parse_args(argv)
    Upstream.addresses = max(1, a.addresses)
    if a.rounds < 1 or a.zones < 1 or not 1 <= a.queue <= BATCH:
        p.error(f"rounds must be >= 1 and queue within 1..{BATCH} (one read's worth)")
    try:
        import uvloop  # the loop splitdns serves on where it is installed
        run = uvloop.run
    except ImportError:
        run = asyncio.run
    for label, micros in run(measure(a.rounds, a.queue, tuple(a.directive), a.qtype, a.zones)).items():
        print(f"{label}: {micros:.2f} us per hit (median of {a.rounds} wakeups)")


if __name__ == "__main__":
    main(sys.argv[1:])
