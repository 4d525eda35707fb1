"""`cache { prefetch }` and `forward { next }` end to end: a real `splitdns serve`, real `dig`,
scripted upstreams on 127.0.0.x. The decisions themselves are transcripts in
tests/test_corefile_compat.py; here the shell must act on them. Prefetch's timing (asked again
before expiry, no client ever misses; the control without it) is tested in process against a
fake clock (tests/test_server_inprocess.py).
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.processes import dig, scripted_upstream
from tests.support.resolver import splitdns_serve

TTL = 4  # seconds: the upstream's TTL, short so the test sees two prefetches in one run


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
