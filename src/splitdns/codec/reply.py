"""Upstream replies read on the wire by hand, checked in full and indexed for the cache.

Why by hand, with the figures: bench/README.md, "Where splitdns's time goes" (replies). One walk
checks what a forwarder relies on (RFC 5452 matching, RFC 9267's name and length rules, counts,
OPT placement, the rdata of the common types) and keeps what the core needs: flags, rcode, TTLs
and their offsets, the SOA for negative caching, the owners of authority and additional records.
Other rdata, other classes and EDNS options are checked by dnspython record by record (a record
a client's parser would refuse is neither relayed nor cached), and an OPT record that is not
last is left to dnspython whole (`read_matched`). Anything malformed
reads as None: not a reply (dropped, counted, keep waiting). Tests prove the reader agrees with
dnspython. Pure: no sockets, no clock.
Tests: tests/test_reply.py, tests/test_properties.py.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

import dns.exception
from dns.rdataclass import RdataClass
from dns.rdatatype import RdataType

from splitdns.codec import wire

if TYPE_CHECKING:
    import dns.message

_RR = struct.Struct("!HHIH")
_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")

T_A, T_NS, T_CNAME, T_SOA, T_PTR, T_MX, T_TXT, T_AAAA, T_SRV, T_DNAME, T_OPT = (
    1, 2, 5, 6, 12, 15, 16, 28, 33, 39, 41)
T_TSIG, T_RRSIG = 250, 46
MAX_POINTER_HOPS = 16  # compression pointers followed in one name (dnspython's limit)
C_IN = 1
_IN_ONLY = frozenset({T_A, T_AAAA, T_SRV})  # the hand-checked types whose rules are class IN's
_ONE_NAME = frozenset({T_NS, T_CNAME, T_PTR, T_DNAME})
_FIXED = {T_A: 4, T_AAAA: 16}


class Unusual(Exception):
    """A legal shape the hand reader leaves to dnspython: an OPT record that is not last."""


class Reply:
    """What the core needs to know of a valid upstream reply."""

    __slots__ = ("ancount", "arcount", "data", "flags", "min_ttl", "nscount", "offsets", "owners",
                 "plain", "qdcount", "rcode_value", "soa_ttl", "stored")

    def __init__(self, data: bytes, flags: int, rcode: int, counts: tuple[int, int, int, int],
                 min_ttl: int | None, soa_ttl: int | None, stored: bytes, offsets: tuple[int, ...],
                 owners: tuple[bytes, ...] = (), plain: bool = True) -> None:
        self.data = data
        self.flags = flags
        self.rcode_value = rcode
        self.qdcount, self.ancount, self.nscount, self.arcount = counts
        self.min_ttl = min_ttl      # over every record but OPT; None when there is none
        self.soa_ttl = soa_ttl      # min(TTL, MINIMUM) of the authority's SOA (RFC 2308)
        self.stored = stored        # the reply without OPT, ID zero: what the cache keeps
        self.offsets = offsets      # where each TTL sits in `stored`
        self.owners = owners        # lower-cased owner names in authority and additional (not OPT)
        # The answer holds a record of the asked type and no CNAME, DNAME or RRSIG anywhere:
        # it answers the question, and the cache need not look closer (core/cache.py).
        self.plain = plain

    def rcode(self) -> int:
        return self.rcode_value

    @property
    def question(self) -> bool:
        return self.qdcount > 0

    @property
    def answer(self) -> bool:
        return self.ancount > 0


def ttl(value: int) -> int:
    return 0 if value & 0x80000000 else value  # RFC 2181 8: the top bit set means zero


def read_matched(data: bytes, qlen: int = 0) -> Reply | None:
    """The reply in `data`, which passed `wire.reply_matches` (the caller counted the others):
    read by hand, or rewritten by dnspython in the one legal shape the hand reader leaves to it.
    None if it is not a well-formed reply we can use. `qlen`: the length of the question it was
    matched against, if the caller knows it: that question is then not read again."""
    try:
        return read_canonical(data, qlen)
    except Unusual:
        return rewrite_with_dnspython(data)


def read_canonical(data: bytes, qlen: int = 0) -> Reply | None:
    """The hand reader alone, for bytes known to match the query and written in canonical order
    (ours, dnspython's): raises `Unusual` where OPT is not last, which `read_matched` rewrites."""
    _, flags, qdcount, ancount, nscount, arcount = wire.HEADER.unpack_from(data)
    try:
        return _walk(data, len(data), flags, (qdcount, ancount, nscount, arcount), qlen)
    except (IndexError, struct.error):
        return None


def rewrite_with_dnspython(data: bytes,
                           edit: Callable[[dns.message.Message], None] | None = None) -> Reply | None:
    """The reply as dnspython writes it back (OPT last, names compressed anew), after `edit`
    changed the message if given; None if dnspython refuses it. The rare paths that must
    change a reply's shape (OPT not last, records to remove) go through here: cutting bytes
    out by hand would break the compression pointers of the records after them."""
    from dns.message import from_wire  # here: 6 MiB that ordinary replies never need (bench/)

    try:
        msg = from_wire(data, ignore_trailing=False)
        if edit is not None:
            edit(msg)
        rewritten = msg.to_wire()
    except (dns.exception.DNSException, ValueError, IndexError, UnicodeError):
        return None
    try:
        return read_canonical(rewritten)
    except Unusual:
        return None


def _walk(data: bytes, n: int, flags: int, counts: tuple[int, int, int, int],
          qlen: int = 0) -> Reply | None:
    qdcount, ancount, nscount, arcount = counts
    pos = 12
    read: list[tuple[int, int]] = []  # the parts of names reached by pointers
    if qlen and qdcount == 1:
        pos += qlen  # matched byte for byte, or but for case, against a question of ours
    else:
        for _ in range(qdcount):
            pos = _name(data, pos, n)
            if pos < 0 or pos + 4 > n:
                return None
            pos += 4
    offsets: list[int] = []
    min_ttl: int | None = None
    soa_ttl: int | None = None
    opt_start = -1
    owners: list[bytes] = []
    rcode = flags & wire.RCODE_MASK
    total = ancount + nscount + arcount
    qtype = _U16.unpack_from(data, pos - 4)[0] if qdcount == 1 else -1
    asked = odd = False
    for index in range(total):
        start = pos
        first = data[pos]
        if first == 0:
            pos += 1  # the root (OPT's owner): what `_name` finds
        elif first == 0xC0 and qdcount and data[pos + 1] == 12:
            # A pointer to the question's name, which `_name` checked above: what `_name`
            # would find (a target after the header, before this record), without the walk;
            # the part it reaches ends before any TTL, so `read` needs no note of it.
            pos += 2
        else:
            pos = _name(data, pos, n, read)
        if pos < 0 or pos + 10 > n:
            return None
        rtype, rclass, rttl, rdlen = _RR.unpack_from(data, pos)
        rdata = pos + 10
        end = rdata + rdlen
        if end > n:
            return None
        if rclass == C_IN and rtype in _FIXED:  # A, AAAA: what _rdata_ok checks, inline
            if rdlen != _FIXED[rtype]:
                return None
        elif rtype == T_OPT and rdlen == 0:
            pass  # an OPT without options: what _rdata_ok accepts
        elif not _rdata_ok(data, rtype, rclass, rdata, end, read):
            return None
        if rtype == T_OPT:
            if index < ancount + nscount or opt_start >= 0 or data[start] != 0 or pos != start + 1:
                return None  # OPT only once, in the additional section, owned by the root
            if (rttl >> 16) & 0xFF:
                return None  # an EDNS version we did not send (we send 0): not our answer
            opt_start = start
            rcode |= (rttl >> 24) << 4
        elif rtype == T_TSIG:
            return None  # we never sign; dnspython refuses a signed message without its key
        else:
            if rtype == T_RRSIG:
                odd = True
            elif index < ancount:
                if rtype == qtype:
                    asked = True
                elif rtype in (T_CNAME, T_DNAME):
                    odd = True
            if index >= ancount:
                owners.append(owner(data, start))
            offsets.append(pos + 4)
            value = 0 if rttl & 0x80000000 else rttl  # ttl(rttl)
            if min_ttl is None or value < min_ttl:
                min_ttl = value
            if rtype == T_SOA and soa_ttl is None and ancount <= index < ancount + nscount:
                soa_ttl = min(value, ttl(_U32.unpack_from(data, end - 4)[0]))
        pos = end
    if pos != n:
        return None  # trailing bytes: dnspython (ignore_trailing=False) refuses them too
    if rcode > 10:
        return None  # DSO's, unassigned, or extended rcodes (cookies, versions) we never asked for
    if read and offsets and _names_in_ttls(read, offsets):
        return None
    stored = b"\x00\x00" + data[2:]
    if opt_start >= 0:
        if offsets and offsets[-1] > opt_start:  # offsets grow: the last is the largest
            raise Unusual("OPT is not the last record")
        stored = wire.HEADER.pack(0, flags, qdcount, ancount, nscount, arcount - 1) + data[12:opt_start]
    return Reply(data, flags, rcode, counts, min_ttl, soa_ttl, stored, tuple(offsets), tuple(owners),
                 asked and not odd)


def _names_in_ttls(read: list[tuple[int, int]], offsets: list[int]) -> bool:
    """Whether a name reached by a pointer is read from a TTL field's bytes. A cache hit writes
    the remaining TTL there, so that name would change under the client's eyes (dnspython
    accepts a pointer into the middle of anything before it)."""
    first = offsets[0]  # parts that end before it (the question's name, mostly) touch no TTL
    return any(end > first and any(off < end and start < off + 4 for off in offsets)
               for start, end in read)


def owner(data: bytes, pos: int) -> bytes:
    """The lower-cased, uncompressed wire form of a name already checked by `_name`."""
    out = bytearray()
    while data[pos]:
        if data[pos] >= 0xC0:
            pos = ((data[pos] & 0x3F) << 8) | data[pos + 1]
            continue
        out += data[pos:pos + 1 + data[pos]]
        pos += 1 + data[pos]
    return bytes(out.lower()) + b"\x00"


def _name(data: bytes, pos: int, n: int, read: list[tuple[int, int]] | None = None,
          floor: int = wire.HEADER.size) -> int:
    """The offset after the name at `pos`, or -1 if it breaks a rule (RFC 9267, dnspython's).
    `read`: where each part reached by a pointer lies, [start, end), is added to it.
    `floor`: no pointer may target an offset below it (the message's header, by default)."""
    end = -1
    jumped = -1      # where the part reached by the last pointer starts
    part = pos       # where the part of the name being read starts: the name, then each target
    stop = n         # the name's bytes lie before this: a target may not run into the part that
                     # pointed to it, let alone past it (dnspython 2.9.1)
    hops = 0
    length = 0
    for _ in range(128 + MAX_POINTER_HOPS):  # at most 127 labels, and the pointers between them
        if pos >= stop:
            return -1
        count = data[pos]
        if count == 0:
            if jumped >= 0 and read is not None:
                read.append((jumped, pos + 1))
            return pos + 1 if end < 0 else end
        if count < 64:
            length += count + 1
            if length > 254 or pos + 1 + count > stop:
                return -1
            pos += count + 1
        elif count >= 0xC0:
            if pos + 1 >= stop:
                return -1
            target = ((count & 0x3F) << 8) | data[pos + 1]
            if end < 0:
                end = pos + 2
            hops += 1
            # Strictly backwards, each before the last one's target; a bounded chain. Never into
            # the header, which dnspython allows: we rewrite its ID and flags, and a name read
            # there would change under a client's eyes.
            if target < floor or target >= part or hops > MAX_POINTER_HOPS:
                return -1
            if jumped >= 0 and read is not None:
                read.append((jumped, pos + 2))
            stop = part
            part = pos = jumped = target
        else:
            return -1  # label types 64-191 are not in use
    return -1


def _rdata_ok(data: bytes, rtype: int, rclass: int, start: int, end: int,
              read: list[tuple[int, int]]) -> bool:
    """The rdata shapes dnspython checks, by hand for the types replies carry most. A, AAAA
    and SRV mean what they mean only in class IN (dnspython reads CH's A as a name and a
    number, and rdata of a class it has no rules for as opaque)."""
    if rclass != C_IN and rtype in _IN_ONLY:
        return _dnspython_reads(data, rtype, rclass, start, end)
    size = _FIXED.get(rtype)
    if size is not None:
        return end - start == size
    if rtype in _ONE_NAME:
        return _name(data, start, end, read) == end
    if rtype == T_MX:
        return end - start > 2 and _name(data, start + 2, end, read) == end
    if rtype == T_SRV:
        return end - start > 6 and _name(data, start + 6, end, read) == end
    if rtype == T_SOA:
        after = _name(data, start, end, read)
        after = _name(data, after, end, read) if after > 0 else -1
        return after > 0 and end - after == 20
    if rtype == T_TXT:
        pos = start
        while pos < end:
            pos += 1 + data[pos]
        return pos == end and end > start
    if rtype == T_OPT:
        pos = start
        while pos + 4 <= end:
            pos += 4 + _U16.unpack_from(data, pos + 2)[0]
        # Options (cookies, client subnet, extended errors) have rules of their own: rare
        # in a reply, and read by dnspython when present.
        return pos == end and (end == start or _dnspython_reads(data, rtype, rclass, start, end))
    return _dnspython_reads(data, rtype, rclass, start, end)


def _dnspython_reads(data: bytes, rtype: int, rclass: int, start: int, end: int) -> bool:
    import dns.rdata  # here, as in `rewrite_with_dnspython`: the common replies never need it

    try:
        dns.rdata.from_wire(RdataClass.make(rclass), RdataType.make(rtype), data, start, end - start)
    except Exception:  # dnspython refuses with many exception types; each means "not valid"
        return False
    return True
