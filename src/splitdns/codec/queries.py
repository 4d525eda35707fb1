"""Client input: read a query fast when it is plain, with dnspython otherwise, or say what to answer.

Rules (miekg/dns and Unbound agree): nothing at all for fewer than 12 bytes or for a packet
with QR set (any reply could amplify an attack); NOTIMP for an opcode other than QUERY;
FORMERR for anything that does not parse, does not hold exactly one question, has TC set,
or carries answer or authority records or more than two additional records (an OPT and a
TSIG at most, as miekg/dns), and for a malformed COOKIE option; BADVERS for an EDNS version
other than 0; REFUSED for a class other than IN and for the meta types (OPT, AXFR, IXFR,
TSIG, TKEY, MAILA, MAILB: `wire.is_meta_type`). A query without a question but with a
client cookie asks for our server cookie (RFC 7873 5.4): NOERROR with both. Every error
reply to a query with an OPT record has one too (RFC 6891 7), and every reply has RA set.
Pure: no sockets, no clock.
Tests: tests/test_wire.py, tests/test_hostile_clients.py.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import dns.exception
import dns.flags
import dns.opcode
import dns.rcode
import dns.rdataclass
import dns.rdatatype

from splitdns.codec import wire

if TYPE_CHECKING:
    import dns.message
    import dns.name

Verdict = wire.Query | bytes | None  # a query to resolve, a reply to send now, or silence
MAX_ADDITIONAL = 2  # ARCOUNT above this is FORMERR (miekg/dns: an OPT and a TSIG at most)
MAX_WALKED = 8  # records of a malformed query we look through for its OPT record


def read(data: bytes) -> Verdict:
    q = wire.parse_query(data)
    if q is not None:
        return q
    return _read_slow(data)


def question_type(data: bytes) -> int:
    """The QTYPE of a query's question as sent, 0 when there is none to read (for metrics)."""
    try:
        if struct.unpack_from("!H", data, 4)[0] < 1:
            return 0
        return int(struct.unpack_from("!H", data, 12 + wire.question_length(data) - 4)[0])
    except (IndexError, struct.error):
        return 0


def _read_slow(data: bytes) -> Verdict:
    if len(data) < 12:
        return None
    qid, flags = struct.unpack_from("!HH", data)
    if flags & wire.QR:
        return None
    if flags & wire.OPCODE_MASK:
        return _header_only(data, dns.rcode.NOTIMP)
    qdcount, ancount, nscount, arcount = struct.unpack_from("!HHHH", data, 4)
    if qdcount == 0 and not (ancount or nscount or arcount > MAX_ADDITIONAL or flags & wire.TC):
        return _cookie_only(data)
    if qdcount != 1 or ancount or nscount or arcount > MAX_ADDITIONAL or flags & wire.TC:
        # FORMERR whatever the records say: no need to let dnspython read them (garbage
        # would make it import a module per record type it meets, milliseconds each).
        return _header_only(data, dns.rcode.FORMERR)
    from dns.message import BadEDNS, from_wire  # here: 6 MiB plain queries never need (bench/)

    try:
        msg = from_wire(data, ignore_trailing=False)
    except BadEDNS:
        return _header_only(data, dns.rcode.FORMERR)
    except (dns.exception.DNSException, ValueError, IndexError, UnicodeError):
        return _header_only(data, dns.rcode.FORMERR)
    if len(msg.question) != 1 or msg.answer or msg.authority or flags & wire.TC:
        return _header_only(data, dns.rcode.FORMERR)
    rrset = msg.question[0]
    question = _name_wire(rrset.name) + struct.pack("!HH", rrset.rdtype, rrset.rdclass)
    opt = _opt(data)
    cookie = b"" if opt is None else wire.client_cookie(opt.options, 0, len(opt.options))
    if cookie is None:
        return _header_only(data, dns.rcode.FORMERR)  # a malformed COOKIE (RFC 7873 5.2.2)
    if msg.edns > 0:
        return _with_question(msg, question, dns.rcode.BADVERS, cookie)
    if rrset.rdclass != dns.rdataclass.IN:
        return _with_question(msg, question, dns.rcode.REFUSED, cookie)
    if wire.is_meta_type(rrset.rdtype):
        return _with_question(msg, question, dns.rcode.REFUSED, cookie)
    do = bool(msg.ednsflags & dns.flags.DO)
    payload = max(msg.payload, wire.PLAIN_PAYLOAD) if msg.edns == 0 else wire.PLAIN_PAYLOAD
    name = _name_wire(rrset.name.canonicalize())
    return wire.Query(qid, flags, question, name, int(rrset.rdtype), msg.edns == 0, payload, do,
                      cookie)


class Opt:
    """The OPT record of a query that may be malformed elsewhere: what an error reply echoes."""

    __slots__ = ("do", "options", "version")

    def __init__(self, version: int, do: bool, options: bytes) -> None:
        self.version = version
        self.do = do
        self.options = options


def _opt(data: bytes) -> Opt | None:
    """The query's OPT record (the first in its additional section), found by walking the
    records without reading their data; None if it has none or the walk breaks."""
    n = len(data)
    qdcount, ancount, nscount, arcount = struct.unpack_from("!HHHH", data, 4)
    if qdcount + ancount + nscount + arcount > MAX_WALKED:
        return None  # garbage, not a client speaking EDNS: not worth a walk (a flood is made of it)
    pos = 12
    for _ in range(qdcount):
        pos = wire.skip_name(data, pos)
        if pos < 0 or pos + 4 > n:
            return None
        pos += 4
    for index in range(ancount + nscount + arcount):
        start = pos
        pos = wire.skip_name(data, pos)
        if pos < 0 or pos + 10 > n:
            return None
        rtype, _, rttl, rdlen = struct.unpack_from("!HHIH", data, pos)
        pos += 10 + rdlen
        if pos > n:
            return None
        if rtype == wire.TYPE_OPT and index >= ancount + nscount and data[start] == 0:
            return Opt((rttl >> 16) & 0xFF, bool(rttl & wire.DO), data[pos - rdlen:pos])
    return None


def _header_only(data: bytes, rcode: int) -> bytes:
    """A reply with the header echoed and every section empty (miekg/dns does the same), and
    an OPT if the query had one (RFC 6891 7: EDNS in, EDNS out), with the client's cookie
    answered (RFC 7873 5.2)."""
    qid, flags = struct.unpack_from("!HH", data)
    out = wire.QR | wire.RA | (flags & (wire.OPCODE_MASK | wire.RD | wire.CD)) | (rcode & 0xF)
    opt = _opt(data)
    if opt is None:
        return wire.HEADER.pack(qid, out, 0, 0, 0, 0)
    cookie = wire.client_cookie(opt.options, 0, len(opt.options))
    options = wire.cookie_option(cookie) if cookie else b""
    return wire.HEADER.pack(qid, out, 0, 0, 0, 1) + _opt_record(rcode, opt.do, options)


def _cookie_only(data: bytes) -> bytes:
    """A query without a question: legal only to learn a server cookie (RFC 7873 5.4), which
    we answer NOERROR with the client's cookie and ours. FORMERR otherwise."""
    opt = _opt(data)
    if opt is None or opt.version:
        return _header_only(data, dns.rcode.BADVERS if opt else dns.rcode.FORMERR)
    cookie = wire.client_cookie(opt.options, 0, len(opt.options))
    if not cookie:
        return _header_only(data, dns.rcode.FORMERR)  # no COOKIE, or a malformed one
    return _header_only(data, dns.rcode.NOERROR)


def _with_question(msg: dns.message.Message, question: bytes, rcode: int, cookie: bytes) -> bytes:
    flags = wire.QR | wire.RA | (msg.flags & (wire.RD | wire.CD))
    opt = b""
    arcount = 0
    if msg.edns >= 0:
        arcount = 1
        opt = _opt_record(rcode, bool(msg.ednsflags & dns.flags.DO),
                          wire.cookie_option(cookie) if cookie else b"")
    header = wire.HEADER.pack(msg.id, flags | (rcode & 0xF), 1, 0, 0, arcount)
    return header + question + opt


def _opt_record(rcode: int, do: bool, options: bytes) -> bytes:
    # The extended rcode's upper bits live in the OPT TTL (RFC 6891 6.1.3).
    return b"\x00" + struct.pack("!HHBBHH", wire.TYPE_OPT, wire.EDNS_PAYLOAD, rcode >> 4, 0,
                                 wire.DO if do else 0, len(options)) + options


def _name_wire(name: dns.name.Name) -> bytes:
    data = name.to_wire()
    assert data is not None  # without a file argument dnspython returns the bytes
    return data
