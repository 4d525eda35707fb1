"""`splitdns check` on wg-quick configs beside the pod's Corefile: WireGuard's traps, each with the
line, what breaks and what to write instead."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from splitdns import cli
from splitdns.kube import tunnels
from splitdns.kube.check import checker
from splitdns.kube.shared import sources
from splitdns.kube.tunnels import wireguard_conf

GOOD = """[Interface]
PrivateKey = yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=
Address = 10.8.0.2/32, fd00:8::2/128
DNS = 192.168.240.1, svc.acme.internal

[Peer]
PublicKey = xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=
AllowedIPs = 192.168.240.0/24
Endpoint = 203.0.113.7:51820
PersistentKeepalive = 25
"""
COREFILE = """.:53 {
    forward . 10.96.0.10
}
svc.acme.internal:53 {
    wireguard {
        resolvconf /run/splitdns
    }
}
"""


def check(tmp_path: Path, conf: str, corefile: str | None = COREFILE) -> list[checker.Finding]:
    (tmp_path / "wg0.conf").write_text(conf)
    paths = [str(tmp_path / "wg0.conf")]
    if corefile is not None:
        (tmp_path / "Corefile").write_text(corefile)
        paths.append(str(tmp_path / "Corefile"))
    return checker.check(paths, checker.Options())


def codes(found: list[checker.Finding]) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in found]


def test_a_good_config_is_clean_and_read_as_wireguard(tmp_path: Path) -> None:
    assert check(tmp_path, GOOD) == []
    formats = tunnels.formats()
    assert sources.kind_of("wg0.conf", GOOD, formats) == "wireguard"
    assert sources.kind_of("client.conf", "client\nremote vpn.example 1194\ndev tun\n", formats) == "openvpn"


def test_a_default_route_takes_the_cluster_dns_and_the_computed_list_leaves_it_out(tmp_path: Path) -> None:
    found = check(tmp_path, GOOD.replace("AllowedIPs = 192.168.240.0/24", "AllowedIPs = 0.0.0.0/0"))
    assert codes(found) == [(8, "SD302")]
    message = found[0].message
    assert "the cluster DNS 10.96.0.10 (forward of block .:53" in message
    assert "kubeadm's default Service range 10.96.0.0/12" in message
    written = message.split("Write instead: AllowedIPs = ", 1)[1]
    nets = [ipaddress.ip_network(n) for n in written.split(", ")]
    service = ipaddress.ip_network("10.96.0.0/12")
    assert not any(n.overlaps(service) for n in nets)
    # Everything else is still routed: the list and the Service range make up the whole space.
    assert sum(n.num_addresses for n in nets) + service.num_addresses == 2 ** 32
    assert ipaddress.ip_address("192.168.240.1") in ipaddress.ip_network("192.168.0.0/16")
    assert any(ipaddress.ip_address("192.168.240.1") in n for n in nets)


def test_a_narrower_allowed_ips_over_the_cluster_dns_is_named_too(tmp_path: Path) -> None:
    found = check(tmp_path, GOOD.replace("192.168.240.0/24", "192.168.240.0/24, 10.96.0.0/16"))
    # The Corefile's catch-all is now forwarded into the tunnel too: SD104, on the Corefile.
    assert codes(found) == [(2, "SD104"), (8, "SD302")]
    assert "10.96.0.10 is behind the tunnel of" in found[0].message
    assert "AllowedIPs 10.96.0.0/16 routes into the tunnel" in found[1].message
    assert found[1].message.endswith("Write instead: AllowedIPs = 192.168.240.0/24")


def test_without_a_corefile_a_default_route_is_still_an_error(tmp_path: Path) -> None:
    found = check(tmp_path, GOOD.replace("192.168.240.0/24", "::/0"), corefile=None)
    assert codes(found) == [(8, "SD302")] and "sends every address into the tunnel" in found[0].message


def test_a_dns_line_naming_the_resolver_itself_is_a_loop(tmp_path: Path) -> None:
    found = check(tmp_path, GOOD.replace("DNS = 192.168.240.1", "DNS = 127.0.0.1"))
    assert codes(found) == [(4, "SD303")]


def test_an_endpoint_only_the_tunnel_resolves(tmp_path: Path) -> None:
    found = check(tmp_path, GOOD.replace("203.0.113.7", "vpn.svc.acme.internal"))
    assert codes(found) == [(9, "SD304")]
    assert "takes its upstreams from WireGuard" in found[0].message
    # Under a zone the cluster DNS answers, a name is fine.
    assert check(tmp_path, GOOD.replace("203.0.113.7", "vpn.example.net")) == []


def test_no_keepalive_is_a_warning(tmp_path: Path) -> None:
    found = check(tmp_path, GOOD.replace("PersistentKeepalive = 25\n", ""))
    assert codes(found) == [(6, "SD305")] and found[0].severity == "warning"


def test_a_dns_server_behind_the_tunnel_marks_the_catch_all_forwarded_into_it(tmp_path: Path) -> None:
    """The catch-all sent to the tunnel's DNS server: SD104, as with an OpenVPN config."""
    found = check(tmp_path, GOOD, COREFILE.replace("forward . 10.96.0.10", "forward . 192.168.240.1"))
    assert "SD104" in [f.code for f in found]


@pytest.mark.parametrize(("networks", "excluded", "expected"), [
    (["0.0.0.0/0"], ["10.96.0.10/32"], None),
    (["10.96.0.0/16", "192.168.240.0/24"], ["10.96.0.0/12"], ["192.168.240.0/24"]),
    (["10.0.0.0/8"], ["10.96.0.0/12"], ["10.0.0.0/10", "10.64.0.0/11", "10.112.0.0/12", "10.128.0.0/9"]),
    (["::/0"], ["10.96.0.0/12"], ["::/0"]),
])
def test_the_computed_allowed_ips(networks: list[str], excluded: list[str],
                                  expected: list[str] | None) -> None:
    nets = [ipaddress.ip_network(n) for n in networks]
    out = wireguard_conf.without(nets, [ipaddress.ip_network(e) for e in excluded])
    if expected is None:  # one address out of the whole space
        assert sum(n.num_addresses for n in out) == 2 ** 32 - 1
        assert not any(ipaddress.ip_address("10.96.0.10") in n for n in out)
    else:
        assert [str(n) for n in out] == expected


def test_explain_says_where_a_wireguard_block_learns_its_upstreams(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "Corefile").write_text(COREFILE)
    assert cli.main(["explain", "db.svc.acme.internal", "-conf", str(tmp_path / "Corefile")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == ("  upstreams: the DNS servers of the wg-quick config's DNS = line, learned at "
                         f"run time (wireguard, {tmp_path / 'Corefile'}:5)")


def test_a_catch_all_that_follows_wireguard_is_the_tunnel_owning_everything(tmp_path: Path) -> None:
    """SD104 on the `wireguard` line, as on an `openvpn` one (check had asserted it was openvpn)."""
    (tmp_path / "Corefile").write_text(". {\n    wireguard {\n        resolvconf /run/splitdns\n    }\n}\n")
    found = checker.check([str(tmp_path / "Corefile")], checker.Options())
    assert [(f.line, f.code) for f in found] == [(2, "SD104")]
    assert "the `.` block takes its upstreams from WireGuard" in found[0].message


def test_no_dns_address_for_a_wireguard_block_is_an_error_and_fine_without_one(tmp_path: Path) -> None:
    no_dns = GOOD.replace("DNS = 192.168.240.1, svc.acme.internal\n", "")
    found = check(tmp_path, no_dns)
    assert codes(found) == [(1, "SD306")]
    assert f"the `wireguard` block at {tmp_path / 'Corefile'}:5" in found[0].message
    # A Corefile that forwards the zone to a fixed address does not need the line.
    assert check(tmp_path, no_dns, COREFILE.replace(
        "wireguard {\n        resolvconf /run/splitdns\n    }", "forward . 192.168.240.1")) == []


def test_a_tunnel_without_ipv6_suggests_filter_aaaa_until_the_zone_has_it(tmp_path: Path) -> None:
    v4_only = GOOD.replace("Address = 10.8.0.2/32, fd00:8::2/128", "Address = 10.8.0.2/32")
    found = check(tmp_path, v4_only)
    assert codes(found) == [(3, "SD307")] and found[0].severity == "info"
    assert "filter_aaaa" in found[0].message
    filtered = COREFILE.replace("    wireguard {", "    filter_aaaa\n    wireguard {")
    assert check(tmp_path, v4_only, filtered) == []


@pytest.mark.parametrize(("old", "new", "line", "said"), [
    ("yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=", "not-a-key", 2,
     "PrivateKey is not a WireGuard key: 44 characters of base64 (32 bytes), as `wg genkey` writes"),
    ("10.8.0.2/32", "10.8.0.2/33", 3, "Address 10.8.0.2/33: prefix length 33 is not 0 to 32"),
    ("192.168.240.0/24", "192.168.240.0/33", 8,
     "AllowedIPs 192.168.240.0/33: prefix length 33 is not 0 to 32"),
    ("203.0.113.7:51820", "203.0.113.7:wg", 9,
     "Endpoint 203.0.113.7:wg: wg is not a port number (1 to 65535)"),
    ("203.0.113.7:51820", "vpn.example.net", 9,
     "Endpoint vpn.example.net has no port: write HOST:PORT (IPv6 as [ADDRESS]:PORT), e.g. :51820"),
    ("DNS = ", "ListenPort = fifty\nDNS = ", 4,
     "ListenPort fifty: not a port number (1 to 65535)"),
])
def test_what_wg_quick_would_refuse_is_a_wg_quick_error_at_its_line(
        tmp_path: Path, old: str, new: str, line: int, said: str) -> None:
    found = check(tmp_path, GOOD.replace(old, new, 1))
    assert [(f.line, f.code, f.message) for f in found if f.code == "SD308"] == [(line, "SD308", said)]
    assert not [f for f in found if f.code == "SD100"]


def test_a_config_starting_with_its_peer_is_wg_quick_not_a_corefile(tmp_path: Path) -> None:
    peer_first = GOOD[GOOD.index("[Peer]"):] + "\n" + GOOD[:GOOD.index("[Peer]")]
    assert sources.kind_of("wg0.conf", peer_first, tunnels.formats()) == "wireguard"
    found = check(tmp_path, peer_first)
    assert (1, "SD308") in codes(found) and "SD100" not in [c for _, c in codes(found)], codes(found)
    assert "[Peer] before any [Interface]" in next(f.message for f in found if f.code == "SD308")
