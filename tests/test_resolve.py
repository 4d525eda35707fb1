"""The sans-io core as transcripts: routing, forward selection, exchanges. No sockets, no sleeps."""

from __future__ import annotations

import random

import dns.flags
import dns.message
import dns.rcode
import dns.rrset
import pytest

from splitdns import config
from splitdns.codec import wire
from splitdns.codec.reply import Reply
from splitdns.core import liveness
from splitdns.core.decisions import scrub
from splitdns.core.exchange import EDE_NO_REACHABLE_AUTHORITY, Done, Exchange, ForwardState, Send
from splitdns.core.routing import Router, cache_key
from splitdns.core.zone import Zone
from tests.helpers import indexed, query, reply
from tests.helpers import wire as to_wire


def zones(text: str) -> Router:
    cfg = config.loads(text, "Corefile", env={})
    return Router(Zone(b) for b in cfg.blocks)


SPLIT = """
.:53 { forward . 192.0.2.10 }
svc.acme.internal:53 { forward . 192.0.2.1 }
acme.internal:53 { forward . 192.0.2.2 }
"""


@pytest.mark.parametrize(("name", "zone"), [
    ("db.svc.acme.internal.", "svc.acme.internal."),
    ("svc.acme.internal.", "svc.acme.internal."),          # the apex belongs to the zone
    ("DB.Svc.ACME.internal.", "svc.acme.internal."),       # case does not matter
    ("a.b.c.svc.acme.internal.", "svc.acme.internal."),
    ("other.acme.internal.", "acme.internal."),            # longest match wins
    ("svc.acme.internal.example.net.", "."),               # not on a label boundary: catch-all
    ("xsvc.acme.internal.", "acme.internal."),             # a suffix of characters is not a zone
    ("kubernetes.default.svc.cluster.local.", "."),
    (".", "."),
])
def test_routing_by_whole_labels(name: str, zone: str) -> None:
    q = wire.parse_query(to_wire(query(name)))
    assert q is not None
    routed = zones(SPLIT).route(q.name)
    assert routed is not None and routed.block.zones == (zone,)


def test_block_order_does_not_matter() -> None:
    reversed_text = "\n".join(reversed(SPLIT.strip().splitlines()))
    q = wire.parse_query(to_wire(query("db.svc.acme.internal.")))
    assert q is not None
    for text in (SPLIT, reversed_text):
        routed = zones(text).route(q.name)
        assert routed is not None and routed.block.zones == ("svc.acme.internal.",)


def test_no_matching_zone_means_no_route() -> None:
    router = zones("example.org:53 { forward . 192.0.2.1 }")
    q = wire.parse_query(to_wire(query("example.net.")))
    assert q is not None and router.route(q.name) is None


def test_forward_from_and_except() -> None:
    router = zones("""example.org:53 {
        forward sub.example.org 192.0.2.2
        forward . 192.0.2.1 { except private.example.org }
    }""")
    zone = router.route(wire.name_to_wire("example.org."))
    assert zone is not None

    def chosen(name: str) -> str | None:
        fwd = zone.forward_for(wire.name_to_wire(name))
        return None if fwd is None else str(fwd.spec.upstreams[0])

    assert chosen("a.sub.example.org.") == "192.0.2.2:53"   # file order: the child first
    assert chosen("www.example.org.") == "192.0.2.1:53"
    assert chosen("db.private.example.org.") is None         # excepted, no next forward: SERVFAIL


def forward_state(options: str = "", upstreams: str = "192.0.2.1 192.0.2.2") -> ForwardState:
    text = f". {{\n forward . {upstreams} {{\n policy sequential\n {options}\n }}\n}}\n"
    return ForwardState.of(config.loads(text, "Corefile", env={}).blocks[0].forwards[0])


def answer_for(step: Send, *records: str, rcode: int = 0, tc: bool = False) -> Reply:
    return indexed(reply(query("example.org."), *records, rcode=rcode, tc=tc))


def test_exchange_fails_over_in_policy_order_then_answers() -> None:
    ex = Exchange(forward_state(), now=0.0, rng=random.Random(1))
    step = ex.start()
    assert isinstance(step, Send) and str(step.upstream.upstream) == "192.0.2.1:53"
    assert (step.tcp, step.timeout) == (False, 2.0)
    step = ex.failed(step, "timeout after 2s", now=2.0)
    assert isinstance(step, Send) and str(step.upstream.upstream) == "192.0.2.2:53"
    assert step.timeout == 2.0
    done = ex.answered(step, answer_for(step, "example.org. 60 IN A 192.0.2.80"), now=2.1)
    assert isinstance(done, Done) and done.reply is not None and done.error is None


def test_truncated_reply_is_asked_again_over_tcp_of_the_same_upstream() -> None:
    ex = Exchange(forward_state(), now=0.0, rng=random.Random(1))
    step = ex.start()
    assert isinstance(step, Send)
    retry = ex.answered(step, answer_for(step, tc=True), now=0.01)
    assert isinstance(retry, Send) and retry.tcp and retry.upstream is step.upstream


def test_everything_failing_ends_in_servfail_with_the_reason_within_the_attempts() -> None:
    fwd = forward_state()
    ex = Exchange(fwd, now=0.0, rng=random.Random(1))
    step = ex.start()
    t = 0.0
    sends = 0
    while isinstance(step, Send):
        sends += 1
        t += 0.001  # refused at once: ICMP port unreachable on a connected socket
        step = ex.failed(step, "connection refused (nothing listens there)", now=t)
    assert sends == 4  # CoreDNS's max_connect_attempts default: twice the upstreams
    assert step.rcode == dns.rcode.SERVFAIL and step.ede is not None
    assert "connection refused" in (step.error or "")


def test_overall_deadline_bounds_the_exchange() -> None:
    ex = Exchange(forward_state(upstreams="192.0.2.1 192.0.2.2 192.0.2.3 192.0.2.4"),
                          now=0.0, rng=random.Random(1))
    step = ex.start()
    assert isinstance(step, Send)
    step = ex.failed(step, "timeout", now=2.0)
    step = ex.failed(step, "timeout", now=4.0)  # type: ignore[arg-type]
    assert isinstance(step, Send) and step.timeout == pytest.approx(1.0)  # 5 s overall
    step = ex.failed(step, "timeout", now=5.0)
    assert isinstance(step, Done) and step.rcode == dns.rcode.SERVFAIL


def test_down_upstreams_are_skipped_and_failfast_answers_at_once() -> None:
    fwd = forward_state("failfast_all_unhealthy_upstreams\n max_fails 2")
    fwd.upstreams[0].fails = 3
    ex = Exchange(fwd, now=0.0, rng=random.Random(1))
    step = ex.start()
    assert isinstance(step, Send) and str(step.upstream.upstream) == "192.0.2.2:53"
    fwd.upstreams[1].fails = 3
    done = Exchange(fwd, now=0.0, rng=random.Random(1)).start()
    assert isinstance(done, Done) and (done.error or "").startswith("all upstreams are down")
    assert fwd.broken == 1


def test_all_down_with_failfast_off_still_tries_one_as_coredns() -> None:
    fwd = forward_state("max_fails 1\n failfast_all_unhealthy_upstreams off")
    for state in fwd.upstreams:
        state.fails = 2
    step = Exchange(fwd, now=0.0, rng=random.Random(1)).start()
    assert isinstance(step, Send)


def test_failures_count_towards_down_and_any_reply_heals() -> None:
    fwd = forward_state("max_fails 2\n failfast_all_unhealthy_upstreams off", upstreams="192.0.2.1")
    ex = Exchange(fwd, now=0.0, rng=random.Random(1))
    step = ex.start()
    for t in (1.0, 2.0):
        assert isinstance(step, Send)
        step = ex.failed(step, "timeout", now=t)
    assert fwd.upstreams[0].fails == 2 and not fwd.upstreams[0].down(2)
    fwd.upstreams[0].fails = 3
    assert fwd.upstreams[0].down(2)
    ex = Exchange(fwd, now=10.0, rng=random.Random(1))
    step = ex.start()
    assert isinstance(step, Send)
    ex.answered(step, answer_for(step, rcode=dns.rcode.SERVFAIL), now=10.1)
    assert fwd.upstreams[0].fails == 0  # CoreDNS: any reply, SERVFAIL too, means alive


def test_failover_rcodes_try_the_next_upstream_and_keep_the_last_reply() -> None:
    ex = Exchange(forward_state("failover SERVFAIL"), now=0.0, rng=random.Random(1))
    step = ex.start()
    assert isinstance(step, Send)
    step = ex.answered(step, answer_for(step, rcode=dns.rcode.SERVFAIL), now=0.1)
    assert isinstance(step, Send) and str(step.upstream.upstream) == "192.0.2.2:53"
    done = ex.answered(step, answer_for(step, rcode=dns.rcode.SERVFAIL), now=0.2)
    while isinstance(done, Send):
        done = ex.answered(done, answer_for(done, rcode=dns.rcode.SERVFAIL), now=0.3)
    assert done.reply is not None and done.reply.rcode() == dns.rcode.SERVFAIL


def test_round_robin_rotates_the_first_upstream() -> None:
    text = ". {\n forward . 192.0.2.1 192.0.2.2 192.0.2.3 {\n policy round_robin\n }\n}\n"
    fwd = ForwardState.of(config.loads(text, "Corefile", env={}).blocks[0].forwards[0])
    firsts = []
    for _ in range(4):
        step = Exchange(fwd, now=0.0, rng=random.Random(1)).start()
        assert isinstance(step, Send)
        firsts.append(str(step.upstream.upstream))
    assert firsts == ["192.0.2.1:53", "192.0.2.2:53", "192.0.2.3:53", "192.0.2.1:53"]


def test_random_policy_spreads_over_upstreams() -> None:
    text = ". {\n forward . 192.0.2.1 192.0.2.2 192.0.2.3\n}\n"
    fwd = ForwardState.of(config.loads(text, "Corefile", env={}).blocks[0].forwards[0])
    rng = random.Random(7)
    seen = set()
    for _ in range(50):
        step = Exchange(fwd, now=0.0, rng=rng).start()
        assert isinstance(step, Send)
        seen.add(str(step.upstream.upstream))
    assert len(seen) == 3


def test_scrub_drops_records_another_zone_owns_and_keeps_the_answer() -> None:
    text = ". {\n forward . 192.0.2.10\n}\ncorp.example {\n forward . 192.0.2.20\n}\n"
    router = Router(Zone(b) for b in config.loads(text, "Corefile", env={}).blocks)
    catch_all = router.route(wire.name_to_wire("x.public.test."))
    assert catch_all is not None
    clean = reply(query("x.public.test."), "x.public.test. 60 IN CNAME db.corp.example.",
                  authority=("public.test. 60 IN NS ns.public.test.",))
    clean.additional.append(dns.rrset.from_text("ns.public.test.", 60, "IN", "A", "192.0.2.53"))
    done = Done(indexed(clean))
    assert scrub(done, catch_all, router.route) is done  # nothing foreign: untouched, no rewrite
    hostile = reply(query("x.public.test."), "x.public.test. 60 IN CNAME db.corp.example.",
                    authority=("corp.example. 60 IN NS ns.public.test.",))
    hostile.additional.append(dns.rrset.from_text("ns.public.test.", 60, "IN", "A", "192.0.2.53"))
    hostile.additional.append(dns.rrset.from_text("DB.Corp.Example.", 60, "IN", "A", "192.0.2.66"))
    scrubbed = scrub(Done(indexed(hostile)), catch_all, router.route).reply
    assert scrubbed is not None
    out = dns.message.from_wire(scrubbed.data)
    assert out.answer == hostile.answer  # the answer section answers the question: kept
    assert out.authority == [] and [r.name.to_text() for r in out.additional] == ["ns.public.test."]
    assert scrubbed.owners == (b"\x02ns\x06public\x04test\x00",)


def test_failing_fast_is_the_default_and_a_probe_reply_ends_it() -> None:
    """One blackholed upstream, no options: the first query makes its 2 attempts; once the
    upstream is known down (more than max_fails failures in a row, probes included), every
    query is answered at once with the reason, until a health probe gets a reply."""
    fwd = forward_state("", upstreams="192.0.2.1")
    assert fwd.spec.failfast_all_unhealthy and fwd.spec.max_fails == 2
    ex = Exchange(fwd, now=0.0, rng=random.Random(1))
    step = ex.start()
    sends = 0
    t = 0.0
    while isinstance(step, Send):
        sends += 1
        t += 2.0
        step = ex.failed(step, "timeout after 2s", now=t)
        if sends == 1:  # the health probe started by that failure times out too (health_checks.py)
            fwd.upstreams[0].failed("health probe: timeout after 1s", fwd.spec.max_fails)
    assert sends == 2 and step.rcode == dns.rcode.SERVFAIL
    state = fwd.upstreams[0]
    assert state.down(fwd.spec.max_fails)
    for later in (4.01, 30.0, 300.0):  # no attempt at all: SERVFAIL with the reason at once
        done = Exchange(fwd, now=later, rng=random.Random(1)).start()
        assert isinstance(done, Done) and done.ede is not None
        assert done.ede[0] == EDE_NO_REACHABLE_AUTHORITY
        assert done.ede[1].startswith("all upstreams are down (192.0.2.1:53: timeout after 2s)")
    state.replied(301.0)  # a probe got a reply: in service at once
    assert isinstance(Exchange(fwd, now=301.1, rng=random.Random(1)).start(), Send)


def test_a_single_lost_packet_does_not_mark_a_healthy_upstream_down() -> None:
    fwd = forward_state("", upstreams="192.0.2.1")
    ex = Exchange(fwd, now=0.0, rng=random.Random(1))
    step = ex.start()
    assert isinstance(step, Send)
    step = ex.failed(step, "timeout after 2s", now=2.0)  # one datagram lost
    assert isinstance(step, Send) and not step.upstream.down(fwd.spec.max_fails)
    ex.answered(step, answer_for(step, "example.org. 60 IN A 192.0.2.80"), now=2.01)
    assert fwd.upstreams[0].fails == 0


def test_silent_upstreams_are_what_a_live_readiness_check_probes() -> None:
    zone = zones(". {\n forward . 192.0.2.1 192.0.2.2\n}\n").route(b"\x00")
    assert zone is not None
    first, second = zone.forwards[0].upstreams
    assert [u for _, u in liveness.unheard(zone, 100.0, 3.0)] == [first, second]  # never heard from
    first.replied(98.0)
    assert [u for _, u in liveness.unheard(zone, 100.0, 3.0)] == [second]
    second.fails = 3  # marked down: its own probes already run
    assert liveness.unheard(zone, 100.0, 3.0) == []
    assert [u for _, u in liveness.unheard(zone, 101.5, 3.0)] == [first]


@pytest.mark.parametrize(("after", "kept"), [
    ("forward . 192.0.2.1\n cache 60\n errors", True),                   # nothing the cache depends on
    ("forward . 192.0.2.1\n cache 30", False),                            # its settings
    ("forward . 192.0.2.99\n cache 60", False),                           # its upstreams
    ("forward . 192.0.2.1 {\n except a.example\n }\n cache 60", False),  # which names go upstream
    ("forward . 192.0.2.1\n cache 60\n private_addresses", False),       # what may be stored
    ("forward . 192.0.2.1\n cache 60\n rewrite name a.example b.example", False),  # what is asked
    ("forward . 192.0.2.1\n cache 60\n loadbalance\n hosts {\n  10.0.0.1 h.example\n }", True),  # not cached
])
def test_a_reload_keeps_a_cache_only_when_its_content_would_be_the_same(after: str, kept: bool) -> None:
    def block(body: str) -> config.Block:
        return config.loads(f". {{\n {body}\n}}\n", "Corefile", env={}).blocks[0]

    before = block("forward . 192.0.2.1\n cache 60")
    assert (cache_key(before) == cache_key(block(after))) is kept


def test_relayed_referral_and_stale_answers_obey_the_ttl_cap() -> None:
    """`cache 30`: a referral (not cached) keeps no TTL above 30 in any section, glue included;
    a stale answer gets RFC 8767's 30 s or the cap if lower; every answer has RA, none AA."""
    router = zones(". {\n cache 10 {\n  serve_stale\n }\n forward . 192.0.2.10\n}\n")
    zone = router.route(b"\x00")
    assert zone is not None and zone.cache is not None
    client = query("www.sub.example.org.")
    q = wire.parse_query(to_wire(client))
    assert q is not None
    referral = reply(client, authority=("sub.example.org. 3600 IN NS ns.sub.example.org.",))
    referral.additional.append(dns.rrset.from_text("ns.sub.example.org.", 3600, "IN", "A", "192.0.2.53"))
    referral.flags = (referral.flags | dns.flags.AA) & ~dns.flags.RA  # an authoritative-only server
    done = Done(indexed(referral))
    assert zone.store(q, done, 100.0) is None  # no answer, no SOA: not cached
    out = dns.message.from_wire(zone.render(q, done, None, 100.0))
    assert [r.ttl for r in out.authority + out.additional] == [10, 10]
    assert out.flags & dns.flags.RA and not out.flags & dns.flags.AA
    answer = reply(client, "www.sub.example.org. 3600 IN A 192.0.2.1")
    answer.flags |= dns.flags.AA
    entry = zone.store(q, Done(indexed(answer)), 100.0)
    assert entry is not None
    stale = zone.stale(q, 111.0)
    assert stale is not None
    stale_msg = dns.message.from_wire(stale)
    assert [r.ttl for r in stale_msg.answer] == [10]
    assert stale_msg.flags & dns.flags.RA and not stale_msg.flags & dns.flags.AA
