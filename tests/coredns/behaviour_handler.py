"""CoreDNS's template_test.go TestHandler, its rows written as Corefiles: the Go test builds each
template as a Go struct, whose fields are a `template` block's lines (`regex` is `match`,
`answer`/`additional`/`authority` the records, `rcode`, `fall` is `fallthrough`, then the class,
type and zones), and checks the reply with Go closures, written here as expected data.

Every template of the table matches the zone `.` and falls through; the Go test's next plugin
(which returns its fallthrough code) is the fake upstream here: a fallthrough is a question the
upstream was asked. The RcodeServFail row leaves the question's class and type unset (0), which
no client sends; its template matches any class and type, so an IN A question stands for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import dns.edns
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset

from splitdns.errors import ConfigError
from tests.support.inprocess import FakeUpstream, serving

Run = Callable[[], Awaitable[tuple[bool, str]]]
FILE = "plugin/template/template_test.go:TestHandler"
_IP = "(^|[.])ip-10-(?P<b>[0-9]*)-(?P<c>[0-9]*)-(?P<d>[0-9]*)[.]example[.]$"
_IP_A = "{{ .Name }} 60 IN A 10.{{ .Group.b }}.{{ .Group.c }}.{{ .Group.d }}"


@dataclass(frozen=True)
class Row:
    template: str  # the lines of the `template` block: the Go struct's fields
    qname: str
    qtype: str
    rcode: int | None  # None: the question falls through to the next plugin
    answer: tuple[str, ...] = ()  # the types of the reply's sections the Go closure counts
    extra: tuple[str, ...] = ()
    ns: tuple[str, ...] = ()
    checks: tuple[tuple[str, str], ...] = field(default=())  # (what, text) the closure compares
    qclass: str = "IN"
    head: str = "ANY ANY"


# In the Go table's order, each with its Go row name.
ROWS: tuple[Row, ...] = (
    Row("match .*\nrcode SERVFAIL", "test.invalid.", "A", dns.rcode.SERVFAIL),  # RcodeServFail
    Row(f"match {_IP}\nanswer \"{_IP_A}\"", "test.invalid.", "A", None),  # ExampleDomainNameMismatch
    Row("match [.]example[.]$\nanswer \"{{ .Name }} 60 IN TXT \\\"{{ index .Match 2 }}\\\"\"",
        "test.example.", "ANY", dns.rcode.SERVFAIL),  # BrokenTemplate
    Row("match [.]example[.]$\nanswer \"{{ .Name }}\"", "test.example.", "ANY",
        dns.rcode.SERVFAIL),  # NonRRTemplate
    Row("match [.]example[.]$\nadditional \"{{ .Name }}\"", "test.example.", "ANY",
        dns.rcode.SERVFAIL),  # NonRRAdditionalTemplate
    Row("match [.]example[.]$\nauthority \"{{ .Name }}\"", "test.example.", "ANY",
        dns.rcode.SERVFAIL),  # NonRRAuthorityTemplate
    Row("match .*\nanswer \"{{ .Name }} 60 IN A {{ .Remote }}\"", "test.example.", "A", dns.rcode.NOERROR,
        ("A",), checks=(("address", "10.240.0.1"),), head="IN A"),  # ExampleIPMatch
    Row(f"match {_IP}\nanswer \"{_IP_A}\"", "ip-10-95-12-8.example.", "A", dns.rcode.NOERROR, ("A",),
        checks=(("address", "10.95.12.8"),)),  # ExampleDomainMatch
    Row("match ^ip0a(?P<b>[a-f0-9]{2})(?P<c>[a-f0-9]{2})(?P<d>[a-f0-9]{2})[.]example[.]$\n"
        "answer \"{{ .Name }} 60 IN A 10.{{ parseInt .Group.b 16 8 }}.{{ parseInt .Group.c 16 8 }}."
        "{{ parseInt .Group.d 16 8 }}\"", "ip0a5f0c09.example.", "A", dns.rcode.NOERROR, ("A",),
        checks=(("address", "10.95.12.9"),)),  # ExampleDomainMatchHexIp
    Row("match [.]example[.]$\nanswer \"{{ .Name }} 60 IN TXT \\\"{{ parseInt \\\"gg\\\" 16 8 }}\\\"\"",
        "test.example.", "ANY", dns.rcode.SERVFAIL),  # BrokenParseIntTemplate
    Row(f"match {_IP}\nanswer \"{{{{ .Name }}}} 60 MX 10 {{{{ .Name }}}}\"\nadditional \"{_IP_A}\"",
        "ip-10-95-12-8.example.", "MX", dns.rcode.NOERROR, ("MX",), ("A",)),  # ExampleDomainMXMatch
    Row(f"match {_IP}\nanswer \"{_IP_A}\"\nadditional \"ns0.example. IN A 203.0.113.8\"\n"
        "authority \"example. IN NS ns0.example.com.\"", "ip-10-95-12-8.example.", "A", dns.rcode.NOERROR,
        ("A",), ("A",), ("NS",)),  # ExampleDomainANSMatch
    Row("match [.]invalid[.]$\nrcode NXDOMAIN\n"
        "answer \"invalid. 60 {{ .Class }} SOA a.invalid. b.invalid. (1 60 60 60 60)\"",
        "test.invalid.", "MX", dns.rcode.NXDOMAIN, ("SOA",)),  # ExampleInvalidNXDOMAIN
    Row("match example[.]net[.]\nanswer \"example.net 60 IN CNAME target.example.com\"",
        "example.net.", "A", dns.rcode.NOERROR, ("CNAME",)),  # CNAMEWithoutUpstream
    Row(f"match {_IP}\nanswer \"{{{{ .Meta \\\"foo\\\" }}}}-{_IP_A}\"\n"
        "additional \"{{ .Meta \\\"bar\\\" }}.example. IN A 203.0.113.8\"\n"
        "authority \"example. IN NS {{ .Meta \\\"bar\\\" }}.example.com.\"", "ip-10-95-12-8.example.", "A",
        dns.rcode.NOERROR, ("A",), ("A",), ("NS",),
        (("name", "myfoo-ip-10-95-12-8.example."),)),  # mdMatch
    Row(f"match {_IP}\nanswer \"{{{{ .Meta \\\"foofoo\\\" }}}}{_IP_A}\"", "ip-10-95-12-8.example.", "A",
        dns.rcode.NOERROR, ("A",), checks=(("name", "ip-10-95-12-8.example."),)),  # mdMissing
    Row("match .*\nrcode NXDOMAIN\n"
        "authority \"invalid. 60 {{ .Class }} SOA ns.invalid. hostmaster.invalid. (1 60 60 60 60)\"\n"
        "ederror 21 \"Blocked due to RFC2606\"", "test.invalid.", "A", dns.rcode.NXDOMAIN,
        checks=(("ede", "21"),)),  # EDNS error
)

def _types(section: list[dns.rrset.RRset]) -> tuple[str, ...]:
    return tuple(dns.rdatatype.to_text(r.rdtype) for r in section for _ in r)


def _case(row: Row) -> Run:
    body = "\n        ".join([*row.template.split("\n"), "fallthrough"])
    block = f"    template {row.head} . {{\n        {body}\n    }}\n"

    async def run() -> tuple[bool, str]:
        async with FakeUpstream(dns.message.make_response) as up:
            try:
                async with serving(". {\n" + block + "    forward . " + up.target + "\n}\n") as s:
                    edns = 0 if any(what == "ede" for what, _ in row.checks) else -1
                    query = dns.message.make_query(row.qname, row.qtype, row.qclass, use_edns=edns)
                    reply = await s.ask(query)
            except ConfigError as e:
                return False, f"refused at load: {e}"
        if reply is None:
            return False, "no reply"
        got = (_types(reply.answer), _types(reply.additional), _types(reply.authority))
        said = f"{dns.rcode.to_text(reply.rcode())}, sections {got}, upstream asked {len(up.asked)}"
        if row.rcode is None:
            return len(up.asked) == 1, said
        ok = reply.rcode() == row.rcode and not up.asked
        if row.rcode == dns.rcode.NOERROR or row.answer:
            ok = ok and got == (row.answer, row.extra, row.ns)
        for what, text in row.checks:
            first = reply.answer[0] if reply.answer else None
            if what == "ede":  # the Go closure wants an EDE option with the template's code
                seen = ",".join(str(o.code) for o in reply.options if o.otype == dns.edns.EDE) or None
            else:
                seen = (first[0].to_text() if what == "address" else str(first.name)) if first else None
            ok, said = ok and seen == text, f"{said}; {what} {seen}"
        return ok, said
    return run


def scenarios() -> list[tuple[str, Run]]:
    return [(f"{FILE}#{i}", _case(row)) for i, row in enumerate(ROWS)]
