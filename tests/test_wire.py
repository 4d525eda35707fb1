"""The hand-written wire path, proven against dnspython, the reference."""

from __future__ import annotations

import dns.edns
import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
from hypothesis import given, settings
from hypothesis import strategies as st

from splitdns.codec import entries, queries, wire
from splitdns.core.cache import Cache
from splitdns.directives.cache import CacheSpec
from tests.helpers import indexed, query, reply
from tests.helpers import wire as to_wire

labels = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_",
                 min_size=1, max_size=20)
names = st.lists(labels, min_size=1, max_size=5).map(lambda ls: ".".join(ls) + ".")
qtypes = st.sampled_from(["A", "AAAA", "TXT", "MX", "SRV", "NS", "PTR", "CNAME", "SOA", "HTTPS"])


def fields(q: wire.Query) -> tuple[object, ...]:
    return (q.id, q.flags, q.question, q.name, q.qtype, q.edns, q.payload, q.do, q.cd, q.key)


@given(name=names, qtype=qtypes, edns=st.sampled_from([-1, 0]), do=st.booleans(), cd=st.booleans(),
       payload=st.integers(0, 65535), qid=st.integers(0, 65535))
@settings(max_examples=300, deadline=None)
def test_fast_and_dnspython_readers_agree(name: str, qtype: str, edns: int, do: bool, cd: bool,
                                           payload: int, qid: int) -> None:
    data = to_wire(query(name, qtype, qid=qid, edns=edns, payload=payload, do=do and edns == 0, cd=cd))
    fast = wire.parse_query(data)
    slow = queries._read_slow(data)
    assert fast is not None and isinstance(slow, wire.Query)
    assert fields(fast) == fields(slow)
    parsed = dns.message.from_wire(data)
    assert fast.name == parsed.question[0].name.canonicalize().to_wire()
    assert fast.edns == (edns == 0)
    assert fast.max_udp == (min(max(payload, 512), 1232) if edns == 0 else 512)


@given(data=st.binary(max_size=600))
@settings(max_examples=2000, deadline=None)
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    verdict = queries.read(data)
    assert verdict is None or isinstance(verdict, (bytes, wire.Query))
    if isinstance(verdict, bytes):
        dns.message.from_wire(verdict)  # every reply we make is itself valid DNS


def test_short_packets_and_replies_get_silence() -> None:
    assert queries.read(b"\x12\x34\x01") is None
    r = to_wire(reply(query("example.org.")))
    assert queries.read(r) is None  # QR set: answering could amplify


def test_error_replies_for_bad_queries() -> None:
    q = query("example.org.")
    notify = to_wire(q)[:2] + b"\x20\x00" + to_wire(q)[4:]  # opcode NOTIFY
    out = queries.read(notify)
    assert isinstance(out, bytes)
    assert dns.message.from_wire(out).rcode() == dns.rcode.NOTIMP
    two_questions = bytearray(to_wire(query("example.org.", edns=-1)))
    two_questions[5] = 2
    out = queries.read(bytes(two_questions))
    assert isinstance(out, bytes) and (out[3] & 0xF) == dns.rcode.FORMERR
    assert out[:2] == b"\x12\x34"  # the client's ID is echoed
    chaos = dns.message.make_query("version.bind.", "TXT", "CH")
    out = queries.read(to_wire(chaos))
    assert isinstance(out, bytes)
    assert dns.message.from_wire(out).rcode() == dns.rcode.REFUSED
    badvers = query("example.org.", edns=1)
    out = queries.read(to_wire(badvers))
    assert isinstance(out, bytes)
    assert dns.message.from_wire(out).rcode() == dns.rcode.BADVERS


def test_unusual_queries_take_the_slow_path() -> None:
    q = to_wire(query("example.org.", edns=-1))
    assert wire.parse_query(q) is not None
    # An OPT record whose option overruns its data: the fast reader declines, dnspython says FORMERR.
    bad_option = q[:11] + b"\x01" + q[12:] + b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x03\x00\x0a\x00"
    assert wire.parse_query(bad_option) is None
    out = queries.read(bad_option)
    assert isinstance(out, bytes) and out[3] & 0xF == dns.rcode.FORMERR
    # An additional record that is not OPT: legal, slow path, same Query as the fast reader's.
    extra = dns.message.make_query("Example.org.", "A", use_edns=False)
    extra.additional.append(dns.rrset.from_text("x.example.org.", 60, "IN", "A", "192.0.2.9"))
    data = to_wire(extra)
    assert wire.parse_query(data) is None
    slow = queries.read(data)
    assert isinstance(slow, wire.Query) and slow.name == b"\x07example\x03org\x00"


@given(name=names, qtype=st.sampled_from(["A", "AAAA", "TXT"]), client_edns=st.booleans(),
       do=st.booleans(), cd=st.booleans(), ad=st.booleans(), aa=st.booleans(), ra=st.booleans(),
       ttls=st.lists(st.integers(1, 7200), min_size=1, max_size=4),
       age=st.integers(0, 40), qid=st.integers(0, 65535),
       cookie=st.sampled_from([b"", b"\x01" * 8, bytes(range(24))]))
@settings(max_examples=300, deadline=None)
def test_cache_hit_render_equals_dnspython(name: str, qtype: str, client_edns: bool, do: bool,
                                           cd: bool, ad: bool, aa: bool, ra: bool, ttls: list[int],
                                           age: int, qid: int, cookie: bytes) -> None:
    rdata = {"A": "192.0.2.{}", "AAAA": "2001:db8::{}", "TXT": '"t{}"'}[qtype]
    client = query(name, qtype, qid=qid, edns=0 if client_edns else -1, do=do and client_edns, cd=cd)
    if cookie and client_edns:
        client.use_edns(0, client.ednsflags, 1232, options=[dns.edns.CookieOption(cookie[:8], cookie[8:])])
    upstream_q = dns.message.from_wire(wire.upstream_query(_q(client), 0x4242))
    up = reply(upstream_q, *[f"{name} {t} IN {qtype} {rdata.format(i + 1)}" for i, t in enumerate(ttls)])
    if ad:
        up.flags |= dns.flags.AD
    # An authoritative-only upstream: AA set, RA clear. A cache is no authority, and recurses.
    up.flags = (up.flags | (dns.flags.AA if aa else 0)) & ~(0 if ra else dns.flags.RA)
    cache = Cache(CacheSpec(success_ttl=3600, success_min_ttl=5))
    q = _q(client)
    entry = cache.put(q.key, q.name, indexed(up), now=1000.0)
    assert entry is not None
    served = dns.message.from_wire(entries.render(entry, entries.remaining(entry, 1000.0 + age), q))

    expected = dns.message.make_response(client)
    rd_cd = dns.flags.RD | dns.flags.CD
    expected.flags = (up.flags & ~rd_cd & ~dns.flags.AA) | dns.flags.RA | (client.flags & rd_cd)
    if not (do and client_edns):
        expected.flags &= ~dns.flags.AD
    stored_ttl = min(max(min(ttls), 5), 3600)
    for rrset in up.answer:
        copy = rrset.copy()
        copy.ttl = max(0, stored_ttl - age)
        expected.answer.append(copy)
    if client_edns:
        options = [dns.edns.CookieOption(cookie[:8], wire.cookie_option(cookie[:8])[12:])] if cookie else []
        expected.use_edns(0, dns.flags.DO if do else 0, 1232, options=options)
    assert served.to_text() == expected.to_text()
    assert [rr.ttl for rr in served.answer] == [max(0, stored_ttl - age)] * len(served.answer)


def _q(msg: dns.message.Message) -> wire.Query:
    q = wire.parse_query(to_wire(msg))
    assert q is not None
    return q


def test_reply_matching_follows_rfc5452() -> None:
    sent = wire.upstream_query(_q(query("example.org.")), 0xBEEF)
    good = reply(dns.message.from_wire(sent), "example.org. 60 IN A 192.0.2.1")
    assert wire.reply_matches(sent, to_wire(good))
    upper = to_wire(good).replace(b"example", b"EXAMPLE", 1)
    assert wire.reply_matches(sent, upper)  # case may differ (no 0x20 here)
    wrong_id = bytearray(to_wire(good))
    wrong_id[1] ^= 1
    assert not wire.reply_matches(sent, bytes(wrong_id))
    other = reply(query("example.net.", qid=0xBEEF), "example.net. 60 IN A 192.0.2.1")
    assert not wire.reply_matches(sent, to_wire(other))
    assert not wire.reply_matches(sent, sent)  # QR clear: a query, not a reply
    no_question_servfail = sent[:2] + b"\x81\x82" + b"\x00" * 8
    assert wire.reply_matches(sent, no_question_servfail)  # a failure signal
    no_question_noerror = sent[:2] + b"\x81\x80" + b"\x00" * 8
    assert not wire.reply_matches(sent, no_question_noerror)


def test_truncated_and_error_replies_are_valid_dns() -> None:
    q = _q(query("example.org.", "TXT", qid=7, edns=0, do=True))
    tc = dns.message.from_wire(wire.truncated(q, 0x8180))
    assert tc.flags & dns.flags.TC and tc.id == 7 and not tc.answer and tc.edns == 0
    err = dns.message.from_wire(wire.error_reply(q, dns.rcode.SERVFAIL, (22, "tunnel is down")))
    assert err.rcode() == dns.rcode.SERVFAIL
    ede = [o for o in err.options if o.otype == 15]
    assert ede and ede[0].code == 22 and ede[0].text == "tunnel is down"
    assert dns.rdatatype.to_text(err.question[0].rdtype) == "TXT"


def test_truncated_replies_offer_recursion_and_claim_no_authority() -> None:
    q = _q(query("example.org.", "TXT", qid=7, edns=0))
    aa_no_ra = 0x8400  # what an authoritative-only upstream sends
    tc = dns.message.from_wire(wire.truncated(q, aa_no_ra))
    assert tc.flags & dns.flags.RA and not tc.flags & dns.flags.AA


def _with_opt(data: bytes, options: bytes = b"", do: bool = False, version: int = 0) -> bytes:
    """A query's bytes with an OPT record appended, whatever the rest says."""
    opt = b"\x00\x00\x29\x04\xd0\x00" + bytes((version,)) + (b"\x80" if do else b"\x00") + b"\x00" + \
        len(options).to_bytes(2, "big") + options
    arcount = int.from_bytes(data[10:12], "big") + 1
    return data[:10] + arcount.to_bytes(2, "big") + data[12:] + opt


def _cookie(client: bytes) -> bytes:
    return b"\x00\x0a" + len(client).to_bytes(2, "big") + client


def test_error_replies_carry_edns_when_the_query_did() -> None:
    """RFC 6891 7: EDNS in, EDNS out, also for FORMERR and NOTIMP; DO copied; RA set."""
    plain = to_wire(query("example.org.", edns=-1))
    two = plain[:5] + b"\x02" + plain[6:] + plain[12:]
    cases = {
        "no question": plain[:5] + b"\x00" + plain[6:12],
        "two questions": two,
        "TC set": plain[:2] + bytes((plain[2] | 0x02,)) + plain[3:],
        "opcode NOTIFY": plain[:2] + b"\x20" + plain[3:],
    }
    for what, data in cases.items():
        for do in (False, True):
            out = queries.read(_with_opt(data, do=do))
            assert isinstance(out, bytes), what
            msg = dns.message.from_wire(out)
            assert msg.rcode() in (dns.rcode.FORMERR, dns.rcode.NOTIMP), what
            assert msg.edns == 0 and bool(msg.ednsflags & dns.flags.DO) == do, what
            assert msg.flags & dns.flags.RA, what
        bare = queries.read(data)
        assert isinstance(bare, bytes) and dns.message.from_wire(bare).edns == -1, what
    out = queries.read(_with_opt(to_wire(query("example.org.", edns=-1)), version=1))
    assert isinstance(out, bytes)
    badvers = dns.message.from_wire(out)
    assert badvers.rcode() == dns.rcode.BADVERS and badvers.flags & dns.flags.RA


def test_a_query_without_question_but_with_a_cookie_gets_our_server_cookie() -> None:
    """RFC 7873 5.4: NOERROR, no question, the client cookie and a server cookie; the same
    server cookie for the same client cookie; FORMERR for a malformed cookie."""
    header = to_wire(query("example.org.", edns=-1))[:4] + b"\x00" * 8
    client = bytes(range(1, 9))
    for sent in (client, client + bytes(16)):  # a new client, and one that sends our cookie back
        out = queries.read(_with_opt(header, _cookie(sent), do=True))
        assert isinstance(out, bytes)
        msg = dns.message.from_wire(out)
        assert msg.rcode() == dns.rcode.NOERROR and not msg.question and not msg.answer
        assert msg.flags & dns.flags.RA and msg.ednsflags & dns.flags.DO
        (option,) = msg.options
        assert isinstance(option, dns.edns.CookieOption)
        assert option.client == client and len(option.server) == 8
        assert option.server == wire.cookie_option(client)[12:]
    for bad in (bytes(5), bytes(12), bytes(41)):
        out = queries.read(_with_opt(header, _cookie(bad)))
        assert isinstance(out, bytes) and dns.message.from_wire(out).rcode() == dns.rcode.FORMERR
    out = queries.read(_with_opt(header))  # no cookie: a question is missing after all
    assert isinstance(out, bytes) and dns.message.from_wire(out).rcode() == dns.rcode.FORMERR


def test_queries_with_a_cookie_get_it_answered_and_malformed_ones_formerr() -> None:
    client = bytes(range(8))
    data = _with_opt(to_wire(query("example.org.", edns=-1)), _cookie(client))
    q = wire.parse_query(data)
    assert q is not None and q.cookie == client
    err = dns.message.from_wire(wire.error_reply(q, dns.rcode.SERVFAIL, (22, "down")))
    codes = [o.otype for o in err.options]
    assert codes == [dns.edns.OptionType.COOKIE, dns.edns.OptionType.EDE]
    bad = _with_opt(to_wire(query("example.org.", edns=-1)), _cookie(bytes(9)))
    assert wire.parse_query(bad) is None
    out = queries.read(bad)
    assert isinstance(out, bytes)
    formerr = dns.message.from_wire(out)
    assert formerr.rcode() == dns.rcode.FORMERR and formerr.edns == 0
    refused = queries.read(_with_opt(to_wire(dns.message.make_query("version.bind.", "TXT", "CH",
                                                                    use_edns=False)), _cookie(client)))
    assert isinstance(refused, bytes)
    (option,) = dns.message.from_wire(refused).options
    assert isinstance(option, dns.edns.CookieOption) and option.client == client


@given(name=names, rd=st.booleans(), qid=st.integers(0, 0xFFFF))
def test_our_own_queries_are_the_ones_dnspython_makes(name: str, rd: bool, qid: int) -> None:
    """Probes and `explain` build their queries with `question_query`: a health probe is the
    question alone (no EDNS, RD as `health_check ... no_rec` says), as CoreDNS's forward sends
    it; a readiness or loop probe goes upstream as a client's query does."""
    own = wire.question_query(wire.name_to_wire(name), dns.rdatatype.NS, recursion=rd)
    assert own.name == wire.name_to_wire(name) and own.qtype == dns.rdatatype.NS and not own.edns
    expected = dns.message.make_query(name.lower(), "NS", use_edns=False)
    expected.id = qid
    if not rd:
        expected.flags &= ~dns.flags.RD
    assert wire.upstream_query(own, qid, health_probe=True) == expected.to_wire()
    expected = dns.message.make_query(name.lower(), "NS", use_edns=0, payload=wire.EDNS_PAYLOAD)
    expected.id = qid
    expected.flags |= dns.flags.AD  # asked of every upstream (RFC 6840 5.7), as CoreDNS's cache does
    assert wire.upstream_query(wire.question_query(own.name, own.qtype), qid) == expected.to_wire()
