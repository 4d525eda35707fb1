"""Corefile meaning: zones, ports, directives and their options, and the errors for bad ones."""

from __future__ import annotations

from pathlib import Path

import dns.name
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splitdns import config, directives
from splitdns.core.exchange import ForwardState
from splitdns.directives._args import domain_name
from splitdns.errors import ConfigError
from tests.lab.configs import SCENARIO_COREFILE


def load(text: str, port: int = 53) -> config.Config:
    return config.loads(text, "Corefile", default_port=port, env={})


def test_scenario_corefile_means_what_it_says() -> None:
    cfg = load(SCENARIO_COREFILE)
    catch_all, tunnel = cfg.blocks
    assert catch_all.zones == (".",) and tunnel.zones == ("svc.acme.internal.",)
    assert [str(u) for u in catch_all.forwards[0].upstreams] == ["10.100.0.10:53"]
    assert [str(u) for u in tunnel.forwards[0].upstreams] == ["192.168.240.1:53"]
    assert catch_all[directives.CACHE] is not None and catch_all[directives.CACHE].success_ttl == 30
    assert catch_all[directives.CACHE].denial_ttl == 30  # `cache 30` caps negative answers too
    assert catch_all[directives.ERRORS] is not None
    # No `bind`: loopback only, a deliberate difference from CoreDNS.
    assert set(cfg.listeners()) == {("127.0.0.1", 53), ("::1", 53)}


@pytest.mark.parametrize(("key", "zones", "port"), [
    ("Example.ORG", ("example.org.",), 53),
    ("example.org.", ("example.org.",), 53),
    ("dns://example.org:1053", ("example.org.",), 1053),
    (".", (".",), 53),
    (":1053", (".",), 1053),
    ("10.0.0.0/8", ("10.in-addr.arpa.",), 53),
    ("10.1.0.0/23", ("0.1.10.in-addr.arpa.", "1.1.10.in-addr.arpa."), 53),
    ("2001:db8::/32", ("8.b.d.0.1.0.0.2.ip6.arpa.",), 53),
])
def test_zone_keys_are_normalised(key: str, zones: tuple[str, ...], port: int) -> None:
    block = load(f"{key} {{\n forward . 192.0.2.1\n}}\n").blocks[0]
    assert (block.zones, block.port) == (zones, port)


def test_dns_port_flag_changes_the_default_port_only() -> None:
    cfg = load("a.example {\n forward . 192.0.2.1\n}\nb.example:5353 {\n forward . 192.0.2.1\n}\n", 1053)
    assert [b.port for b in cfg.blocks] == [1053, 5353]


@pytest.mark.parametrize(("text", "line", "message"), [
    ("example.org {\n forward . 192.0.2.1\n}\nEXAMPLE.org. {\n forward . 192.0.2.2\n}\n",
     4, "cannot serve dns://example.org.:53 - it is already defined at Corefile:1"),
    # once per address: two blocks may share a zone and port only on different addresses
    ("a.org {\n bind 127.0.0.1 127.0.0.2\n}\na.org {\n bind 127.0.0.2\n}\n",
     4, "cannot serve dns://a.org.:53 - it is already defined at Corefile:1"),
    ("example.org {\n kubernetes cluster.local\n}\n", 2,
     "'kubernetes' is a CoreDNS plugin that splitdns does not implement; splitdns supports: "),
    ("example.org {\n frobnicate\n}\n", 2,
     "unknown directive 'frobnicate'; splitdns supports: autopath, bind"),
    ("example.org {\n cache 30\n cache 60\n}\n", 3, "only once per server block (first at Corefile:2)"),
    ("tls://example.org {\n errors\n}\n", 1, "tls:// servers are not supported"),
    ("example.org: {\n errors\n}\n", 1, "a ':' with no port after it"),
    ("example.org:99999 {\n errors\n}\n", 1, "is not a port number"),
    ("example.org {\n forward\n}\n", 2, "forward: wrong number of arguments"),
    ("example.org {\n forward . ns1.example.net\n}\n", 2, "hostnames are not supported"),
    ("example.org {\n forward . grpc://192.0.2.1\n}\n", 2, "grpc:// upstreams are not supported"),
    ("example.org {\n forward . 192.0.2.1 {\n  policy fastest\n }\n}\n", 3,
     "unknown policy 'fastest'; use one of random, round_robin, sequential"),
    ("example.org {\n forward . 192.0.2.1 {\n  max_fails -1\n }\n}\n", 3, "out of range"),
    ("example.org {\n forward . 192.0.2.1 {\n  health_check soon\n }\n}\n", 3, "is not a duration"),
    ("example.org {\n forward . 192.0.2.1 {\n  failover NOERROR\n }\n}\n", 3, "cannot trigger a failover"),
    ("example.org {\n forward . 192.0.2.1 {\n  tls_name x\n }\n}\n", 3,
     "forward: unknown option 'tls_name'; supported: except, force_tcp"),
    ("example.org {\n forward . 192.0.2.1 {\n  failfast_all_unhealthy_upstreams no\n }\n}\n", 3,
     "'no' is neither `on` nor `off`"),
    ("example.org {\n cache 0\n}\n", 2, "cache TTL: 0 is out of range"),
    ("example.org {\n cache {\n  prefetch 10 1m 5%\n }\n}\n", 3, "prefetch PERCENTAGE: 5 is out of range"),
    ("example.org {\n cache {\n  prefetch 10 1m 20\n }\n}\n", 3, "needs its percent sign"),
    ("example.org {\n forward . 192.0.2.1 {\n  polcy random\n }\n}\n", 3,
     "forward: unknown option 'polcy' (did you mean `policy`?); supported: except"),
    ("example.org {\n cache {\n  servfail 10m\n }\n}\n", 3, "servfail: at most 5m"),
    ("example.org {\n bind eth0\n forward . 192.0.2.1\n}\n", 2, "is not an IP address"),
    ("a.example {\n bind 127.0.0.2\n}\nb.example {\n errors\n}\n", 4, "same bind"),
    ("example.org {\n errors\n forward . openvpn\n}\n", 3, "needs an `openvpn` directive in the same block"),
])
def test_errors_name_file_line_and_what_is_wrong(text: str, line: int, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(text)
    assert str(caught.value).startswith(f"Corefile:{line}: ")
    assert caught.value.where is not None and caught.value.where.line == line  # for `check`'s findings
    assert message in caught.value.message


def test_forward_targets_and_options() -> None:
    text = """example.org {
        forward . 192.0.2.1 192.0.2.2:5353 [2001:db8::1]:53 dns://192.0.2.3 192.0.2.1 {
            except internal.example.org Other.Example.org
            policy sequential
            max_fails 0
            health_check 1s no_rec domain example.net
            force_tcp
            max_concurrent 100
            failover SERVFAIL REFUSED
            failfast_all_unhealthy_upstreams
            read_timeout 500ms
            expire 1m30s
        }
    }"""
    spec = load(text).blocks[0].forwards[0]
    assert [str(u) for u in spec.upstreams] == [
        "192.0.2.1:53", "192.0.2.2:5353", "[2001:db8::1]:53", "192.0.2.3:53"]  # duplicate dropped
    assert spec.excepts == ("internal.example.org.", "other.example.org.")
    assert (spec.policy, spec.max_fails, spec.health_check) == ("sequential", 0, 1.0)
    assert (spec.health_check_rd, spec.health_check_name) == (False, "example.net.")
    assert spec.force_tcp and spec.failfast_all_unhealthy and spec.max_concurrent == 100
    assert spec.failover == frozenset({2, 5})
    assert (spec.read_timeout, spec.expire) == (0.5, 90.0)
    assert ForwardState.of(spec).attempts() == 8  # CoreDNS: twice the number of upstreams


@pytest.mark.parametrize(("option", "fails_fast"), [
    ("", True),                                           # our default (CoreDNS: off)
    ("failfast_all_unhealthy_upstreams", True),           # CoreDNS's spelling still means on
    ("failfast_all_unhealthy_upstreams on", True),
    ("failfast_all_unhealthy_upstreams off", False),      # CoreDNS's behaviour back
])
def test_failing_fast_is_on_unless_turned_off(option: str, fails_fast: bool) -> None:
    spec = load(f"example.org {{\n forward . 192.0.2.1 {{\n  {option}\n }}\n}}\n").blocks[0].forwards[0]
    assert spec.failfast_all_unhealthy is fails_fast


def test_several_forward_lines_keep_file_order() -> None:
    text = "example.org {\n forward sub.example.org 192.0.2.2\n forward . 192.0.2.1\n}\n"
    origins = [f.origin for f in load(text).blocks[0].forwards]
    assert origins == ["sub.example.org.", "."]


def test_forward_reads_nameservers_from_a_resolv_conf(tmp_path: Path) -> None:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("search example.org\nnameserver 192.0.2.53\nnameserver 2001:db8::53\noptions ndots:5\n")
    spec = load(f"example.org {{\n forward . {resolv}\n}}\n").blocks[0].forwards[0]
    assert [str(u) for u in spec.upstreams] == ["192.0.2.53:53", "[2001:db8::53]:53"]


def test_resolv_conf_without_nameserver_is_an_error(tmp_path: Path) -> None:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("search example.org\n")
    with pytest.raises(ConfigError, match="has no usable nameserver line"):
        load(f"example.org {{\n forward . {resolv}\n}}\n")


def test_catch_all_to_a_resolv_conf_naming_ourselves_is_refused(tmp_path: Path) -> None:
    """The resolv.conf trap: under dnsPolicy None, /etc/resolv.conf names 127.0.0.1, i.e. us."""
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\noptions ndots:5\n")
    with pytest.raises(ConfigError) as caught:
        load(f".:53 {{\n errors\n forward . {resolv}\n}}\n")
    message = str(caught.value)
    assert message.startswith("Corefile:3: forward . sends queries to 127.0.0.1:53")
    assert f"(read from {resolv}, line 1: `nameserver 127.0.0.1`)" in message
    assert "this server itself" in message
    assert "kube-dns" in message  # the fix, not only the diagnosis


def test_forward_to_ourselves_on_another_port_is_fine() -> None:
    cfg = load(".:1053 {\n forward . 127.0.0.1:53\n}\n")
    assert str(cfg.blocks[0].forwards[0].upstreams[0]) == "127.0.0.1:53"


def test_cache_options() -> None:
    text = """. {
        cache 300 example.org {
            success 5000 600 10
            denial 2000 60
            servfail 2s
            serve_stale 1h verify
        }
    }"""
    spec = load(text).blocks[0][directives.CACHE]
    assert spec is not None
    assert spec.zones == ("example.org.",)
    assert (spec.success_capacity, spec.success_ttl, spec.success_min_ttl) == (4864, 600, 10)
    assert (spec.denial_capacity, spec.denial_ttl) == (1792, 60)  # a multiple of 256
    assert (spec.servfail_ttl, spec.serve_stale, spec.serve_stale_verify) == (2.0, 3600.0, True)


def test_bind_listens_where_asked() -> None:
    cfg = load(". {\n bind 127.0.0.2 ::1\n forward . 192.0.2.1\n}\n")
    assert set(cfg.listeners()) == {("127.0.0.2", 53), ("::1", 53)}


def test_limits_have_defaults_and_can_be_set() -> None:
    assert load(". {\n forward . 192.0.2.1\n}\n").limits.pending == 1000
    cfg = load(". {\n limits {\n  pending 10\n  tcp_buffer 16KiB\n  cache_memory 8MB\n }\n"
               " forward . 192.0.2.1\n}\n")
    assert (cfg.limits.pending, cfg.limits.tcp_buffer, cfg.limits.cache_memory) == (10, 16384, 8_000_000)
    with pytest.raises(ConfigError, match="Corefile:3: cache_memory: 'lots' is not a size"):
        load(". {\n limits {\n  cache_memory lots\n }\n}\n")


@pytest.mark.parametrize(("key", "why"), [
    ("a..b", "an empty label"),
    ("x" * 64 + ".example", "longer than 63"),
    (".".join(["abcdefghi"] * 26), "longer than 255 octets"),
    ("café.example", "xn-- form"),
    ("a b.example", "not allowed in a zone name"),
])
def test_bad_zone_names_say_what_breaks(key: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why) as err:
        config.loads(f'"{key}" {{\n forward . 192.0.2.1\n}}\n', "Corefile", env={})
    assert str(err.value).startswith("Corefile:1: ")


@given(st.lists(st.text(alphabet="abcXYZ019-_", min_size=1, max_size=63), min_size=1, max_size=4),
       st.booleans())
@settings(max_examples=200, deadline=None)
def test_zone_names_normalise_as_dnspython_does(labels: list[str], dot: bool) -> None:
    text = ".".join(labels) + ("." if dot else "")
    assert domain_name(text) == dns.name.from_text(text.lower()).to_text()


def test_keys_on_several_ports_make_one_block_per_port_as_in_coredns() -> None:
    loaded = config.loads("a.example:53 b.example:54 c.example {\n    forward . 192.0.2.1\n}\n")
    assert [(b.zones, b.port) for b in loaded.blocks] == [(("a.example.", "c.example."), 53),
                                                          (("b.example.",), 54)]
    assert loaded.blocks[0].forwards == loaded.blocks[1].forwards


@pytest.mark.parametrize(("target", "said"), [
    ("::1:5300", "forward: ::1:5300 is ambiguous: for port 5300 of ::1 write [::1]:5300; for the address "
                 "::1:5300 on port 53 write [::1:5300]"),
    ("127.0.0.1:99999", "forward: 127.0.0.1:99999: port 99999 out of range (1 to 65535)"),
    ("[::1]:70000", "forward: [::1]:70000: port 70000 out of range (1 to 65535)"),
    ("127.0.0.1:0", "forward: 127.0.0.1:0: port 0 out of range (1 to 65535)"),
])
def test_an_address_that_cannot_mean_what_it_says_is_refused_with_the_form_to_write(
        target: str, said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(f".:53 {{\n forward . {target}\n}}\n")
    assert str(caught.value) == f"Corefile:2: {said}"


@pytest.mark.parametrize(("target", "host", "port"), [
    ("[::1]:5300", "::1", 5300), ("[::1:5300]", "::1:5300", 53), ("2001:db8::53", "2001:db8::53", 53)])
def test_ipv6_targets_in_brackets_or_without_a_port_like_group_load(
        target: str, host: str, port: int) -> None:
    up = load(f".:53 {{\n forward . {target}\n}}\n").blocks[0].forwards[0].upstreams[0]
    assert (up.host, up.port) == (host, port)
