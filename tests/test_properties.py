"""Property-based tests (hypothesis) beyond tests/test_wire.py: the Corefile parser, upstream
replies of any shape, the two reply renderers, and routing (catalogue H1).

test_wire.py already proves: the fast and dnspython query readers agree; arbitrary client
bytes never raise out of `queries.read`; a cache hit renders as dnspython would for plain
answers. This file does not repeat those.
"""

from __future__ import annotations

import random
import string
import tempfile
from pathlib import Path

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rrset
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from splitdns import config
from splitdns.codec import entries, wire
from splitdns.codec import reply as replies
from splitdns.core.cache import Cache
from splitdns.core.decisions import scrub
from splitdns.core.exchange import Done, Exchange, Send
from splitdns.core.routing import Router
from splitdns.core.zone import Zone
from splitdns.directives.cache import CacheSpec
from splitdns.errors import ConfigError
from tests.helpers import indexed, query
from tests.helpers import wire as to_wire

# --- the Corefile parser -----------------------------------------------------------------

WORDS = [".", "example.org", "svc.acme.internal:53", "dns://.:1053", "10.0.0.0/8", "[::1]:53", "{", "}",
         "forward", "cache", "errors", "log", "health", "ready", "prometheus", "reload", "loop", "bind",
         "limits", "openvpn", "import", "(snip)", "snip", "except", "policy", "random", "max_fails",
         "health_check", "read_timeout", "1s", "500ms", "-1", "0", "65536", "99999999999999999999",
         "127.0.0.1", "127.0.0.1:5300", "192.0.2.1", "::1", "[::1]", "tls://1.1.1.1", "success", "denial",
         "serve_stale", "servfail", "pending", "tcp_buffer", "64KB", "cache_memory", "1GiB", "{$HOME}",
         "{%X%}", '"quoted word"', '"unterminated', "#", "# comment", "\\", ",", "a,b", "*", "nope",
         "failover", "SERVFAIL", "NOERROR", "lameduck", "probe", "status", "management", "hook", "\t", "é",
         "\x00", "0x20", ":", "::", "dns://", "a..b", "-", "_"]


def corefile_text() -> st.SearchStrategy[str]:
    token = st.sampled_from(WORDS) | st.text(alphabet=string.printable, min_size=1, max_size=8)
    sep = st.sampled_from([" ", " ", "\n", "\n", "\r\n", "\t"])
    return st.lists(st.tuples(token, sep), max_size=60).map(lambda ts: "".join(t + s for t, s in ts))


REPR_MARKS = ("Traceback", "object at 0x", "Error(", "Exception(")  # Python leaking into a message


def check_clean(text: str, folder: Path) -> None:
    """The text loads, or fails with a ConfigError that names the Corefile and a line and
    shows the user no Python (no traceback, no object repr) unless the input itself held it."""
    corefile = str(folder / "Corefile")
    try:
        config.loads(text, corefile, env={}, read_files=False)
    except ConfigError as err:
        message = str(err)
        event("refused with a ConfigError")
        # read_files=False: nothing is imported, so every error is in this Corefile, on a line.
        assert err.where is not None, message
        assert err.where.file == corefile and err.where.line >= 1, message
        prefix = f"{corefile}:{err.where.line}: "
        assert message.startswith(prefix) and message[len(prefix):].strip(), message
        for mark in REPR_MARKS:
            assert mark not in message or mark in text, message
    else:
        event("loaded")


@given(text=corefile_text())
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_corefile_like_text_never_crashes_the_parser(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:  # relative imports find nothing to read here
        check_clean(text, Path(folder))


@given(text=st.text(max_size=400))
@settings(max_examples=500, deadline=None)
def test_arbitrary_text_never_crashes_the_parser(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        check_clean(text, Path(folder))


# --- upstream replies of any shape ---------------------------------------------------------

labels = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789-", min_size=1, max_size=12)
names = st.lists(labels, min_size=1, max_size=4).map(lambda ls: ".".join(ls) + ".")


def router_for(text: str) -> Router:
    cfg = config.loads(text, "Corefile", env={})
    return Router(Zone(b) for b in cfg.blocks)


SPLIT = ". {\n cache 30\n forward . 192.0.2.10\n}\ncorp.example {\n forward . 192.0.2.20\n}\n"


def built_reply(name: str, qtype: str, rcode: int, answers: int, extra: list[str], soa: bool,
                ad: bool, client_edns: bool, do: bool, aa: bool = False, ra: bool = True,
                ttl: int = 60) -> tuple[wire.Query, bytes, dns.message.Message]:
    client = query(name, qtype, qid=0x2222, edns=0 if client_edns else -1, do=do and client_edns)
    q = wire.parse_query(to_wire(client))
    assert q is not None
    sent = wire.upstream_query(q, 0x4242)
    up = dns.message.make_response(dns.message.from_wire(sent))
    up.set_rcode(rcode)
    rdata = {"A": "192.0.2.{}", "AAAA": "2001:db8::{}", "TXT": '"t{}"', "MX": "{} mx.example.org."}[qtype]
    for i in range(answers):
        up.answer.append(dns.rrset.from_text(name, ttl, "IN", qtype, rdata.format(i + 1)))
    if soa:
        up.authority.append(dns.rrset.from_text("example.org.", 300, "IN", "SOA",
                                                "ns.example.org. h.example.org. 1 2 3 4 60"))
    for owner in extra:
        up.additional.append(dns.rrset.from_text(owner, 30, "IN", "A", "192.0.2.99"))
    if ad:
        up.flags |= dns.flags.AD
    # An authoritative-only upstream sets AA and clears RA; a recursive one the other way round.
    up.flags = (up.flags | (dns.flags.AA if aa else 0)) & ~(0 if ra else dns.flags.RA)
    data = to_wire(up)
    return q, data, dns.message.from_wire(data)


reply_shapes = st.fixed_dictionaries({
    "name": names, "qtype": st.sampled_from(["A", "AAAA", "TXT", "MX"]),
    "rcode": st.sampled_from([dns.rcode.NOERROR, dns.rcode.NXDOMAIN, dns.rcode.SERVFAIL]),
    "answers": st.integers(0, 3), "extra": st.lists(st.sampled_from(
        ["ns.example.org.", "api.corp.example.", "x.y.", "CORP.EXAMPLE."]), max_size=3),
    "soa": st.booleans(), "ad": st.booleans(), "client_edns": st.booleans(), "do": st.booleans(),
    "aa": st.booleans(), "ra": st.booleans(), "ttl": st.sampled_from([0, 2, 60, 3600, 0x80000001])})


def zone_with(cache: str) -> Zone:
    """The zone of a one-block Corefile with this `cache` line (or none)."""
    zone = router_for(f". {{\n {cache}\n forward . 192.0.2.10\n}}\n").route(b"\x00")
    assert zone is not None
    return zone


def dnspython_render(msg: dns.message.Message, q: wire.Query, cap: int | None = None) -> bytes:
    """The reference for a passed-through reply, built by dnspython: the client's ID and RD/CD,
    no TC, RA set and AA clear (we recurse; we are no authority), AD only for clients that
    asked, our EDNS if the client sent EDNS, every TTL at most `cap`."""
    out = dns.message.Message(q.id)
    out.flags = (msg.flags & ~(wire.RD | wire.CD | wire.TC | wire.AA)) | wire.RA | \
        (q.flags & (wire.RD | wire.CD))
    if not (q.do or q.flags & wire.AD):
        out.flags &= ~wire.AD
    out.set_rcode(msg.rcode())
    out.question = msg.question
    out.answer, out.authority, out.additional = msg.answer, msg.authority, msg.additional
    if cap is not None:
        for section in (out.answer, out.authority, out.additional):
            for rrset in section:
                rrset.ttl = min(rrset.ttl, cap)  # dnspython already reads a top-bit TTL as 0
    if q.edns:
        out.use_edns(0, wire.DO if q.do else 0, wire.EDNS_PAYLOAD)
    data = out.to_wire()
    return data[:12] + q.question + data[12 + len(q.question):]


@given(shape=reply_shapes, cap=st.sampled_from([None, 1, 30, 3600]))
@settings(max_examples=250, deadline=None)
def test_passthrough_render_agrees_with_dnspython(shape: dict[str, object], cap: int | None) -> None:
    """A passed-through reply (not cached) is rendered by hand from the reader's index; the
    client must get the message dnspython would build, every TTL within `cache CAP`."""
    q, _, msg = built_reply(**shape)  # type: ignore[arg-type]
    done = Done(indexed(msg))
    fast = zone_with(f"cache {cap}" if cap else "").render(q, done, None, 0.0)
    a, b = dns.message.from_wire(fast), dns.message.from_wire(dnspython_render(msg, q, cap))
    assert (a.id, a.flags, a.rcode(), a.edns, a.ednsflags, a.payload) == \
        (b.id, b.flags, b.rcode(), b.edns, b.ednsflags, b.payload)
    # dnspython shuffles the records of an RRset when it writes one: compare as sets, with TTLs.
    for section in ("question", "answer", "authority", "additional"):
        assert getattr(a, section) == getattr(b, section), section
        assert [r.ttl for r in getattr(a, section)] == [r.ttl for r in getattr(b, section)]
    assert fast[12:12 + len(q.question)] == q.question  # the client's spelling, byte for byte


@given(shape=reply_shapes, age=st.integers(0, 400))
@settings(max_examples=150, deadline=None)
def test_cache_hit_and_passthrough_differ_only_in_ttls(shape: dict[str, object], age: int) -> None:
    q, _, msg = built_reply(**shape)  # type: ignore[arg-type]
    cache = Cache(CacheSpec(success_ttl=3600, success_min_ttl=0, denial_min_ttl=0))
    entry = cache.put(q.key, q.name, indexed(msg), now=1000.0)
    assume(entry is not None)
    assert entry is not None
    hit = dns.message.from_wire(entries.render(entry, entries.remaining(entry, 1000.0 + age), q))
    passed = dns.message.from_wire(zone_with("").render(q, Done(indexed(msg)), None, 1000.0))
    for section in ("question", "answer", "authority", "additional"):
        assert getattr(hit, section) == getattr(passed, section), section
    assert (hit.id, hit.flags, hit.rcode(), hit.edns, hit.ednsflags) == \
        (passed.id, passed.flags, passed.rcode(), passed.edns, passed.ednsflags)


def mutations(data: bytes, max_ops: int = 6, start: int = 0) -> st.SearchStrategy[bytes]:
    """A valid reply, then bytes flipped, cut, inserted or its counts changed (at `start` or
    after it: past the question, the reply still answers the query)."""
    def mutate(draw_ops: list[tuple[int, int, int]]) -> bytes:
        buf = bytearray(data)
        for op, pos, value in draw_ops:
            if len(buf) <= start:
                break
            pos = start + pos % (len(buf) - start)
            if op == 0:
                buf[pos] = value
            elif op == 1:
                del buf[pos:]
            elif op == 2:
                buf.insert(pos, value)
            elif op == 3 and len(buf) >= 12:
                buf[6 + 2 * (pos % 3) + 1] = value  # ANCOUNT/NSCOUNT/ARCOUNT low byte
        return bytes(buf)

    ops = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10_000), st.integers(0, 255)),
                   max_size=max_ops)
    return ops.map(mutate)


@given(data=st.data(), shape=reply_shapes)
@settings(max_examples=400, deadline=None)
def test_any_upstream_bytes_never_raise_through_the_reply_path(data: st.DataObject,
                                                               shape: dict[str, object]) -> None:
    """Whatever an upstream sends: matched or dropped, parsed or dropped, then scrubbed, cached
    and rendered without an exception, and what reaches the client is valid DNS."""
    q, good, _ = built_reply(**shape)  # type: ignore[arg-type]
    sent = wire.upstream_query(q, 0x4242)
    # Mostly a valid reply with a few bytes past its question changed, so that many examples
    # reach the render step; else changes anywhere, or any bytes after the right ID. What is
    # dropped before the render step is rejected with assume(): a path that dropped everything
    # would fail the run (hypothesis finds no example it can use).
    past_question = mutations(good, max_ops=2, start=12 + len(q.question))
    raw = data.draw(st.one_of(past_question, past_question, mutations(good),
                              st.binary(max_size=600).map(lambda b: good[:2] + b)))
    matches = wire.reply_matches(sent, raw)
    got = replies.read_matched(raw) if matches else None
    event("not a reply to the query: dropped" if not matches else
          "unreadable: dropped" if got is None else "read")
    assume(got is not None)
    assert got is not None
    router = router_for(SPLIT)
    zone = router.route(q.name)
    assert zone is not None
    # As the server does: the exchange decides what the reply means (failure signal, TC, ...).
    exchange = Exchange(zone.forwards[0], 1000.0, random.Random(0))
    step = exchange.start()
    assert isinstance(step, Send)
    outcome = exchange.answered(step, got, 1000.0)
    event(f"the exchange: {type(outcome).__name__}")
    assume(isinstance(outcome, Done))
    assert isinstance(outcome, Done)
    done = scrub(outcome, zone, router.route)
    entry = zone.store(q, done, 1000.0)
    out = zone.render(q, done, entry, 1000.0)
    reply = dns.message.from_wire(out)
    assert reply.id == q.id and reply.question[0].name.to_wire() == q.question[:-4]
    if len(out) > q.max_udp:
        dns.message.from_wire(wire.truncated(q, 0x8180))


@given(data=st.data(), shape=reply_shapes)
@settings(max_examples=400, deadline=None)
def test_the_miss_paths_shortcuts_agree_with_the_full_checks(data: st.DataObject,
                                                             shape: dict[str, object]) -> None:
    """The callback miss path passes the question's length it sent: matching and reading then
    skip walking the question. Whatever comes back, they decide as without it, field by field."""
    q, good, _ = built_reply(**shape)  # type: ignore[arg-type]
    sent = wire.upstream_query(q, 0x4242)
    raw = data.draw(st.one_of(mutations(good, max_ops=2, start=12), mutations(good),
                              st.binary(max_size=600).map(lambda b: good[:2] + b)))
    qlen = len(q.question)
    matches = wire.reply_matches(sent, raw)
    assert wire.reply_matches(sent, raw, qlen) == matches
    event("matches" if matches else "does not match")
    if not matches:
        return
    full, short = replies.read_matched(raw), replies.read_matched(raw, qlen)
    event("read" if full is not None else "unreadable")
    assert (full is None) == (short is None)
    if full is not None and short is not None:
        assert [getattr(full, f) for f in replies.Reply.__slots__] == \
            [getattr(short, f) for f in replies.Reply.__slots__]


# --- H1: routing ---------------------------------------------------------------------------

def reference_route(name: str, zones: list[str]) -> str | None:
    """Longest zone that is a whole-label suffix of the name, case-insensitively; '.' catches all."""
    labels_ = name.lower().rstrip(".").split(".") if name != "." else []
    for i in range(len(labels_) + 1):
        candidate = ".".join(labels_[i:]) + "." if labels_[i:] else "."
        if candidate in zones:
            return candidate
    return None


zone_labels = st.sampled_from(["corp", "example", "svc", "cluster", "local", "a", "b", "evil", "xcorp"])
zone_names = st.lists(zone_labels, min_size=1, max_size=3).map(lambda ls: ".".join(ls) + ".")


@given(zones=st.lists(zone_names, min_size=1, max_size=6, unique=True), root=st.booleans(),
       name_labels=st.lists(zone_labels | labels, min_size=0, max_size=6), seed=st.integers(0, 2**32))
@settings(max_examples=300, deadline=None)
def test_h1_routing_is_the_longest_whole_label_suffix(zones: list[str], root: bool, name_labels: list[str],
                                                      seed: int) -> None:
    all_zones = [*zones, "."] if root else zones
    text = "\n".join(f"{z} {{\n forward . 192.0.2.1\n}}" for z in all_zones)
    router = router_for(text)
    rng = random.Random(seed)
    name = ".".join("".join(c.upper() if rng.random() < 0.3 else c for c in lab) for lab in name_labels) + "."
    if name == ".":
        name = "."
    wire_name = wire.name_to_wire(name)
    routed = router.route(wire_name)
    expected = reference_route(name, all_zones)
    assert (routed.block.zones[0] if routed is not None else None) == expected, (name, all_zones)
    # The lookalike neighbours of every zone: "x" glued to the first label is never the zone.
    for zone in zones:
        look = "x" + zone
        got = router.route(wire.name_to_wire(look))
        assert got is None or got.block.zones[0] != zone


def test_h1_route_is_case_blind_and_label_exact() -> None:
    router = router_for(SPLIT)
    corp = router.route(wire.name_to_wire("API.CORP.EXAMPLE."))
    evil = router.route(wire.name_to_wire("evilcorp.example."))
    under = router.route(wire.name_to_wire("corp.example.evil.test."))
    assert corp is not None and corp.block.zones == ("corp.example.",)
    assert evil is not None and evil.block.zones == (".",)
    assert under is not None and under.block.zones == (".",)
    assert dns.name.from_text("corp.example.").to_wire() == wire.name_to_wire("corp.example.")
