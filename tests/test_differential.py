"""A respdiff-style differential test: splitdns against Unbound and dnsmasq, query by query.

All three forward to one NSD on loopback (tests/support/differential.py) and are asked the
same generated corpus: every name of the two zones (signed and unsigned) with several types
and query shapes (no EDNS, EDNS, DO, DO+CD, a 512-byte payload, a client cookie, 0x20
case), each asked twice so the second comes from cache, plus malformed and unusual queries.
Each reply is cut into aspects: rcode, each header flag, the answer and authority RRsets
as sets (RRSIGs and NSECs included), whether every TTL stays within the authority's TTL
and the cap, EDNS, the cookie, and the full answer over TCP after TC. A difference where
Unbound and dnsmasq agree with each other fails the test, unless it is one of DELIBERATE
below, each with its reason (the README lists them too). Independently of the references,
every splitdns answer must have RA set, AA clear and TTLs within bounds.
"""

from __future__ import annotations

import itertools
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import dns.edns
import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import pytest

from tests.support import differential
from tests.support.differential import ADDR, CAP, World
from tests.support.prerequisites import skip_or_fail


@pytest.fixture(autouse=True)
def peers_installed() -> None:
    """Skip, or fail under SPLITDNS_LAB_REQUIRED=1 (CI), where a peer is missing."""
    if differential.missing():
        skip_or_fail(f"needs {', '.join(differential.missing())} (make deps-debian)")


TIMEOUT = 2.0
COOKIE = bytes(range(1, 9))

# -- the corpus ------------------------------------------------------------------------------

def _do_cd(msg: dns.message.Message) -> None:
    msg.use_edns(0, dns.flags.DO, 1232)
    msg.flags |= dns.flags.CD


SHAPES: dict[str, Callable[[dns.message.Message], None]] = {
    "plain": lambda m: m.use_edns(False),
    "edns": lambda m: m.use_edns(0, 0, 1232),
    "do": lambda m: m.use_edns(0, dns.flags.DO, 1232),
    "do+cd": _do_cd,
    "udp512": lambda m: m.use_edns(0, dns.flags.DO, 512),
    "cookie": lambda m: m.use_edns(0, 0, 1232, options=[dns.edns.CookieOption(COOKIE, b"")]),
}
NAMES = ["@", "host", "HoSt", "www", "chain", "mail", "txt", "_sip._udp", "x.wild", "a.b.WILD",
         "zero", "two", "long", "ent", "a.ent", "esc\\.dot", "a.old", "old", "www.sub", "sub",
         "nope", "nope.host", "large"]
TYPES = ["A", "AAAA", "TXT", "MX", "NS", "SOA", "CNAME", "SRV", "DNAME", "DNSKEY", "PTR", "TYPE65534"]


@dataclass(frozen=True)
class Case:
    label: str
    wire: bytes
    malformed: bool = False


def corpus() -> list[Case]:
    """Each name with A, AAAA and one more type, shapes taken in turn; every shape for a few
    names; and the malformed and unusual queries."""
    cases: list[Case] = []
    shapes = itertools.cycle(SHAPES)
    extra = itertools.cycle(TYPES[2:])
    for zone in differential.ZONES:
        for name in NAMES:
            owner = zone if name == "@" else f"{name}.{zone}"
            for rdtype in ("A", "AAAA", next(extra)):
                cases.append(_case(owner, rdtype, next(shapes)))
        for name, rdtype in (("host", "A"), ("nope", "A"), ("large", "TXT"), ("www.sub", "A"),
                             ("x.wild", "TXT"), ("two", "A"), ("zero", "A")):
            for shape in SHAPES:
                cases.append(_case(f"{name}.{zone}", rdtype, shape))
    unique = {case.label: case for case in cases}  # the shape cycle meets the full sets
    return list(unique.values()) + malformed()


def _case(owner: str, rdtype: str, shape: str) -> Case:
    msg = dns.message.make_query(owner, rdtype)
    SHAPES[shape](msg)
    return Case(f"{owner} {rdtype} {shape}", _to_wire(msg))


def malformed() -> list[Case]:
    base = _to_wire(dns.message.make_query("host.plain.test.", "A", use_edns=False))
    opt = b"\x00\x00\x29\x04\xd0\x00\x00\x80\x00\x00\x00"  # EDNS 0, DO, no options

    def with_opt(data: bytes, options: bytes = b"") -> bytes:
        arcount = struct.unpack_from("!H", data, 10)[0] + 1
        return data[:10] + struct.pack("!H", arcount) + data[12:] + opt[:-2] + \
            struct.pack("!H", len(options)) + options

    cookie = struct.pack("!HH", 10, 8) + COOKIE
    shapes = {
        "no question": base[:4] + b"\x00\x00" + base[6:12],
        "two questions": base[:4] + b"\x00\x02" + base[6:] + base[12:],
        "TC set": base[:2] + bytes((base[2] | 0x02,)) + base[3:],
        "opcode NOTIFY": base[:2] + bytes((base[2] | 0x20,)) + base[3:],
        "opcode 3": base[:2] + bytes((base[2] | 0x18,)) + base[3:],
    }
    cases = []
    for what, data in shapes.items():
        cases.append(Case(f"{what}, no EDNS", data, True))
        cases.append(Case(f"{what}, EDNS", with_opt(data), True))
    cases.append(Case("no question, COOKIE", with_opt(shapes["no question"], cookie), True))
    for owner, rdtype, rdclass in (("version.bind.", "TXT", "CH"), ("id.server.", "TXT", "CH"),
                                   ("host.plain.test.", "A", "HS"), ("plain.test.", "AXFR", "IN"),
                                   ("plain.test.", "ANY", "IN")):
        msg = dns.message.make_query(owner, rdtype, rdclass)
        cases.append(Case(f"{owner} {rdclass} {rdtype}", _to_wire(msg), rdtype != "ANY"))
    cases.append(Case("COOKIE of 5 bytes", with_opt(base, struct.pack("!HH", 10, 5) + bytes(5)), True))
    return cases


def _to_wire(msg: dns.message.Message) -> bytes:
    data = msg.to_wire()
    assert isinstance(data, bytes)
    return b"\x00\x00" + data[2:]


# -- asking ----------------------------------------------------------------------------------

def ask(port: int, data: bytes, qid: int, tcp: bool = False) -> bytes | None:
    """The reply to `data` under ID `qid`, or None after TIMEOUT (silence is an answer too)."""
    data = struct.pack("!H", qid) + data[2:]
    family, kind = socket.AF_INET, socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM
    with socket.socket(family, kind) as sock:
        sock.settimeout(TIMEOUT)
        try:
            sock.connect((ADDR, port))
            if tcp:
                sock.sendall(struct.pack("!H", len(data)) + data)
                size = struct.unpack("!H", _exactly(sock, 2))[0]
                return _exactly(sock, size)
            sock.send(data)
            for _ in range(8):  # a reply to another ID is not ours: keep reading
                got = sock.recv(65535)
                if got[:2] == data[:2]:
                    return got
        except (TimeoutError, ConnectionError, struct.error):
            return None
    return None


def _exactly(sock: socket.socket, size: int) -> bytes:
    out = b""
    while len(out) < size:
        chunk = sock.recv(size - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def answers(port: int) -> bool:
    """Whether the server at `port` answers (a name outside the corpus, so no cache is primed)."""
    probe = _to_wire(dns.message.make_query("ready.plain.test.", "A"))
    return ask(port, probe, 4242) is not None


# -- aspects ---------------------------------------------------------------------------------

Aspects = dict[str, object]
FLAGS = {"QR": dns.flags.QR, "AA": dns.flags.AA, "TC": dns.flags.TC, "RD": dns.flags.RD,
         "RA": dns.flags.RA, "AD": dns.flags.AD, "CD": dns.flags.CD}
Authority = dict[tuple[str, int, int], int]  # (owner, type, covered type) -> the zone's TTL


def aspects(sent: bytes, raw: bytes | None, zone_ttls: Authority) -> Aspects:
    if raw is None:
        return {"answered": False}
    try:
        msg = dns.message.from_wire(raw)
    except Exception as err:  # dnspython refuses with many types; the reply is what differs
        return {"answered": True, "parses": type(err).__name__}
    out: Aspects = {"answered": True, "rcode": dns.rcode.to_text(msg.rcode())}
    for flag, bit in FLAGS.items():
        out[f"flag {flag}"] = bool(msg.flags & bit)
    out["question echoed"] = raw[4:6] == sent[4:6] and _question(raw) == _question(sent)
    for section in ("answer", "authority"):
        out[section] = frozenset(
            (r.name.to_text().lower(), dns.rdatatype.to_text(r.rdtype), dns.rdatatype.to_text(r.covers),
             frozenset(rd.to_text().lower() for rd in r)) for r in getattr(msg, section))
    out["ttls within bounds"] = all(
        r.ttl <= min(CAP, zone_ttls.get((r.name.to_text().lower(), r.rdtype, r.covers), CAP))
        for r in msg.answer + msg.authority + msg.additional)
    out["edns"] = (msg.edns, bool(msg.ednsflags & dns.flags.DO)) if msg.edns >= 0 else None
    out["cookie"] = any(o.otype == dns.edns.OptionType.COOKIE for o in msg.options)
    return out


def _question(data: bytes) -> bytes:
    qdcount = struct.unpack_from("!H", data, 4)[0]
    if qdcount != 1:
        return b""
    pos = 12
    while pos < len(data) and data[pos]:
        pos += data[pos] + 1
    return data[12:pos + 5]


def zone_ttls(raw: bytes | None) -> Authority:
    """The TTLs the authority itself gives, record by record."""
    if raw is None:
        return {}
    msg = dns.message.from_wire(raw)
    return {(r.name.to_text().lower(), r.rdtype, r.covers): r.ttl
            for r in msg.answer + msg.authority + msg.additional}


# -- deliberate differences ------------------------------------------------------------------

@dataclass(frozen=True)
class Deliberate:
    """A difference we mean: the aspects it shows in, when it applies (the case, splitdns's
    aspects, the references' common value of the aspect), and why."""

    aspects: tuple[str, ...]
    applies: Callable[[Case, Aspects, object], bool]
    reason: str


def _only_more_ns(ours: Aspects, ref: object) -> bool:
    """Our authority section is the references' plus the zone's NS RRset (and its RRSIG)."""
    mine = ours.get("authority")
    if not isinstance(mine, frozenset) or not isinstance(ref, frozenset) or not ref <= mine:
        return False
    return bool(mine - ref) and all(rrset[1] == "NS" or rrset[2] == "NS" for rrset in mine - ref)


DELIBERATE = [
    Deliberate(("authority",), lambda c, ours, ref: _only_more_ns(ours, ref),
               "the authority's NS RRset next to a positive answer is relayed as the authority "
               "sent it; Unbound (minimal-responses) and dnsmasq leave it out to save bytes"),
    Deliberate(("flag TC", "answer", "authority"),
               lambda c, ours, ref: c.label.endswith(" udp512") and ours.get("flag TC") is True,
               "an answer that does not fit the client's 512 bytes with the authority's NS "
               "records gets TC and comes whole over TCP; the references leave the NS records "
               "out instead, as RFC 2181 9 allows. Choosing what may go (never a DNSSEC proof) "
               "is not built; the client loses one round trip, no data"),
    Deliberate(("question echoed",), lambda c, ours, ref: c.malformed and ours.get("rcode") != "NOERROR",
               "a malformed query (no or two questions, TC set, another opcode, a bad cookie) "
               "gets a header-only error reply, as CoreDNS's miekg/dns gives: its records are "
               "not read (RFC 1035 does not ask for the question to be echoed)"),
    Deliberate(("rcode",), lambda c, ours, ref: c.label.startswith("opcode NOTIFY"),
               "NOTIFY is not implemented, so NOTIMP as for every opcode but QUERY (RFC 1035 "
               "4.1.1; CoreDNS does the same); Unbound and dnsmasq say REFUSED"),
    Deliberate(("rcode", "answer"), lambda c, ours, ref: " CH " in c.label,
               "a class other than IN is REFUSED, CHAOS included: a pod's resolver does not say "
               "what it is or runs (CoreDNS without its chaos plugin answers the same); Unbound "
               "and dnsmasq answer version.bind"),
    Deliberate(("cookie",), lambda c, ours, ref: "COOKIE" in c.label or c.label.endswith(" cookie"),
               "we answer a client cookie with ours (RFC 7873); neither reference speaks cookies "
               "in its default configuration, so both leave the option out"),
    Deliberate(("rcode", "answer", "question echoed"),
               lambda c, ours, ref: c.label in ("no question, COOKIE", "COOKIE of 5 bytes"),
               "cookies (RFC 7873): a query without a question but with a COOKIE asks for our "
               "server cookie, NOERROR (5.4); a COOKIE of a length the RFC does not allow is "
               "FORMERR (5.2.2); servers without cookies answer FORMERR and NOERROR instead"),
]


def deliberate(case: Case, aspect: str, ours: Aspects, ref: object) -> Deliberate | None:
    for known in DELIBERATE:
        if aspect in known.aspects and known.applies(case, ours, ref):
            return known
    return None


# -- the test --------------------------------------------------------------------------------

def run(world: World, cases: list[Case]) -> dict[tuple[str, str, str], Aspects]:
    """Every case asked of NSD, then twice of each forwarder (the second from cache), and over
    TCP where UDP said TC. Keyed by (case label, server, round)."""
    seen: dict[tuple[str, str, str], Aspects] = {}
    qids = itertools.count(1)
    ttls = {c.label: zone_ttls(ask(world.nsd, _with_do(c.wire), next(qids) & 0xFFFF))
            for c in cases if not c.malformed}
    for round_ in ("first", "second"):
        for case in cases:
            for server, port in world.forwarders.items():
                raw = ask(port, case.wire, next(qids) & 0xFFFF)
                got = aspects(case.wire, raw, ttls.get(case.label, {}))
                seen[(case.label, server, round_)] = got
                if got.get("flag TC"):
                    tcp = aspects(case.wire, ask(port, case.wire, next(qids) & 0xFFFF, tcp=True),
                                  ttls.get(case.label, {}))
                    seen[(case.label, server, round_ + " tcp")] = tcp
    return seen


def _with_do(data: bytes) -> bytes:
    msg = dns.message.from_wire(data)
    msg.use_edns(0, dns.flags.DO, 4096)
    msg.flags &= ~dns.flags.RD
    return _to_wire(msg)


def compare(cases: list[Case], seen: dict[tuple[str, str, str], Aspects]) -> tuple[list[str], list[str]]:
    """Failures (both references agree, splitdns differs, not deliberate) and the deliberate
    differences that did show (each shown once per aspect and reason)."""
    failures: list[str] = []
    shown: list[str] = []
    by_label = {c.label: c for c in cases}
    for (label, server, round_), ours in seen.items():
        if server != "splitdns":
            continue
        unbound = seen.get((label, "unbound", round_))
        dnsmasq = seen.get((label, "dnsmasq", round_))
        if unbound is None or dnsmasq is None:
            continue  # a reference did not set TC, so it has no TCP round to compare with
        for aspect in sorted(set(ours) | set(unbound) | set(dnsmasq)):
            ref = unbound.get(aspect)
            if ref != dnsmasq.get(aspect) or ref == ours.get(aspect):
                continue
            known = deliberate(by_label[label], aspect, ours, ref)
            line = f"{label} [{round_}] {aspect}: splitdns {ours.get(aspect)!r}, both references {ref!r}"
            if known is None:
                failures.append(line)
            elif known.reason not in shown:
                shown.append(known.reason)
    return failures, shown


def absolute(seen: dict[tuple[str, str, str], Aspects]) -> list[str]:
    """What splitdns must do whatever the references do: RA on every answer, AA on none,
    every TTL within the authority's and the cap."""
    wrong = []
    for (label, server, round_), got in seen.items():
        if server != "splitdns" or not got.get("answered") or "rcode" not in got:
            continue
        for aspect, want in (("flag RA", True), ("flag AA", False), ("ttls within bounds", True)):
            if got.get(aspect) != want:
                wrong.append(f"{label} [{round_}] {aspect} is {got.get(aspect)!r}")
    return wrong


def test_splitdns_answers_as_unbound_and_dnsmasq_agree(tmp_path: Path) -> None:
    cases = corpus()
    with differential.world(tmp_path, answers) as world:
        seen = run(world, cases)
    failures, shown = compare(cases, seen)
    print(f"{len(cases)} cases, {len(seen)} replies compared; deliberate differences seen:")
    for line in shown:
        print("  - " + line)
    assert not absolute(seen), "\n".join(absolute(seen)[:40])
    assert not failures, f"{len(failures)} differences where Unbound and dnsmasq agree:\n" + \
        "\n".join(failures[:60])
    # The corpus reached what it is for: every case asked, TCP after TC on all three, DNSSEC
    # records relayed, the TTL 0 record handed out with TTL 0 from the first ask to the second.
    assert len({k[0] for k in seen}) == len(cases)
    assert any(k[2] == "second tcp" and k[1] == "splitdns" and (k[0], "unbound", k[2]) in seen
               and (k[0], "dnsmasq", k[2]) in seen for k in seen)
    ours = [v for k, v in seen.items() if k[1] == "splitdns"]
    assert any(rrset[1] == "RRSIG" for v in ours for rrset in v.get("answer", ()))  # type: ignore[attr-defined]
    assert any(rrset[1] == "NSEC" for v in ours for rrset in v.get("authority", ()))  # type: ignore[attr-defined]
    zero = [v for k, v in seen.items() if k[0].startswith("zero.plain.test A ") and k[1] == "splitdns"]
    assert zero and all(v["answer"] and v["ttls within bounds"] for v in zero)
