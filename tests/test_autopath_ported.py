"""CoreDNS's own autopath tests, ported: plugin/autopath/autopath_test.go (TestAutoPath,
TestInSearchPath) and setup_test.go (TestSetupAutoPath) at v1.14.7, Copyright The CoreDNS
Authors, Apache License 2.0: the search lists, names and expectations are theirs. Served in
process over real UDP sockets on loopback, with a fake upstream that answers as their
`nextHandler` does (NXDOMAIN with an SOA, an A record of TTL 3600, SERVFAIL for the rest).

Two of their expectations are deliberate differences, each asserted as what we do instead:
a try that fails (SERVFAIL) ends the walk with that error, where CoreDNS skips it (a later
search domain must not answer for a name an earlier one may hold: the client's own walk would
not have got there either), and `@kubernetes` is refused (README, "Names the pod asks for").
"""

from __future__ import annotations

from pathlib import Path

import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest

from splitdns import config, directives
from splitdns.codec import wire
from splitdns.core.search import AutoPath
from splitdns.errors import ConfigError
from tests.helpers import query
from tests.support.inprocess import FakeUpstream, run, serving

RESOLV_CONF = "nameserver 1.2.3.4\ndomain foo.com\nsearch bar.com baz.com\noptions ndots:5\n"  # setup_test.go
SOA = "example.org. 1800 IN SOA example.org. example.org. 1502165581 14400 3600 604800 14400"
NEXT = {"b.example.org.": dns.rcode.NXDOMAIN, "b.com.": dns.rcode.NOERROR,
        "a.example.com.": dns.rcode.NOERROR}  # autopath_test.go newTestAutoPath


def _next_handler(q: dns.message.Message) -> dns.message.Message:
    name = q.question[0].name.to_text()
    out = dns.message.make_response(q)
    rcode = NEXT.get(name, dns.rcode.SERVFAIL)
    out.set_rcode(rcode)
    if rcode == dns.rcode.NXDOMAIN:
        out.authority.append(dns.rrset.from_text(*SOA.split(maxsplit=4)))
    elif rcode == dns.rcode.NOERROR:
        out.answer.append(dns.rrset.from_text(name, 3600, "IN", "A", "127.0.0.53"))
    return out


def _ask(tmp_path: Path, name: str) -> dns.message.Message:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("search example.org example.com com\n")  # newTestAutoPath's search path

    async def scenario() -> dns.message.Message | None:
        async with FakeUpstream(_next_handler) as up, \
                serving(f". {{\n autopath {resolv}\n forward . {up.target}\n}}\n") as srv:
            return await srv.ask(query(name))
    got = run(scenario)
    assert got is not None
    return got


def _answer(msg: dns.message.Message) -> list[str]:
    return [f"{r.name} {r.ttl} {dns.rdatatype.to_text(r.rdtype)} {rd}" for r in msg.answer for rd in r]


def test_autopath_no_search_path_expansion(tmp_path: Path) -> None:
    """TestAutoPath case 1: a.example.com. is not under the first search domain."""
    assert _answer(_ask(tmp_path, "a.example.com.")) == ["a.example.com. 3600 A 127.0.0.53"]


def test_autopath_search_path_expansion_stops_at_a_failed_try(tmp_path: Path) -> None:
    """TestAutoPath case 0, deliberate: CoreDNS skips b.example.com. (its next plugin fails)
    and answers b.com. under a CNAME; here the failed try ends the walk, as the client's own
    would have (musl stops there; glibc goes on itself)."""
    got = _ask(tmp_path, "b.example.org.")
    assert got.rcode() == dns.rcode.SERVFAIL and not got.answer


def test_autopath_search_path_expansion(tmp_path: Path) -> None:
    """TestAutoPath case 0 with b.example.com. NXDOMAIN, as a healthy upstream answers it: the
    CNAME sits before the answer, with its TTL."""
    NEXT["b.example.com."] = dns.rcode.NXDOMAIN
    try:
        got = _ask(tmp_path, "b.example.org.")
    finally:
        del NEXT["b.example.com."]
    assert _answer(got) == ["b.example.org. 3600 CNAME b.com.", "b.com. 3600 A 127.0.0.53"]


@pytest.mark.parametrize(("qname", "first"), [
    ("google.com.", False),
    ("default.svc.cluster.local.", False),  # CoreDNS: true; a search domain itself has no NAME to walk
    ("a.default.svc.cluster.local.", True),
    ("a.b.svc.cluster.local.", False),
])
def test_in_search_path(qname: str, first: bool) -> None:
    """TestInSearchPath: which queries are a first try."""
    path = AutoPath((".",), ("default.svc.cluster.local.", "svc.cluster.local.", "cluster.local."))
    q = wire.parse_query(dns.message.make_query(qname, "A").to_wire())
    assert q is not None
    assert (path.tries(q, 0.0) is not None) is first


def test_setup_reads_the_search_path(tmp_path: Path) -> None:
    """TestSetupAutoPath row 3: the `search` line wins over `domain` (CoreDNS adds its ""
    sentinel; the name itself is always our last try)."""
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(RESOLV_CONF)
    block = config.loads(f". {{\n autopath {resolv}\n forward . 192.0.2.1\n}}\n").blocks[0]
    spec = block[directives.AUTOPATH]
    assert spec is not None and spec.search == ("bar.com.", "baz.com.") and spec.ndots == 5


@pytest.mark.parametrize(("line", "error"), [
    ("autopath kubernetes", "cannot read kubernetes"),         # row 4: "open kubernetes:"
    ("autopath", "wrong number of arguments"),                 # row 5: "no resolv-conf"
    ('autopath ""', "autopath: cannot read"),                  # row 6: "failed to parse"
    ("autopath @kubernetes", "own pod's search list"),         # rows 0-2, deliberate: refused
    ("autopath example.org @kubernetes", "own pod's search list"),
    ("autopath 10.0.0.0/8 @kubernetes", "own pod's search list"),
])
def test_setup_errors(line: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        config.loads(f". {{\n {line}\n forward . 192.0.2.1\n}}\n")
