"""CoreDNS's cache tests that are one scenario each rather than a table (qclass_test.go,
spoof_test.go, ad_bit_test.go) and dnssec_test.go's table, served by the in-process server
with `cache` in front of a fake upstream that answers as the Go test's next plugin does.

Where the Go test reads the cache's length, here a repeat of the question shows it: the
upstream is asked again, or not. Each case names the Go test and the step (`#N`) it checks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import dns.flags
import dns.message
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from tests.support.inprocess import FakeClock, FakeUpstream, serving

Run = Callable[[], Awaitable[tuple[bool, str]]]
COREFILE = ". {{\n    cache\n    forward . {target}\n}}\n"
SHORT_WAIT = ". {{\n    cache\n    forward . {target} {{\n        read_timeout 100ms\n    }}\n}}\n"

NOT_PORTED: dict[tuple[str, str], str] = {}


# --- qclass_test.go: TestCacheSeparatesQuestionClasses ----------------------------------------

def _classes() -> Run:
    qname = "victim.cache-class.test."

    def handle(q: dns.message.Message) -> dns.message.Message:
        r = dns.message.make_response(q)
        if q.question[0].rdclass == dns.rdataclass.CH:
            r.set_rcode(dns.rcode.NXDOMAIN)
            r.authority = [dns.rrset.from_text("cache-class.test.", 60, "CH", "SOA", "ns.cache-class.test. "
                                               "hostmaster.cache-class.test. 1 60 60 60 60")]
        else:
            r.answer = [dns.rrset.from_text(qname, 60, "IN", "A", "192.0.2.1")]
        return r

    async def run() -> tuple[bool, str]:
        async with FakeUpstream(handle) as up, serving(COREFILE.format(target=up.target)) as s:
            chaos = await s.ask(dns.message.make_query(qname, "A", "CH"))
            inet = await s.ask(dns.message.make_query(qname, "A", "IN"))
        classes = [dns.rdataclass.to_text(a.message.question[0].rdclass) for a in up.asked]
        rcodes = [r and dns.rcode.to_text(r.rcode()) for r in (chaos, inet)]
        said = f"CH, IN: {rcodes}, IN answers {inet and len(inet.answer)}, upstream asked {classes}"
        ok = (chaos is not None and chaos.rcode() == dns.rcode.NXDOMAIN and inet is not None
              and inet.rcode() == dns.rcode.NOERROR and len(inet.answer) == 1 and classes == ["CH", "IN"])
        return ok, said
    return run


# --- spoof_test.go: TestSpoof, TestResponse ------------------------------------------------

def _not_cached(qname: str, qtype: str, reply_name: str, reply_type: str, record: str,
                response: bool) -> Run:
    """The upstream's reply names another question (or is no response); the cache must not keep it."""
    def handle(q: dns.message.Message) -> dns.message.Message:
        r = dns.message.make_query(reply_name, reply_type)
        r.id = q.id
        r.flags = (r.flags | dns.flags.QR) if response else (r.flags & ~dns.flags.QR)
        name, rdtype, rdata = record.split(" ", 2)
        r.answer = [dns.rrset.from_text(name, 3600, "IN", rdtype, rdata)]
        return r

    async def run() -> tuple[bool, str]:
        # A short read timeout: the forwarder drops the mismatched reply and the attempt ends
        # soon (the Go test has no forwarder; its next plugin's reply goes to the cache as is).
        async with FakeUpstream(handle) as up, serving(SHORT_WAIT.format(target=up.target)) as s:
            replies = [await s.ask(dns.message.make_query(qname, qtype), timeout=2.0) for _ in range(2)]
        served = [[r.to_text() for r in reply.answer] if reply else None for reply in replies]
        # the spoofed record reaches the client neither fresh nor from the cache
        ok = all(reply is not None and not reply.answer for reply in replies)
        return ok, f"answers {served}, upstream asked {len(up.asked)}"
    return run


# --- ad_bit_test.go: TestCacheADBitNotPartitioned ----------------------------------------

def _ad_bit(first_ad: bool) -> Run:
    def handle(q: dns.message.Message) -> dns.message.Message:  # adBitHandler
        r = dns.message.make_response(q)
        do = bool(q.ednsflags & dns.flags.DO)
        r.flags = (r.flags | dns.flags.AD) if (q.flags & dns.flags.AD or do) else (r.flags & ~dns.flags.AD)
        r.answer = [dns.rrset.from_text("invent.example.org.", 60, "IN", "A", "192.0.2.1")]
        return r

    async def run() -> tuple[bool, str]:
        async with FakeUpstream(handle) as up, serving(COREFILE.format(target=up.target)) as s:
            got = []
            for ad in (first_ad, not first_ad):
                q = dns.message.make_query("invent.example.org.", "A")
                q.flags = (q.flags | dns.flags.AD) if ad else (q.flags & ~dns.flags.AD)
                reply = await s.ask(q)
                got.append(reply is not None and bool(reply.flags & dns.flags.AD))
        asked_ad = [bool(a.message.flags & dns.flags.AD) for a in up.asked]
        said = f"AD in the replies {got}, upstream asked {len(up.asked)} times with AD {asked_ad}"
        # each client gets AD as it asked it, from one upstream question that asked for AD
        ok = got == [first_ad, not first_ad] and asked_ad == [True]
        return ok, said
    return run


def _ad_stale_verify() -> Run:
    """TestCacheADBitStaleVerify: `serve_stale 1h verify`; the clock moves 2 minutes past a
    60 s answer, and a client asking with AD gets a verified answer with AD."""
    corefile = ". {{\n    cache {{\n        serve_stale 1h verify\n    }}\n    forward . {target}\n}}\n"

    def handle(q: dns.message.Message) -> dns.message.Message:  # adBitHandler
        r = dns.message.make_response(q)
        do = bool(q.ednsflags & dns.flags.DO)
        r.flags = (r.flags | dns.flags.AD) if (q.flags & dns.flags.AD or do) else (r.flags & ~dns.flags.AD)
        r.answer = [dns.rrset.from_text("invent.example.org.", 60, "IN", "A", "192.0.2.1")]
        return r

    async def run() -> tuple[bool, str]:
        clock = FakeClock()
        async with FakeUpstream(handle) as up, serving(corefile.format(target=up.target), clock=clock) as s:
            q = dns.message.make_query("invent.example.org.", "A")
            q.flags &= ~dns.flags.AD
            await s.ask(q)
            clock.advance(120)
            ad = dns.message.make_query("invent.example.org.", "A")
            ad.flags |= dns.flags.AD
            reply = await s.ask(ad)
        asked_ad = [bool(a.message.flags & dns.flags.AD) for a in up.asked]
        got = reply is not None and bool(reply.flags & dns.flags.AD)
        return asked_ad == [True, True] and got, f"upstream asked with AD {asked_ad}, reply AD {got}"
    return run


def _ad_prefetch() -> Run:
    """TestCacheADBitPrefetchRequestsAD: `prefetch 1`; a later hit starts a prefetch, which asks
    the upstream with AD as the first question did. The Go test sets 100% and moves its clock
    1 s; a Corefile takes at most 90% (CoreDNS's setup too), so here the clock moves 10 s of
    the answer's 60."""
    corefile = ". {{\n    cache {{\n        prefetch 1 1m 90%\n    }}\n    forward . {target}\n}}\n"

    def handle(q: dns.message.Message) -> dns.message.Message:
        r = dns.message.make_response(q)
        r.answer = [dns.rrset.from_text("invent.example.org.", 60, "IN", "A", "192.0.2.1")]
        return r

    async def run() -> tuple[bool, str]:
        clock = FakeClock()
        async with FakeUpstream(handle) as up, serving(corefile.format(target=up.target), clock=clock) as s:
            q = dns.message.make_query("invent.example.org.", "A")
            q.flags &= ~dns.flags.AD
            await s.ask(q)
            clock.advance(10)
            await s.ask(q)
            for _ in range(100):  # the prefetch runs after the reply: up to 1 s for it
                if len(up.asked) >= 2:
                    break
                await asyncio.sleep(0.01)
        asked_ad = [bool(a.message.flags & dns.flags.AD) for a in up.asked]
        return asked_ad == [True, True], f"upstream asked with AD {asked_ad}"
    return run


# --- dnssec_test.go: TestResponseWithDNSSEC ------------------------------------------------

def _dnssec(rows: list[dict[str, Any]], order: list[int], upto: int) -> Run:
    from tests.coredns.behaviour import _records  # behaviour imports this module
    plain, signed = _records(rows[0]["Answer"]), _records(rows[1]["Answer"])

    def handle(q: dns.message.Message) -> dns.message.Message:  # dnssecHandler
        r = dns.message.make_response(q)
        r.flags |= dns.flags.AD
        r.answer = list(signed if q.ednsflags & dns.flags.DO else plain)
        return r

    def texts(rrsets: list[dns.rrset.RRset]) -> list[str]:
        return sorted(line for rrset in rrsets for line in rrset.to_text().split("\n"))

    async def run() -> tuple[bool, str]:
        async with FakeUpstream(handle) as up, serving(COREFILE.format(target=up.target)) as s:
            for index in order[:order.index(upto) + 1]:
                row = rows[index]
                query = dns.message.make_query(row["Qname"], "A", want_dnssec=bool(row.get("Do")))
                reply = await s.ask(query)
        if reply is None:
            return False, "no reply"
        want = texts(_records(rows[upto]["Answer"]))
        # the Go test compares AD only in the first order
        want_ad = bool(rows[upto].get("AuthenticatedData")) if order == [0, 1] else None
        ad = bool(reply.flags & dns.flags.AD)
        ok = texts(reply.answer) == want and want_ad in (None, ad)
        return ok, f"AD {ad}, answer {texts(reply.answer)}"
    return run


def scenarios() -> list[tuple[str, Run]]:
    """The cases of the single-scenario tests: (id, run)."""
    spoof = "plugin/cache/spoof_test.go"
    ad_bit = "plugin/cache/ad_bit_test.go:TestCacheADBitNotPartitioned"
    return [
        ("plugin/cache/qclass_test.go:TestCacheSeparatesQuestionClasses#0", _classes()),
        (f"{spoof}:TestSpoof#0",  # the reply names example.net
         _not_cached("example.org.", "A", "example.net.", "A", "example.org. A 127.0.0.53", True)),
        (f"{spoof}:TestSpoof#1",  # the reply's question is of type A, for an MX question
         _not_cached("example.org.", "MX", "example.org.", "A", "example.org. MX 10 mail.example.org.",
                     True)),
        (f"{spoof}:TestResponse#0",  # the reply has no QR bit
         _not_cached("example.net.", "A", "example.net.", "A", "example.org. A 127.0.0.53", False)),
        (f"{ad_bit}#0 (noad_then_ad)", _ad_bit(False)),
        (f"{ad_bit}#1 (ad_then_noad)", _ad_bit(True)),
        ("plugin/cache/ad_bit_test.go:TestCacheADBitStaleVerify#0", _ad_stale_verify()),
        ("plugin/cache/ad_bit_test.go:TestCacheADBitPrefetchRequestsAD#0", _ad_prefetch()),
    ]


def dnssec_table(rows: list[dict[str, Any]]) -> list[tuple[str, Run]]:
    """TestResponseWithDNSSEC's two rows, asked in order and then reversed (each on a new cache)."""
    out = []
    for order, name in (([0, 1], "in order"), ([1, 0], "reversed")):
        for upto in order:
            row = rows[upto]
            out.append((f"{row['file']}:TestResponseWithDNSSEC#{upto} ({name})", _dnssec(rows, order, upto)))
    return out
