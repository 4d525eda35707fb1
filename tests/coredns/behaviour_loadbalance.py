"""CoreDNS's loadbalance prefer_test.go TestSortPreferred as a Corefile: `prefer` with the Go
test's three networks, in front of a fake upstream that answers the Go test's records; the
client's answer must come in the Go test's order (the CNAME, then the preferred networks'
addresses in the order the networks are listed, then the others as they came).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import dns.message
import dns.rrset

from splitdns.errors import ConfigError
from tests.support.inprocess import FakeUpstream, serving

Run = Callable[[], Awaitable[tuple[bool, str]]]

NOT_PORTED = {
    ("plugin/loadbalance/prefer_test.go", "TestExtractIP"):
        "a Go helper (extractIP) on single records; no question reaches it",
}

RECORDS = (
    "A 10.9.30.1", "A 10.9.20.5", "A 192.168.1.2", "A 10.10.0.1", "A 10.9.20.3", "A 172.16.0.1",
    "AAAA 2001:db8::1", "AAAA 2001:db8:abcd::1", "AAAA fd00::1", "CNAME alias.example.org.",
)
CIDRS = ("2001:db8::/32", "10.9.20.0/24", "10.9.30.0/24")
EXPECTED = ("alias.example.org.", "2001:db8::1", "2001:db8:abcd::1", "10.9.20.5", "10.9.20.3",
            "10.9.30.1", "192.168.1.2", "10.10.0.1", "172.16.0.1", "fd00::1")


def _upstream(q: dns.message.Message) -> dns.message.Message:
    r = dns.message.make_response(q)
    r.answer = [dns.rrset.from_text("example.org.", 300, "IN", *text.split(" ")) for text in RECORDS]
    return r


async def _sort_preferred() -> tuple[bool, str]:
    body = "    loadbalance round_robin {\n        prefer " + " ".join(CIDRS) + "\n    }\n"
    async with FakeUpstream(_upstream) as up:
        try:
            async with serving(". {\n" + body + "    forward . " + up.target + "\n}\n") as s:
                reply = await s.ask(dns.message.make_query("example.org.", "A"))
        except ConfigError as e:
            return False, f"refused at load: {e}"
    got = tuple(rd.to_text() for rrset in (reply.answer if reply else []) for rd in rrset)
    return got == EXPECTED, f"answer order {list(got)}"


def scenarios() -> list[tuple[str, Run]]:
    return [("plugin/loadbalance/prefer_test.go:TestSortPreferred#0", _sort_preferred)]
