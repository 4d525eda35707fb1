"""`minimal`: positive answers lose their authority and additional sections; denials,
referrals and errors keep them. Served in process over real UDP sockets on loopback, with a
fake upstream that writes the sections, and from the zone's own answers (`template`).

The three cases of `PORTED` come from CoreDNS's own tests (plugin/minimal/minimal_test.go,
TestMinimizeResponse, and setup_test.go, TestSetup, at v1.14.7), Copyright The CoreDNS
Authors, Apache License 2.0: the records and the expectations are theirs.
"""

from __future__ import annotations

import dns.message
import dns.rcode
import dns.rrset
import pytest

from splitdns import config
from splitdns.errors import ConfigError
from tests.helpers import query
from tests.support.inprocess import FakeUpstream, run, serving

ANSWER = ("example.com. 293 IN A 142.250.76.46",)
NS = tuple(f"example.com. 157127 IN NS ns{i}.example.com." for i in (2, 1, 3, 4))
EXTRA = ("ns2.example.com. 316273 IN A 216.239.34.10", "ns2.example.com. 157127 IN AAAA 2001:4860:4802:34::a",
         "ns3.example.com. 316274 IN A 216.239.36.10", "ns3.example.com. 157127 IN AAAA 2001:4860:4802:36::a",
         "ns1.example.com. 165555 IN A 216.239.32.10", "ns1.example.com. 165555 IN AAAA 2001:4860:4802:32::a",
         "ns4.example.com. 190188 IN A 216.239.38.10", "ns4.example.com. 157127 IN AAAA 2001:4860:4802:38::a")

# (source, answer, authority, additional, rcode) -> (answer, authority, additional) the client sees
PORTED = [
    ("minimal_test.go TestMinimizeResponse row 0: minimization possible, NoError",
     (ANSWER, (), EXTRA, dns.rcode.NOERROR), (1, 0, 0)),
    ("minimal_test.go TestMinimizeResponse row 1: a delegation passes through",
     ((), NS, EXTRA, dns.rcode.NOERROR), (0, 4, 8)),
    ("minimal_test.go TestMinimizeResponse row 2: an error passes through",
     (ANSWER, NS, EXTRA, dns.rcode.SERVFAIL), (1, 4, 8)),
]
SOA = "example.com. 60 IN SOA ns1.example.com. hostmaster.example.com. 1 3600 600 86400 60"


def _upstream(answer: tuple[str, ...], authority: tuple[str, ...], additional: tuple[str, ...],
              rcode: int) -> FakeUpstream:
    def handle(q: dns.message.Message) -> dns.message.Message:
        msg = dns.message.make_response(q)
        msg.set_rcode(rcode)
        for section, lines in ((msg.answer, answer), (msg.authority, authority),
                               (msg.additional, additional)):
            for line in lines:
                rrset = dns.rrset.from_text(*line.split(maxsplit=4))
                existing = next((r for r in section if r.match(rrset.name, rrset.rdclass, rrset.rdtype,
                                                               rrset.covers)), None)
                if existing is None:
                    section.append(rrset)
                else:
                    existing.union_update(rrset)
        return msg
    return FakeUpstream(handle)


def _sections(msg: dns.message.Message | None) -> tuple[int, int, int]:
    assert msg is not None
    count = [sum(len(r) for r in s) for s in (msg.answer, msg.authority, msg.additional)]
    return count[0], count[1], count[2]


def _ask_through(upstream: FakeUpstream, extra: str, name: str = "example.com",
                 asks: int = 1) -> list[dns.message.Message | None]:
    async def scenario() -> list[dns.message.Message | None]:
        async with upstream, serving(f". {{\n {extra}\n forward . {upstream.target}\n}}\n") as srv:
            return [await srv.ask(query(name, edns=0)) for _ in range(asks)]
    return run(scenario)


@pytest.mark.parametrize(("source", "upstream", "seen"), PORTED, ids=[p[0].split(":")[0] + str(i)
                                                                       for i, p in enumerate(PORTED)])
def test_corednss_minimize_cases(source: str, upstream: tuple[tuple[str, ...], tuple[str, ...],
                                                              tuple[str, ...], int],
                                 seen: tuple[int, int, int]) -> None:
    (got,) = _ask_through(_upstream(*upstream), "minimal")
    assert _sections(got) == seen, source
    assert got is not None and got.edns == 0  # the client's EDNS is answered: OPT is not "additional"
    # Without the directive the same reply passes whole: the test can tell the difference.
    (plain,) = _ask_through(_upstream(*upstream), "")
    answer, authority, additional, _ = upstream
    assert _sections(plain) == (len(answer), len(authority), len(additional))


def test_denials_keep_their_soa_and_hits_stay_minimal() -> None:
    nodata = _ask_through(_upstream((), (SOA,), EXTRA[:1], dns.rcode.NOERROR), "minimal")
    assert _sections(nodata[0]) == (0, 1, 1)
    nxdomain = _ask_through(_upstream((), (SOA,), (), dns.rcode.NXDOMAIN), "minimal")
    assert _sections(nxdomain[0]) == (0, 1, 0)
    # What the cache stored is already minimal: the hits (memo and all) answer the same.
    asked = _ask_through(_upstream(ANSWER, NS, EXTRA, dns.rcode.NOERROR), "cache 60\n minimal", asks=3)
    assert [_sections(m) for m in asked] == [(1, 0, 0)] * 3


def test_the_zones_own_answers_are_minimal_too() -> None:
    template = ("template IN A example.com {\n  answer \"{{ .Name }} 60 IN A 192.0.2.1\"\n"
                "  authority \"example.com. 60 IN NS ns1.example.com.\"\n"
                "  additional \"ns1.example.com. 60 IN A 192.0.2.53\"\n }")
    with_minimal = _ask_through(_upstream((), (), (), dns.rcode.SERVFAIL), f"minimal\n {template}", asks=2)
    assert [_sections(m) for m in with_minimal] == [(1, 0, 0)] * 2
    without = _ask_through(_upstream((), (), (), dns.rcode.SERVFAIL), template)
    assert _sections(without[0]) == (1, 1, 1)


@pytest.mark.parametrize(("line", "error"), [
    # setup_test.go TestSetup row 1
    ("minimal example.org", "Corefile:2: minimal: wrong number of arguments; usage: minimal"),
    ("minimal {\n  foo\n }", "Corefile:2: minimal takes no block"),
    ("minimal\n minimal", "Corefile:3: minimal can be used only once per server block"),
])
def test_minimal_takes_nothing(line: str, error: str) -> None:
    with pytest.raises(ConfigError) as raised:
        config.loads(f". {{\n {line}\n forward . 192.0.2.1\n}}\n", read_files=False)
    assert str(raised.value).startswith(error), str(raised.value)


def test_minimal_alone_loads() -> None:  # setup_test.go TestSetup row 0
    block = config.loads(". {\n minimal\n forward . 192.0.2.1\n}\n", read_files=False).blocks[0]
    assert block.specs == {"minimal": True}
