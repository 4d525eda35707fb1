"""Which interface a tunnel zone's queries may leave by, and the tunnel canary, as the core
decides them (no sockets, no clock); the `openvpn` and `wireguard` options that turn binding
off or name the interface; what the OpenVPN watcher learns of its interface."""

from __future__ import annotations

import dns.rcode
import pytest

from splitdns import config, directives
from splitdns.codec import wire
from splitdns.core import confinement, liveness
from splitdns.core.tunnel import DOWN, UP, Pushed, TunnelState
from splitdns.core.zone import Zone
from splitdns.directives.openvpn import OpenVPNSpec
from splitdns.directives.wireguard import WireGuardSpec
from splitdns.errors import ConfigError
from splitdns.shell import openvpn
from tests.helpers import query

PUSHED = Pushed((("192.0.2.53", 53),))


def openvpn_block(body: str) -> config.Block:
    text = f"corp.example {{\n openvpn {{\n  state /run/openvpn.json\n{body}\n }}\n}}\n"
    return config.loads(text, read_files=False).blocks[0]


def test_openvpn_binds_to_the_interface_openvpn_names_unless_the_corefile_names_one() -> None:
    up = TunnelState(UP, "up script ran", PUSHED, "tun0")
    assert confinement.confine(up, OpenVPNSpec(state_file="/s")).device == "tun0"
    assert confinement.confine(up, OpenVPNSpec(state_file="/s", interface="tun7")).device == "tun7"
    assert confinement.confine(TunnelState(UP, "", PUSHED), OpenVPNSpec(state_file="/s",
                                                                        interface="tun7")).device == "tun7"


def test_wireguard_binds_to_its_interface() -> None:
    up = TunnelState(UP, "wg-quick up (wg0)", PUSHED)
    assert confinement.confine(up, WireGuardSpec(resolvconf="/run", interface="wg0")).device == "wg0"


def test_binding_off_leaves_the_choice_to_the_routing_table() -> None:
    up = TunnelState(UP, "up script ran", PUSHED, "tun0")
    off = confinement.confine(up, OpenVPNSpec(state_file="/s", bind_to_tunnel=False))
    assert off.up and off.device == ""
    assert confinement.confine(TunnelState(UP, "", PUSHED), OpenVPNSpec(state_file="/s",
                                                                        bind_to_tunnel=False)).up


def test_up_on_an_interface_nobody_named_is_down_for_the_zone() -> None:
    """Binding to nothing would let the routing table choose: the zone fails fast instead."""
    state = confinement.confine(TunnelState(UP, "up (UPDOWN)", PUSHED), OpenVPNSpec(state_file="/s"))
    assert state.status == DOWN and not state.up and state.pushed == PUSHED
    assert "interface NAME" in state.describe()
    zone = Zone(openvpn_block(""))
    liveness.follow_tunnel(zone, state, set())
    q = wire.parse_query(query("db.corp.example.").to_wire())
    assert q is not None
    reply = zone.tunnel_down(q, 0.0)
    assert reply is not None and b"interface nobody named" in reply


def test_a_down_tunnel_stays_down_whatever_the_binding() -> None:
    down = TunnelState(DOWN, "RECONNECTING: ping-restart", PUSHED, "tun0")
    assert confinement.confine(down, OpenVPNSpec(state_file="/s")) == down


def test_the_upstreams_of_the_zone_carry_the_interface() -> None:
    zone = Zone(openvpn_block(""))
    state = confinement.confine(TunnelState(UP, "", PUSHED, "tun0"), OpenVPNSpec(state_file="/s"))
    liveness.follow_tunnel(zone, state, set())
    assert [(str(u.upstream), u.upstream.device) for f in zone.forwards for u in f.upstreams] == \
        [("192.0.2.53:53", "tun0")]
    # The interface changes (OpenVPN reopened another): new upstreams, bound to the new one.
    change = liveness.follow_tunnel(zone, TunnelState(UP, "", PUSHED, "tun1"), set())
    assert change.probe_loops is False
    assert [u.upstream.device for f in zone.forwards for u in f.upstreams] == ["tun1"]
    liveness.follow_tunnel(zone, TunnelState(UP, "", PUSHED, ""), set())
    assert [u.upstream.device for f in zone.forwards for u in f.upstreams] == [None]


# --- the canary ---------------------------------------------------------------------------------

def test_a_canary_is_due_at_every_new_path() -> None:
    up = TunnelState(UP, "", PUSHED, "tun0")
    assert confinement.canary_due(None, up)
    assert confinement.canary_due(TunnelState(), up)
    assert confinement.canary_due(TunnelState(DOWN, "", PUSHED, "tun0"), up)
    assert not confinement.canary_due(up, TunnelState(UP, "another reason", PUSHED, "tun0"))
    assert confinement.canary_due(up, TunnelState(UP, "", PUSHED, "tun1"))
    assert confinement.canary_due(up, TunnelState(UP, "", Pushed((("192.0.2.54", 53),)), "tun0"))
    assert not confinement.canary_due(up, TunnelState(DOWN, "", PUSHED, "tun0"))


def test_the_canary_name_is_under_the_zone() -> None:
    assert confinement.canary_name("corp.example.", "ab12") == "splitdns-canary-ab12.corp.example."
    assert confinement.canary_name(".", "ab12") == "splitdns-canary-ab12."


@pytest.mark.parametrize(("rcode", "error", "status", "said"), [
    (dns.rcode.NXDOMAIN, None, confinement.PASSED, "was answered by 192.0.2.53:53 through tun0"),
    (dns.rcode.NOERROR, None, confinement.PASSED, "was answered by"),
    (dns.rcode.SERVFAIL, None, confinement.FAILED, "failed through tun0: answered SERVFAIL"),
    (dns.rcode.REFUSED, None, confinement.FAILED, "answered REFUSED"),
    (None, "send failed: Network is unreachable", confinement.FAILED,
     "failed through tun0: send failed: Network is unreachable"),
])
def test_a_canary_passes_on_an_answer_from_the_zones_dns(rcode: int | None, error: str | None,
                                                         status: str, said: str) -> None:
    canary = confinement.Canary()
    round_ = canary.start("splitdns-canary-1.corp.example.", "tun0")
    assert canary.status == confinement.PENDING and "has not been answered yet bound to tun0" in canary.reason
    line = canary.answered(round_, rcode, error, "192.0.2.53:53", 1000.0)
    assert canary.status == status and line is not None and said in line and canary.reason == line
    assert canary.outcomes[status] == 1 and canary.answered_at == 1000.0


def test_an_older_canary_does_not_count_and_a_pass_is_latched() -> None:
    canary = confinement.Canary()
    first = canary.start("splitdns-canary-1.corp.example.", "tun0")
    second = canary.start("splitdns-canary-2.corp.example.", "tun0")
    assert canary.answered(first, dns.rcode.NXDOMAIN, None, "x", 1.0) is None
    assert canary.status == confinement.PENDING
    assert canary.answered(second, dns.rcode.NXDOMAIN, None, "x", 2.0) is not None
    assert canary.answered(second, dns.rcode.SERVFAIL, None, "x", 3.0) is None and canary.passed
    canary.stopped("the tunnel is down (RECONNECTING)")
    assert not canary.passed and canary.reason == "no canary while the tunnel is down (RECONNECTING)"
    assert canary.answered(second, dns.rcode.NXDOMAIN, None, "x", 4.0) is None  # too late
    assert canary.outcomes == {confinement.PASSED: 1, confinement.FAILED: 0}


def test_without_binding_the_canary_says_it_proves_the_answer_not_the_path() -> None:
    canary = confinement.Canary()
    canary.start("splitdns-canary-1.corp.example.", "")
    assert "not bound to the tunnel: binding is off" in canary.reason


# --- the directives -----------------------------------------------------------------------------

def test_the_options_and_their_defaults() -> None:
    spec = openvpn_block("")[directives.OPENVPN]
    assert spec is not None and spec.bind_to_tunnel and spec.interface is None
    spec = openvpn_block("  interface tun3\n  bind_to_tunnel off")[directives.OPENVPN]
    assert spec is not None and spec.interface == "tun3" and not spec.bind_to_tunnel
    text = "corp.example {\n wireguard {\n  resolvconf /run\n  bind_to_tunnel off\n }\n}\n"
    wg = config.loads(text, read_files=False).blocks[0][directives.WIREGUARD]
    assert wg is not None and not wg.bind_to_tunnel and wg.interface == "wg0"


@pytest.mark.parametrize(("body", "error"), [
    ("  bind_to_tunnel", "bind_to_tunnel: wrong number of arguments; usage: bind_to_tunnel on|off"),
    ("  bind_to_tunnel maybe", "bind_to_tunnel: say on or off, not 'maybe'"),
    ("  interface tun/0", "openvpn: 'tun/0' is not a network interface name"),
    ("  interface averyveryverylongname", "is not a network interface name"),
    ("  interfaces tun0", "did you mean `interface`?"),
])
def test_option_errors_say_what_and_where(body: str, error: str) -> None:
    with pytest.raises(ConfigError, match=r"Corefile:\d+: ") as err:
        openvpn_block(body)
    assert error in str(err.value)


# --- what the OpenVPN watcher learns of its interface -------------------------------------------

def test_the_watcher_learns_the_interface_from_updown_and_from_the_log() -> None:
    seen: list[TunnelState] = []
    watcher = openvpn.Watcher(OpenVPNSpec(management="127.0.0.1:7505"), seen.append)
    session = openvpn._Session(watcher)
    for line in ("UP", "ENV,dev=tun4", "ENV,foreign_option_1=dhcp-option DNS 192.0.2.53", "ENV,END"):
        session._updown(line)
    assert seen[-1].up and seen[-1].device == "tun4"
    # Attached after the tunnel came up: the state history says CONNECTED first (`state on all`),
    # then the log history (`log on all`) has the PUSH_REPLY, then the interface OpenVPN opened.
    later = openvpn.Watcher(OpenVPNSpec(management="127.0.0.1:7505"), seen.append)
    history = openvpn._Session(later)
    history.history("1700000002,CONNECTED,SUCCESS,10.8.0.2,192.0.2.1,1194,,")
    history.history("1700000001,,PUSH: Received control message: 'PUSH_REPLY,dhcp-option DNS 192.0.2.53'")
    assert not confinement.confine(seen[-1], later.spec).up  # no interface yet: down for the zone
    history.history("1700000001,,TUN/TAP device tun9 opened")
    assert seen[-1].up and seen[-1].device == "tun9"
    assert confinement.confine(seen[-1], later.spec).up
    # The log line out of OpenVPN's history: the interface holding CONNECTED's local address.
    late = openvpn.Watcher(OpenVPNSpec(management="127.0.0.1:7505"), seen.append)
    late.pushed = PUSHED
    openvpn._Session(late).history("1700000002,CONNECTED,SUCCESS,127.0.0.1,192.0.2.1,1194,,")
    assert seen[-1].up and seen[-1].device == "lo"
    assert confinement.device_from_log("2026-12-02 TUN/TAP device tun0 opened") == "tun0"
    assert confinement.device_from_log("TUN/TAP TX queue length set to 1000") is None


def test_the_hook_records_the_interface_in_its_state_file() -> None:
    from splitdns.commands import openvpn_hook
    from splitdns.core import openvpn as tunnel

    state = openvpn_hook.state_of({"script_type": "up", "dev": "tun0",
                                   "foreign_option_1": "dhcp-option DNS 192.0.2.53"})
    assert state is not None and state.device == "tun0"
    assert tunnel.from_json(tunnel.to_json(state)).device == "tun0"
    assert tunnel.from_json({"status": "up", "servers": [], "device": 7}).device == ""
