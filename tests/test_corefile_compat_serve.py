"""`cache { prefetch }` and `forward { next }` end to end: a real `splitdns serve`, real `dig`,
scripted upstreams on 127.0.0.x. The decisions themselves are transcripts in
tests/test_corefile_compat.py; here the shell must act on them.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

from tests.support.hostile import metric, metrics
from tests.support.processes import dig, free_port, scripted_upstream
from tests.support.resolver import splitdns_serve

TTL = 4  # seconds: the upstream's TTL, short so the test sees two prefetches in one run


def test_prefetch_asks_the_upstream_again_before_expiry_and_clients_never_miss(tmp_path: Path) -> None:
    rules = [{"suffix": ".", "records": [f"hot.example. {TTL} IN A 192.0.2.80"]}]
    mport = free_port("127.0.0.1")
    text = """. {{
        prometheus 127.0.0.1:{mport}
        cache {{
            success 1024 3600 1
            prefetch 2 10s 50%
        }}
        forward . {target}
    }}"""
    with scripted_upstream(tmp_path, rules) as up, \
            splitdns_serve(tmp_path, text.format(target=up.target, mport=mport)) as r:
        answers: list[tuple[str, list[str], int]] = []
        end = time.monotonic() + 3 * TTL  # bounded: about 12 s, some 40 lookups
        while time.monotonic() < end and len(answers) < 100:
            out = dig("hot.example", server="127.0.0.1", port=r.port)
            answers.append((out.status, out.rdata, out.answers[0][1] if out.answers else -1))
            time.sleep(0.2)
        asked = [q["t"] for q in up.queries() if q.get("qname") == "hot.example."]
        values = metrics(mport)
    assert all(status == "NOERROR" and rdata == ["192.0.2.80"] for status, rdata, _ in answers), answers
    # The upstream was asked again while the entry still had time left: each gap between two
    # asks is shorter than the TTL (the refresh starts at 50% of it, at most 2 s left).
    gaps = [b - a for a, b in itertools.pairwise(asked)]
    assert len(asked) >= 3 and all(gap < TTL for gap in gaps), gaps
    # Clients never saw a miss: one miss in all (the first lookup), every other answer a hit.
    assert metric(values, "coredns_cache_misses_total") == 1
    assert metric(values, "coredns_cache_hits_total") == len(answers) - 1
    assert metric(values, "coredns_cache_prefetch_total") == len(asked) - 1
    print(f"prefetch: {len(answers)} lookups over {3 * TTL} s, upstream asked {len(asked)} times, "
          f"gaps {[round(g, 2) for g in gaps]} s (TTL {TTL} s), misses 1")


def test_without_prefetch_the_same_clients_see_a_miss_each_ttl(tmp_path: Path) -> None:
    # The control: the same traffic without `prefetch` misses once per expiry.
    rules = [{"suffix": ".", "records": [f"hot.example. {TTL} IN A 192.0.2.80"]}]
    mport = free_port("127.0.0.1")
    text = """. {{
        prometheus 127.0.0.1:{mport}
        cache {{
            success 1024 3600 1
        }}
        forward . {target}
    }}"""
    with scripted_upstream(tmp_path, rules) as up, \
            splitdns_serve(tmp_path, text.format(target=up.target, mport=mport)) as r:
        end = time.monotonic() + 2 * TTL + 1
        while time.monotonic() < end:
            assert dig("hot.example", server="127.0.0.1", port=r.port).rdata == ["192.0.2.80"]
            time.sleep(0.2)
        assert metric(metrics(mport), "coredns_cache_misses_total") >= 3
        assert len([q for q in up.queries() if q.get("qname") == "hot.example."]) >= 3


def test_next_hands_an_nxdomain_to_the_next_forward_line(tmp_path: Path) -> None:
    first = [{"suffix": "old.example", "records": ["host.old.example. 60 IN A 192.0.2.1"]},
             {"suffix": ".", "rcode": "NXDOMAIN"}]
    second = [{"suffix": ".", "records": ["{qname} 60 IN A 192.0.2.2"]}]
    text = """. {{
        forward . {first} {{
            next NXDOMAIN
        }}
        forward . {second}
    }}"""
    with scripted_upstream(tmp_path, first, "127.0.0.21") as a, \
            scripted_upstream(tmp_path, second, "127.0.0.22") as b, \
            splitdns_serve(tmp_path, text.format(first=a.target, second=b.target)) as r:
        kept = dig("host.old.example", server="127.0.0.1", port=r.port)
        handed = dig("new.example", server="127.0.0.1", port=r.port)
        assert (kept.status, kept.rdata) == ("NOERROR", ["192.0.2.1"])
        assert (handed.status, handed.rdata) == ("NOERROR", ["192.0.2.2"])
        assert [q["qname"] for q in a.queries() if "qname" in q] == ["host.old.example.", "new.example."]
        assert [q["qname"] for q in b.queries() if "qname" in q] == ["new.example."]


def test_prefetch_in_a_rewriting_block_asks_the_rewritten_name(tmp_path: Path) -> None:
    # A prefetch goes upstream as a miss would: under the name `rewrite` makes of the client's.
    rules = [{"suffix": ".", "records": [f"{{qname}} {TTL} IN A 192.168.240.10"]}]
    text = """svc.acme.internal short {{
        rewrite name suffix .short .svc.acme.internal answer auto
        cache {{
            success 1024 3600 1
            prefetch 1 10s 50%
        }}
        forward . {target}
    }}"""
    with scripted_upstream(tmp_path, rules) as up, \
            splitdns_serve(tmp_path, text.format(target=up.target)) as r:
        answers = []
        end = time.monotonic() + 2 * TTL
        while time.monotonic() < end and len(answers) < 60:
            out = dig("db.short", server="127.0.0.1", port=r.port)
            answers.append((out.status, out.rdata, out.question))
            time.sleep(0.2)
        asked = [q["qname"] for q in up.queries() if "qname" in q]
    assert all(a == ("NOERROR", ["192.168.240.10"], [("db.short.", "A")]) for a in answers), answers
    assert len(asked) >= 2 and set(asked) == {"db.svc.acme.internal."}, asked
