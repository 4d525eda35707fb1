"""The hand-written reply reader, proven against dnspython on generated and mutated replies."""

from __future__ import annotations

import struct

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rrset
import dns.tsigkeyring
import dns.wire
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from splitdns.codec import reply, wire
from tests.helpers import query
from tests.helpers import wire as to_wire

labels = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
names = st.lists(labels, min_size=1, max_size=4).map(lambda ls: ".".join(ls) + ".")
ttls = st.one_of(st.integers(0, 100_000), st.sampled_from([0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]))
RDATA = {
    "A": st.ip_addresses(v=4).map(str),
    "AAAA": st.ip_addresses(v=6).map(str),
    "CNAME": names,
    "NS": names,
    "PTR": names,
    "MX": names.map(lambda n: f"10 {n}"),
    "SRV": names.map(lambda n: f"1 2 443 {n}"),
    "TXT": st.text(alphabet="abc xyz", min_size=0, max_size=300).map(lambda t: f'"{t}"'),
    "CAA": st.just('0 issue "ca.example.net"'),
}
# CAA stands for the types whose rdata the reader leaves to dnspython (reply._dnspython_reads).


def read_reply_to(sent: bytes, data: bytes) -> reply.Reply | None:
    """The hand reader on a reply to `sent`: None if it does not match, `Unusual` if OPT is not last."""
    return reply.read_canonical(data) if wire.reply_matches(sent, data) else None


def records(types: list[str]) -> st.SearchStrategy[tuple[str, int, str, str]]:
    return st.tuples(names, ttls, st.sampled_from(types)).flatmap(
        lambda t: RDATA[t[2]].map(lambda rdata: (t[0], t[1], t[2], rdata)))


@st.composite
def replies(draw: st.DrawFn) -> tuple[bytes, bytes, dns.message.Message]:
    record = records(sorted(RDATA))
    qname = draw(names)
    client = query(qname, draw(st.sampled_from(["A", "AAAA", "TXT"])), edns=0 if draw(st.booleans()) else -1)
    q = wire.parse_query(to_wire(client))
    assert q is not None
    sent = wire.upstream_query(q, draw(st.integers(0, 0xFFFF)))
    msg = dns.message.make_response(dns.message.from_wire(sent))
    msg.set_rcode(draw(st.sampled_from([0, 0, 0, 2, 3, 5])))
    for section in (msg.answer, msg.authority, msg.additional):
        for owner, ttl, rtype, rdata in draw(st.lists(record, max_size=4)):
            section.append(dns.rrset.from_text(owner, ttl, "IN", rtype, rdata))
    if draw(st.booleans()):
        soa_ttl, minimum = draw(ttls), draw(st.integers(0, 100_000))
        msg.authority.append(dns.rrset.from_text(qname, soa_ttl, "IN", "SOA",
                                                 f"ns.{qname} host.{qname} 1 2 3 4 {minimum}"))
    if draw(st.booleans()):
        msg.flags |= dns.flags.TC
    return sent, to_wire(msg), msg


def _expected_ttls(msg: dns.message.Message) -> tuple[int | None, int | None]:
    all_ttls = [reply.ttl(r.ttl) for s in (msg.answer, msg.authority, msg.additional) for r in s for _ in r]
    soa = next((r for r in msg.authority if r.rdtype == 6), None)
    soa_ttl = None if soa is None else min(reply.ttl(soa.ttl), reply.ttl(soa[0].minimum))  # type: ignore[attr-defined]
    return (min(all_ttls) if all_ttls else None), soa_ttl


@given(replies())
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_agrees_with_dnspython_on_valid_replies(case: tuple[bytes, bytes, dns.message.Message]) -> None:
    sent, data, _ = case
    got = read_reply_to(sent, data)
    assert got is not None
    parsed = dns.message.from_wire(data)
    assert got.flags == parsed.flags and got.rcode() == parsed.rcode()
    assert (got.min_ttl, got.soa_ttl) == _expected_ttls(parsed)
    assert bool(got.answer) == bool(parsed.answer)  # dnspython merges duplicate records
    assert_stored_is_the_reply_without_opt(got, parsed)


def assert_stored_is_the_reply_without_opt(got: reply.Reply, parsed: dns.message.Message) -> None:
    """What the cache keeps: the same message with ID 0 and no OPT, and every TTL's offset."""
    stored = dns.message.from_wire(got.stored)
    assert stored.id == 0 and stored.edns == -1 and stored.flags == parsed.flags
    for section in ("question", "answer", "authority", "additional"):
        assert getattr(stored, section) == getattr(parsed, section), section
    assert len(got.offsets) == got.ancount + got.nscount + got.arcount - (stored.edns != parsed.edns)
    marked = bytearray(got.stored)
    for o in got.offsets:
        marked[o:o + 4] = (0x01020304).to_bytes(4, "big")
    rewritten = dns.message.from_wire(bytes(marked))
    for section in ("answer", "authority", "additional"):  # each offset is a TTL, nothing else moved
        assert getattr(rewritten, section) == getattr(parsed, section), section
        assert all(r.ttl == 0x01020304 for r in getattr(rewritten, section))


def test_opt_not_last_is_rewritten_in_canonical_order() -> None:
    client = query("example.org.", edns=0)
    sent = wire.upstream_query(wire.parse_query(to_wire(client)), 0x4242)  # type: ignore[arg-type]
    msg = dns.message.make_response(dns.message.from_wire(sent))
    msg.additional.append(dns.rrset.from_text("ns.example.org.", 60, "IN", "A", "192.0.2.53"))
    parsed = dns.message.from_wire(to_wire(msg))
    msg.use_edns(False)
    plain = to_wire(msg)  # header, question, then the A record last
    record = plain[len(plain) - 10 - 4 - 5:]  # "ns" + pointer, type, class, TTL, length, address
    assert record.startswith(b"\x02ns\xc0")
    opt = wire.opt_record(False)
    swapped = plain[:10] + b"\x00\x02" + plain[12:len(plain) - len(record)] + opt + record
    with pytest.raises(reply.Unusual):
        read_reply_to(sent, swapped)
    got = reply.read_matched(swapped)
    assert got is not None and got.arcount == 2
    assert_stored_is_the_reply_without_opt(got, parsed)


def test_signed_replies_extended_rcodes_and_other_edns_versions_are_not_answers() -> None:
    client = query("example.org.", edns=0)
    sent = wire.upstream_query(wire.parse_query(to_wire(client)), 0x4242)  # type: ignore[arg-type]
    msg = dns.message.make_response(dns.message.from_wire(sent))
    assert read_reply_to(sent, to_wire(msg)) is not None
    msg.set_rcode(dns.rcode.BADVERS)  # 16: in the OPT's extended bits
    assert read_reply_to(sent, to_wire(msg)) is None
    msg.set_rcode(11)
    assert read_reply_to(sent, to_wire(msg)) is None
    msg.set_rcode(0)
    msg.use_edns(1)
    assert read_reply_to(sent, to_wire(msg)) is None
    msg.use_edns(0)
    msg.use_tsig(dns.tsigkeyring.from_text({"k.": "c2VjcmV0c2VjcmV0c2VjcmV0"}), keyname="k.")
    assert reply.read_matched(msg.to_wire()) is None  # we never sign; dnspython refuses it too


@given(replies(),
       st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 255)), min_size=0, max_size=3),
       st.integers(0, 8) | st.just(0))
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_replies_accepted_only_when_dnspython_accepts(
        case: tuple[bytes, bytes, dns.message.Message], flips: list[tuple[int, int]], cut: int) -> None:
    """A reply with bytes changed or cut: the reader (and reply.read_matched, for what it leaves to
    dnspython) accepts exactly what dnspython accepts as a reply to our query, and what it
    accepts reads as dnspython reads it. Few flips and often none, so that many examples are
    accepted and compared: a reader that refused everything fails on the unchanged ones."""
    sent, data, _ = case
    mutated = bytearray(data)
    for where, value in flips:
        mutated[12 + where % max(1, len(data) - 12)] = value  # keep ID and flags: they must match
    raw = bytes(mutated[:len(mutated) - cut] if cut else mutated)
    try:
        got = read_reply_to(sent, raw)
    except reply.Unusual:
        event("left to dnspython by the reader (reply.read_matched)")
        got = reply.read_matched(raw)
    try:
        parsed = dns.message.from_wire(raw, ignore_trailing=False)
    except (dns.exception.DNSException, ValueError, IndexError, UnicodeError):
        parsed = None
    if got is not None and parsed is None:
        raise AssertionError(f"accepted a reply dnspython refuses: {raw.hex()}")
    if parsed is not None and got is None:
        # Rejected here, accepted by dnspython: allowed only when it is not a reply to `sent`,
        # or by our own rules (an EDNS version or an rcode no reply to our query carries).
        if (not wire.reply_matches(sent, raw) or parsed.edns > 0 or parsed.rcode() > 10
                or may_point_into_the_header(raw) or names_change_with_the_ttls(raw, parsed)):
            event("refused by our rules, read by dnspython")
            return
        raise AssertionError(f"rejected a reply dnspython accepts: {raw.hex()}")
    if got is None:
        event("refused by both")
        return
    assert parsed is not None
    event("accepted by both: contents compared")
    assert got.flags == parsed.flags and got.rcode() == parsed.rcode()
    assert (got.min_ttl, got.soa_ttl) == _expected_ttls(parsed)
    assert_stored_is_the_reply_without_opt(got, parsed)


def may_point_into_the_header(raw: bytes) -> bool:
    """Two bytes past the header that would read as a pointer below offset 12 (our rule, not
    dnspython's). Rdata may hold such bytes too: this may say yes for a reply without one."""
    return any(raw[i] >= 0xC0 and ((raw[i] & 0x3F) << 8 | raw[i + 1]) < 12 for i in range(12, len(raw) - 1))


def names_change_with_the_ttls(raw: bytes, parsed: dns.message.Message) -> bool:
    """Whether writing other TTLs into the reply, as a cache hit does, changes anything else
    dnspython reads from it: a name was read from a TTL field (our rule, not dnspython's). The
    TTL fields are found by dnspython's own wire parser, not by the reader under test."""
    changed = bytearray(raw)
    parser = dns.wire.Parser(raw, 12)
    counts = struct.unpack_from("!HHHH", raw, 4)
    for _ in range(counts[0]):
        parser.get_name(decompress=True)
        parser.seek(parser.current + 4)
    for _ in range(sum(counts[1:])):
        parser.get_name(decompress=True)
        rtype, _, _, rdlen = struct.unpack_from("!HHIH", raw, parser.current)
        if rtype != 41:  # OPT's "TTL" is its flags and version, which we do not rewrite
            changed[parser.current + 4:parser.current + 8] = b"\x7f\x01\x02\x03"
        parser.seek(parser.current + 10 + rdlen)
    try:
        again = dns.message.from_wire(bytes(changed), ignore_trailing=False)
    except (dns.exception.DNSException, ValueError, IndexError, UnicodeError):
        return True
    return (again.question, again.answer, again.authority, again.additional) != \
        (parsed.question, parsed.answer, parsed.authority, parsed.additional)


def test_compression_attacks_are_rejected() -> None:
    sent = wire.upstream_query(wire.parse_query(to_wire(query("example.org.")))  # type: ignore[arg-type]
                               , 0x4242)
    head = sent[:2] + b"\x81\x80" + b"\x00\x01\x00\x01\x00\x00\x00\x00" + sent[12:sent.index(b"\x00\x00\x29")]
    rr = b"\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04\xc0\x00\x02\x01"
    assert read_reply_to(sent, head + b"\xc0\x0c" + rr) is not None  # a normal pointer to the question
    for bad in (b"\xc0\x1d", b"\xc0\xff", b"\x03abc\xc0\x1d"):  # self, past the end, forward loop
        assert read_reply_to(sent, head + bad + rr) is None
    assert read_reply_to(sent, head + b"\x40abc" + rr) is None  # label type 64
    # Into the header: dnspython reads a name there, but the header is ours to rewrite (ID, RA,
    # AA), so the name a client would read from our answer is not the one we checked.
    # Here the flags' low byte (RA clear, NOERROR) reads as the root name; our RA=1 breaks it.
    no_ra = head[:3] + b"\x00" + head[4:]
    assert read_reply_to(sent, no_ra + b"\xc0\x0c" + rr) is not None
    assert read_reply_to(sent, no_ra + b"\xc0\x03" + rr) is None
    assert read_reply_to(sent, head + b"\xc0\x0c" + rr + b"\x00") is None  # trailing byte


def test_a_name_read_from_a_ttl_field_is_refused() -> None:
    """A pointer may land anywhere before it (dnspython reads what it finds), also on a TTL. A
    cache hit writes the remaining TTL there, so the name a client reads would change."""
    sent = wire.upstream_query(wire.parse_query(to_wire(query("example.org.")))  # type: ignore[arg-type]
                               , 0x4242)
    question_end = sent.index(b"\x00\x00\x29")  # the OPT record follows the question
    head = sent[:2] + b"\x81\x80" + b"\x00\x01\x00\x01\x00\x01\x00\x00" + sent[12:question_end]
    answer = b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04\xc0\x00\x02\x01"
    # To the answer's class's low byte: read as a 1-byte label, then the TTL's bytes.
    into_ttl = struct.pack("!H", 0xC000 | (len(head) + 5))
    ns = b"\xc0\x0c\x00\x02\x00\x01\x00\x00\x00\x3c\x00\x02"
    good = head + answer + ns + b"\xc0\x0c"
    bad = head + answer + ns + into_ttl
    assert read_reply_to(sent, good) is not None
    read = dns.message.from_wire(bad)  # dnspython accepts it: the NS name is the TTL's bytes
    assert read.authority[0][0].target.labels[0] == b"\x00"
    changed = bytearray(bad)
    changed[len(head) + 6:len(head) + 10] = struct.pack("!I", 1 << 24)  # what a cache hit writes
    assert dns.message.from_wire(bytes(changed)).authority[0][0].target != read.authority[0][0].target
    assert read_reply_to(sent, bad) is None


@pytest.mark.parametrize(("rtype", "rclass", "rdata", "valid"), [
    (1, 1, b"\xc0\x00\x02\x01", True),          # A in IN: an address
    (1, 3, b"\xc0\x00\x02\x01", False),         # A in CH: a name and a number for dnspython
    (1, 3, b"\x00\x00\x01", True),               # ... which this is
    (1, 4, b"\xc0\x00\x02\x01\x05", True),      # A in HS: no rules of its own, opaque
    (33, 3, b"\x00\x01\x00\x02\x01\xbb\x00", True),  # SRV in CH: opaque too
    (257, 1, b"\x00", False),                  # CAA too short
    (41, 1232, b"\x00\x08\x00\x03\x00\x01\x99", False),  # OPT: client subnet, bad prefix
])
def test_records_of_other_classes_and_options_are_judged_as_dnspython_does(
        rtype: int, rclass: int, rdata: bytes, valid: bool) -> None:
    sent = wire.upstream_query(wire.parse_query(to_wire(query("example.org.")))  # type: ignore[arg-type]
                               , 0x4242)
    question = sent[12:sent.index(b"\x00\x00\x29")]
    section = (0, 1) if rtype == 41 else (1, 0)  # OPT in the additional section
    owner = b"\x00" if rtype == 41 else b"\xc0\x0c"
    data = sent[:2] + b"\x81\x80\x00\x01" + struct.pack("!HHH", section[0], 0, section[1]) + question + \
        owner + struct.pack("!HHIH", rtype, rclass, 60, len(rdata)) + rdata
    try:
        dns.message.from_wire(data, ignore_trailing=False)
    except Exception:  # any refusal
        assert not valid
    else:
        assert valid
    assert (read_reply_to(sent, data) is not None) == valid


def dnspython_name_end(data: bytes, pos: int) -> int:
    parser = dns.wire.Parser(data, pos)
    try:
        dns.name.from_wire_parser(parser)
    except dns.exception.FormError:
        return -1
    return parser.current


def pointer_chain(hops: int) -> tuple[bytes, int]:
    """The root name at 0, then `hops` pointers each to the one before: the last one's name."""
    data = b"\x00" + b"".join(bytes([0xC0, max(0, 2 * i - 1)]) for i in range(hops))
    return data, len(data) - 2


@pytest.mark.parametrize(("data", "pos", "valid", "why"), [
    (b"\x05hello\x00\x03abc\xc0\x00", 7, True, "a target that ends before the part pointing to it"),
    (b"\x03abc\x05hello\x00\x01x\xc0\x04", 13, True, "labels, then a pointer to a whole name"),
    (b"\x05hello\xc0\x00", 6, False, "a target running into its own pointer"),
    (b"\x03abc\x01x\xc0\x00", 4, False, "a target running into the labels before its pointer"),
    (b"\x01a\x00\x01b\xc0\x00\xc0\x03", 7, True, "two hops, each target before the last"),
    (b"\x01a\x01b\xc0\x00\xc0\x02", 6, False, "a second target running into the first"),
    (b"\x01a" * 64 + b"\x00" + b"\x01a" * 63 + b"\xc0\x00", 129, True, "127 labels, 255 octets"),
    (b"\x01a" * 64 + b"\x00" + b"\x01a" * 64 + b"\xc0\x00", 129, False, "257 octets across a pointer"),
    (*pointer_chain(16), True, "16 pointers in a row"),
    (*pointer_chain(17), False, "17 pointers in a row"),
])
def test_name_rules_are_dnspythons(data: bytes, pos: int, valid: bool, why: str) -> None:
    end = reply._name(data, pos, len(data), floor=0)  # a bare name, no header before it
    assert (end > 0) == valid and end == dnspython_name_end(data, pos), why


@given(replies())
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_owners_of_authority_and_additional_match_dnspython(
        case: tuple[bytes, bytes, dns.message.Message]) -> None:
    sent, data, _ = case
    got = read_reply_to(sent, data)
    assert got is not None
    parsed = dns.message.from_wire(data)
    expected = sorted(r.name.canonicalize().to_wire() for s in (parsed.authority, parsed.additional)
                      for r in s for _ in r)
    assert sorted(set(got.owners)) == sorted(set(expected))
