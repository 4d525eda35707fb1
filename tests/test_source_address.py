"""`forward { source_address IP }`: every query to the upstreams leaves from that address, over
UDP and, after a truncated reply, over TCP, as CoreDNS's forward sends them."""

from __future__ import annotations

import dns.flags
import dns.message

from tests.support.inprocess import FakeUpstream, run, serving

SOURCE = "127.0.0.9"


def _answer(q: dns.message.Message) -> dns.message.Message:
    r = dns.message.make_response(q)
    r.answer = [dns.rrset.from_text(q.question[0].name, 60, "IN", "A", "192.0.2.1")]
    return r


def _truncated(q: dns.message.Message) -> dns.message.Message:
    r = dns.message.make_response(q)
    r.flags |= dns.flags.TC
    return r


def test_queries_leave_from_the_source_address_over_udp_and_tcp() -> None:
    async def scenario() -> None:
        async with FakeUpstream(_answer) as plain, FakeUpstream(_truncated, addr="127.0.0.22",
                                                              tcp_handle=_answer) as big:
            corefile = (f"example.org {{\n    forward . {plain.target} {{\n        source_address {SOURCE}\n"
                        f"    }}\n}}\nexample.net {{\n    forward . {big.target} {{\n"
                        f"        source_address {SOURCE}\n    }}\n}}\n")
            async with serving(corefile) as s:
                for name in ("a.example.org.", "a.example.net."):
                    reply = await s.ask(dns.message.make_query(name, "A"))
                    assert reply is not None and reply.answer, name
        assert [(a.transport, a.src[0]) for a in plain.asked] == [("udp", SOURCE)]
        assert [(a.transport, a.src[0]) for a in big.asked] == [("udp", SOURCE), ("tcp", SOURCE)]

    run(scenario)
