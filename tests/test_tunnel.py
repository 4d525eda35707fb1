"""What OpenVPN pushed, parsed from its own words (recorded from OpenVPN 2.6.14 in the lab)."""

from __future__ import annotations

from splitdns.commands import openvpn_hook
from splitdns.core import openvpn, tunnel

DHCP_PUSH = {  # LAB_PUSH=dhcp: what a classic dhcp-option push looks like
    "script_type": "up", "dev": "tun0", "foreign_option_1": "dhcp-option DNS 192.168.240.1",
    "foreign_option_2": "dhcp-option DOMAIN svc.acme.internal", "ifconfig_local": "10.8.0.2",
}
DNS_PUSH = {  # LAB_PUSH=dns
    "script_type": "up", "dns_search_domain_1": "svc.acme.internal",
    "dns_server_1_address_1": "192.168.240.1", "dns_server_1_resolve_domain_1": "svc.acme.internal",
    "foreign_option_1": "dhcp-option DNS 192.168.240.1",
    "foreign_option_2": "dhcp-option DOMAIN-SEARCH svc.acme.internal",
}
RICH_PUSH = {  # two servers, ports, IPv6; foreign options lose the ports
    "dns_search_domain_1": "svc.acme.internal", "dns_search_domain_2": "corp.acme.internal",
    "dns_server_1_address_1": "192.168.240.1", "dns_server_1_address_2": "192.168.240.2",
    "dns_server_1_address_3": "fd00::53", "dns_server_1_dnssec": "no", "dns_server_1_port_2": "5353",
    "dns_server_1_port_3": "53", "dns_server_1_resolve_domain_1": "svc.acme.internal",
    "dns_server_1_resolve_domain_2": "acme.internal", "dns_server_2_address_1": "192.168.240.3",
    "foreign_option_1": "dhcp-option DOMAIN-ROUTE acme.internal",
    "foreign_option_3": "dhcp-option DNS 192.168.240.1", "foreign_option_4": "dhcp-option DNS 192.168.240.2",
    "foreign_option_5": "dhcp-option DNS6 fd00::53", "foreign_option_6": "dhcp-option DNS 192.168.240.3",
}


def test_dhcp_option_push() -> None:
    pushed = openvpn.from_env(DHCP_PUSH)
    assert pushed.servers == (("192.168.240.1", 53),)
    assert pushed.domains == ("svc.acme.internal.",)


def test_dns_push_prefers_the_26_variables() -> None:
    pushed = openvpn.from_env(DNS_PUSH)
    assert pushed.servers == (("192.168.240.1", 53),)
    assert pushed.domains == ("svc.acme.internal.",) and pushed.search == ("svc.acme.internal.",)


def test_rich_push_keeps_ports_and_only_the_lowest_server() -> None:
    pushed = openvpn.from_env(RICH_PUSH)
    assert pushed.servers == (("192.168.240.1", 53), ("192.168.240.2", 5353), ("fd00::53", 53))
    assert pushed.domains == ("svc.acme.internal.", "acme.internal.")
    assert pushed.search == ("svc.acme.internal.", "corp.acme.internal.")


def test_openvpn_260_spellings() -> None:
    env = {"dns_server_1_address4": "192.168.240.1", "dns_server_1_port4": "5353",
           "dns_server_1_address6": "fd00::53"}
    assert openvpn.from_env(env).servers == (("192.168.240.1", 5353), ("fd00::53", 53))


def test_foreign_options_sort_numerically_not_as_text() -> None:
    env = {f"foreign_option_{n}": f"dhcp-option DNS 192.0.2.{n}" for n in (10, 2, 1)}
    assert [s for s, _ in openvpn.from_env(env).servers] == ["192.0.2.1", "192.0.2.2", "192.0.2.10"]


def test_garbage_is_ignored() -> None:
    env = {"foreign_option_1": "dhcp-option DNS not-an-ip", "foreign_option_2": "route 10.0.0.0",
           "dns_server_1_address_1": "bogus"}
    assert openvpn.from_env(env) == tunnel.Pushed()


def test_push_reply_from_the_client_log() -> None:
    line = ("PUSH: Received control message: 'PUSH_REPLY,route 192.168.240.0 255.255.255.0,"
            "dhcp-option DNS 192.168.240.1,dhcp-option DOMAIN svc.acme.internal,route-gateway 10.8.0.1,"
            "topology subnet,ping 2,ping-restart 10,ifconfig 10.8.0.2 255.255.255.0'")
    pushed = openvpn.from_push_reply(line)
    assert pushed is not None and pushed.servers == (("192.168.240.1", 53),)
    modern = openvpn.from_push_reply(
        "PUSH_REPLY,dns server 9 address 192.168.240.9,dns server 5 address "
        "192.168.240.1 [fd00::53]:5353,dns server 5 resolve-domains svc.acme.internal")
    assert modern is not None
    assert modern.servers == (("192.168.240.1", 53), ("fd00::53", 5353))  # lowest id wins, not push order
    assert modern.domains == ("svc.acme.internal.",)
    assert openvpn.from_push_reply("Initialization Sequence Completed") is None


def test_management_state_lines() -> None:
    pushed = openvpn.from_env(DHCP_PUSH)
    connected = "1796031187,CONNECTED,SUCCESS,10.8.0.2,10.99.0.2,1194,,"
    up = openvpn.state_from_line(connected.split(","), pushed)
    assert up is not None and up.up
    down = openvpn.state_from_line(["1796031188", "RECONNECTING", "ping-restart", "", "", "", "", ""], pushed)
    assert down is not None and not down.up and "RECONNECTING: ping-restart" in down.describe()
    assert openvpn.state_from_line(["1796031187", "ASSIGN_IP", "", "10.8.0.2", "", "", "", ""],
                                   pushed) is None


def test_state_file_round_trip_and_malformed_files_read_as_down() -> None:
    state = tunnel.TunnelState(tunnel.UP, "up script ran", openvpn.from_env(RICH_PUSH))
    assert openvpn.from_json(openvpn.to_json(state)) == state
    assert openvpn.from_json({"status": "sideways"}).status == tunnel.DOWN
    assert openvpn.from_json([1, 2]).status == tunnel.DOWN


def test_hook_maps_script_types() -> None:
    up = openvpn_hook.state_of(DHCP_PUSH)
    assert up is not None and up.up
    down = openvpn_hook.state_of({**DHCP_PUSH, "script_type": "down", "signal": "sigterm"})
    assert down is not None and down.status == tunnel.DOWN and "sigterm" in down.reason
    assert openvpn_hook.state_of({"script_type": "ipchange"}) is None
