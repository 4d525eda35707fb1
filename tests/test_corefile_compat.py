"""Where Corefiles people write met gaps: each now means what it means to CoreDNS, as transcripts
(time passed in, no sockets). The end-to-end halves (prefetch measured, `next` against real
upstreams) are in tests/test_corefile_compat_serve.py.
"""

from __future__ import annotations

from pathlib import Path

import dns.rcode
import pytest

from splitdns import cli, config, directives
from splitdns.codec import entries, wire
from splitdns.core.cache import Cache
from splitdns.core.exchange import Done
from splitdns.core.routing import Router
from splitdns.core.zone import Zone
from splitdns.directives.cache import CacheSpec
from splitdns.directives.logging import LogSpec
from splitdns.errors import ConfigError
from splitdns.kube.check import checker
from splitdns.shell import logs
from tests.helpers import SOA, indexed, query, reply
from tests.helpers import wire as to_wire


def _query(name: str, rdtype: str = "A") -> wire.Query:
    q = wire.parse_query(to_wire(query(name, rdtype)))
    assert q is not None
    return q


# --- syntax ----------------------------------------------------------------------------------

def test_a_directives_brace_may_stand_on_the_next_line() -> None:
    loaded = config.loads(". {\n    forward . 192.0.2.1\n    {\n        policy sequential\n    }\n"
                          "    cache 30\n    {\n        success 2048\n    }\n}\n")
    block = loaded.blocks[0]
    assert block.forwards[0].policy == "sequential"
    assert block[directives.CACHE] is not None and block[directives.CACHE].success_capacity == 2048


def test_a_brace_after_a_directive_that_already_has_a_body_is_still_an_error() -> None:
    with pytest.raises(ConfigError, match="a block needs a name before it"):
        config.loads(". {\n    forward . 192.0.2.1 {\n        policy sequential\n    }\n    {\n    }\n}\n")


# --- RFC 2317 classless reverse zones ---------------------------------------------------------

def test_classless_reverse_keys_are_zone_names_and_route_as_coredns_routes_them() -> None:
    loaded = config.loads("32/27.104.21.172.in-addr.arpa {\n    forward . 192.0.2.27\n}\n"
                          ". {\n    forward . 192.0.2.1\n}\n10.0.0.0/8 {\n    forward . 192.0.2.10\n}\n")
    assert [b.zones for b in loaded.blocks] == [("32/27.104.21.172.in-addr.arpa.",), (".",),
                                                ("10.in-addr.arpa.",)]  # a real network still expands
    zones = {b.zones[0]: Zone(b) for b in loaded.blocks}
    router = Router(zones.values())
    # The parent zone's CNAME (33.104.21.172.in-addr.arpa -> 33.32/27.104.21.172.in-addr.arpa)
    # leads to names under the classless zone: those go to its block, the parent's stay with `.`.
    delegated = router.route(wire.name_to_wire("33.32/27.104.21.172.in-addr.arpa."))
    assert delegated is zones["32/27.104.21.172.in-addr.arpa."]
    assert router.route(wire.name_to_wire("33.104.21.172.in-addr.arpa.")) is zones["."]


def test_a_malformed_network_is_still_an_error() -> None:
    with pytest.raises(ConfigError, match="is not a network"):
        config.loads("10.0.0.0/33 {\n    forward . 192.0.2.1\n}\n")


# --- log and errors ---------------------------------------------------------------------------

@pytest.mark.parametrize(("line", "names", "template"), [
    ("log", (".",), None),
    ("log example.org", ("example.org.",), None),
    ("log . {common}", (".",), None),
    ("log . {combined}", (".",), "{combined}"),
    ('log . "{proto} Request: {name} {type} {>id}"', (".",), "{proto} Request: {name} {type} {>id}"),
    ("log a.example b.example {combined}", ("a.example.", "b.example."), "{combined}"),
])
def test_log_takes_names_and_a_format_as_coredns_does(line: str, names: tuple[str, ...],
                                                      template: str | None) -> None:
    spec = config.loads(f". {{\n    {line} {{\n        class error\n    }}\n}}\n").blocks[0][directives.LOG]
    assert spec is not None
    assert (spec.names, spec.template, spec.classes) == (names, template, frozenset({"error"}))


def test_log_writes_only_the_classes_and_names_it_is_given() -> None:
    """CoreDNS's `class` (success, denial, error) and names: which replies get a line."""
    def spec_of(line: str) -> LogSpec:
        spec = config.loads(f". {{\n    {line}\n}}\n").blocks[0][directives.LOG]
        assert spec is not None
        return spec

    inside, outside = wire.name_to_wire("www.example.org."), wire.name_to_wire("www.example.net.")
    some = spec_of("log example.org {\n        class denial error\n    }")
    assert [some.wants(inside, rcode) for rcode in (dns.rcode.NOERROR, dns.rcode.NXDOMAIN,
                                                     dns.rcode.SERVFAIL, dns.rcode.REFUSED)] == \
        [False, True, True, True]
    assert not some.wants(outside, dns.rcode.NXDOMAIN)
    every = spec_of("log")
    assert every.wants(outside, dns.rcode.NOERROR) and every.wants(inside, dns.rcode.SERVFAIL)


def test_errors_stdout_is_accepted_and_anything_else_named() -> None:
    assert config.loads(". {\n    errors stdout\n}\n").blocks[0][directives.ERRORS] is not None
    with pytest.raises(ConfigError, match="'/var/log/x' is not a log destination"):
        config.loads(". {\n    errors /var/log/x\n}\n")


def test_log_formats_fill_coredns_placeholders() -> None:
    q = _query("example.org.")
    out = to_wire(reply(query("example.org."), "example.org. 30 IN A 192.0.2.1"))
    peer = ("192.0.2.7", 40000)
    common = logs.templated_line(q, peer, "udp", 29, out, 0.25, "{common}")
    assert common == logs.query_line(q, peer, "udp", 29, out, 0.25, False)  # one Common Log Format
    combined = logs.templated_line(q, peer, "udp", 29, out, 0.25, "{combined}")
    assert combined == common + ' "0"'  # + the query's opcode
    custom = logs.templated_line(q, ("2001:db8::1", 53), "tcp", 29, out, 0.25,
                                 "{proto} Request: {name} {type} {>id} {remote} {/meta} {nope}")
    assert custom == f"[INFO] tcp Request: example.org. A {q.id} [2001:db8::1] - {{nope}}"
    v6 = ("2001:db8::1", 40000)  # CoreDNS's log writes an IPv6 client as [2001:db8::1]:40000
    assert logs.query_line(q, v6, "udp", 29, out, 0.25, False) == \
        logs.templated_line(q, v6, "udp", 29, out, 0.25, "{common}")


# --- cache disable ZONES ----------------------------------------------------------------------

def test_cache_disable_success_for_some_zones_only() -> None:
    spec = config.loads(". {\n    cache {\n        disable success internal.example\n"
                        "        disable denial\n    }\n}\n").blocks[0][directives.CACHE]
    assert spec is not None
    cache = Cache(spec)
    for name, cached in (("db.internal.example.", False), ("www.example.org.", True)):
        client = query(name)
        q = wire.parse_query(to_wire(client))
        assert q is not None
        entry = cache.put(q.key, q.name, indexed(reply(client, f"{name} 300 IN A 192.0.2.1")), 0.0)
        assert (entry is not None) == cached, name
    missing = query("nope.example.org.")
    q = wire.parse_query(to_wire(missing))
    assert q is not None
    denial = indexed(reply(missing, rcode=dns.rcode.NXDOMAIN, authority=(SOA,)))
    assert cache.put(q.key, q.name, denial, 0.0) is None  # `disable denial` with no zone: everywhere


# --- cache prefetch (the decision; serve's half is measured end to end) -----------------------

def _stored(cache: Cache, name: str, ttl: int, now: float) -> tuple[wire.Query, entries.Entry]:
    q = _query(name)
    entry = cache.put(q.key, q.name, indexed(reply(query(name), f"{name} {ttl} IN A 192.0.2.1")), now)
    assert entry is not None
    return q, entry


def test_prefetch_parses_coredns_arguments() -> None:
    text = ". {\n    cache {\n        prefetch 2 10m 20%\n    }\n}\n"
    spec = config.loads(text).blocks[0][directives.CACHE]
    assert spec is not None
    assert (spec.prefetch_amount, spec.prefetch_duration, spec.prefetch_percentage) == (2, 600.0, 20)
    default = config.loads(". {\n    cache {\n        prefetch 5\n    }\n}\n").blocks[0][directives.CACHE]
    assert default is not None and (default.prefetch_duration, default.prefetch_percentage) == (60.0, 10)


def test_a_popular_entry_is_prefetched_once_when_its_ttl_runs_low() -> None:
    cache = Cache(CacheSpec(prefetch_amount=3, prefetch_duration=100.0, prefetch_percentage=20))
    q, entry = _stored(cache, "popular.example.", 100, now=0.0)
    # Two asks: not popular yet, even late in the TTL.
    assert not cache.prefetch_due(q.key, entry, 10.0)
    assert not cache.prefetch_due(q.key, entry, 85.0)
    # Third ask at 85 s: popular, and 15 s (<= 20% of 100 s) left: prefetch, once.
    assert cache.prefetch_due(q.key, entry, 85.0)
    assert not cache.prefetch_due(q.key, entry, 86.0)
    # The refreshed reply replaces the entry and stays popular: its next low TTL prefetches again.
    _, fresh = _stored(cache, "popular.example.", 100, now=86.0)
    assert not cache.prefetch_due(q.key, fresh, 100.0)  # 86 s left: too early
    assert cache.prefetch_due(q.key, fresh, 170.0)
    assert cache.prefetches == 2


def test_a_gap_of_duration_resets_popularity_and_an_early_ask_never_prefetches() -> None:
    cache = Cache(CacheSpec(prefetch_amount=2, prefetch_duration=10.0, prefetch_percentage=10))
    q, entry = _stored(cache, "rare.example.", 300, now=0.0)
    assert not cache.prefetch_due(q.key, entry, 100.0)
    assert not cache.prefetch_due(q.key, entry, 200.0)   # 100 s gap >= 10 s: a count of 1 again
    assert not cache.prefetch_due(q.key, entry, 205.0)   # popular now, but 95 s left > 30 s
    assert not cache.prefetch_due(q.key, entry, 272.0)   # 67 s gap: a count of 1 again
    assert cache.prefetch_due(q.key, entry, 275.0)       # popular, 25 s left <= 10% of 300 s


def test_short_ttls_prefetch_at_the_latest_one_second_before_expiry() -> None:
    cache = Cache(CacheSpec(prefetch_amount=1, success_min_ttl=5))
    q, entry = _stored(cache, "short.example.", 5, now=0.0)  # 10% of 5 s is 0.5 s: 1 s wins
    assert not cache.prefetch_due(q.key, entry, 3.9)
    assert cache.prefetch_due(q.key, entry, 4.1)


# --- forward next -----------------------------------------------------------------------------

NEXT = """. {
    forward example.org 192.0.2.9
    forward . 192.0.2.1 {
        next NXDOMAIN SERVFAIL
    }
    forward . 192.0.2.2 {
        next nxdomain
    }
    forward . 192.0.2.3
}
"""


def test_next_hands_listed_rcodes_to_the_next_covering_forward_in_file_order() -> None:
    zone = Zone(config.loads(NEXT).blocks[0])
    first, second, third, last = zone.forwards
    name = wire.name_to_wire("www.example.net.")
    client = query("www.example.net.")

    def done(rcode: int) -> Done:
        return Done(indexed(reply(client, rcode=rcode, authority=(SOA,))))

    assert zone.forward_for(name) is second  # example.org's line does not cover the name
    assert zone.handed_on(second, name, done(dns.rcode.NXDOMAIN)) is third
    assert zone.handed_on(second, name, done(dns.rcode.SERVFAIL)) is third
    assert zone.handed_on(second, name, done(dns.rcode.NOERROR)) is None  # the reply stands
    assert zone.handed_on(third, name, done(dns.rcode.SERVFAIL)) is None  # not in its list
    assert zone.handed_on(third, name, done(dns.rcode.NXDOMAIN)) is last
    assert zone.handed_on(last, name, done(dns.rcode.NXDOMAIN)) is None   # no next: it stands
    assert zone.handed_on(second, name, Done(error="timeout")) is None  # no reply, no hand-over
    assert first is zone.forwards[0]


def test_next_rejects_unknown_rcodes(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="next: unknown rcode 'NOPE'"):
        config.loads(". {\n    forward . 192.0.2.1 {\n        next NOPE\n    }\n}\n")


def test_check_does_not_call_a_line_after_next_unreachable(tmp_path: Path) -> None:
    path = tmp_path / "Corefile"
    path.write_text(NEXT)
    assert [f.message for f in checker.check([str(path)], checker.Options()) if f.code == "SD106"] == []
    path.write_text(NEXT.replace("next", "failover"))  # failover stays within one line's upstreams
    assert len([f for f in checker.check([str(path)], checker.Options()) if f.code == "SD106"]) == 2


# --- false alarms -----------------------------------------------------------------------------

SHARED = """svc.acme.internal {
    forward . 192.0.2.53
}
. {
    forward . 192.0.2.53
}
"""


def test_a_private_zone_and_root_sharing_a_public_upstream_is_no_tunnel(tmp_path: Path) -> None:
    path = tmp_path / "Corefile"
    path.write_text(SHARED)
    assert "SD104" not in [f.code for f in checker.check([str(path)], checker.Options())]


def test_the_same_upstream_routed_through_a_vpn_is_the_tunnel(tmp_path: Path) -> None:
    path = tmp_path / "Corefile"
    path.write_text(SHARED)
    ovpn = tmp_path / "client.ovpn"
    ovpn.write_text("client\ndev tun\nremote 203.0.113.7 1194\nroute 192.0.2.0 255.255.255.0\n")
    found = checker.check([str(path), str(ovpn)], checker.Options())
    assert ("SD104", 5) in [(f.code, f.line) for f in found]


def test_a_stub_only_corefile_is_a_warning_with_its_reason(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "example.server"
    path.write_text("example.org {\n    forward . 192.0.2.1\n}\n")
    assert cli.main(["check", "--brief", str(path)]) == 1
    out = capsys.readouterr().out
    assert "SD103 warning no `.` block" in out and "stub-only server or a piece to import" in out


@pytest.mark.parametrize("text", [
    "tls://.:853 {\n    tls cert.pem key.pem\n    forward . 192.0.2.1\n}\n",
    ". {\n    bind lo\n    forward . tls://192.0.2.1 {\n        tls_servername dns.example\n    }\n}\n",
])
def test_check_for_coredns_reports_nothing_coredns_accepts(tmp_path: Path, text: str) -> None:
    path = tmp_path / "Corefile"
    path.write_text(text)
    found = checker.check([str(path)], checker.Options(resolver="coredns"))
    assert [f.text(False) for f in found if f.severity == "error"] == []
    # The same file for splitdns is refused, so the quiet verdict above is a choice, not blindness.
    assert any(f.code == "SD100" for f in checker.check([str(path)], checker.Options(resolver="splitdns")))


def test_several_log_lines_are_coredns_rules_the_first_whose_names_match_decides() -> None:
    spec = config.loads(". {\n    log a.example {\n        class denial\n    }\n"
                        "    log example {combined}\n}\n").blocks[0][directives.LOG]
    assert spec is not None
    nxdomain, noerror = 3, 0
    assert spec.rule_for(wire.name_to_wire("x.a.example."), noerror) is None  # a.example's: denial only
    assert spec.rule_for(wire.name_to_wire("x.a.example."), nxdomain) is spec
    chosen = spec.rule_for(wire.name_to_wire("b.example."), noerror)
    assert chosen is not None and chosen.template == "{combined}"
    assert spec.rule_for(wire.name_to_wire("b.example.net."), noerror) is None
