"""CoreDNS's template_test.go TestMultiSection: its Corefile text (extracted as data) served
by the in-process server, each question the Go test asks a case (`#N`, in the test's order).

The Go test hands the templates to the handler with the block key `test.:8053` and asks it
names outside that zone too (example., coredns.invalid.), which a server would route
elsewhere. Here the block's keys are those three zones, and the two templates that name no
zone get `test.`, the zone the Go test's key gives them. The Go test's next plugin (for a
fallthrough) is the upstream here: a fallthrough is a question the upstream was asked.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset

from tests.coredns import cases
from tests.support.inprocess import FakeUpstream, serving

Run = Callable[[], Awaitable[tuple[bool, str]]]
FALLTHROUGH = "fallthrough"

# (name, class, type, the outcome: an rcode with the type of its one answer, or FALLTHROUGH)
STEPS: tuple[tuple[str, str, str, str | tuple[int, str | None]], ...] = (
    ("some.test.", "IN", "A", (dns.rcode.REFUSED, None)),
    ("some.test.", "IN", "TXT", FALLTHROUGH),
    ("coredns.invalid.", "CH", "TXT", (dns.rcode.NOERROR, "TXT")),
    ("ip-10-11-12-13.example.", "IN", "A", (dns.rcode.NOERROR, "A")),
    ("ip-10-11-12-13.example.", "IN", "MX", (dns.rcode.NOERROR, "MX")),
    ("something.example.", "IN", "A", FALLTHROUGH),
    ("something.example.", "IN", "MX", (dns.rcode.SERVFAIL, None)),
)


def _corefile(target: str) -> str:
    text = cases.tables()["constants"]["plugin/template/template_test.go:multisectionConfig"]
    text = re.sub(r"^(\s*template \w+ \w+) \{", r"\1 test. {", text, flags=re.MULTILINE)
    return "test. example. coredns.invalid. {\n" + text + "\n    forward . " + target + "\n}\n"


def _step(index: int) -> Run:
    name, rdclass, rdtype, want = STEPS[index]

    def upstream(q: dns.message.Message) -> dns.message.Message:
        return dns.message.make_response(q)

    async def run() -> tuple[bool, str]:
        async with FakeUpstream(upstream) as up, serving(_corefile(up.target)) as s:
            reply = await s.ask(dns.message.make_query(name, rdtype, rdclass))
        if reply is None:
            return False, "no reply"
        types = [dns.rdatatype.to_text(r.rdtype) for r in reply.answer for _ in r]
        said = f"{dns.rcode.to_text(reply.rcode())}, answer {types}, upstream asked {len(up.asked)}"
        if want == FALLTHROUGH:
            return len(up.asked) == 1, said
        rcode, answer = want
        return (reply.rcode() == rcode and types == ([answer] if answer else []) and not up.asked), said
    return run


def scenarios() -> list[tuple[str, Run]]:
    return [(f"plugin/template/template_test.go:TestMultiSection#{i}", _step(i)) for i in range(len(STEPS))]


# cname_test.go TestTruncatedCNAME: CoreDNS looks up the CNAME's target through itself (the Go
# test's stub upstream answers it, truncated) and gives the client the CNAME, the target's A
# record and the TC bit. Here the fake upstream stands for that lookup.
_CNAME_TEMPLATE = "    template IN A test. {\n        match ^cname\\.test\\.$\n" \
                  "        answer \"cname.test. 600 IN CNAME test.up\"\n    }\n"


def _truncated_target(q: dns.message.Message) -> dns.message.Message:
    r = dns.message.make_response(q)
    r.flags |= dns.flags.TC
    r.answer = [dns.rrset.from_text("test.up.", 600, "IN", "A", "1.2.3.4")]
    return r


async def _truncated_cname() -> tuple[bool, str]:
    async with FakeUpstream(_truncated_target) as up, \
            serving(". {\n" + _CNAME_TEMPLATE + "    forward . " + up.target + "\n}\n") as s:
        reply = await s.ask(dns.message.make_query("cname.test.", "A"))
    if reply is None:
        return False, "no reply"
    texts = sorted(line for rrset in reply.answer for line in rrset.to_text().splitlines())
    want = sorted(["cname.test. 600 IN CNAME test.up.", "test.up. 600 IN A 1.2.3.4"])
    truncated = bool(reply.flags & dns.flags.TC)
    return texts == want and truncated, f"answer {texts}, TC {truncated}, upstream asked {len(up.asked)}"


def cname_scenarios() -> list[tuple[str, Run]]:
    return [("plugin/template/cname_test.go:TestTruncatedCNAME#0", _truncated_cname)]
