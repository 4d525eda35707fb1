"""The flights of misses (shell/flights.py) and their driver on loop callbacks (shell/misses.py).

An in-process server in front of scripted upstream processes on 127.0.0.x, asked by real UDP
and TCP clients. Every miss, whichever client asked, boards a flight `Flights` owns and the one
driver flies it; each behaviour is one test over both client paths (a UDP client answered from
a callback, a coroutine: a TCP client, or `Flights.answer` which it runs): forgeries dropped
while the attempt waits, failover on its timer, merging across the paths, the pending cap, a
bug of ours answered, a client that goes away, drain and stop, each landing its flight once.
The hostile suites (test_hostile_*.py) run the same through `splitdns serve`.
"""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from typing import TypeVar

import dns.flags
import dns.message
import dns.rcode
import dns.rrset
import pytest

from splitdns import config
from splitdns.codec import wire
from splitdns.core.flight import ABANDONED, Flight
from splitdns.core.zone import Zone
from splitdns.shell import datagrams, server
from tests.helpers import query
from tests.support.hostile import ask_tcp, ask_udp, names_seen, rcode_of, rdata
from tests.support.inprocess import FakeUpstream, replies_to, serving, with_server
from tests.support.inprocess import ask as ask_in_process
from tests.support.processes import free_port, scripted_upstream

T = TypeVar("T")
GENUINE = "192.0.2.1"
# An upstream that answers every name after 400 ms: long enough for other clients to join.
SLOW_GENUINE = [{"suffix": ".", "delay_ms": 400, "records": [f"{{qname}} 60 IN A {GENUINE}"]}]
CLIENTS = ["udp", "tcp"]


def corefile(port: int, forward: str, options: str = "") -> config.Config:
    return config.loads(f". {{\n bind 127.0.0.1\n cache 30\n forward . {forward} {{\n {options}\n }}\n}}\n",
                        default_port=port)


async def ask_over(client: str, port: int, name: str, qid: int = 0x1234,
                   timeout: float = 3.0) -> dns.message.Message | None:
    """One query from a real client over UDP or TCP; None when nobody answered."""
    ask_by = ask_udp if client == "udp" else ask_tcp
    raw, _ = await asyncio.to_thread(ask_by, port, query(name, qid=qid), timeout)
    return None if raw is None else dns.message.from_wire(raw)


def in_flight(srv: server.Server) -> list[Flight]:
    return list(srv.flights.table)


def waiting_on(srv: server.Server) -> list[int]:
    """How many clients wait on each flight under way."""
    return [len(w) for w in srv.flights.table.values()]


def coroutine_asks(srv: server.Server, name: str) -> asyncio.Task[tuple[bytes, Zone | None, object]]:
    """The coroutine path as a TCP client's task runs it (`Flights.answer`), in this process."""
    q = wire.parse_query(query(name).to_wire())
    assert q is not None
    return asyncio.create_task(srv.flights.answer(q, srv.listeners[0]))


@pytest.mark.parametrize("client", CLIENTS)
def test_a_miss_waits_on_callbacks_and_drops_forgeries_until_the_genuine_reply(
        tmp_path: Path, client: str) -> None:
    forge = {"wrong_id": 1, "wrong_question": 1, "wrong_qtype": 1, "qr_clear": 1}
    rules = [{"suffix": ".", "delay_ms": 400, "forge": forge, "records": [f"{{qname}} 60 IN A {GENUINE}"]}]
    port = free_port("127.0.0.1")
    with scripted_upstream(tmp_path, rules, "127.0.0.31") as up:

        async def scenario(srv: server.Server) -> None:
            asked = asyncio.create_task(ask_over(client, port, "www.callback.test."))
            await asyncio.sleep(0.2)  # the forgeries are in, the genuine reply is not
            assert len(in_flight(srv)) == 1
            assert len(srv.misses.waiting) == 1  # a socket in the epoll set
            assert not srv.tasks  # no task for the attempt, whoever asked
            assert srv.counters.mismatched == len(forge)
            msg = await asked
            assert msg is not None and msg.rcode() == dns.rcode.NOERROR and rdata(msg) == [GENUINE]
            assert not in_flight(srv) and not srv.misses.waiting
            assert srv.counters.mismatched == len(forge)

        with_server(corefile(port, up.target), scenario)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_timeout_on_the_callback_path_fails_over_to_the_next_upstream(tmp_path: Path, client: str) -> None:
    answer = [{"suffix": ".", "records": [f"{{qname}} 60 IN A {GENUINE}"]}]
    port = free_port("127.0.0.1")
    with scripted_upstream(tmp_path, [{"suffix": ".", "action": "drop"}], "127.0.0.31") as dead, \
            scripted_upstream(tmp_path, answer, "127.0.0.32") as alive:

        async def scenario(srv: server.Server) -> None:
            began = time.monotonic()
            msg = await ask_over(client, port, "www.failover.test.")
            took = time.monotonic() - began
            assert msg is not None and rdata(msg) == [GENUINE]
            # The dead one was asked first (sequential) and its read_timeout ran out.
            asked = [[n for n in names_seen(u) if n != "."] for u in (dead, alive)]  # not probes
            assert asked == [["www.failover.test."], ["www.failover.test."]]
            assert took >= 0.3
            zone = next(iter(srv.zones.values()))
            assert zone.stats.upstream[(dead.target, "timeout")].total == 1
            assert zone.stats.upstream[(alive.target, "NOERROR")].total == 1
            assert zone.forwards[0].upstreams[0].fails == 1  # its health knows it
            assert not in_flight(srv)

        with_server(corefile(port, f"{dead.target} {alive.target}", "policy sequential\n read_timeout 300ms"),
                scenario)


@pytest.mark.parametrize("first", CLIENTS)
def test_identical_queries_of_both_paths_share_one_upstream_query(tmp_path: Path, first: str) -> None:
    """Whichever path asks first, the identical queries of the other (and its own) join its
    flight: one upstream query, and each client its own answer (ID, spelling); the UDP
    clients that join make no task."""
    other = "tcp" if first == "udp" else "udp"
    port = free_port("127.0.0.1")
    with scripted_upstream(tmp_path, SLOW_GENUINE, "127.0.0.31") as up:

        async def scenario(srv: server.Server) -> None:
            asked = [asyncio.create_task(ask_over(first, port, "www.merged.test.", 1))]
            await asyncio.sleep(0.15)
            tasks = len(srv.tasks)
            asked.append(asyncio.create_task(ask_over(first, port, "WWW.merged.test.", 2)))
            asked.append(asyncio.create_task(ask_over(other, port, "Www.Merged.test.", 3)))
            await asyncio.sleep(0.1)
            assert waiting_on(srv) == [3]
            assert len(srv.tasks) == tasks  # nobody made a task to wait
            answers = [await a for a in asked]
            assert [m.id for m in answers if m is not None] == [1, 2, 3]
            assert all(m is not None and rdata(m) == [GENUINE] for m in answers)
            spelt = [m.question[0].name.to_text() for m in answers if m is not None]
            assert spelt == ["www.merged.test.", "WWW.merged.test.", "Www.Merged.test."]
            assert names_seen(up) == ["www.merged.test."]
            assert not in_flight(srv)

        with_server(corefile(port, up.target), scenario)


@pytest.mark.parametrize("client", CLIENTS)
def test_the_pending_cap_refuses_as_the_zone_decides(tmp_path: Path, client: str) -> None:
    port = free_port("127.0.0.1")
    with scripted_upstream(tmp_path, SLOW_GENUINE, "127.0.0.31") as up:

        async def scenario(srv: server.Server) -> None:
            first = asyncio.create_task(ask_over("udp", port, "one.capped.test.", 1))
            await asyncio.sleep(0.1)
            second = await ask_over(client, port, "two.capped.test.", 2)
            assert second is not None and second.rcode() == dns.rcode.REFUSED
            msg = await first
            assert msg is not None and rdata(msg) == [GENUINE]
            assert names_seen(up) == ["one.capped.test."]

        capped = f". {{\n bind 127.0.0.1\n limits {{\n  pending 1\n }}\n forward . {up.target}\n}}\n"
        with_server(config.loads(capped, default_port=port), scenario)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_bug_of_ours_answers_servfail_is_counted_and_lands_the_flight(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: str) -> None:
    """A bug while the flight settles, with a UDP client and a TCP one waiting: each gets
    SERVFAIL, the bug is counted once, and the flight is abandoned, so nothing is left pending."""
    rules = [{"suffix": ".", "delay_ms": 200, "records": [f"{{qname}} 60 IN A {GENUINE}"]}]
    port = free_port("127.0.0.1")

    def broken(self: Zone, *args: object) -> None:
        raise RuntimeError("a bug in storing")

    monkeypatch.setattr(Zone, "store", broken)
    with scripted_upstream(tmp_path, rules, "127.0.0.31") as up:

        async def scenario(srv: server.Server) -> None:
            asked = asyncio.create_task(ask_over(client, port, "www.bug.test."))
            await asyncio.sleep(0.1)
            joined = await ask_over("tcp" if client == "udp" else "udp", port, "www.bug.test.")
            msg = await asked
            assert msg is not None and msg.rcode() == dns.rcode.SERVFAIL
            assert joined is not None and joined.rcode() == dns.rcode.SERVFAIL
            assert srv.internal_errors == 1
            zone = next(iter(srv.zones.values()))
            assert not in_flight(srv) and (zone.pending, zone.forwards[0].inflight) == (0, 0)

        with_server(corefile(port, up.target), scenario)


def test_a_bug_answering_one_client_leaves_the_others_their_answer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Our own bug while one waiting client's answer is made (here for the one that spelt the
    name in capitals): that client gets SERVFAIL and the bug is counted; the other clients of
    the flight, of either path, still get their answer."""
    port = free_port("127.0.0.1")
    finish = Zone.finish

    def broken_for_capitals(self: Zone, q: wire.Query, *args: object) -> object:
        if q.question.startswith(b"\x03WWW"):
            raise RuntimeError("a bug in answering")
        return finish(self, q, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Zone, "finish", broken_for_capitals)
    with scripted_upstream(tmp_path, SLOW_GENUINE, "127.0.0.31") as up:

        async def scenario(srv: server.Server) -> None:
            asked = [asyncio.create_task(ask_over("udp", port, "www.shared.test.", 1))]
            await asyncio.sleep(0.1)
            asked.append(asyncio.create_task(ask_over("udp", port, "WWW.shared.test.", 2)))
            asked.append(asyncio.create_task(ask_over("tcp", port, "www.Shared.test.", 3)))
            first, broken, over_tcp = [await a for a in asked]
            assert broken is not None and broken.id == 2 and broken.rcode() == dns.rcode.SERVFAIL
            assert first is not None and rdata(first) == [GENUINE]
            assert over_tcp is not None and over_tcp.id == 3 and rdata(over_tcp) == [GENUINE]
            assert srv.internal_errors == 1 and names_seen(up) == ["www.shared.test."]

        with_server(corefile(port, up.target), scenario)


def test_a_client_that_goes_away_leaves_the_flight_to_the_others(tmp_path: Path) -> None:
    """The coroutine of the client that started the flight is cancelled (a TCP client gone)
    while it waits upstream: the flight goes on, the UDP client that joined it gets the
    answer, the cache keeps it, and nothing is left pending."""
    port = free_port("127.0.0.1")
    with scripted_upstream(tmp_path, SLOW_GENUINE, "127.0.0.31") as up:

        async def scenario(srv: server.Server) -> None:
            asked = coroutine_asks(srv, "www.halted.test.")
            await asyncio.sleep(0.1)
            joined = asyncio.create_task(ask_over("udp", port, "www.halted.test."))
            await asyncio.sleep(0.1)
            zone = next(iter(srv.zones.values()))
            assert zone.pending == 1 and waiting_on(srv) == [2]
            asked.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asked
            msg = await joined
            assert msg is not None and rdata(msg) == [GENUINE]
            assert not in_flight(srv)
            assert (zone.pending, zone.forwards[0].inflight, zone.flights) == (0, 0, {})
            assert zone.cache is not None and len(zone.cache) == 1
            assert names_seen(up) == ["www.halted.test."]

        with_server(corefile(port, up.target), scenario)


@pytest.mark.parametrize("client", ["udp", "coroutine"])
def test_drain_waits_for_the_misses_in_flight(tmp_path: Path, client: str) -> None:
    rules = [{"suffix": ".", "delay_ms": 300, "records": [f"{{qname}} 60 IN A {GENUINE}"]}]
    port = free_port("127.0.0.1")
    with scripted_upstream(tmp_path, rules, "127.0.0.31") as up:

        async def scenario(srv: server.Server) -> None:
            asked: asyncio.Task[object] = asyncio.create_task(ask_over("udp", port, "www.drain.test.")) \
                if client == "udp" else coroutine_asks(srv, "www.drain.test.")
            await asyncio.sleep(0.1)
            assert in_flight(srv)
            began = time.monotonic()
            await srv.drain(5.0)
            assert not in_flight(srv)  # finished, not abandoned: its answer went to the cache
            assert 0.1 <= time.monotonic() - began < 4.0
            zone = next(iter(srv.zones.values()))
            assert zone.cache is not None and len(zone.cache) == 1
            # The listener closed first: no reply over UDP; the coroutine has its own.
            answered = await asked
            if client == "udp":
                assert answered is None
            else:
                assert isinstance(answered, tuple) and rdata(dns.message.from_wire(answered[0])) == [GENUINE]

        with_server(corefile(port, up.target), scenario)


@pytest.mark.parametrize("client", ["udp", "coroutine"])
def test_a_server_stop_answers_nobody_and_lands_the_misses_in_flight(tmp_path: Path, client: str) -> None:
    """As a cancelled task: no answer, and the flight leaves the zone's table and its counts
    (core/flight.py: abandoned), so nothing is left pending."""
    port = free_port("127.0.0.1")
    with scripted_upstream(tmp_path, SLOW_GENUINE, "127.0.0.31") as up:

        async def scenario(srv: server.Server) -> None:
            asked: asyncio.Task[object] = \
                asyncio.create_task(asyncio.to_thread(ask_udp, port, query("www.stopped.test."), 1.0)) \
                if client == "udp" else coroutine_asks(srv, "www.stopped.test.")
            await asyncio.sleep(0.15)
            [flight] = in_flight(srv)
            zone = next(iter(srv.zones.values()))
            assert zone.pending == 1 and zone.forwards[0].inflight == 1
            srv.close()
            assert not in_flight(srv) and not srv.misses.waiting
            assert (zone.pending, zone.forwards[0].inflight, zone.flights) == (0, 0, {})
            assert flight.state is ABANDONED
            if client == "udp":
                raw, _ = await asked  # type: ignore[misc]
                assert raw is None  # nobody answered
            else:
                with pytest.raises(asyncio.CancelledError):
                    await asked

        with_server(corefile(port, up.target), scenario)


def test_an_upstream_reply_larger_than_a_page_is_read_whole_on_the_callback_path() -> None:
    """We ask for 1232 bytes at most, yet an upstream may send more over UDP: the reply is
    read whole (not cut at 4096 and dropped as unparseable), cached, and served in full over
    TCP after the UDP client got the truncated reply its size allows."""
    addresses = [f"10.{i // 250}.{i % 250}.1" for i in range(300)]

    def large(q: dns.message.Message) -> bytes:
        answer = dns.message.make_response(q)
        answer.use_edns(-1)  # no OPT: dnspython would hold the reply to the size we asked for
        answer.answer.append(dns.rrset.from_text_list(q.question[0].name, 60, "IN", "A", addresses))
        data: bytes = answer.to_wire(max_size=65535)
        return data

    async def scenario() -> tuple[int, dns.message.Message | None, dns.message.Message | None]:
        async with FakeUpstream(large) as up, \
                serving(f". {{\n cache 30\n forward . {up.target}\n}}\n") as s:
            on_udp = await s.ask(query("big.example."))
            on_tcp = await ask_in_process(s.port, query("big.example."), tcp=True)
            return len(large(query("big.example."))), on_udp, on_tcp

    size, on_udp, on_tcp = asyncio.run(asyncio.wait_for(scenario(), 20))
    assert size > 4096
    assert on_udp is not None and on_udp.flags & dns.flags.TC
    assert on_tcp is not None and len(rdata(on_tcp)) == 300


def test_the_attempts_of_one_read_share_one_deadline_and_leave_it_as_they_end() -> None:
    """One loop timer for the attempts sent in the same millisecond with the same timeout
    (`misses.Deadline`): an answered attempt empties its slot at once, the others expire
    together, fail over on a deadline of their own, and no deadline outlives its attempts."""

    def handle(q: dns.message.Message) -> dns.message.Message | None:
        if q.question[0].name.to_text().startswith("dead"):
            return None  # a blackhole for these names
        answer = dns.message.make_response(q)
        answer.answer.append(dns.rrset.from_text(q.question[0].name, 60, "IN", "A", GENUINE))
        return answer

    async def scenario() -> tuple[list[tuple[int, int]], list[str]]:
        async with FakeUpstream(handle) as up, serving(f". {{\n cache 30\n forward . {up.target} {{\n"
                                                       " read_timeout 300ms\n max_fails 0\n }\n}\n") as s:
            misses = s.server.misses
            clients = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3)]
            try:
                for c, name in zip(clients, ["dead1.test.", "dead2.test.", "live.test."], strict=True):
                    c.sendto(query(name).to_wire(), ("127.0.0.1", s.port))
                listener = s.server.listeners[0]
                listener.last_count = datagrams.BATCH  # as after a full read: the next is a batch
                # One read, three misses sent at once. The clock stands still for the read, as
                # uvloop's does for a turn of its loop (this test runs on asyncio's, whose clock
                # moves on: on a busy machine the three could straddle a millisecond).
                loop = asyncio.get_running_loop()
                frozen = loop.time()
                loop.time = lambda: frozen  # type: ignore[method-assign]
                try:
                    s.server.udp.readable(listener)
                finally:
                    del loop.time
                seen = [(d.live, len(d.members)) for d in misses.deadlines.values()]
                deadline = next(iter(misses.deadlines.values()))
                replies = await asyncio.to_thread(replies_to, clients[2:], 5)
                seen.append((deadline.live, sum(m is None for m in deadline.members)))
                replies += await asyncio.to_thread(replies_to, clients[:2], 5)
                seen.append((len(misses.deadlines), len(misses.waiting)))
                return seen, [rcode_of(r) for r in replies]
            finally:
                for c in clients:
                    c.close()

    seen, rcodes = asyncio.run(asyncio.wait_for(scenario(), 20))
    assert seen == [(3, 3), (2, 1), (0, 0)]  # one deadline; the answer left it; none outlived them
    assert rcodes == ["NOERROR", "SERVFAIL", "SERVFAIL"]
