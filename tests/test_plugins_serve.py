"""hosts, template, rewrite and loadbalance end to end: `splitdns serve`, `dig`, a scripted upstream."""

from __future__ import annotations

from pathlib import Path

import dns.message
import dns.name
import dns.rdataclass
import dns.rdatatype

from tests.helpers import query
from tests.helpers import wire as to_wire
from tests.support.hostile import ask_udp
from tests.support.processes import dig, poll_until, scripted_upstream
from tests.support.resolver import splitdns_serve

UPSTREAM = [
    {"suffix": "svc.acme.internal", "qtype": "A", "records": ["{qname} 60 IN A 10.8.0.5"]},
    {"suffix": "lb.example.org", "qtype": "A",
     "records": [f"lb.example.org. 60 IN A 10.0.0.{i}" for i in (1, 2, 3)]},
    {"suffix": ".", "qtype": "A", "records": ["{qname} 60 IN A 192.0.2.80"]},
    {"suffix": ".", "records": [], "authority": [
        ". 60 IN SOA a.root-servers.net. nstld.verisign-grs.com. 1 1800 900 604800 60"]},
]


def seen(up: object, qtype: str) -> list[str]:
    return [q["qname"].lower() for q in up.queries() if q["qtype"] == qtype]  # type: ignore[attr-defined]


def test_hosts_answers_from_its_file_and_inline_and_follows_the_file(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("10.1.0.1 app.corp.example app\n")
    with scripted_upstream(tmp_path, UPSTREAM) as up, splitdns_serve(tmp_path, f""". {{
    hosts {hosts} {{
        10.1.0.9 pinned.corp.example
        ttl 30
        reload 200ms
        fallthrough
    }}
    forward . {up.target}
}}
""") as r:
        got = dig("app.corp.example", server="127.0.0.1", port=r.port)
        assert got.status == "NOERROR" and got.answers == [("app.corp.example.", 30, "A", "10.1.0.1")]
        assert "aa" in got.flags
        assert dig("pinned.corp.example", server="127.0.0.1", port=r.port).rdata == ["10.1.0.9"]
        # A name with an entry of the other family only: NODATA, not forwarded.
        assert dig("app.corp.example", "AAAA", server="127.0.0.1", port=r.port).answers == []
        # No entry: fallthrough to the upstream.
        assert dig("other.example.org", server="127.0.0.1", port=r.port).rdata == ["192.0.2.80"]
        assert seen(up, "A") == ["other.example.org."] and seen(up, "AAAA") == []
        same = to_wire(query("app.corp.example"))  # the same bytes again: the memo answers

        def address() -> str:
            raw, _ = ask_udp(r.port, same)
            assert raw is not None
            return str(next(iter(dns.message.from_wire(raw).answer[0])))

        assert [address() for _ in range(3)] == ["10.1.0.1"] * 3
        # The file changes: within the reload interval the new address answers, memo or not.
        hosts.write_text("10.1.0.2 app.corp.example app\n# moved\n")
        poll_until("the new hosts entry", 5.0, lambda: address() == "10.1.0.2" or None)
        assert dig("app.corp.example", server="127.0.0.1", port=r.port).rdata == ["10.1.0.2"]


def test_template_stops_aaaa_lookups_while_a_goes_upstream(tmp_path: Path) -> None:
    with scripted_upstream(tmp_path, UPSTREAM) as up, splitdns_serve(tmp_path, f"""svc.acme.internal {{
    cache 30
    template IN AAAA {{
        rcode NOERROR
    }}
    forward . {up.target}
}}
""") as r:
        for _ in range(3):  # the first made by the template, the next from its kept wire bytes
            got = dig("db.svc.acme.internal", "AAAA", server="127.0.0.1", port=r.port)
            assert got.status == "NOERROR" and got.answers == [] and "aa" in got.flags
            raw, _ = ask_udp(r.port, to_wire(query("db.svc.acme.internal", "AAAA", qid=7)))
            assert raw is not None and dns.message.from_wire(raw).id == 7
        assert dig("db.svc.acme.internal", server="127.0.0.1", port=r.port).rdata == ["10.8.0.5"]
        assert seen(up, "AAAA") == [] and seen(up, "A") == ["db.svc.acme.internal."]


def test_rewrite_sends_the_tunnel_name_upstream_and_answers_the_short_one(tmp_path: Path) -> None:
    with scripted_upstream(tmp_path, UPSTREAM) as up, splitdns_serve(tmp_path, f"""short {{
    cache 30
    rewrite name suffix .short .svc.acme.internal answer auto
    forward . {up.target}
}}
""") as r:
        for _ in range(2):  # a miss, then a cache hit: both under the name the client asked
            got = dig("db.short", server="127.0.0.1", port=r.port)
            assert got.status == "NOERROR"
            assert got.question == [("db.short.", "A")]
            assert got.answers == [("db.short.", got.answers[0][1], "A", "10.8.0.5")]
        assert seen(up, "A") == ["db.svc.acme.internal."]


def test_loadbalance_rotates_cached_answers_including_repeats_of_the_same_bytes(tmp_path: Path) -> None:
    with scripted_upstream(tmp_path, UPSTREAM) as up, splitdns_serve(tmp_path, f""". {{
    cache 30
    loadbalance
    forward . {up.target}
}}
""") as r:
        data = to_wire(query("lb.example.org"))
        firsts = []
        for _ in range(7):  # the same bytes: after the first, answered by the memo
            raw, _ = ask_udp(r.port, data)
            assert raw is not None
            rrset = dns.message.from_wire(raw).find_rrset(
                dns.message.ANSWER, dns.name.from_text("lb.example.org"), dns.rdataclass.IN, dns.rdatatype.A)
            assert sorted(str(rd) for rd in rrset) == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
            firsts.append(str(next(iter(rrset))))
        assert len(seen(up, "A")) == 1
        # Every address comes first, in turn.
        assert sorted(set(firsts)) == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
        assert all(firsts[i] != firsts[i + 1] for i in range(len(firsts) - 1))
        assert dig("lb.example.org", server="127.0.0.1", port=r.port).rdata[0] in firsts
