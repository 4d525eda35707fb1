"""`private_addresses` (catalogue I3): what leaves a reply, what stays, and the Corefile side."""

from __future__ import annotations

import ipaddress
import struct

import dns.message
import dns.rdatatype
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splitdns import config, directives
from splitdns.codec import reply as replies
from splitdns.codec import wire
from splitdns.core.decisions import scrub
from splitdns.core.exchange import Done
from splitdns.core.routing import Router
from splitdns.core.zone import Zone
from splitdns.directives.private import DEFAULT_NETWORKS
from splitdns.errors import ConfigError
from splitdns.shell import http
from tests.helpers import indexed, query, reply
from tests.helpers import wire as to_wire

COREFILE = """. {
    private_addresses {
        allow home.example
    }
    forward . 192.0.2.10
}
corp.example {
    forward . 192.0.2.20
}
"""


def zones() -> tuple[Zone, Zone]:
    router = Router(Zone(b) for b in config.loads(COREFILE, "Corefile", env={}).blocks)
    catch_all = router.route(wire.name_to_wire("x.public.test."))
    tunnel = router.route(wire.name_to_wire("api.corp.example."))
    assert catch_all is not None and tunnel is not None
    return catch_all, tunnel


def filtered(zone: Zone, msg: dns.message.Message) -> tuple[dns.message.Message, list[str]]:
    done, removed = zone.without_private(Done(indexed(msg)))
    assert done.reply is not None
    return dns.message.from_wire(done.reply.data), removed


def addresses(msg: dns.message.Message) -> list[str]:
    return sorted(rd.to_text() for rrset in msg.answer for rd in rrset)


def test_private_addresses_leave_and_public_ones_stay() -> None:
    catch_all, _ = zones()
    name = "v4.public.test."
    up = reply(query(name), *(f"{name} 60 IN A {a}" for a in
                              ("127.0.0.1", "10.1.2.3", "169.254.169.254", "192.0.2.7")))
    out, removed = filtered(catch_all, up)
    assert addresses(out) == ["192.0.2.7"]
    assert sorted(removed) == ["10.1.2.3", "127.0.0.1", "169.254.169.254"]
    assert catch_all.stats.private_removed == 3


def test_an_answer_left_without_addresses_is_nodata() -> None:
    catch_all, _ = zones()
    name = "v6.public.test."
    up = reply(query(name, "AAAA"), f"{name} 60 IN AAAA ::ffff:127.0.0.1", f"{name} 60 IN AAAA fd00::1")
    out, removed = filtered(catch_all, up)
    assert out.rcode() == 0 and out.answer == [] and len(removed) == 2


def test_allowed_zones_other_blocks_and_clean_replies_are_untouched() -> None:
    catch_all, tunnel = zones()
    lan = reply(query("nas.home.example."), "nas.home.example. 60 IN A 192.168.1.10")
    done = Done(indexed(lan))
    assert catch_all.without_private(done)[0] is done  # allowed: the same reply, not a rewrite
    inside = Done(indexed(reply(query("api.corp.example."), "api.corp.example. 60 IN A 10.8.0.5")))
    assert tunnel.without_private(inside)[0] is inside  # the tunnel block has no directive
    public = Done(indexed(reply(query("x.public.test."), "x.public.test. 60 IN A 192.0.2.1")))
    assert catch_all.without_private(public)[0] is public


def test_a_cname_into_private_space_loses_the_address_but_keeps_the_chain() -> None:
    catch_all, _ = zones()
    up = reply(query("x.public.test."), "x.public.test. 60 IN CNAME db.corp.example.",
               "db.corp.example. 60 IN A 10.8.0.5")
    out, removed = filtered(catch_all, up)
    assert removed == ["10.8.0.5"] and [r.rdtype for r in out.answer] == [dns.rdatatype.CNAME]


def edges() -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Each default network's first and last address, and the addresses just outside."""
    out = []
    for net in map(ipaddress.ip_network, DEFAULT_NETWORKS):
        first, last = int(net.network_address), int(net.broadcast_address)
        top = 2 ** net.max_prefixlen - 1
        for value in (first - 1, first, last, last + 1):
            if 0 <= value <= top:
                out.append(ipaddress.ip_address(value) if net.version == 4 else ipaddress.IPv6Address(value))
    return out


Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@given(st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6), st.sampled_from(edges())))
@settings(max_examples=500, deadline=None)
def test_the_integer_check_agrees_with_ipaddress(address: Address) -> None:
    catch_all, _ = zones()
    assert catch_all.private is not None
    nets = [ipaddress.ip_network(n) for n in DEFAULT_NETWORKS]
    expected = any(address.version == n.version and address in n for n in nets)
    assert catch_all.private.private(address.packed) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("private_addresses 10.0.0.0/33", "'10.0.0.0/33' is not a network"),
    ("private_addresses {\n  deny x\n }", "unknown option 'deny'; supported: allow"),
    ("private_addresses {\n  allow\n }", "wrong number of arguments"),
    ("private_addresses\n private_addresses", "only once per server block"),
])
def test_corefile_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        config.loads(f". {{\n {text}\n forward . 192.0.2.1\n}}\n", "Corefile", env={})
    assert str(err.value).startswith("Corefile:")


def test_explicit_networks_replace_the_default_set() -> None:
    cfg = config.loads(". {\n private_addresses 198.18.0.0/15\n forward . 192.0.2.1\n}\n", "Corefile", env={})
    spec = cfg.blocks[0][directives.PRIVATE_ADDRESSES]
    assert spec is not None and spec.networks == ("198.18.0.0/15",) and spec.allow == ()


@pytest.mark.parametrize(("host", "status"), [
    ("127.0.0.1:9153", 200), ("localhost:9153", 200), ("[::1]:9153", 200), ("127.0.0.1", 200),
    ("rebind.attacker.test:9153", 403), ("LOCALHOST.attacker.test", 403), (None, 200),
])
def test_loopback_endpoints_refuse_a_foreign_host(host: str | None, status: int) -> None:
    head = b"GET /health HTTP/1.1\r\n" + (f"Host: {host}\r\n".encode() if host else b"") + b"\r\n"
    routes: dict[str, http.Handler] = {"/health": lambda _: (200, "text/plain", b"OK")}
    assert http._dispatch(head, routes, strict_host=True)[0] == status
    assert http._dispatch(head, routes, strict_host=False)[0] == 200  # pod-IP listeners


def with_broken_caa(msg: dns.message.Message, owner: bytes) -> bytes:
    """The reply plus one additional CAA record whose rdata dnspython refuses."""
    data = bytearray(to_wire(msg))
    arcount = int.from_bytes(data[10:12], "big")
    data[10:12] = (arcount + 1).to_bytes(2, "big")
    return bytes(data) + owner + struct.pack("!HHIH", 257, 1, 60, 1) + b"\x00"


def test_a_reply_dnspython_cannot_rewrite_is_refused_not_passed_on(monkeypatch: pytest.MonkeyPatch) -> None:
    catch_all, _ = zones()
    up = reply(query("v4.public.test.", edns=-1), "v4.public.test. 60 IN A 127.0.0.1")
    assert replies.read_canonical(with_broken_caa(up, b"\x00")) is None  # the reader asks dnspython
    # Were the reader ever to let through what dnspython refuses, the rewrite meets it:
    monkeypatch.setattr(replies, "_dnspython_reads", lambda *_: True)
    broken = replies.read_canonical(with_broken_caa(up, b"\x00"))
    assert broken is not None
    done, removed = catch_all.without_private(Done(broken))
    assert done.reply is None and done.error is not None and "could not be rewritten" in done.error
    assert removed == []
    router = Router([catch_all, *zones()[1:]])
    foreign = replies.read_canonical(with_broken_caa(reply(query("x.public.test.", edns=-1),
                                                   "x.public.test. 60 IN A 192.0.2.1"),
                                             wire.name_to_wire("corp.example.")))
    assert foreign is not None
    scrubbed = scrub(Done(foreign), catch_all, router.route)
    assert scrubbed.reply is None and scrubbed.error is not None
