"""Client input: read a query fast when it is plain, with dnspython otherwise, or say what to answer.

Rules (miekg/dns and Unbound agree): nothing at
all for fewer than 12 bytes or for a packet with QR set (any reply could amplify an
attack); NOTIMP for an opcode other than QUERY; FORMERR for anything that does not parse,
does not hold exactly one question, or carries answer or authority records or more than
two additional records (an OPT and a TSIG at most, as miekg/dns); BADVERS for an EDNS
version other than 0; REFUSED for a class other than IN and for the meta types (OPT,
AXFR, IXFR, TSIG, TKEY, MAILA, MAILB: `wire.is_meta_type`). Pure: no sockets, no clock.
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

from splitdns import wire

if TYPE_CHECKING:
    import dns.message
    import dns.name

Verdict = wire.Query | bytes | None  # a query to resolve, a reply to send now, or silence
MAX_ADDITIONAL = 2  # ARCOUNT above this is FORMERR (miekg/dns: an OPT and a TSIG at most)


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
        return _header_only(qid, flags, dns.rcode.NOTIMP)
    qdcount, ancount, nscount, arcount = struct.unpack_from("!HHHH", data, 4)
    if qdcount != 1 or ancount or nscount or arcount > MAX_ADDITIONAL or flags & wire.TC:
        # FORMERR whatever the records say: no need to let dnspython read them (garbage
        # would make it import a module per record type it meets, milliseconds each).
        return _header_only(qid, flags, dns.rcode.FORMERR)
    from dns.message import BadEDNS, from_wire  # here: 6 MiB plain queries never need (bench/)

    try:
        msg = from_wire(data, ignore_trailing=False)
    except BadEDNS:
        return _header_only(qid, flags, dns.rcode.FORMERR)
    except (dns.exception.DNSException, ValueError, IndexError, UnicodeError):
        return _header_only(qid, flags, dns.rcode.FORMERR)
    if len(msg.question) != 1 or msg.answer or msg.authority or flags & wire.TC:
        return _header_only(qid, flags, dns.rcode.FORMERR)
    rrset = msg.question[0]
    question = _name_wire(rrset.name) + struct.pack("!HH", rrset.rdtype, rrset.rdclass)
    if msg.edns > 0:
        return _with_question(msg, question, dns.rcode.BADVERS)
    if rrset.rdclass != dns.rdataclass.IN:
        return _with_question(msg, question, dns.rcode.REFUSED)
    if wire.is_meta_type(rrset.rdtype):
        return _with_question(msg, question, dns.rcode.REFUSED)
    do = bool(msg.ednsflags & dns.flags.DO)
    payload = max(msg.payload, wire.PLAIN_PAYLOAD) if msg.edns == 0 else wire.PLAIN_PAYLOAD
    name = _name_wire(rrset.name.canonicalize())
    return wire.Query(qid, flags, question, name, int(rrset.rdtype), msg.edns == 0, payload, do)


def _header_only(qid: int, flags: int, rcode: int) -> bytes:
    """A reply with the header echoed and every section empty (miekg/dns does the same)."""
    out = wire.QR | (flags & (wire.OPCODE_MASK | wire.RD | wire.CD)) | (rcode & 0xF)
    return wire.HEADER.pack(qid, out, 0, 0, 0, 0)


def _with_question(msg: dns.message.Message, question: bytes, rcode: int) -> bytes:
    flags = wire.QR | (msg.flags & (wire.RD | wire.CD))
    opt = b""
    arcount = 0
    if msg.edns >= 0:
        arcount = 1
        # The extended rcode's upper bits live in the OPT TTL (RFC 6891 6.1.3).
        opt = b"\x00" + struct.pack("!HHBBHH", wire.TYPE_OPT, wire.EDNS_PAYLOAD,
                                    rcode >> 4, 0, 0, 0)
    header = wire.HEADER.pack(msg.id, flags | (rcode & 0xF), 1, 0, 0, arcount)
    return header + question + opt


def _name_wire(name: dns.name.Name) -> bytes:
    data = name.to_wire()
    assert data is not None  # without a file argument dnspython returns the bytes
    return data
