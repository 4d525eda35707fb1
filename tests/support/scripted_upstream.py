#!/usr/bin/env python3
"""A scripted upstream DNS server for splitdns end-to-end tests.

Run as a real process (tests/support/processes.py starts it). It listens on UDP and TCP on
one loopback address and port, replies as a JSON script says, and appends every query it
receives to a JSON-lines log, so that a test can prove which upstream saw what.

    scripted_upstream.py --addr 127.0.0.21 --port 0 --script S.json --log Q.jsonl \\
        --ready-file READY

The chosen port is written to --ready-file (atomically) once both listeners are up.
SIGTERM exits at once; SIGHUP re-reads the script.

The script is a JSON list of rules. The first rule that matches a query decides the reply;
a query no rule matches gets REFUSED. Rule keys (all optional):

  qname       exact name to match (case-insensitive)
  suffix      whole-label suffix: "acme.internal." matches "db.acme.internal." and
              "acme.internal." but not "notacme.internal."; "." matches everything
  qtype       "A", "AAAA", ...
  transport   "udp" or "tcp"
  action      "answer" (default), "servfail", "drop", "truncate", "raw", "close" or "stall"
  records     answer section, zone-file lines: "db.acme.internal. 300 IN A 192.0.2.1"
  authority   authority section lines, e.g. an SOA for a negative answer
  additional  additional section lines
  rcode       "NOERROR" (default; "SERVFAIL" for action "servfail"), "NXDOMAIN", ...
  ttl         overrides the TTL of every record of the rule
  aa          set the AA flag (default false)
  delay_ms    reply (or close) only after this delay; other queries are not held up
  forge       {"wrong_id": N, "wrong_port": N, "wrong_question": N, "wrong_qtype": N,
              "wrong_qclass": N, "qr_clear": N, "wrong_addr": N}: forged replies sent at
              once, before the genuine reply. They carry poison data (POISON_A, POISON_AAAA,
              else NXDOMAIN) so a test can tell whether a resolver swallowed one.
              wrong_id: IDs query ID + 1, + 2, ... (never the query's own ID, also past
              65535); wrong_port: right ID and question but from another UDP source port;
              wrong_addr: the same from another address (FORGE_ADDR); wrong_question: right
              ID and port, question WRONG_QUESTION; wrong_qtype: right name, qtype + 32
              (so A becomes 33, and 65 becomes 97, whose ASCII letter is 65's lower case);
              wrong_qclass: class CH; qr_clear: right everything but QR=0. Over TCP,
              the ones with a right port go as extra frames on the connection (dig +tcp
              gives up on those); wrong_port and wrong_addr do not apply.
  repeat      send the genuine reply this many extra times (late duplicates)
  hex         for "raw": the exact reply bytes, as hex (whitespace allowed)
  patch_id    for "raw": overwrite the first two bytes with the query's ID
  comment     ignored

"truncate" replies over UDP with TC=1 and no records, over TCP with the full answer.
"close" closes a TCP connection without replying; over UDP it is "drop" after delay_ms.
"stall" over TCP sends one byte of the two-byte length prefix and then nothing, keeping the
connection open until the client closes it (logged as {"tcp_closed": true, "after", "t",
"src"}); over UDP it is "drop".
"records" lines may use the owner name {qname}: it becomes the question's name as received.
An answer too big for the client's UDP size (512 without EDNS) is sent truncated, as a
real server would. Replies to EDNS queries carry EDNS (payload 1232) and echo DO; CD and
the question (case included) are echoed.

Log lines, each flushed at once:
  query:     {"t", "transport", "qname", "qtype", "id", "rd", "cd", "do", "edns",
              "edns_payload", "src"}     (qname as received, case preserved)
  malformed: {"malformed": true, "len", "t", "transport", "src", "error"}
  reload:    {"event": "reloaded", "generation", "rules", "t"} or
             {"event": "reload_failed", "error", "t"}
"t" is time.monotonic(), which on Linux is one clock for all processes.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO, cast

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import dns.tokenizer
import dns.ttl

EDNS_PAYLOAD = 1232
# Without EDNS a client takes at most 512 bytes over UDP (RFC 1035 4.2.1).
PLAIN_UDP_LIMIT = 512
TCP_LIMIT = 65535
DEFAULT_TTL = 300
# Documentation-range data: easy to spot in a resolver's answer, and never routable.
POISON_A = "203.0.113.66"
POISON_AAAA = "2001:db8::66"
POISON_TTL = 3600
POISON = {dns.rdatatype.A: POISON_A, dns.rdatatype.AAAA: POISON_AAAA}
WRONG_QUESTION = dns.name.from_text("forged.invalid.")
QNAME_TEMPLATE = dns.name.from_text("{qname}.")
# wrong_addr forgeries come from here: loopback, but not the address the resolver asked.
FORGE_ADDR = "127.0.0.253"
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
# With --port 0 another process may hold the TCP side of the port UDP picked; retry a bit.
BIND_ATTEMPTS = 64

ACTIONS = frozenset({"answer", "servfail", "drop", "truncate", "raw", "close", "stall"})
RULE_KEYS = frozenset(
    {
        "qname", "suffix", "qtype", "transport", "action", "records", "authority",
        "additional", "rcode", "ttl", "aa", "delay_ms", "forge", "hex", "patch_id", "comment",
        "repeat",
    }
)  # fmt: skip
FORGE_KEYS = frozenset(
    {"wrong_id", "wrong_port", "wrong_question", "wrong_qtype", "wrong_qclass", "qr_clear", "wrong_addr"}
)

Record = dict[str, Any]


class ScriptError(ValueError):
    """The script is not a valid list of rules."""


@dataclass(frozen=True)
class Forge:
    wrong_id: int = 0
    wrong_port: int = 0
    wrong_question: int = 0
    wrong_qtype: int = 0
    wrong_qclass: int = 0
    qr_clear: int = 0
    wrong_addr: int = 0


@dataclass(frozen=True)
class Rule:
    qname: dns.name.Name | None = None
    suffix: dns.name.Name | None = None
    qtype: dns.rdatatype.RdataType | None = None
    transport: str | None = None
    action: str = "answer"
    records: tuple[dns.rrset.RRset, ...] = ()
    authority: tuple[dns.rrset.RRset, ...] = ()
    additional: tuple[dns.rrset.RRset, ...] = ()
    rcode: dns.rcode.Rcode = dns.rcode.NOERROR
    aa: bool = False
    delay: float = 0.0
    forge: Forge = field(default_factory=Forge)
    raw: bytes = b""
    patch_id: bool = False
    repeat: int = 0

    def matches(self, qname: dns.name.Name, qtype: int, transport: str) -> bool:
        # dns.name comparisons ignore case, which is what DNS matching wants.
        if self.qname is not None and qname != self.qname:
            return False
        if self.suffix is not None and not qname.is_subdomain(self.suffix):
            return False
        if self.qtype is not None and qtype != self.qtype:
            return False
        return self.transport is None or transport == self.transport


# --- script parsing --------------------------------------------------------------------


def load_script(path: Path) -> tuple[Rule, ...]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ScriptError(f"{path}: {e}") from e
    if not isinstance(data, list):
        raise ScriptError(f"{path}: the script must be a JSON list of rules")
    return tuple(parse_rule(index, raw) for index, raw in enumerate(data))


def parse_rule(index: int, raw: object) -> Rule:
    if not isinstance(raw, dict):
        raise ScriptError(f"rule {index}: must be a JSON object")
    # Unknown keys are almost always typos ("delay": 100) that would silently do nothing.
    unknown = sorted(set(raw) - RULE_KEYS)
    if unknown:
        raise ScriptError(f"rule {index}: unknown keys {unknown}")
    try:
        return build_rule(raw)
    except (dns.exception.DNSException, ValueError, TypeError) as e:
        raise ScriptError(f"rule {index}: {e}") from e


def build_rule(raw: dict[str, Any]) -> Rule:
    action = raw.get("action", "answer")
    if action not in ACTIONS:
        raise ScriptError(f"unknown action {action!r}; expected one of {sorted(ACTIONS)}")
    transport = raw.get("transport")
    if transport not in (None, "udp", "tcp"):
        raise ScriptError(f"transport must be 'udp' or 'tcp', not {transport!r}")
    if action == "raw" and not raw.get("hex"):
        raise ScriptError('action "raw" needs "hex"')
    ttl = raw.get("ttl")
    rcode = raw.get("rcode", "SERVFAIL" if action == "servfail" else "NOERROR")
    return Rule(
        qname=optional_name(raw.get("qname")),
        suffix=optional_name(raw.get("suffix")),
        qtype=dns.rdatatype.from_text(raw["qtype"]) if "qtype" in raw else None,
        transport=transport,
        action=action,
        records=parse_records(raw.get("records", []), ttl),
        authority=parse_records(raw.get("authority", []), ttl),
        additional=parse_records(raw.get("additional", []), ttl),
        rcode=dns.rcode.from_text(rcode),
        aa=bool(raw.get("aa", False)),
        delay=float(raw.get("delay_ms", 0)) / 1000,
        forge=parse_forge(raw.get("forge", {})),
        raw=bytes.fromhex(raw.get("hex", "")),
        patch_id=bool(raw.get("patch_id", False)),
        repeat=int(raw.get("repeat", 0)),
    )


def optional_name(text: object) -> dns.name.Name | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise ScriptError(f"a name must be a string, not {text!r}")
    return dns.name.from_text(text)


def parse_forge(raw: object) -> Forge:
    if not isinstance(raw, dict) or set(raw) - FORGE_KEYS:
        raise ScriptError(f"forge must be an object with keys from {sorted(FORGE_KEYS)}")
    counts = {key: int(value) for key, value in raw.items()}
    if any(count < 0 for count in counts.values()):
        raise ScriptError("forge counts must not be negative")
    return Forge(**counts)


def parse_records(lines: object, ttl: int | None) -> tuple[dns.rrset.RRset, ...]:
    if not isinstance(lines, list) or not all(isinstance(line, str) for line in lines):
        raise ScriptError("records must be a list of zone-file lines")
    # One RRset per line keeps the script's order and duplicates, byte for byte on the wire.
    return tuple(parse_record(line, ttl) for line in lines)


def parse_record(line: str, ttl_override: int | None) -> dns.rrset.RRset:
    """Parse `name [ttl] [class] type rdata` (ttl and class in either order)."""
    tokens = dns.tokenizer.Tokenizer(line)
    name = tokens.get_name(origin=dns.name.root)
    ttl: int | None = None
    rdclass: dns.rdataclass.RdataClass | None = None
    token = tokens.get_string()
    for _ in range(2):
        if ttl is None and token[:1].isdigit():
            ttl = dns.ttl.from_text(token)
        elif rdclass is None and is_rdclass(token):
            rdclass = dns.rdataclass.from_text(token)
        else:
            break
        token = tokens.get_string()
    rdclass = dns.rdataclass.IN if rdclass is None else rdclass
    rdtype = dns.rdatatype.from_text(token)
    rdata = dns.rdata.from_text(rdclass, rdtype, tokens, origin=dns.name.root, relativize=False)
    if ttl_override is not None:
        ttl = int(ttl_override)
    return dns.rrset.from_rdata(name, DEFAULT_TTL if ttl is None else ttl, rdata)


def is_rdclass(token: str) -> bool:
    try:
        dns.rdataclass.from_text(token)
    except dns.rdataclass.UnknownRdataclass:
        return False
    return True


# --- messages --------------------------------------------------------------------------


def new_response(query: dns.message.Message, rcode: int = dns.rcode.NOERROR) -> dns.message.Message:
    # make_response echoes ID, RD and the question as received, and EDNS if the query had it.
    response = dns.message.make_response(query, recursion_available=True, our_payload=EDNS_PAYLOAD)
    # Validating resolvers look at CD and DO in replies (RFC 6840 5.9, RFC 3225 3).
    response.flags |= query.flags & dns.flags.CD
    if query.ednsflags & dns.flags.DO:
        response.want_dnssec(True)
    response.set_rcode(dns.rcode.Rcode.make(rcode))
    return response


def answer_message(query: dns.message.Message, rule: Rule) -> dns.message.Message:
    response = new_response(query, rule.rcode)
    if rule.aa:
        response.flags |= dns.flags.AA
    name = query.question[0].name
    response.answer = [with_owner(r, name) for r in rule.records]
    response.authority = list(rule.authority)
    response.additional = list(rule.additional)
    return response


def with_owner(rrset: dns.rrset.RRset, qname: dns.name.Name) -> dns.rrset.RRset:
    """The record as scripted, its owner {qname} replaced by the question's name."""
    if rrset.name != QNAME_TEMPLATE:
        return rrset
    return dns.rrset.from_rdata_list(qname, rrset.ttl, list(rrset))


def truncated_wire(query: dns.message.Message) -> bytes:
    response = new_response(query)
    response.flags |= dns.flags.TC
    return response.to_wire()


def udp_limit(query: dns.message.Message) -> int:
    # RFC 6891 6.2.5: an advertised size below 512 means 512.
    return max(query.payload, PLAIN_UDP_LIMIT) if query.edns >= 0 else PLAIN_UDP_LIMIT


def forged_message(
    query: dns.message.Message,
    msg_id: int,
    qname: dns.name.Name | None = None,
    rdtype: int | None = None,
    rdclass: int | None = None,
    qr: bool = True,
) -> bytes:
    question = query.question[0]
    response = new_response(query)
    response.id = msg_id & 0xFFFF
    name = question.name if qname is None else qname
    qtype = question.rdtype if rdtype is None else dns.rdatatype.RdataType.make(rdtype)
    qclass = question.rdclass if rdclass is None else dns.rdataclass.RdataClass.make(rdclass)
    if (qname, rdtype, rdclass) != (None, None, None):
        response.question = [dns.rrset.RRset(name, qclass, qtype)]
    # The poison is what the victim asked for (an A for an A query), whatever the question says.
    poison = POISON.get(question.rdtype) if question.rdclass == dns.rdataclass.IN else None
    if poison is None:
        response.set_rcode(dns.rcode.NXDOMAIN)
    else:
        response.answer = [
            dns.rrset.from_text(question.name, POISON_TTL, "IN", question.rdtype, poison)
        ]
    if not qr:
        response.flags &= ~dns.flags.QR
    return response.to_wire()


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


# --- startup ---------------------------------------------------------------------------


def bind_pair(addr: str, port: int) -> tuple[socket.socket, socket.socket]:
    """Bind UDP and TCP sockets to the same address and port (port 0: pick one)."""
    last_error: OSError | None = None
    for _ in range(1 if port else BIND_ATTEMPTS):
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            udp.bind((addr, port))
            # Lets a fixed --port be reused while an earlier run's connections sit in TIME_WAIT.
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tcp.bind((addr, udp.getsockname()[1]))
            tcp.listen(128)
        except OSError as e:
            udp.close()
            tcp.close()
            last_error = e
            continue
        udp.setblocking(False)
        tcp.setblocking(False)
        return udp, tcp
    raise OSError(f"cannot bind UDP+TCP on {addr}:{port}: {last_error}")


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


async def serve(args: argparse.Namespace) -> int:
    log = QueryLog(args.log)
    server = ScriptedServer(args.script, log)
    udp_sock, tcp_sock = bind_pair(args.addr, args.port)
    other_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    other_sock.bind((args.addr, 0))
    other_sock.setblocking(False)

    loop = asyncio.get_running_loop()
    other, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, sock=other_sock)
    elsewhere_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    elsewhere_sock.bind((FORGE_ADDR, 0))
    elsewhere_sock.setblocking(False)
    elsewhere, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, sock=elsewhere_sock)
    main, _ = await loop.create_datagram_endpoint(
        lambda: UdpProtocol(server, other, elsewhere), sock=udp_sock
    )
    tcp_server = await asyncio.start_server(server.serve_tcp, sock=tcp_sock)

    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    # Installed before the ready file appears: SIGHUP's default action would kill us.
    loop.add_signal_handler(signal.SIGHUP, server.reload)

    write_atomically(args.ready_file, f"{udp_sock.getsockname()[1]}\n")
    await stop.wait()

    tcp_server.close()
    main.close()
    other.close()
    elsewhere.close()
    server.cancel_all()
    log.close()
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--addr", required=True, help="loopback IPv4 address to listen on")
    parser.add_argument("--port", type=int, default=0, help="0 picks a port free for UDP+TCP")
    parser.add_argument("--script", type=Path, required=True, help="JSON list of rules")
    parser.add_argument("--log", type=Path, required=True, help="JSON-lines query log")
    parser.add_argument("--ready-file", type=Path, required=True, help="gets the port")
    args = parser.parse_args(argv)
    # Project rule: nothing leaves loopback, so refuse to listen anywhere else.
    try:
        on_loopback = ipaddress.ip_address(args.addr) in LOOPBACK
    except ValueError:
        on_loopback = False
    if not on_loopback:
        parser.error(f"--addr must be an IPv4 address in {LOOPBACK}, not {args.addr!r}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return asyncio.run(serve(args))
    except (ScriptError, OSError) as e:
        print(f"scripted_upstream: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
