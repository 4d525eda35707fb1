"""The scripted upstream's server: each query is logged, matched against the rules and answered
(or not) as its rule says, over UDP or TCP, a slow rule never holding up the others."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import traceback
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, Protocol, TextIO, cast

import dns.exception
import dns.flags
import dns.message
import dns.rcode
import dns.rdataclass
import dns.rdatatype

from tests.support.scripted_upstream.replies import (
    WRONG_QUESTION,
    answer_message,
    forged_message,
    new_response,
    truncated_wire,
    udp_limit,
)
from tests.support.scripted_upstream.script import Forge, Rule, ScriptError, load_script

TCP_LIMIT = 65535

Record = dict[str, Any]


def describe(query: dns.message.Message, transport: str, src: str) -> Record:
    question = query.question[0]
    has_edns = query.edns >= 0
    return {
        "t": time.monotonic(),
        "transport": transport,
        "qname": question.name.to_text(),
        "qtype": dns.rdatatype.to_text(question.rdtype),
        "id": query.id,
        "rd": bool(query.flags & dns.flags.RD),
        "cd": bool(query.flags & dns.flags.CD),
        "do": bool(query.ednsflags & dns.flags.DO),
        "edns": has_edns,
        "edns_payload": query.payload if has_edns else None,
        "src": src,
    }



# --- transports ------------------------------------------------------------------------


class Channel(Protocol):
    """Where the replies to one query go: a UDP peer or a TCP connection."""

    name: str
    pending: set[asyncio.Task[None]]

    def send(self, wire: bytes) -> None: ...
    def send_from_other_port(self, wire: bytes) -> None: ...
    def send_from_other_addr(self, wire: bytes) -> None: ...
    def close(self) -> None: ...
    def fit(self, query: dns.message.Message, response: dns.message.Message) -> bytes: ...


class UdpChannel:
    name = "udp"

    def __init__(
        self,
        main: asyncio.DatagramTransport,
        other: asyncio.DatagramTransport,
        peer: tuple[str, int],
        elsewhere: asyncio.DatagramTransport | None = None,
    ) -> None:
        self.main = main
        self.other = other
        self.elsewhere = elsewhere
        self.peer = peer
        self.pending: set[asyncio.Task[None]] = set()

    def send(self, wire: bytes) -> None:
        if not self.main.is_closing():
            self.main.sendto(wire, self.peer)

    def send_from_other_port(self, wire: bytes) -> None:
        if not self.other.is_closing():
            self.other.sendto(wire, self.peer)

    def send_from_other_addr(self, wire: bytes) -> None:
        if self.elsewhere is not None and not self.elsewhere.is_closing():
            self.elsewhere.sendto(wire, self.peer)

    def close(self) -> None:
        pass  # UDP has no connection: the client simply never hears back.

    def fit(self, query: dns.message.Message, response: dns.message.Message) -> bytes:
        try:
            return response.to_wire(max_size=udp_limit(query))
        except dns.exception.TooBig:
            return truncated_wire(query)


class TcpChannel:
    name = "tcp"

    def __init__(self, writer: asyncio.StreamWriter, src: str = "") -> None:
        self.writer = writer
        self.src = src
        self.pending: set[asyncio.Task[None]] = set()
        self.stalled = False
        self.closed = asyncio.Event()

    def send(self, wire: bytes) -> None:
        # One write per frame: pipelined replies interleave whole, never mid-frame.
        if not self.writer.is_closing():
            self.writer.write(len(wire).to_bytes(2, "big") + wire)

    def send_from_other_port(self, wire: bytes) -> None:
        pass  # A TCP connection has no other port to forge from.

    def send_from_other_addr(self, wire: bytes) -> None:
        pass  # nor another address.

    def close(self) -> None:
        self.writer.close()

    def fit(self, query: dns.message.Message, response: dns.message.Message) -> bytes:
        return response.to_wire(max_size=TCP_LIMIT)


class QueryLog:
    def __init__(self, path: Path) -> None:
        self._file: TextIO = path.open("a", encoding="utf-8")

    def write(self, record: Record) -> None:
        # One write + flush per line so a reader never waits on our buffer.
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


# --- the server ------------------------------------------------------------------------


class ScriptedServer:
    def __init__(self, script_path: Path, log: QueryLog) -> None:
        self.script_path = script_path
        self.rules = load_script(script_path)
        self.log = log
        self.generation = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def reload(self) -> None:
        try:
            rules = load_script(self.script_path)
        except ScriptError as e:
            print(f"scripted_upstream: reload failed, keeping old rules: {e}", file=sys.stderr)
            self.log.write({"event": "reload_failed", "error": str(e), "t": time.monotonic()})
            return
        self.rules = rules
        self.generation += 1
        self.log.write(
            {
                "event": "reloaded",
                "generation": self.generation,
                "rules": len(rules),
                "t": time.monotonic(),
            }
        )

    def receive(self, data: bytes, channel: Channel, src: str) -> None:
        query = self._parse_and_log(data, channel.name, src)
        if query is None:
            return
        question = query.question[0]
        rule = next(
            (r for r in self.rules if r.matches(question.name, question.rdtype, channel.name)),
            None,
        )
        if rule is None:
            channel.send(channel.fit(query, new_response(query, dns.rcode.REFUSED)))
            return
        self._spawn(self._perform(query, rule, channel), channel)

    def _parse_and_log(self, data: bytes, transport: str, src: str) -> dns.message.Message | None:
        try:
            query = dns.message.from_wire(data)
            if query.flags & dns.flags.QR:
                raise ValueError("QR is set: a response, not a query")
            if len(query.question) != 1:
                raise ValueError(f"{len(query.question)} questions")
        except Exception as e:  # whatever a client sends, it must not take the server down
            self.log.write(
                {
                    "malformed": True,
                    "len": len(data),
                    "t": time.monotonic(),
                    "transport": transport,
                    "src": src,
                    "error": f"{type(e).__name__}: {e}",
                }
            )
            return None
        self.log.write(describe(query, transport, src))
        return query

    async def _perform(self, query: dns.message.Message, rule: Rule, channel: Channel) -> None:
        self._send_forgeries(query, rule.forge, channel)
        if rule.action == "drop" or (rule.action == "stall" and channel.name == "udp"):
            return
        if rule.delay > 0:
            await asyncio.sleep(rule.delay)
        if rule.action == "close":
            channel.close()
            return
        if rule.action == "stall":
            await self._stall(cast(TcpChannel, channel))
            return
        reply = self._reply(query, rule, channel)
        for _ in range(1 + rule.repeat):
            channel.send(reply)

    async def _stall(self, channel: TcpChannel) -> None:
        """One byte of a length prefix, then silence until the client gives up."""
        started = time.monotonic()
        channel.writer.write(b"\x00")
        channel.stalled = True
        await channel.closed.wait()
        self.log.write({"tcp_closed": True, "after": time.monotonic() - started,
                        "t": time.monotonic(), "src": channel.src})

    @staticmethod
    def _send_forgeries(query: dns.message.Message, forge: Forge, channel: Channel) -> None:
        forged = forged_message(query, query.id + 1) if forge.wrong_id else b""
        sent, n = 0, 0
        while sent < forge.wrong_id:  # built once, the ID patched: floods of 10^5 stay fast
            n += 1
            if (query.id + n) & 0xFFFF == query.id:
                continue  # past 65535 the counter wraps onto the right ID: not a forgery
            channel.send(((query.id + n) & 0xFFFF).to_bytes(2, "big") + forged[2:])
            sent += 1
        for _ in range(forge.wrong_question):
            channel.send(forged_message(query, query.id, WRONG_QUESTION))
        rdtype = (query.question[0].rdtype + 32) & 0xFFFF
        for _ in range(forge.wrong_qtype):
            channel.send(forged_message(query, query.id, rdtype=rdtype))
        for _ in range(forge.wrong_qclass):
            channel.send(forged_message(query, query.id, rdclass=dns.rdataclass.CH))
        for _ in range(forge.qr_clear):
            channel.send(forged_message(query, query.id, qr=False))
        for _ in range(forge.wrong_port):
            channel.send_from_other_port(forged_message(query, query.id))
        for _ in range(forge.wrong_addr):
            channel.send_from_other_addr(forged_message(query, query.id))

    @staticmethod
    def _reply(query: dns.message.Message, rule: Rule, channel: Channel) -> bytes:
        if rule.action == "raw":
            return (query.id.to_bytes(2, "big") + rule.raw[2:]) if rule.patch_id else rule.raw
        if rule.action == "truncate" and channel.name == "udp":
            return truncated_wire(query)
        return channel.fit(query, answer_message(query, rule))

    def _spawn(self, coro: Coroutine[Any, Any, None], channel: Channel) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        # The loop keeps only weak references to tasks; these sets keep them alive.
        for owner in (self._tasks, channel.pending):
            owner.add(task)
            task.add_done_callback(owner.discard)
        task.add_done_callback(report_crash)

    async def serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        src = f"{peer[0]}:{peer[1]}"
        channel = TcpChannel(writer, src)
        try:
            while not writer.is_closing():
                length = int.from_bytes(await reader.readexactly(2), "big")
                self.receive(await reader.readexactly(length), channel, src)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client (or a "close" rule) ended the connection
        except asyncio.CancelledError:
            # Shutting down. Not re-raised: 3.11's start_server then calls task.exception()
            # on the cancelled handler and logs a spurious traceback.
            writer.close()
            return
        finally:
            channel.closed.set()
        # A client may half-close after its last query and still expect the replies.
        if channel.pending and not writer.is_closing() and not channel.stalled:
            await asyncio.wait(channel.pending)
        writer.close()

    def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()


def report_crash(task: asyncio.Task[None]) -> None:
    exc = None if task.cancelled() else task.exception()
    if exc is not None:
        traceback.print_exception(exc, file=sys.stderr)


class UdpProtocol(asyncio.DatagramProtocol):
    def __init__(
        self,
        server: ScriptedServer,
        other: asyncio.DatagramTransport,
        elsewhere: asyncio.DatagramTransport | None = None,
    ) -> None:
        self.server = server
        self.other = other
        self.elsewhere = elsewhere
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # On 3.11 the selector transport does not subclass DatagramTransport, so no isinstance.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        assert self.transport is not None
        channel = UdpChannel(self.transport, self.other, addr, self.elsewhere)
        self.server.receive(data, channel, f"{addr[0]}:{addr[1]}")

    def error_received(self, exc: Exception) -> None:
        pass  # ICMP unreachable from a client that already gave up: nothing to do.
