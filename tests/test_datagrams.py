"""recvmmsg/sendmmsg batches (datagrams.py) against recvfrom/sendto, on real loopback sockets.

Both readers must hand the server the same datagrams and senders, and every reply must
reach the sender of the datagram it answers, whatever the pattern of answered and
unanswered (miss) datagrams in a batch.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import dns.message
import dns.rcode
import dns.rdatatype
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splitdns import config
from splitdns.codec import wire
from splitdns.core import metrics
from splitdns.core.routing import Router
from splitdns.shell import datagrams, server, udp
from splitdns.shell import listener as listener_module
from tests.helpers import reply
from tests.support.hostile import ask_udp
from tests.support.inprocess import FakeUpstream, Handle, replies_to, run, with_server
from tests.support.prerequisites import skip_or_fail
from tests.support.processes import free_port

READERS = [datagrams.Batch, datagrams.OneByOne]
T = TypeVar("T")


@contextmanager
def sockets(family: socket.AddressFamily,
            clients: int) -> Iterator[tuple[socket.socket, list[socket.socket]]]:
    host = "::1" if family == socket.AF_INET6 else "127.0.0.1"
    try:
        listener = socket.socket(family, socket.SOCK_DGRAM)
        listener.bind((host, 0))
    except OSError as err:
        skip_or_fail(f"no {host} here: {err}")
    listener.setblocking(False)
    senders = [socket.socket(family, socket.SOCK_DGRAM) for _ in range(clients)]
    try:
        for s in senders:
            s.bind((host, 0))
            s.settimeout(1.0)
            s.connect(listener.getsockname()[:2])
        yield listener, senders
    finally:
        for s in senders:
            s.close()
        listener.close()


def read_all(reader: datagrams.Batch | datagrams.OneByOne, expected: int) -> list[tuple[bytes, object]]:
    """Every datagram waiting, over as many receives as it takes (bounded)."""
    got: list[tuple[bytes, object]] = []
    for _ in range(expected + 5):
        count = reader.receive()
        got += [(reader.datagram(i), reader.peer(i)) for i in range(count)]
        if len(got) >= expected:
            break
    return got


@pytest.mark.parametrize("reader_class", READERS)
@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_a_reader_gives_each_datagram_and_its_sender_as_recvfrom_does(
        reader_class: type[datagrams.Batch | datagrams.OneByOne], family: socket.AddressFamily) -> None:
    with sockets(family, 3) as (listener, senders):
        reader = reader_class(listener, size=4)
        assert reader.receive() == 0  # nothing waiting: no block, no datagram
        sent = []
        for n in range(7):  # more than one batch of 4
            payload = bytes([n]) * (1 + n * 600)  # up to 3601 bytes
            senders[n % 3].send(payload)
            sent.append((payload, senders[n % 3].getsockname()))
        got = read_all(reader, len(sent))
        assert [data for data, _ in got] == [data for data, _ in sent]
        assert [peer for _, peer in got] == [peer for _, peer in sent]


def test_senders_decoded_once_are_kept_up_to_a_bound_and_stay_right(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datagrams, "PEERS_KEPT", 3)
    decoded: list[bytes] = []
    real_sockaddr = datagrams._sockaddr

    def counted(raw: bytes) -> datagrams.Peer:
        decoded.append(raw)
        return real_sockaddr(raw)

    monkeypatch.setattr(datagrams, "_sockaddr", counted)
    with sockets(socket.AF_INET, 4) as (listener, senders):
        batch = datagrams.Batch(listener, size=4)
        sent = []
        for round_no in range(2):  # three senders, twice each: decoded once each
            for n, s in enumerate(senders[:3]):
                s.send(b"%d-%d" % (round_no, n))
                sent.append(s.getsockname())
        got = read_all(batch, len(sent))
        assert [peer for _, peer in got] == sent
        assert len(decoded) == 3
        senders[3].send(b"fourth")  # one more than kept: the table starts over
        senders[0].send(b"first again")
        got = read_all(batch, 2)
        assert [peer for _, peer in got] == [senders[3].getsockname(), senders[0].getsockname()]
        assert len(decoded) == 5 and len(batch._peers) == 2


@pytest.mark.parametrize("reader_class", READERS)
def test_each_reply_reaches_the_sender_of_its_datagram_around_unanswered_ones(
        reader_class: type[datagrams.Batch | datagrams.OneByOne]) -> None:
    with sockets(socket.AF_INET, 6) as (listener, senders):
        reader = reader_class(listener, size=8)
        for n, s in enumerate(senders):
            s.send(b"q%d" % n)
        count = reader.receive()
        assert count == 6
        answered = [0, 1, 3, 5]  # 2 and 4 are misses: they end runs of consecutive replies
        for i in answered:
            reader.reply(i, b"reply to " + reader.datagram(i))
        reader.send()
        for n in answered:
            assert senders[n].recv(100) == b"reply to q%d" % n
        # Loopback delivers a datagram within the send call, and send() has returned with the
        # replies around the misses delivered: a reply to a miss would be waiting by now.
        for n in set(range(6)) - set(answered):
            senders[n].setblocking(False)
            with pytest.raises(BlockingIOError):
                senders[n].recv(100)


def test_a_reply_larger_than_a_slot_still_goes_out() -> None:
    with sockets(socket.AF_INET, 1) as (listener, (client,)):
        batch = datagrams.Batch(listener, size=2)
        client.send(b"q")
        assert batch.receive() == 1
        big = b"x" * (datagrams.DATAGRAM_BYTES + 100)
        batch.reply(0, big)
        batch.send()
        assert client.recv(10000) == big


@dataclass
class Tail:
    tail: bytes


def knows_odd(after_id: bytes, now: float) -> Tail | None:
    """A finder that knows the replies to the odd-numbered senders' datagrams."""
    return Tail(after_id + b"!") if len(after_id) and after_id[0] % 2 else None


@given(st.lists(st.tuples(st.integers(3, datagrams.DATAGRAM_BYTES), st.booleans()), min_size=1, max_size=12))
@settings(max_examples=40, deadline=None)
def test_batch_and_one_by_one_deliver_the_same(plan: list[tuple[int, bool]]) -> None:
    """Any sizes, any answered/unanswered pattern, replies known to a finder (written after
    the query's ID) or made by the caller: the clients receive the same replies."""
    received: dict[str, list[bytes]] = {}
    for reader_class in READERS:
        with sockets(socket.AF_INET, len(plan)) as (listener, senders):
            reader = reader_class(listener, size=5)
            for n, (size, _) in enumerate(plan):
                senders[n].send(bytes([n]) * size)
            got = 0
            for _ in range(len(plan) + 5):
                count = reader.receive()
                found: list[Tail] = []
                others = reader.answer_known(knows_odd, 0.0, found)  # the ID stays the query's
                assert len(found) + len(others) == count and others == sorted(others)
                for i in others:
                    data = reader.datagram(i)
                    assert data[0] % 2 == 0  # the finder knew every odd one
                    if plan[data[0]][1]:
                        reader.reply(i, data + b"!")
                got += count
                if got >= len(plan):
                    break
            reader.send()
            replies = []
            for n, (_, answer) in enumerate(plan):
                senders[n].settimeout(1.0 if answer or n % 2 else 0.01)
                try:
                    replies.append(senders[n].recv(datagrams.DATAGRAM_BYTES + 1))
                except TimeoutError:
                    replies.append(b"")
            received[reader_class.__name__] = replies
    assert received["Batch"] == received["OneByOne"]
    assert received["Batch"] == [bytes([n]) * size + b"!" if answer or n % 2 else b""
                                 for n, (size, answer) in enumerate(plan)]


def test_the_server_answers_through_the_fallback_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where recvmmsg is missing, hits and misses are served the same, one datagram at a time."""
    monkeypatch.setattr(datagrams, "open_batch", datagrams.OneByOne)
    port = free_port("127.0.0.1")

    async def scenario() -> tuple[list[dns.message.Message], tuple[int, int]]:
        async with FakeUpstream(lambda q: reply(q, f"{q.question[0].name} 300 IN A 192.0.2.7")) as up:
            srv = server.Server(cached_forward(port, up.addr, up.port))
            await srv.start()
            try:
                assert isinstance(srv.listeners[0].batch, datagrams.OneByOne)
                replies = [await asyncio.to_thread(ask, port, "www.example.", qid) for qid in (1, 2, 3)]
                stats = next(iter(srv.zones.values())).stats
                return replies, (stats.cache_misses, stats.cache_hits)
            finally:
                srv.close()

    replies, (misses, hits) = run(scenario)
    assert [r.id for r in replies] == [1, 2, 3]
    assert all(r.rcode() == dns.rcode.NOERROR for r in replies)
    assert all(r.answer[0][0].address == "192.0.2.7" for r in replies)
    assert (misses, hits) == (1, 2)


def ask(port: int, name: str, qid: int, qtype: str = "A") -> dns.message.Message:
    query = dns.message.make_query(name, qtype)
    query.id = qid
    with closing(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)) as s:
        s.settimeout(5)
        s.sendto(query.to_wire(), ("127.0.0.1", port))
        return dns.message.from_wire(s.recv(4096))


def test_a_receive_error_other_than_eagain_is_raised_not_taken_for_silence() -> None:
    """Silence would leave the socket readable and the loop spinning on it."""
    with sockets(socket.AF_INET, 1) as (listener, _):
        batch = datagrams.Batch(listener)
        spare = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        batch.fd = spare.fileno()
        spare.close()  # a descriptor that no longer exists: EBADF, a real recvmmsg error
        with pytest.raises(OSError) as raised:
            batch.receive()
    assert raised.value.errno == errno.EBADF


def test_sendmmsg_interrupted_without_end_gives_up_after_a_bound() -> None:
    """EINTR is retried, but a signal storm must not hold the loop: after MAX_INTERRUPTED
    retries the replies are dropped one per call, as a failed send is."""
    with sockets(socket.AF_INET, 3) as (listener, senders):
        for s in senders:
            s.send(b"query")
        time.sleep(0.05)
        batch = datagrams.Batch(listener)
        assert batch.receive() == 3
        for i in range(3):
            batch.reply(i, b"reply")
        calls = []

        def interrupted(*args: object) -> int:
            calls.append(args)
            ctypes.set_errno(errno.EINTR)
            return -1

        batch._send = interrupted
        batch.send()
    assert len(calls) == datagrams.MAX_INTERRUPTED + 3


def test_opening_a_batch_leaves_a_waiting_query_queued() -> None:
    """open_batch checks that recvmmsg works with a peek, which must not eat a query."""
    with sockets(socket.AF_INET, 1) as (listener, (client,)):
        client.send(b"early")
        time.sleep(0.05)
        reader = datagrams.open_batch(listener)
        assert isinstance(reader, datagrams.Batch)
        assert reader.receive() == 1 and reader.datagram(0) == b"early"


def serving_behind(handle: Handle, conf: Callable[[FakeUpstream], config.Config],
                   scenario: Callable[[server.Server], Awaitable[T]]) -> T:
    """`scenario` against a started in-process server whose upstream answers with `handle`."""
    async def run_it() -> T:
        async with FakeUpstream(handle) as up:
            srv = server.Server(conf(up))
            await srv.start()
            try:
                return await scenario(srv)
            finally:
                srv.close()

    return run(run_it)


def cached_forward(port: int, up_addr: str, up_port: int) -> config.Config:
    """A cache in front of one upstream: the first ask is a miss, repeats are hits."""
    return config.loads(f". {{\n bind 127.0.0.1\n cache 30\n forward . {up_addr}:{up_port}\n}}\n",
                        default_port=port)


def upstreamless(port: int) -> config.Config:
    """A block whose upstream is never asked: the queries below are answered locally."""
    return config.loads(f"example {{\n bind 127.0.0.1\n forward . 127.0.0.1:{port + 1}\n}}\n",
                        default_port=port)


def notimp_query(qid: int) -> bytes:
    query = dns.message.make_query("www.example.", "A")
    query.id = qid
    data = bytearray(query.to_wire())
    data[2] |= 2 << 3  # opcode STATUS: answered NOTIMP at once, no upstream involved
    return bytes(data)


def test_a_failing_recvmmsg_turns_the_listener_to_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A seccomp filter refusing recvmmsg cannot be set up here: the libc call is replaced
    by one that fails with EPERM, as such a filter would make it."""
    port = free_port("127.0.0.1")

    def refused(*args: object) -> int:
        ctypes.set_errno(errno.EPERM)
        return -1

    async def scenario(srv: server.Server) -> tuple[type, list[bytes | None]]:
        listener = srv.listeners[0]
        assert isinstance(listener.batch, datagrams.Batch)
        monkeypatch.setattr(listener.batch, "_receive", refused)
        listener.last_count = datagrams.BATCH  # as after a full read: the next is a batch
        # The failed call took nothing from the socket: the query is read one by one.
        first, _ = await asyncio.to_thread(ask_udp, port, notimp_query(7), 5)
        second, _ = await asyncio.to_thread(ask_udp, port, notimp_query(8), 5)
        return type(listener.batch), [r[:2] if r else None for r in (first, second)]

    kind, ids = with_server(upstreamless(port), scenario)
    assert kind is datagrams.OneByOne and ids == [b"\x00\x07", b"\x00\x08"]


def test_an_internal_error_on_one_datagram_loses_only_that_one(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port("127.0.0.1")
    real = udp.UdpPath._answer_hit

    def answer_hit(self: udp.UdpPath, zone: Any, q: wire.Query, *args: Any) -> bool:
        if b"boom" in q.name:
            raise RuntimeError("a bug of ours")
        return real(self, zone, q, *args)

    monkeypatch.setattr(udp.UdpPath, "_answer_hit", answer_hit)
    boom = dns.message.make_query("boom.example.", "A").to_wire()

    async def scenario(srv: server.Server) -> tuple[list[bytes | None], int]:
        listener = srv.listeners[0]
        clients = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3)]
        try:
            for c, data in zip(clients, [notimp_query(1), boom, notimp_query(3)], strict=True):
                c.sendto(data, ("127.0.0.1", port))
            listener.last_count = datagrams.BATCH  # as after a full read: the next is a batch
            srv.udp.readable(listener)  # the three in one batch, before the loop wakes
            return replies_to(clients), srv.internal_errors
        finally:
            for c in clients:
                c.close()

    replies, errors = with_server(upstreamless(port), scenario)
    assert errors == 1 and replies[1] is None
    assert [r[:2] if r else None for r in (replies[0], replies[2])] == [b"\x00\x01", b"\x00\x03"]
    assert all(r is not None and r[3] & 0xF == dns.rcode.NOTIMP for r in (replies[0], replies[2]))


def test_hits_are_counted_by_kind_in_a_batch_of_one_and_of_many() -> None:
    """A single hit skips the per-kind tally (the usual batch at a pod's rates); a batch
    mixing kinds counts each kind. Every reply is counted once, either way."""
    port = free_port("127.0.0.1")

    def a_and_aaaa(q: dns.message.Message) -> dns.message.Message:
        record = "A 192.0.2.7" if q.question[0].rdtype == dns.rdatatype.A else "AAAA 2001:db8::7"
        return reply(q, f"{q.question[0].name} 300 IN {record}")

    async def scenario(srv: server.Server) -> tuple[list[int], object]:
        for qtype in ("A", "AAAA"):  # the two misses fill the cache
            await asyncio.to_thread(ask, port, "www.example.", 1, qtype)
        for qid in (2, 3):  # alone: rendered from the cache, then from the memo
            await asyncio.to_thread(ask, port, "www.example.", qid, "A")
        clients = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(5)]
        try:
            kinds = ["A", "A", "A", "AAAA", "AAAA"]
            for qid, (c, qtype) in enumerate(zip(clients, kinds, strict=True)):
                query = dns.message.make_query("www.example.", qtype)
                query.id = 10 + qid
                c.sendto(query.to_wire(), ("127.0.0.1", port))
            srv.listeners[0].last_count = datagrams.BATCH  # as after a full read
            srv.udp.readable(srv.listeners[0])  # the five in one batch
            ids = []
            for c in clients:
                c.settimeout(2)
                ids.append(dns.message.from_wire(c.recv(4096)).id)
        finally:
            for c in clients:
                c.close()
        return ids, next(iter(srv.zones.values())).stats

    ids, stats = serving_behind(a_and_aaaa, lambda up: cached_forward(port, up.addr, up.port), scenario)
    assert ids == [10, 11, 12, 13, 14]
    assert isinstance(stats, metrics.ZoneStats)
    assert (stats.cache_misses, stats.cache_hits) == (2, 7)
    assert dict(stats.requests) == {("udp", "1", "A"): 6, ("udp", "1", "AAAA"): 3}
    assert (stats.durations["A"].total, stats.durations["AAAA"].total) == (6, 3)
    assert dict(stats.responses) == {("NOERROR", "forward"): 2, ("NOERROR", "cache"): 7}


def test_reads_far_apart_take_one_datagram_and_close_ones_a_batch() -> None:
    """Listener.reader's rule alone: a read long after one that found a single datagram is a
    pod's pace (recvfrom); a read soon after the last, or after one that found several, a
    queue (recvmmsg)."""
    with sockets(socket.AF_INET, 0) as (sock, _):
        listener = listener_module.Listener("127.0.0.1", 0, Router([]))
        listener.batch, listener.single = datagrams.open_batch(sock), datagrams.OneByOne(sock, 1)
        gap = listener_module.QUIET_GAP
        reads = [(10.0, 1), (10.0 + 10 * gap, 1), (10.0 + 10.2 * gap, 4), (20.0, 1), (30.0, 0),
                 (30.0 + gap / 2, 1)]
        alone = []
        for now, found in reads:
            alone.append(listener.reader(now) is listener.single)
            listener.last_count = found
    assert alone == [True, True, False, False, True, False]


def test_the_server_reads_a_lone_query_alone_and_the_queue_behind_it_as_a_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Real sockets, a clock the test moves: the first wakeup after a quiet second reads one
    query by recvfrom; the next, right behind it, finds two waiting and reads them together.
    Each of the three replies reaches its sender."""
    port = free_port("127.0.0.1")
    now = [100.0]
    reads: dict[str, list[int]] = {"single": [], "batch": []}

    def counting(name: str, receive: Callable[[], int]) -> Callable[[], int]:
        def counted() -> int:
            got = receive()
            reads[name].append(got)
            return got
        return counted

    async def scenario(srv: server.Server) -> list[bytes | None]:
        listener = srv.listeners[0]
        for name in reads:
            reader = getattr(listener, name)
            monkeypatch.setattr(reader, "receive", counting(name, reader.receive))
        clients = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3)]
        try:
            for qid, c in enumerate(clients, 1):
                c.sendto(notimp_query(qid), ("127.0.0.1", port))
            now[0] += 1.0
            srv.udp.readable(listener)
            now[0] += listener_module.QUIET_GAP / 10
            srv.udp.readable(listener)
            return replies_to(clients)
        finally:
            for c in clients:
                c.close()

    replies = with_server(upstreamless(port), scenario, clock=lambda: now[0])
    assert reads == {"single": [1], "batch": [2]}
    assert [r[:2] if r else None for r in replies] == [b"\x00\x01", b"\x00\x02", b"\x00\x03"]
    assert all(r is not None and r[3] & 0xF == dns.rcode.NOTIMP for r in replies)
