"""Hostile catalogue A: spoofing and reply matching.

Real resolver process, scripted upstreams on 127.0.0.x that also forge (see the rule format
in tests/support/scripted_upstream/__init__.py). Each test asserts the catalogue's pass criterion and
prints its figure (`pytest -s`). A1-A7 are in `make test` (and so in CI); A9, a flood of
100,000 spoofed replies, is a load run: `@pytest.mark.hostile` (`make test-hostile`).
"""

from __future__ import annotations

import itertools
import random
import socket
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dns.message
import dns.rdatatype
import pytest

from tests.helpers import query
from tests.support.hostile import (
    Split,
    ask_udp,
    figure,
    names_seen,
    rcode_of,
    rdata,
    split_dns,
    udp_burst,
    wire_of,
)
from tests.support.scripted_upstream import POISON_A, POISON_AAAA

GENUINE_A = "192.0.2.1"
EVIL = [POISON_A, POISON_AAAA]


@pytest.fixture
def split(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Split]:
    """split_dns with the catch-all's rules (and Corefile options) from the any_rules marker."""
    marker = request.node.get_closest_marker("any_rules")
    assert marker is not None
    with split_dns(tmp_path, any_rules=marker.args[0], **marker.kwargs) as s:
        yield s


def every_rdata(msg: dns.message.Message) -> list[str]:
    return [rd.to_text() for section in (msg.answer, msg.authority, msg.additional)
            for rrset in section for rd in rrset]


# --- A1 ------------------------------------------------------------------------------------

FORGE_ALL = {"wrong_id": 1, "wrong_port": 1, "wrong_addr": 1, "wrong_question": 1, "wrong_qtype": 1,
             "wrong_qclass": 1, "qr_clear": 1}
REACH_SOCKET = 5  # wrong_port and wrong_addr never reach the connected socket: the kernel drops them
A1_RULES = [
    {"suffix": "public.test", "qtype": "HTTPS", "delay_ms": 200, "forge": FORGE_ALL,
     "records": ['{qname} 60 IN HTTPS 1 . alpn="h2"']},
    {"suffix": "public.test", "qtype": "A", "delay_ms": 200, "forge": FORGE_ALL,
     "records": ["{qname} 60 IN A 192.0.2.1"]},
    {"suffix": "public.test", "qtype": "AAAA", "delay_ms": 200, "forge": FORGE_ALL,
     "records": ["{qname} 60 IN AAAA 2001:db8::1"]},
]


@pytest.mark.any_rules(A1_RULES)
def test_a1_forgery_matrix(split: Split) -> None:
    """7 forged variants before every genuine reply: none accepted, the genuine one always is."""
    before = split.mismatched()
    asked = 0
    for i in range(4):
        for rdtype in ("A", "AAAA", "HTTPS"):
            name = f"www{i}.public.test."
            msg = split.ask(name, rdtype)
            asked += 1
            assert msg.rcode() == 0, f"{name} {rdtype}: {msg}"
            got = rdata(msg)
            assert not set(got) & set(EVIL), f"{name} {rdtype}: poison served: {got}"
            if rdtype == "A":
                assert got == [GENUINE_A]
            elif rdtype == "AAAA":
                assert got == ["2001:db8::1"]
            elif rdtype == "HTTPS":
                assert got == ['1 . alpn="h2"'], f"{name} HTTPS: {msg}"
            # The cache holds the genuine answer: asked again, no upstream query, same data.
            again = split.ask(name.upper(), rdtype)
            assert rdata(again) == got
    upstream_queries = len(names_seen(split.any))
    counted = split.mismatched() - before
    sent = upstream_queries * sum(FORGE_ALL.values())
    figure("A1", f"{sent} forged replies sent ({len(FORGE_ALL)} kinds), {counted:.0f} reached the "
                 f"socket and were dropped and counted, 0 accepted; {asked} genuine answers served")
    assert upstream_queries == asked  # one upstream query per question: cache hits for the rest
    assert counted == upstream_queries * REACH_SOCKET


# --- A2 ------------------------------------------------------------------------------------

@pytest.mark.any_rules([{"suffix": "burst.public.test", "delay_ms": 300,
                         "records": ["{qname} 60 IN A 192.0.2.1"]},
                        {"suffix": ".", "records": ["{qname} 60 IN A 192.0.2.1"]}])
def test_a2_source_port_entropy(split: Split) -> None:
    port = split.r.port
    with_socket = [query(f"s{i}.seq.public.test.", qid=i) for i in range(2000)]
    for msg in with_socket:
        data, _ = ask_udp(port, msg)
        assert data is not None
    burst = [wire_of(query(f"b{i}.burst.public.test.", qid=i)) for i in range(200)]
    outcomes = udp_burst(port, burst, per_socket=True, timeout=3)
    assert all(o.rcode == "NOERROR" for o in outcomes)

    seen = split.any.queries()
    seq = [int(q["src"].rsplit(":", 1)[1]) for q in seen if q.get("qname", "").endswith("seq.public.test.")]
    par = [int(q["src"].rsplit(":", 1)[1]) for q in seen if q.get("qname", "").endswith("burst.public.test.")]
    assert len(seq) == 2000 and len(par) == 200
    fresh = sum(1 for i, p in enumerate(seq) if p not in seq[max(0, i - 100):i])
    distinct = len(set(seq))
    figure("A2", f"sequential: {distinct} distinct ports in 2000 queries, {fresh / 20:.1f} % not among "
                 f"the previous 100; 200 in flight at once: {len(set(par))} distinct ports")
    assert len(set(par)) == 200  # no two in-flight queries share a port
    assert fresh >= 0.95 * 2000
    assert distinct >= 1500


# --- A4 ------------------------------------------------------------------------------------

def spelled(name: str, rng: random.Random) -> str:
    return "".join(c.upper() if rng.random() < 0.5 else c for c in name)


@pytest.mark.any_rules([{"suffix": ".", "delay_ms": 300, "records": ["{qname} 2 IN A 192.0.2.1"]}],
                       cache="cache 300 {\n success 9984 300 1\n }")
def test_a4_birthday_merging_and_herd_at_expiry(split: Split) -> None:
    rng = random.Random(4)
    port = split.r.port

    def herd(clients: int) -> tuple[int, float]:
        spellings = [spelled("hot.public.test.", rng) for _ in range(clients)]
        ids = [rng.randrange(65536) for _ in range(clients)]
        msgs = [wire_of(query(s, qid=i)) for s, i in zip(spellings, ids, strict=True)]
        before = len(split.any.queries())
        outcomes = udp_burst(port, msgs, per_socket=True, timeout=3, extra_replies=True)
        for out, spelling, qid in zip(outcomes, spellings, ids, strict=True):
            assert out.reply is not None, "a client got no answer"
            reply = dns.message.from_wire(out.reply)
            assert reply.id == qid and reply.rcode() == 0 and rdata(reply) == [GENUINE_A]
            assert reply.question[0].name.to_text() == spelling  # its own spelling, byte for byte
        slowest = max(o.latency or 0 for o in outcomes)
        return len(split.any.queries()) - before, slowest

    cold, cold_slowest = herd(200)
    stored = time.monotonic()
    time.sleep(max(0.0, stored + 2.1 - time.monotonic()))  # the entry (TTL 2) has just expired
    hot, hot_slowest = herd(500)
    figure("A4", f"200 clients on a cold name: {cold} upstream query "
                 f"(slowest answer {cold_slowest * 1000:.0f} ms); "
                 f"500 at expiry: {hot} upstream query (slowest {hot_slowest * 1000:.0f} ms); "
                 "every client its own ID and spelling, no SERVFAIL")
    assert cold == 1 and hot == 1


# --- A6 ------------------------------------------------------------------------------------

A6_RULES = [{"qname": "www.public.test", "records": ["www.public.test. 60 IN A 192.0.2.1"],
             "additional": [f"api.corp.example. 3600 IN A {POISON_A}",
                            f"kubernetes.default.svc.cluster.local. 3600 IN A {POISON_A}",
                            "ns1.public.test. 60 IN A 192.0.2.53"],
             "authority": ["corp.example. 3600 IN NS evil.attacker.test.",
                           "public.test. 60 IN NS ns1.public.test."]},
            {"suffix": ".", "records": ["{qname} 60 IN A 192.0.2.1"]}]


@pytest.mark.any_rules(A6_RULES)
def test_a6_out_of_bailiwick_data_is_never_served(split: Split) -> None:
    """The catch-all's upstream may not speak for the tunnel or cluster zones, in any section."""
    first = split.ask("www.public.test.")
    cached = split.ask("WWW.public.test.")
    for msg in (first, cached):
        assert rdata(msg) == [GENUINE_A]
        owners = {rrset.name.to_text().lower() for s in (msg.authority, msg.additional) for rrset in s}
        assert not any(o.endswith(("corp.example.", "cluster.local.")) for o in owners), msg.to_text()
        assert POISON_A not in every_rdata(msg)
        assert "ns1.public.test." in owners  # in-zone data is kept
    api = split.ask("api.corp.example.")
    k8s = split.ask("kubernetes.default.svc.cluster.local.")
    ns = split.ask("corp.example.", "NS")
    assert rdata(api) == ["10.8.0.5"] and rdata(k8s) == ["10.96.0.1"]
    assert "evil.attacker.test." not in ns.to_text()
    assert names_seen(split.tunnel) == ["api.corp.example.", "corp.example."]
    assert names_seen(split.cluster) == ["kubernetes.default.svc.cluster.local."]
    assert names_seen(split.any) == ["www.public.test."]
    figure("A6", "out-of-zone additional/authority records from U-any: 0 served (stripped), 0 cached; "
                 "api.corp.example and kubernetes.default answered by their own upstreams")


# --- hostile-only ----------------------------------------------------------------------------

CHI2_63_P001 = 103.4  # chi-square critical value, 63 degrees of freedom, p = 0.001


@pytest.mark.any_rules([{"suffix": ".", "records": ["{qname} 60 IN A 192.0.2.1"]}], cache="",
                       any_forward="max_fails 0")
def test_a3_upstream_ids_are_random_and_never_the_clients(split: Split) -> None:
    """max_fails 0: on a busy runner a few of 10,000 upstream exchanges time out, and failing fast
    (the default) would then answer the next ones SERVFAIL; this test is about the IDs."""
    n = 10_000
    msgs = [wire_of(query(f"id{i}.public.test.", qid=0x1234)) for i in range(n)]
    # One socket per 500 queries would keep the client ID; udp_burst per_socket sends each as given.
    outcomes: list[Any] = []
    for start in range(0, n, 500):
        outcomes += udp_burst(split.r.port, msgs[start:start + 500], per_socket=True, timeout=3, rate=3000)
    answered = sum(1 for o in outcomes if o.rcode == "NOERROR")
    ids = [q["id"] for q in split.any.queries() if "qname" in q]
    buckets = Counter(i >> 10 for i in ids)
    expected = len(ids) / 64
    chi2 = sum((buckets.get(b, 0) - expected) ** 2 / expected for b in range(64))
    steps = Counter((b - a) & 0xFFFF for a, b in itertools.pairwise(ids))
    top_step = steps.most_common(1)[0][1] / max(1, len(ids) - 1)
    same = ids.count(0x1234)
    # Two clients, same ID and question, at the same moment: each gets exactly its own reply.
    pair = [wire_of(query("pair.public.test.", qid=0x1234)) for _ in range(2)]
    both = udp_burst(split.r.port, pair, per_socket=True, extra_replies=True)
    figure("A3", f"{len(ids)} upstream IDs for {n} client queries all with ID 0x1234 ({answered} answered): "
                 f"{same} equal to it (chance expects {len(ids) / 65536:.2f}), chi-square {chi2:.1f} "
                 f"(64 buckets, limit {CHI2_63_P001}), most common step {top_step * 100:.2f} %")
    assert answered >= 0.999 * n
    assert same <= 3 and chi2 < CHI2_63_P001 and top_step < 0.01
    assert all(o.reply is not None and o.reply[:2] == b"\x12\x34" for o in both)


@pytest.mark.any_rules([{"qname": "late.public.test", "delay_ms": 1250, "repeat": 2,
                         "records": ["{qname} 60 IN A 192.0.2.99"]},
                        {"suffix": ".", "records": ["{qname} 60 IN A 192.0.2.1"]}],
                       cache="", any_forward="read_timeout 500ms\n max_fails 0")
def test_a5_late_and_duplicate_replies_answer_nobody_else(split: Split) -> None:
    """max_fails 0: the late query's own timeouts must not mark U-any down (on a busy runner that
    turned most of the other queries into SERVFAIL, leaving nothing for a late reply to reach)."""
    port = split.r.port
    late_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    late_sock.settimeout(5)
    late_sock.connect(("127.0.0.1", port))  # only the resolver's datagrams (see hostile.ask_udp)
    late_sock.send(wire_of(query("late.public.test.")))
    others = [wire_of(query(f"o{i}.public.test.", qid=i)) for i in range(1500)]
    outcomes = udp_burst(port, others, per_socket=True, rate=500, timeout=2, extra_replies=True)
    wrong = failed = 0
    for out in outcomes:
        assert out.reply is not None
        msg = dns.message.from_wire(out.reply)
        sent = dns.message.from_wire(out.sent)
        if msg.id != sent.id or msg.question != sent.question or "192.0.2.99" in rdata(msg) or \
                any(r.name != sent.question[0].name for r in msg.answer):
            wrong += 1  # another query's reply, or the late one's data
        elif not msg.answer:
            failed += 1  # its own SERVFAIL: a busy runner's upstream missed T_a; not cross-talk
    with late_sock:
        late_status = rcode_of(late_sock.recv(4096))
        late_sock.settimeout(1.5)
        with pytest.raises(TimeoutError):
            late_sock.recv(4096)  # and nothing more: the late and duplicate replies went nowhere
    figure("A5", f"a reply 2.5 x T_a late and sent 3 times, while {len(others)} other queries flowed: "
                 f"{wrong} wrong answers, {failed} SERVFAIL, each client exactly one reply; the late "
                 f"query got {late_status}")
    assert wrong == 0 and late_status == "SERVFAIL"
    assert failed < len(others) / 2  # most were answered: the late replies had answers to go astray to


@pytest.mark.any_rules([{"qname": "x.public.test", "records": ["x.public.test. 60 IN CNAME db.corp.example.",
                                                               f"db.corp.example. 3600 IN A {POISON_A}"]},
                        {"suffix": ".", "records": ["{qname} 60 IN A 192.0.2.1"]}])
def test_a7_cname_across_zones_never_answers_the_other_zone(split: Split) -> None:
    """Policy (documented): the CNAME reply is passed through as the catch-all gave it, since it
    answers x.public.test; the tunnel name itself is only ever answered by the tunnel."""
    x = split.ask("x.public.test.")
    # The catch-all's answer, as it gave it: the CNAME and its target's (U-any's) address.
    assert x.rcode() == 0
    assert sorted((r.name.to_text(), dns.rdatatype.to_text(r.rdtype), [rd.to_text() for rd in r])
                  for r in x.answer) == [("db.corp.example.", "A", [POISON_A]),
                                         ("x.public.test.", "CNAME", ["db.corp.example."])]
    db = split.ask("db.corp.example.")
    # Not from the cache of x's answer: the tunnel's upstream was asked, and its address served.
    assert rdata(db) == ["10.8.0.5"] and names_seen(split.tunnel) == ["db.corp.example."]
    assert names_seen(split.any) == ["x.public.test."]
    figure("A7", f"x.public.test CNAME db.corp.example via U-any passed through ({len(x.answer)} RRsets); "
                 "db.corp.example asked directly: U-tunnel's 10.8.0.5, not U-any's data")


# A8 (0x20 case randomisation) is 'only if built': splitdns does not randomise case (its matching
# ignores case, as CoreDNS's does), so there is no A8 test.


@pytest.mark.hostile
@pytest.mark.any_rules([{"suffix": ".", "delay_ms": 2000, "forge": {"wrong_id": 100_000},
                         "records": ["{qname} 60 IN A 192.0.2.1"]}],
                       any_forward="read_timeout 4s")
def test_a9_flood_of_spoofed_replies(split: Split) -> None:
    before_drops = udp_rcvbuf_errors()
    before = split.mismatched()
    started = time.monotonic()
    msg = split.ask("flood.public.test.")
    elapsed = time.monotonic() - started
    counted = split.mismatched() - before
    kernel_dropped = udp_rcvbuf_errors() - before_drops
    again = split.ask("flood.public.test.")
    figure("A9", f"100000 wrong-ID replies during a 2 s delay: genuine answer after {elapsed:.2f} s, "
                 f"{counted:.0f} counted as mismatched, {kernel_dropped} dropped by the kernel "
                 "(socket buffer full), nothing poisoned")
    assert rdata(msg) == [GENUINE_A] and rdata(again) == [GENUINE_A]
    assert counted + kernel_dropped >= 0.99 * 100_000


def udp_rcvbuf_errors() -> int:
    lines = [ln.split() for ln in Path("/proc/net/snmp").read_text().splitlines() if ln.startswith("Udp:")]
    header, values = lines[0], lines[1]
    return int(values[header.index("RcvbufErrors")])
