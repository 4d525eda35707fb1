"""CoreDNS's hosts tables: TestFallthroughUnsupportedType, and the lookup tables
(hosts_test.go's hostsTestCases, read by TestLookupA; hostsfile_test.go's
lookupStaticHostTests and lookupStaticAddrTests; wildcard_test.go's TestLookupWildcardHost),
each row served by the in-process server from the Go test's hosts text written to a file.

The Go tests call the hosts file's lookups (LookupStaticHostV4, ...) directly; here the same
lookups are DNS questions: A and AAAA for a name (as given, lower and upper case, as
testStaticHost asks it), PTR for an address.
"""

from __future__ import annotations

import ipaddress
import re
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdatatype
import dns.reversename

from tests.coredns import cases
from tests.support.inprocess import FakeUpstream, Serving, serving

Run = Callable[[], Awaitable[tuple[bool, str]]]

NOT_PORTED = {
    ("plugin/hosts/wildcard_test.go", "TestReplaceWithAsteriskLabel"):
        "a Go helper (replaceWithAsteriskLabel) on names; TestLookupWildcardHost checks what it is for",
}


def _nxdomain(q: dns.message.Message) -> dns.message.Message:  # TestLookupA's next plugin
    r = dns.message.make_response(q)
    r.set_rcode(dns.rcode.NXDOMAIN)
    return r


@asynccontextmanager
async def _hosts(text: str, options: str = "") -> AsyncIterator[tuple[Serving, FakeUpstream]]:
    with tempfile.TemporaryDirectory() as directory:
        hosts = Path(directory) / "hosts"
        hosts.write_text(text)
        block = " {\n        " + options + "\n    }" if options else ""
        corefile = ". {\n    hosts " + str(hosts) + block + "\n    forward . "
        async with FakeUpstream(_nxdomain) as up, serving(corefile + up.target + "\n}\n") as s:
            yield s, up


def _constant(path: str, name: str) -> str:
    text: str = cases.tables()["constants"][f"{path}:{name}"]
    return text


def _strings(go: Any) -> list[str]:
    return re.findall(r'"([^"]*)"', go["go"] if isinstance(go, dict) else go)


# --- TestLookupA ---------------------------------------------------------------------------

# TestLookupA checks a reply only where the plugin wrote one. For this row CoreDNS writes none:
# `*.apps.example.com` covers one label under apps.example.com, not the name itself, so
# ServeDNS returns SERVFAIL unwritten (hosts.go) and the row's Answer is never compared. What
# CoreDNS's server then sends is the row's outcome here.
_UNWRITTEN_SERVFAIL = {"plugin/hosts/hosts_test.go:hostsTestCases#9"}

def lookup_a(row: dict[str, Any]) -> Run:
    from tests.coredns.behaviour import _rcode, _records  # behaviour imports this module
    qname, qtype = row["Qname"], dns.rdatatype.from_text(row["Qtype"]["go"].removeprefix("dns.Type"))
    records = _records(row.get("Answer"))
    want = sorted(line.lower() for rrset in records for line in rrset.to_text().split("\n"))
    want_rcode = _rcode(row["Rcode"]["go"] if isinstance(row.get("Rcode"), dict) else None)
    if f"{row['file']}:{row['test']}#{row['row']}" in _UNWRITTEN_SERVFAIL:
        want, want_rcode = [], dns.rcode.SERVFAIL
    # TestLookupA gives the hosts plugin `fallthrough` for this one name only
    options = "fallthrough" if qname == "fallthrough-example.org." else ""

    async def run() -> tuple[bool, str]:
        async with _hosts(_constant("plugin/hosts/hosts_test.go", "hostsExample"), options) as (s, up):
            reply = await s.ask(dns.message.make_query(qname, qtype))
        if reply is None:
            return False, "no reply"
        got = sorted(line.lower() for rrset in reply.answer for line in rrset.to_text().split("\n"))
        extra = [r for r in reply.additional if r.rdtype != dns.rdatatype.OPT]
        said = f"rcode {dns.rcode.to_text(reply.rcode())}, answer {got}, upstream asked {len(up.asked)}"
        ok = (reply.rcode() == want_rcode and got == want
              and not reply.authority and not extra)
        return ok, said
    return run


# --- testStaticHost: lookupStaticHostTests, TestLookupWildcardHost -------------------------

_ENTRY = re.compile(r'\{"([^"]*)",\s*\[\]string\{([^}]*)\},\s*\[\]string\{([^}]*)\}\}')


async def _addresses(s: Serving, name: str, rdtype: str) -> list[str]:
    reply = await s.ask(dns.message.make_query(name, rdtype))
    if reply is None:
        return ["(no reply)"]
    wanted = dns.name.from_text(name)
    return [rd.address for rrset in reply.answer if rrset.name == wanted
            and rrset.rdtype == dns.rdatatype.from_text(rdtype) for rd in rrset]


async def _static_hosts(s: Serving, entries: list[tuple[str, list[str], list[str]]]) -> tuple[bool, str]:
    for name, v4, v6 in entries:
        # testStaticHost asks the name as given, normalized (lower case), lower and upper case
        for asked in dict.fromkeys((name, name.lower(), name.upper())):
            got4, got6 = await _addresses(s, asked, "A"), await _addresses(s, asked, "AAAA")
            if got4 != v4 or got6 != v6:
                return False, f"{asked}: A {got4}, AAAA {got6}; CoreDNS: {v4}, {v6}"
    return True, f"{len(entries)} names as CoreDNS answers them"


def static_host_table(row: dict[str, Any]) -> Run:
    text = _constant(row["file"], row["file_"]["go"])
    entries = [(n, _strings(a), _strings(b)) for n, a, b in _ENTRY.findall(row["ents"]["go"])]

    async def run() -> tuple[bool, str]:
        async with _hosts(text) as (s, _):
            return await _static_hosts(s, entries)
    return run


def wildcard_host(row: dict[str, Any]) -> Run:
    entry = (row["in"], _strings(row["v4"]), _strings(row["v6"]))

    async def run() -> tuple[bool, str]:
        async with _hosts(_constant(row["file"], "hosts")) as (s, _):
            return await _static_hosts(s, [entry])
    return run


# --- testStaticAddr: lookupStaticAddrTests -------------------------------------------------

_ADDR_ENTRY = re.compile(r'\{"([^"]*)",\s*\[\]string\{([^}]*)\}\}')


def static_addr_table(row: dict[str, Any]) -> Run:
    text = _constant(row["file"], row["file_"]["go"])
    # testStaticAddr compares with the names normalized (lower case)
    entries = [(ip, [n.lower() for n in _strings(names)])
               for ip, names in _ADDR_ENTRY.findall(row["ents"]["go"])]

    async def run() -> tuple[bool, str]:
        async with _hosts(text) as (s, _):
            for ip, want in entries:
                reverse = dns.reversename.from_address(str(ipaddress.ip_address(ip)))
                reply = await s.ask(dns.message.make_query(reverse, "PTR"))
                got = [] if reply is None else [str(rd.target) for rrset in reply.answer
                                                if rrset.rdtype == dns.rdatatype.PTR for rd in rrset]
                if got != want:
                    return False, f"{ip}: PTR {got}; CoreDNS: {want}"
        return True, f"{len(entries)} addresses as CoreDNS answers them"
    return run


# --- hosts: TestFallthroughUnsupportedType -------------------------------------------------

def fallthrough_case(row: dict[str, Any]) -> Run:
    zones = _strings(row["fall"])  # fall.Root: every zone; fall.F{Zones: [...]}: those
    options = "fallthrough " + " ".join(zones)
    if row.get("unsupported"):
        options += "\n        fallthrough_unsupported"
    expect_fall = bool(row.get("expectFallthrough"))
    text = cases.tables()["constants"]["plugin/hosts/hosts_test.go:hostsExample"]

    def refuse(q: dns.message.Message) -> dns.message.Message:  # the Go test's next plugin
        r = dns.message.make_response(q)
        r.set_rcode(dns.rcode.REFUSED)
        return r

    async def run() -> tuple[bool, str]:
        with tempfile.TemporaryDirectory() as directory:
            hosts = Path(directory) / "hosts"
            hosts.write_text(text)
            corefile = ". {\n    hosts " + str(hosts) + " {\n        " + options + "\n    }\n    forward . "
            async with FakeUpstream(refuse) as up, serving(corefile + up.target + "\n}\n") as s:
                reply = await s.ask(dns.message.make_query(row["qname"], "TXT"))
        if reply is None:
            return False, "no reply"
        fell = reply.rcode() == dns.rcode.REFUSED and len(up.asked) == 1
        nodata = (reply.rcode() == dns.rcode.NOERROR and not reply.answer
                  and bool(reply.flags & dns.flags.AA) and not up.asked)
        said = f"rcode {dns.rcode.to_text(reply.rcode())}, upstream asked {len(up.asked)}"
        return (fell if expect_fall else nodata), said
    return run


TABLES: dict[str, Callable[[dict[str, Any]], Run]] = {
    "hostsTestCases": lookup_a,
    "lookupStaticHostTests": static_host_table,
    "lookupStaticAddrTests": static_addr_table,
    "TestLookupWildcardHost": wildcard_host,
}
