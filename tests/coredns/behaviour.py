"""CoreDNS's behaviour tables (an upstream's reply in, what the client gets out), ported as data
for the in-process server (tests/support/inprocess.py): each case names its Go file, table and
row, and where one table runs under several rule sets (rewrite's reverter), the rule set.

The rows come from tables.json's `behaviour` list; the Go `test.Case` and `[]dns.RR` literals in
them are read here (record texts in zone-file form, the header fields the tests set).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from splitdns.core.cache import Cache
from tests.coredns import (
    behaviour_cache,
    behaviour_handler,
    behaviour_hosts,
    behaviour_loadbalance,
    behaviour_log,
    behaviour_rewrite,
    behaviour_template,
    cases,
)
from tests.support.inprocess import FakeUpstream, serving

# Rows CoreDNS's cache test judges at this instant (TestCacheInsertion's `now`), for RRSIG times.
CACHE_TEST_TIME = 1492768281  # Fri Apr 21 10:51:21 BST 2017

NOT_PORTED = {
    ("plugin/cache/cache_test.go", "TestServeFromStaleCacheResponseTTL"):
        "moves Go's clock by hours inside the cache's item; the stale TTL is in tests/test_cache.py",
    ("plugin/cache/cache_test.go", "TestServeFromStaleCacheFetchVerify"):
        "drives the cache's Go handler chain with a fake next plugin and a clock moved by minutes",
    ("plugin/cache/cache_test.go", "TestComputeTTL"): "a Go helper (computeTTL) on durations",
    ("plugin/cache/cache_test.go", "TestCacheKeepTTL"): "`keepttl`, checked by Go internals of the item",
    ("plugin/cache/cache_test.go", "TestCacheSeparation"):
        "the Go cache's hash keys (DO and CD bits), compared as keys",
    ("plugin/cache/cache_test.go", "TestAnswersQuestionStrictEligibility"):
        "a Go helper (answersQuestion) called on hand-built messages without a question's reply",
    ("plugin/cache/cache_test.go", "TestPreferPositiveVerifyKeepsStaleOnNonAnswers"):
        "`serve_stale_policy prefer_positive`, moved by the Go clock",
    ("plugin/cache/cache_test.go", "TestPreferPositiveVerifyRejectsInvalidFreshAnswers"):
        "`serve_stale_policy prefer_positive`, moved by the Go clock",
    ("plugin/rewrite/reverter_test.go", "edns0NoOPTRevertTests"): "`rewrite edns0`, which we refuse",
    ("plugin/rewrite/rewrite_test.go", "TestEdns0MultiRule"): "`rewrite edns0`, which we refuse",
    ("plugin/rewrite/rewrite_test.go", "TestRewriteEDNS0Unset"): "`rewrite edns0`, which we refuse",
    ("plugin/rewrite/rewrite_test.go", "TestRewriteEDNS0Revert"): "`rewrite edns0`, which we refuse",
    ("plugin/rewrite/rewrite_test.go", "TestRewriteEDNS0Local"): "`rewrite edns0`, which we refuse",
    ("plugin/rewrite/rewrite_test.go", "TestRewriteEDNS0Subnet"): "`rewrite edns0`, which we refuse",
    **behaviour_hosts.NOT_PORTED,
    **behaviour_cache.NOT_PORTED,
    **behaviour_rewrite.NOT_PORTED,
    **behaviour_loadbalance.NOT_PORTED,
}
NOT_PORTED_ROWS_NOTE = "rows with noRevert set: a Go-only switch of the reverter, with no Corefile form"


@dataclass(frozen=True)
class BehaviourCase:
    id: str
    plugin: str
    run: Callable[[], Awaitable[tuple[bool, str]]] = field(compare=False, repr=False)


# --- reading the Go literals -----------------------------------------------------------------

_RR = re.compile(r'test\.\w+\(("(?:[^"\\]|\\.)*")\)')


def _rr(text: str) -> dns.rrset.RRset:
    """One record of a `test.A("...")` literal as an RRset of its own (so order is kept)."""
    parts = text.split()
    name, ttl, at = parts[0], int(parts[1]), 2
    if parts[at].upper() == "IN":
        at += 1
    rdtype = parts[at]
    rest = re.split(rf"\s{rdtype}\s", text, maxsplit=1)[1].strip()
    if rdtype.upper() == "RRSIG":  # Go's parser takes a signature without its base64 padding
        rest += "=" * (-len(rest.split()[-1]) % 4)
    rd = dns.rdata.from_text(dns.rdataclass.IN, dns.rdatatype.from_text(rdtype), rest)
    return dns.rrset.from_rdata(dns.name.from_text(name), ttl, rd)


def _section(go: str, key: str) -> list[dns.rrset.RRset]:
    found = re.search(rf"\b{key}:\s*\[\]dns\.RR\{{", go)
    if found is None:
        return []
    depth, start = 1, found.end()
    for i in range(start, len(go)):
        depth += {"{": 1, "}": -1}.get(go[i], 0)
        if depth == 0:
            return [_rr(json.loads(m, strict=False)) for m in _RR.findall(go[start:i])]
    raise ValueError(f"unbalanced {key}")


def _records(go: Any) -> list[dns.rrset.RRset]:
    return [_rr(json.loads(m, strict=False)) for m in _RR.findall(go["go"])] if isinstance(go, dict) else []


def _field(go: str, key: str) -> str | None:
    found = re.search(rf"\b{key}:\s*([^,\n}}]+)", go)
    return found.group(1).strip() if found else None


@dataclass(frozen=True)
class _Case:
    """A Go test.Case: the question, the header and the sections."""
    qname: str
    qtype: int
    rcode: int
    flags: int
    do: bool
    cd: bool
    answer: list[dns.rrset.RRset]
    ns: list[dns.rrset.RRset]


def _test_case(go: str) -> _Case:
    qname = json.loads(_field(go, "Qname") or '"."')
    qtype = _field(go, "Qtype")
    rcode = _field(go, "Rcode")
    flags = 0
    for key, flag in (("RecursionAvailable", dns.flags.RA), ("AuthenticatedData", dns.flags.AD),
                      ("Authoritative", dns.flags.AA), ("Truncated", dns.flags.TC)):
        if _field(go, key) == "true":
            flags |= flag
    return _Case(qname, dns.rdatatype.from_text(qtype.removeprefix("dns.Type")) if qtype else dns.rdatatype.A,
                 _rcode(rcode), flags, _field(go, "Do") == "true", _field(go, "CheckingDisabled") == "true",
                 _section(go, "Answer"), _section(go, "Ns"))


def _rcode(go: str | None) -> int:
    names = {"RcodeSuccess": "NOERROR", "RcodeNameError": "NXDOMAIN", "RcodeServerFailure": "SERVFAIL",
             "RcodeNotImplemented": "NOTIMP", "RcodeRefused": "REFUSED"}
    return int(dns.rcode.from_text(names[go.removeprefix("dns.")])) if go else 0


# --- cache: TestCacheInsertion -------------------------------------------------------------

CACHE_COREFILE = """. {{
    cache {{
        disable success pos-disabled.example.org.
        disable denial neg-disabled.example.org.
    }}
    forward . {target}
}}
"""


def _cache_case(row: dict[str, Any]) -> Callable[[], Awaitable[tuple[bool, str]]]:
    given = _test_case(row["in"]["go"])
    should = bool(row["shouldCache"])

    def handle(q: dns.message.Message) -> dns.message.Message:
        r = dns.message.make_response(q)
        r.flags = (r.flags & ~(dns.flags.RA | dns.flags.AD | dns.flags.AA | dns.flags.TC)) | given.flags
        r.set_rcode(dns.rcode.Rcode.make(given.rcode))
        r.answer, r.authority = list(given.answer), list(given.ns)
        r.use_edns(0, dns.flags.DO if given.do else 0, 1232)
        return r

    async def run() -> tuple[bool, str]:
        async with FakeUpstream(handle) as up, serving(CACHE_COREFILE.format(target=up.target)) as s:
            Cache.wall_offset = CACHE_TEST_TIME - s.clock()
            q = dns.message.make_query(given.qname, given.qtype, want_dnssec=given.do)
            if given.cd:
                q.flags |= dns.flags.CD
            await s.ask(q)
            before = len(up.asked)
            second = await s.ask(q)
            cached = second is not None and len(up.asked) == before
            return cached == should, f"cached: {cached}"
    return run


# --- loadbalance: TestLoadBalanceRandom ----------------------------------------------------

def _order_ok(rrsets: list[dns.rrset.RRset], expected: dict[str, int]) -> tuple[bool, dict[str, int]]:
    """CoreDNS's countRecords: CNAMEs, then addresses, then MX; and how many of each."""
    state, ok = 0, True
    counts = {"cname": 0, "address": 0, "mx": 0}
    for rrset in rrsets:
        for _ in rrset:
            kind = {dns.rdatatype.CNAME: ("cname", 1), dns.rdatatype.A: ("address", 2),
                    dns.rdatatype.AAAA: ("address", 2), dns.rdatatype.MX: ("mx", 3)}.get(rrset.rdtype)
            if kind is None:
                state = 4
                continue
            ok = ok and state <= kind[1]
            state = kind[1]
            counts[kind[0]] += 1
    return ok and counts == expected, counts


def _loadbalance_case(row: dict[str, Any]) -> Callable[[], Awaitable[tuple[bool, str]]]:
    answer, extra = _records(row.get("answer")), _records(row.get("extra"))

    def count(prefix: str) -> dict[str, int]:
        return {k: int(row.get(f"{k}{prefix}", {"go": "0"})["go"]) for k in ("cname", "address", "mx")}

    def handle(q: dns.message.Message) -> dns.message.Message:
        r = dns.message.make_response(q)
        r.answer, r.additional = list(answer), list(extra)
        return r

    async def run() -> tuple[bool, str]:
        corefile = ". {{\n    loadbalance\n    forward . {target}\n}}\n"
        async with FakeUpstream(handle) as up, serving(corefile.format(target=up.target)) as s:
            reply = await s.ask(dns.message.make_query("region2.skydns.test.", "SRV"))
            if reply is None:
                return False, "no reply"
            ok_a, got_a = _order_ok(reply.answer, count("Answer"))
            extra_rrsets = [r for r in reply.additional if r.rdtype != dns.rdatatype.OPT]
            ok_x, got_x = _order_ok(extra_rrsets, count("Extra"))
            return ok_a and ok_x, f"answer {got_a} in order: {ok_a}; extra {got_x} in order: {ok_x}"
    return run


# --- rewrite: the reverter's tables ----------------------------------------------------------

# The rules TestValueResponseReverter and TestResponseReverter build with newNameRule, as
# Corefile lines.
VALUE_RULES = {
    "stop": [r"rewrite stop name regex (.*)\.domain\.uk {1}.cluster.local answer name (.*)\.cluster\.local "
             r"{1}.domain.uk answer value (.*)\.cluster\.local {1}.domain.uk"],
    "continue": [r"rewrite continue name regex (.*)\.domain\.uk {1}.cluster.local answer name "
                 r"(.*)\.cluster\.local {1}.domain.uk answer value (.*)\.cluster\.local {1}.domain.uk"],
    "suffix": [r"rewrite stop name suffix .domain.uk .cluster.local answer auto answer value "
               r"(.*)\.cluster\.local {1}.domain.uk"],
    "suffix_multiple": ["rewrite continue name suffix .domain.uk .domain.us answer auto",
                        "rewrite stop name suffix .domain.us .cluster.local answer auto"],
}
NAME_RULES = {
    "stop": [r"rewrite stop name regex (core)\.(dns)\.(rocks) {2}.{1}.{3} answer name "
             r"(dns)\.(core)\.(rocks) {2}.{1}.{3}"],
    "continue": [r"rewrite continue name regex (core)\.(dns)\.(rocks) {2}.{1}.{3} answer name "
                 r"(dns)\.(core)\.(rocks) {2}.{1}.{3}"],
}
_VALUE_FIELD = {"SRV": "target", "MX": "exchange", "CNAME": "target", "NS": "target", "DNAME": "target",
                "NAPTR": "replacement", "SOA": "mname", "PTR": "target"}


def _rewrite_case(row: dict[str, Any], rules: list[str]) -> Callable[[], Awaitable[tuple[bool, str]]]:
    answer, extra = _records(row.get("answer")), _records(row.get("extra"))
    qname, qtype = row["from"], dns.rdatatype.from_text(row["fromType"]["go"].removeprefix("dns.Type"))
    want_value = row.get("expectValue")
    want_type = row.get("expectAnswerType")
    want_extra = row.get("expectAddlName")

    def handle(q: dns.message.Message) -> dns.message.Message:
        r = dns.message.make_response(q)
        r.answer, r.additional = list(answer), list(extra)
        return r

    async def run() -> tuple[bool, str]:
        body = "\n    ".join(rules)
        async with FakeUpstream(handle) as up, \
                serving(". {\n    " + body + "\n    forward " + ". " + up.target + "\n}\n") as s:
            reply = await s.ask(dns.message.make_query(qname, qtype))
            if reply is None or not reply.question:
                return False, f"reply: {reply}"
            said = [f"question {reply.question[0].name}"]
            ok = reply.question[0].name == dns.name.from_text(row["to"])
            if want_type is not None:
                first = reply.answer[0] if reply.answer else None
                expected_type = dns.rdatatype.from_text(want_type["go"].removeprefix("dns.Type"))
                if first is None or first.rdtype != expected_type:
                    return False, f"answer {reply.answer}"
                kind = dns.rdatatype.to_text(first.rdtype)
                value = str(getattr(first[0], _VALUE_FIELD[kind]))
                extras = [r for r in reply.additional if r.rdtype == dns.rdatatype.A]
                extra_name = str(extras[0].name) if extras else ""
                said += [f"value {value}", f"additional {extra_name}"]
                ok = ok and value == want_value and extra_name == want_extra
            return ok, "; ".join(said)
    return run


# TestRewrite's rules (its class and type rules left out: we refuse those fields, and the rows
# that need them say so), and TestRewriteDefaultRevertPolicy's.
REWRITE_RULES = [
    "rewrite stop name from.nl. to.nl.",
    r"rewrite stop name regex (core)\.(dns)\.(rocks)\.(nl) {2}.{1}.{3}.{4} answer name "
    r"(dns)\.(core)\.(rocks)\.(nl) {2}.{1}.{3}.{4}",
    "rewrite stop name exact from.exact.nl. to.nl.",
    "rewrite stop name prefix prefix to",
    "rewrite stop name suffix .suffix. .nl.",
    "rewrite stop name substring from.substring to",
    r"rewrite stop name regex (f.*m)\.regex\.(nl) to.{2}",
    r"rewrite continue name regex consul\.(rocks) core.dns.{1}",
    "rewrite stop name core.dns.rocks to.nl.",
]
DEFAULT_REVERT_RULES = REWRITE_RULES[3:7]
_CLASSES = {"dns.ClassINET": 1, "dns.ClassCHAOS": 3, "4": 4}


def _asked_case(row: dict[str, Any], rules: list[str],
                revert: bool) -> Callable[[], Awaitable[tuple[bool, str]]]:
    """The name (type, class) the upstream is asked; with `revert`, the client's own question
    comes back too."""
    qtype = dns.rdatatype.from_text(row["fromT"]["go"].removeprefix("dns.Type"))
    to_type = dns.rdatatype.from_text(row["toT"]["go"].removeprefix("dns.Type"))
    qclass, to_class = _CLASSES[row["fromC"]["go"]], _CLASSES[row["toC"]["go"]]

    async def run() -> tuple[bool, str]:
        body = "\n    ".join(rules)
        async with FakeUpstream(dns.message.make_response) as up, \
                serving(". {\n    " + body + "\n    forward " + ". " + up.target + "\n}\n") as s:
            reply = await s.ask(dns.message.make_query(row["from"], qtype, qclass))
        if not up.asked:
            return False, f"the upstream was not asked (reply {reply and dns.rcode.to_text(reply.rcode())})"
        asked = up.asked[-1].message.question[0]
        said = f"asked {asked.name} {dns.rdatatype.to_text(asked.rdtype)} class {asked.rdclass}"
        ok = (asked.name == dns.name.from_text(row["to"]) and asked.rdtype == to_type
              and asked.rdclass == to_class)
        if revert:
            original = dns.name.from_text(row["from"])
            back = reply is not None and bool(reply.question) and reply.question[0].name == original
            ok, said = ok and bool(back), f"{said}; question back: {bool(back)}"
        return ok, said
    return run


# --- the cases -------------------------------------------------------------------------------

def _build() -> tuple[BehaviourCase, ...]:
    out = [BehaviourCase(ident, "cache", run) for ident, run in behaviour_cache.scenarios()]
    dnssec = [r for r in cases.tables()["behaviour"] if r["test"] == "TestResponseWithDNSSEC"]
    out += [BehaviourCase(ident, "cache", run) for ident, run in behaviour_cache.dnssec_table(dnssec)]
    out += [BehaviourCase(ident, "log", run) for ident, run in behaviour_log.scenarios()]
    out += [BehaviourCase(ident, "template", run) for ident, run in behaviour_template.scenarios()]
    out += [BehaviourCase(ident, "template", run) for ident, run in behaviour_template.cname_scenarios()]
    out += [BehaviourCase(ident, "template", run) for ident, run in behaviour_handler.scenarios()]
    out += [BehaviourCase(ident, "loadbalance", run) for ident, run in behaviour_loadbalance.scenarios()]
    out += [BehaviourCase(ident, "rewrite", run) for ident, run in behaviour_rewrite.scenarios()]
    for row in cases.tables()["behaviour"]:
        path, table = row["file"], row["test"]
        ident = f"{path}:{table}#{row['row']}"
        if (path, table) in NOT_PORTED:
            continue
        if table in behaviour_rewrite.CHECKS:
            out.append(BehaviourCase(ident, "rewrite", behaviour_rewrite.name_case(row)))
        elif table in behaviour_log.TABLES:
            out.append(BehaviourCase(ident, "log", behaviour_log.TABLES[table](row)))
        elif table in behaviour_hosts.TABLES:
            out.append(BehaviourCase(ident, "hosts", behaviour_hosts.TABLES[table](row)))
        if table == "TestCacheInsertion":
            out.append(BehaviourCase(ident, "cache", _cache_case(row)))
        elif table == "TestFallthroughUnsupportedType":
            out.append(BehaviourCase(ident, "hosts", behaviour_hosts.fallthrough_case(row)))
        elif table == "TestRewrite":
            out.append(BehaviourCase(ident, "rewrite", _asked_case(row, REWRITE_RULES, False)))
        elif table == "TestRewriteDefaultRevertPolicy":
            out.append(BehaviourCase(ident, "rewrite", _asked_case(row, DEFAULT_REVERT_RULES, True)))
        elif table == "TestLoadBalanceRandom":
            out.append(BehaviourCase(ident, "loadbalance", _loadbalance_case(row)))
        elif table in ("valueTests", "tests") and not row["noRevert"]:
            for name, rules in (VALUE_RULES if table == "valueTests" else NAME_RULES).items():
                out.append(BehaviourCase(f"{ident} ({name})", "rewrite", _rewrite_case(row, rules)))
    return tuple(out)


def not_ported_rows() -> list[str]:
    """The ids of rows skipped row by row (noRevert), for the coverage test."""
    return [f"{r['file']}:{r['test']}#{r['row']}" for r in cases.tables()["behaviour"]
            if r["test"] in ("valueTests", "tests") and r["noRevert"]]


CASES = _build()
