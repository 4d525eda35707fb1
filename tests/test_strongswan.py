"""strongSwan: the `resolve` plugin's file and the tunnel state from one look (tables)."""

from __future__ import annotations

import pytest

from splitdns.core import strongswan as ss
from splitdns.core.tunnel import DOWN, UP

# What charon's resolve plugin (5.9.8) writes for two servers of one IKE SA.
WRITTEN = "nameserver 192.0.2.1   # by strongSwan\nnameserver 2001:db8::53   # by strongSwan\n"


@pytest.mark.parametrize(("text", "servers"), [
    (WRITTEN, ("192.0.2.1", "2001:db8::53")),
    ("", ()),  # the plugin took its last line out: the file stays, empty
    ("# a comment\nsearch corp.example\noptions ndots:2\nnameserver 192.0.2.1\n", ("192.0.2.1",)),
    ("nameserver 192.0.2.1   # by strongSwan\n" * 2, ("192.0.2.1",)),  # two SAs, same server
    ("nameserver fe80::1%ipsec0\n", ("fe80::1",)),
])
def test_the_nameserver_lines(text: str, servers: tuple[str, ...]) -> None:
    assert ss.nameservers(text, "f") == servers


@pytest.mark.parametrize(("text", "error"), [
    ("nameserver\n", "f line 1: expected `nameserver ADDRESS`"),
    ("\nnameserver dns.example\n", "f line 2: 'dns.example' is not an IP address"),
    ("nameserver 192.0.2.1 192.0.2.2\n", "f line 1: expected `nameserver ADDRESS`"),
])
def test_a_broken_nameserver_line_is_an_error_naming_file_and_line(text: str, error: str) -> None:
    with pytest.raises(ss.ResolveFileError) as caught:
        ss.nameservers(text, "f")
    assert str(caught.value) == error


UP_SEEN = ss.Seen("/r", servers=("192.0.2.1",), ifindex=7, up=True, written_under=7)


@pytest.mark.parametrize(("seen", "status", "reason"), [
    (UP_SEEN, UP, "an IKE SA handed DNS (ipsec0)"),
    (ss.Seen("/r", servers=("192.0.2.1",), ifindex=7, up=True), UP, "an IKE SA handed DNS"),
    (ss.Seen("/r"), DOWN, "no file at /r: charon's resolve plugin has written no DNS server yet"),
    (ss.Seen("/r", error="/r line 1: x"), DOWN, "/r line 1: x"),
    (ss.Seen("/r", servers=(), ifindex=7, up=True), DOWN,
     "/r lists no name server: no IKE SA with DNS is up"),
    (ss.Seen("/r", servers=("192.0.2.1",)), DOWN, "interface ipsec0 is gone or down (charon stopped"),
    (ss.Seen("/r", servers=("192.0.2.1",), ifindex=7, up=False), DOWN, "interface ipsec0 is gone or down"),
    (ss.Seen("/r", servers=("192.0.2.1",), ifindex=9, up=True, written_under=7), DOWN,
     "/r was written before charon last started"),
])
def test_the_tunnel_state_from_one_look(seen: ss.Seen, status: str, reason: str) -> None:
    state = ss.state_of(seen)
    assert state.status == status
    assert state.reason.startswith(reason), state.reason


def test_the_zone_s_domains_are_its_own_and_servers_stay_known_while_down() -> None:
    up = ss.state_of(UP_SEEN, ("corp.example.",))
    assert up.up and up.pushed.servers == (("192.0.2.1", 53),) and up.pushed.domains == ("corp.example.",)
    gone = ss.state_of(ss.Seen("/r", servers=("192.0.2.1",)))
    assert not gone.up and gone.pushed.servers == (("192.0.2.1", 53),)
