"""Python and C calls the server's thread makes per query, counted, not timed.

    python -m bench.calls [--queries N]

A count does not move with the machine's load, so it tells two versions of the hit or miss
path apart where a timed A/B on a shared machine cannot: run it in each tree
(`PYTHONPATH=TREE/src python -m bench.calls`) and compare. An in-process server on 127.0.0.1
forwards to an upstream in another thread, and a client in a third thread asks each name
once (a miss), then again (a hit rendered from the cache), over UDP, then the same over TCP
(a connection per query, as `dig +tcp`); only the server's thread is counted (sys.setprofile),
the event loop's own dispatch included. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import socket
import sys
import threading
from types import FrameType

import dns.message
import dns.query
import dns.rrset

from splitdns import config
from splitdns.shell.server import Server


def _upstream(sock: socket.socket, stop: threading.Event) -> None:
    sock.settimeout(0.2)
    while not stop.is_set():
        try:
            data, peer = sock.recvfrom(4096)
        except TimeoutError:
            continue
        q = dns.message.from_wire(data)
        answer = dns.message.make_response(q)
        answer.answer.append(dns.rrset.from_text(q.question[0].name, 60, "IN", "A", "192.0.2.1"))
        sock.sendto(answer.to_wire(), peer)


def _client(port: int, names: list[str], tcp: bool, replies: list[object]) -> None:
    if tcp:
        for name in names:
            replies.append(dns.query.tcp(dns.message.make_query(name, "A"), "127.0.0.1", port=port,
                                         timeout=3))
        return
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(3)
        for name in names:
            sock.sendto(dns.message.make_query(name, "A").to_wire(), ("127.0.0.1", port))
            replies.append(sock.recvfrom(4096)[0])


async def measure(queries: int) -> dict[str, tuple[float, float]]:
    """(Python calls, C calls) per query: UDP miss and hit, TCP miss and hit."""
    up = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    up.bind(("127.0.0.1", 0))
    stop = threading.Event()
    answering = threading.Thread(target=_upstream, args=(up, stop), daemon=True)
    answering.start()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    srv = Server(config.loads(f". {{\n bind 127.0.0.1\n cache 30\n forward . 127.0.0.1:"
                              f"{up.getsockname()[1]}\n}}\n", default_port=port))
    await srv.start()
    loop = asyncio.get_running_loop()
    out: dict[str, tuple[float, float]] = {}
    try:
        for label, prefix, tcp in (("warm-up", "w", False), ("udp miss", "u", False), ("udp hit", "u", False),
                                   ("tcp miss", "t", True), ("tcp hit", "t", True)):
            names = [f"{prefix}{i}.example." for i in range(queries)]
            counts: collections.Counter[str] = collections.Counter()

            def count(frame: FrameType, event: str, arg: object,
                      counts: collections.Counter[str] = counts) -> None:
                if event in ("call", "c_call"):
                    counts[event] += 1

            replies: list[object] = []
            client = threading.Thread(target=_client, args=(port, names, tcp, replies))
            sys.setprofile(count)
            try:
                client.start()
                await loop.run_in_executor(None, client.join)  # the loop sleeps in epoll meanwhile
            finally:
                sys.setprofile(None)
            if len(replies) != queries:
                raise RuntimeError(f"{label}: {len(replies)} replies to {queries} queries")
            if label != "warm-up":
                out[label] = (counts["call"] / queries, counts["c_call"] / queries)
    finally:
        srv.close()
        stop.set()
        answering.join(1.0)  # within its 0.2 s receive timeout
        up.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.calls", description=__doc__.split("\n\n")[0])
    p.add_argument("--queries", type=int, default=300, help="names asked in each part (300)")
    a = p.parse_args(argv)
    for label, (python, c) in asyncio.run(measure(a.queries)).items():
        print(f"{label}: {python:.1f} Python calls + {c:.1f} C calls per query")
    return 0


if __name__ == "__main__":
    sys.exit(main())
