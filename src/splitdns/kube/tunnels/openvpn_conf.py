"""OpenVPN client configs, read for what the DNS split depends on: the `remote` names the client must
resolve before the tunnel exists, and the addresses that live behind the tunnel (pushed or local
`dhcp-option DNS`, `dns server N address`, `route`, `route-ipv6`).
Tests: tests/test_vpn_kinds_kube.py, tests/test_tunnel_kinds.py, tests/test_wireguard_check.py.
"""

from __future__ import annotations

import contextlib
import ipaddress
import shlex
from dataclasses import dataclass, field

_MARKERS = ("client", "remote", "dev", "proto", "ca", "auth-user-pass", "nobind", "persist-tun", "pull")
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Remote:
    host: str
    line: int

    @property
    def is_address(self) -> bool:
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            return False
        return True


@dataclass
class ClientConfig:
    path: str
    remotes: list[Remote] = field(default_factory=list)
    dns_servers: list[str] = field(default_factory=list)
    networks: list[IPNetwork] = field(default_factory=list)

    def behind_tunnel(self, address: str) -> bool:
        """Is this address a DNS server the VPN gives, or inside a network routed into the tunnel?"""
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return address in self.dns_servers or any(ip in net for net in self.networks)

    def server_names(self) -> list[tuple[str, int]]:
        """Each `remote` given as a name (resolved before the tunnel exists), with its line."""
        return [(r.host, r.line) for r in self.remotes if not r.is_address]


def looks_like(text: str) -> bool:
    lines = [ln.split() for ln in text.splitlines() if not ln.lstrip().startswith(("#", ";"))]
    words = {ln[0] for ln in lines if ln}
    return "remote" in words and len(words & set(_MARKERS)) >= 2


def parse(text: str, path: str) -> ClientConfig:
    conf = ClientConfig(path)
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";", "<")):
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            words = line.split()
        if words and words[0] == "push" and len(words) > 1:
            # A server config's push lines say what the clients will get.
            words = shlex.split(words[1])
        if not words:
            continue
        _option(conf, words, number)
    return conf


def _option(conf: ClientConfig, words: list[str], number: int) -> None:
    name, args = words[0], words[1:]
    if name == "remote" and args:
        conf.remotes.append(Remote(args[0], number))
    elif name == "dhcp-option" and len(args) >= 2 and args[0] in ("DNS", "DNS6"):
        conf.dns_servers.append(args[1])
    elif name == "dns" and len(args) >= 4 and args[0] == "server" and args[2] == "address":
        conf.dns_servers.extend(a.rsplit(":", 1)[0] if a.count(":") == 1 else a.strip("[]") for a in args[3:])
    elif name == "route" and args:
        mask = args[1] if len(args) > 1 and _is_ip(args[1]) else "255.255.255.255"
        _add_network(conf, f"{args[0]}/{mask}")
    elif name == "route-ipv6" and args:
        _add_network(conf, args[0])


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _add_network(conf: ClientConfig, text: str) -> None:
    # `route vpn_gateway` and other symbolic forms name no fixed network: nothing to add.
    with contextlib.suppress(ValueError):
        conf.networks.append(ipaddress.ip_network(text, strict=False))
