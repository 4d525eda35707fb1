"""DNS on the wire for the hot path: read a plain query, render a cached or passed-through answer.

Hand-written because building a dnspython message costs about ten times the rest of a
cache hit. It handles only the common shapes and answers None for anything else, so the
caller falls back to dnspython; tests prove both paths give the same answers. Pure: no
sockets, no clock.
Tests: tests/test_wire.py, tests/test_properties.py.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable

try:  # hashlib's own blake2b, without the OpenSSL libcrypto hashlib loads (about 4 MiB of RSS)
    from _blake2 import blake2b
except ImportError:  # a Python built without it
    from hashlib import blake2b

HEADER = struct.Struct("!HHHHHH")
_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_FLAGS_QDCOUNT = struct.Struct("!HH")
_TYPE_CLASS = struct.Struct("!HH")
_OPT_FIXED = struct.Struct("!HHBBHH")  # type, payload, ext-rcode, version, flags, rdlength

QR = 0x8000
OPCODE_MASK = 0x7800
AA = 0x0400
TC = 0x0200
RD = 0x0100
RA = 0x0080
AD = 0x0020
CD = 0x0010
RCODE_MASK = 0x000F
DO = 0x8000  # in the OPT record's flags

TYPE_OPT = 41
EDE = 15  # EDNS option code of Extended DNS Errors
COOKIE = 10  # EDNS option code of DNS Cookies (RFC 7873)
CLIENT_COOKIE = 8  # bytes of a client cookie; a server cookie adds 8 to 32 (RFC 7873 4)
CLASS_IN = 1

EDNS_PAYLOAD = 1232   # DNS Flag Day 2020: never send UDP replies larger than this
PLAIN_PAYLOAD = 512   # RFC 1035 limit for a query without EDNS


_KEY_BITS = (b"\x00", b"\x01", b"\x02", b"\x03")  # a cache key's last byte: DO << 1 | CD


class Query:
    """A plain query, read without dnspython. `key` identifies its answer in a cache."""

    __slots__ = ("cd", "cookie", "do", "edns", "flags", "id", "key", "max_udp", "name", "payload",
                 "qtype", "question")

    def __init__(self, qid: int, flags: int, question: bytes, name: bytes, qtype: int,
                 edns: bool, payload: int, do: bool, cookie: bytes = b"") -> None:
        self.id = qid
        self.flags = flags
        self.question = question  # name + type + class, the client's spelling
        self.name = name          # lower-cased wire name, for routing
        self.qtype = qtype
        self.edns = edns
        self.payload = payload
        self.do = do
        self.cd = cd = bool(flags & CD)
        self.cookie = cookie      # the client cookie it carried (RFC 7873), else empty
        self.key = name + question[-4:] + _KEY_BITS[(do << 1) | cd]
        # The largest UDP reply the client takes (a slot, not a property: read on every reply).
        self.max_udp = min(payload, EDNS_PAYLOAD) if edns else PLAIN_PAYLOAD


def parse_query(data: bytes) -> Query | None:
    """Read a plain IN query (one question, at most an OPT); None means "use the slow path"."""
    n = len(data)
    if n < 17:
        return None
    qid, flags, qdcount, ancount, nscount, arcount = HEADER.unpack_from(data)
    if flags & (QR | OPCODE_MASK | TC) or qdcount != 1 or ancount or nscount or arcount > 1:
        return None
    pos = 12
    while True:
        length = data[pos]
        if length == 0:
            pos += 1
            break
        if length > 63:
            return None  # a compression pointer in a query is legal but rare: slow path
        pos += length + 1
        if pos >= n:
            return None
    if pos - 12 > 255 or pos + 4 > n:
        return None
    qtype, qclass = _TYPE_CLASS.unpack_from(data, pos)
    end = pos + 4
    if qclass != CLASS_IN or qtype == TYPE_OPT or 128 <= qtype <= 254:  # is_meta_type
        return None
    edns, payload, do, cookie = False, PLAIN_PAYLOAD, False, b""
    if arcount:
        if end + 11 > n or data[end] != 0:
            return None
        rtype, payload, _, version, eflags, rdlen = _OPT_FIXED.unpack_from(data, end + 1)
        if rtype != TYPE_OPT or version != 0 or end + 11 + rdlen != n:
            return None
        if rdlen:
            found = client_cookie(data, end + 11, n)
            if found is None:
                return None
            cookie = found
        edns, do = True, bool(eflags & DO)
        payload = max(payload, PLAIN_PAYLOAD)
    elif end != n:
        return None
    return Query(qid, flags, data[12:end], data[12:pos].lower(), qtype, edns, payload, do, cookie)


def is_meta_type(qtype: int) -> bool:
    """OPT and the query/meta range (RFC 6895 3.1): AXFR, IXFR, TSIG, TKEY, MAILA... but not ANY.
    A forwarder for a pod has no business relaying zone transfers or transaction keys."""
    return qtype == TYPE_OPT or 128 <= qtype <= 254


def client_cookie(data: bytes, pos: int, end: int) -> bytes | None:
    """The client cookie among the EDNS options in data[pos:end] (empty if none); None when
    the options overrun their space or a COOKIE option has a length RFC 7873 5.2.2 calls
    malformed (FORMERR)."""
    cookie = b""
    while pos < end:
        if pos + 4 > end:
            return None
        code, length = _TYPE_CLASS.unpack_from(data, pos)
        pos += 4 + length
        if code == COOKIE:
            if length != CLIENT_COOKIE and not 16 <= length <= 40:
                return None
            cookie = data[pos - length:pos - length + CLIENT_COOKIE]
    return cookie if pos == end else None


# A server cookie (RFC 7873 4.2) is the keyed hash of the client cookie under a secret of this
# process. We never refuse a query for its cookie (RFC 7873 5.2.3 and 5.2.4 leave that to the
# server's policy; a pod's clients are local), so the cookie protects nothing of ours: it is
# there so that a client speaking cookies gets well-formed replies. Leaving the client's
# address out keeps every reply a function of the query's bytes, which the memo relies on.
_COOKIE_SECRET = os.urandom(16)  # what secrets.token_bytes gives, without importing secrets


def cookie_option(client: bytes) -> bytes:
    """The COOKIE option of a reply: the client cookie and our server cookie."""
    server = blake2b(client, key=_COOKIE_SECRET, digest_size=8).digest()
    return b"\x00\x0a\x00\x10" + client + server


def question_query(name: bytes, qtype: int, *, recursion: bool = True) -> Query:
    """A query of our own, not a client's (readiness, loop and health probes, `explain`): one IN
    question for `name` (lower-cased wire form), ID zero, no EDNS; RD unless `recursion` is off."""
    question = name + _TYPE_CLASS.pack(qtype, CLASS_IN)
    return Query(0, RD if recursion else 0, question, name, qtype, False, PLAIN_PAYLOAD, False)


def upstream_query(q: Query, qid: int, *, health_probe: bool = False) -> bytes:
    """The query we send upstream: fresh ID, RD and AD set, the client's CD and DO, our EDNS size.
    AD asks the upstream to say whether the answer is authenticated (RFC 6840 5.7) whoever
    asked first, since one stored answer serves clients that ask for AD and clients that do
    not; `render` clears it for the latter (RFC 6840 5.8), as CoreDNS's cache does.
    A health probe goes as CoreDNS's forward sends its: the question alone, RD as `q` has it."""
    if health_probe:
        return HEADER.pack(qid, q.flags & RD, 1, 0, 0, 0) + q.question
    return HEADER.pack(qid, RD | AD | (q.flags & CD), 1, 0, 0, 1) + q.question + _OUR_OPT[q.do]


def opt_record(do: bool, options: bytes = b"") -> bytes:
    return b"\x00" + _OPT_FIXED.pack(TYPE_OPT, EDNS_PAYLOAD, 0, 0, DO if do else 0,
                                     len(options)) + options


_OUR_OPT = (opt_record(False), opt_record(True))  # what upstream_query adds, by DO


def ede_option(code: int, text: str) -> bytes:
    """An Extended DNS Error option (RFC 8914): why we answered SERVFAIL or REFUSED."""
    body = _U16.pack(code) + text.encode("utf-8")[:200]
    return _U16.pack(EDE) + _U16.pack(len(body)) + body


def reply_matches(sent: bytes, reply: bytes, qlen: int = 0) -> bool:
    """RFC 5452 checks a reply must pass before we look at it: ID, QR, opcode, question.

    A reply with no question is accepted only as a failure signal (rcode other than
    NOERROR and NXDOMAIN), as Unbound and dnsdist do. `qlen`, the length of `sent`'s
    question if the caller knows it, saves walking its name.
    """
    if len(reply) < 12 or reply[:2] != sent[:2]:
        return False
    flags, qdcount = _FLAGS_QDCOUNT.unpack_from(reply, 2)
    if not flags & QR or flags & OPCODE_MASK:
        return False
    if qdcount == 0:
        return flags & RCODE_MASK not in (0, 3)
    if qdcount != 1:
        return False
    end = 12 + (qlen or question_length(sent))
    if reply[12:end] == sent[12:end]:  # the usual echo, byte for byte
        return True
    # The name ignoring case; type and class exactly (lower-casing them would make qtype 65
    # match 97, since 0x41 is "A" and 0x61 "a").
    end -= 4
    return reply[12:end].lower() == sent[12:end].lower() and reply[end:end + 4] == sent[end:end + 4]


def skip_name(data: bytes, pos: int) -> int:
    """The offset after the name at `pos` (a pointer ends it), or -1 past the end."""
    n = len(data)
    while pos < n:
        count = data[pos]
        if count == 0:
            return pos + 1
        if count >= 0xC0:
            return pos + 2
        pos += count + 1
    return -1


def question_length(query: bytes) -> int:
    pos = 12
    while query[pos]:
        pos += query[pos] + 1
    return pos + 1 + 4 - 12


def render(stored: bytes | memoryview, ttl_offsets: tuple[int, ...], ttl: int | None, q: Query,
           cap: int | None = None) -> bytes:
    """A stored answer made the client's: its ID, spelling, RD/CD bits, EDNS; TTLs set.

    Every TTL becomes `ttl`; with `ttl` None each keeps the upstream's, lowered to `cap` if
    given (a reply the cache did not store still obeys `cache 30`). RA is ours: this server
    recurses, whatever the upstream offers (RFC 1035 4.1.1). AA is not: a forwarder is no
    authority for what it relays or caches (RFC 1034 4.3.1, RFC 2181 5.4.1).
    """
    buf = bytearray(stored)
    _, flags, _, ancount, nscount, arcount = HEADER.unpack_from(stored)
    flags = (flags & ~(RD | CD | TC | AA)) | RA | (q.flags & (RD | CD))
    if not (q.do or q.flags & AD):
        flags &= ~AD  # RFC 6840 5.8: AD only for clients that asked for it
    # The stored counts, plus our OPT for a client that sent EDNS (appended below).
    HEADER.pack_into(buf, 0, q.id, flags, 1, ancount, nscount, arcount + q.edns)
    buf[12:12 + len(q.question)] = q.question
    if ttl is not None:
        packed = ttl.to_bytes(4, "big")
        for off in ttl_offsets:
            buf[off:off + 4] = packed
    elif cap is not None:
        for off in ttl_offsets:
            value = _U32.unpack_from(buf, off)[0]
            if value > cap:  # the top bit set means 0 (RFC 2181 8), and is sent as 0
                _U32.pack_into(buf, off, 0 if value & 0x80000000 else cap)
    if q.edns:
        buf += _reply_opt(q)
    return bytes(buf)


def truncated(q: Query, flags: int) -> bytes:
    """The reply to send when the answer does not fit: question only, TC set."""
    out_flags = (flags & ~(RD | CD | AD | AA | RCODE_MASK)) | TC | QR | RA | (q.flags & (RD | CD))
    out_flags |= flags & RCODE_MASK
    header = HEADER.pack(q.id, out_flags, 1, 0, 0, 1 if q.edns else 0)
    return header + q.question + (_reply_opt(q) if q.edns else b"")


def error_reply(q: Query, rcode: int, ede: tuple[int, str] | None = None) -> bytes:
    """A bare reply with an rcode (SERVFAIL, REFUSED): header, question, EDNS if asked.

    The Extended DNS Error goes only to clients that sent EDNS, as RFC 8914 requires.
    """
    flags = QR | RA | (q.flags & (RD | CD)) | rcode
    header = HEADER.pack(q.id, flags, 1, 0, 0, 1 if q.edns else 0)
    if not q.edns:
        return header + q.question
    return header + q.question + opt_record(q.do, _cookie(q) + (ede_option(*ede) if ede else b""))


def _reply_opt(q: Query) -> bytes:
    """The OPT record of a reply to an EDNS client: prebuilt unless it sent a cookie."""
    return opt_record(q.do, cookie_option(q.cookie)) if q.cookie else _OUR_OPT[q.do]


def _cookie(q: Query) -> bytes:
    return cookie_option(q.cookie) if q.cookie else b""


# -- names in wire form: lower-cased by the caller, compared as bytes -----------------------

def name_to_wire(zone: str) -> bytes:
    """Text zone (`svc.acme.internal.`) to lower-cased wire form, as `Query.name` holds it."""
    out = b""
    for label in zone.lower().rstrip(".").split("."):
        if label:
            raw = label.encode("ascii")
            out += bytes((len(raw),)) + raw
    return out + b"\x00"


def wire_to_text(name: bytes) -> str:
    labels, pos = [], 0
    while name[pos]:
        labels.append(name[pos + 1:pos + 1 + name[pos]].decode("ascii", "backslashreplace"))
        pos += name[pos] + 1
    return ".".join(labels) + "." if labels else "."


def suffixes(name: bytes) -> Iterable[bytes]:
    """Every whole-label suffix of a wire name, longest first, ending with the root."""
    pos = 0
    while name[pos]:
        yield name[pos:]
        pos += name[pos] + 1
    yield b"\x00"


def is_subdomain(name: bytes, zone: bytes) -> bool:
    return zone == b"\x00" or any(s == zone for s in suffixes(name))
