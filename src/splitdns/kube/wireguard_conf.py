"""wg-quick configs, read for what the DNS split depends on: the `DNS =` servers, the `AllowedIPs`
routed into the tunnel, each peer's `Endpoint` (resolved before the tunnel exists) and keepalive.
"""

from __future__ import annotations

import contextlib
import ipaddress
from dataclasses import dataclass, field

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass
class Peer:
    line: int                                   # its [Peer] line
    endpoint: tuple[str, int] | None = None     # (host as written, line)
    allowed: list[tuple[IPNetwork, int]] = field(default_factory=list)  # (network, line)
    allowed_line: int = 0
    keepalive: int | None = None


@dataclass
class WgConfig:
    path: str
    dns: list[tuple[str, int]] = field(default_factory=list)  # (address, line); names are search domains
    addresses: list[tuple[IPNetwork, int]] = field(default_factory=list)  # the [Interface]'s own
    peers: list[Peer] = field(default_factory=list)
    interface_line: int = 1

    def behind_tunnel(self, address: str) -> bool:
        """A DNS server of the `DNS =` line, or an address routed into the tunnel by a narrower
        AllowedIPs than a default route (that one is reported on its own)."""
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(address == d for d, _ in self.dns) or any(
            ip in net for p in self.peers for net, _ in p.allowed if net.prefixlen > 0)

    def server_names(self) -> list[tuple[str, int]]:
        """Each peer's Endpoint given as a name (wg-quick resolves it before the tunnel exists)."""
        return [p.endpoint for p in self.peers if p.endpoint is not None and not _is_ip(p.endpoint[0])]


def looks_like(text: str) -> bool:
    sections = {ln.strip().lower() for ln in text.splitlines() if ln.strip().startswith("[")}
    return "[interface]" in sections and ("[peer]" in sections or "privatekey" in text.lower())


def parse(text: str, path: str) -> WgConfig:
    conf = WgConfig(path)
    section = ""
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip().lower()
            if section == "interface":
                conf.interface_line = number
            if section == "peer":
                conf.peers.append(Peer(number))
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        key = key.strip().lower()
        items = [v for v in value.replace(",", " ").split() if v]
        if section == "interface" and key == "dns":
            conf.dns += [(_address(v), number) for v in items if _address(v)]
        elif section == "interface" and key == "address":
            for item in items:
                with contextlib.suppress(ValueError):
                    conf.addresses.append((ipaddress.ip_network(item, strict=False), number))
        elif section == "peer" and conf.peers:
            _peer_option(conf.peers[-1], key, items, value.strip(), number)
    return conf


def _peer_option(peer: Peer, key: str, items: list[str], value: str, number: int) -> None:
    if key == "allowedips":
        peer.allowed_line = peer.allowed_line or number
        for item in items:
            with contextlib.suppress(ValueError):
                peer.allowed.append((ipaddress.ip_network(item, strict=False), number))
    elif key == "endpoint" and value:
        host = value.rsplit(":", 1)[0].strip("[]") if ":" in value else value
        peer.endpoint = (host, number)
    elif key == "persistentkeepalive" and value.isdigit():
        peer.keepalive = int(value)
    elif key == "persistentkeepalive" and value == "off":
        peer.keepalive = 0


def _is_ip(text: str) -> bool:
    return bool(_address(text))


def _address(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text.strip("[]")))
    except ValueError:
        return ""


def without(networks: list[IPNetwork], excluded: list[IPNetwork]) -> list[IPNetwork]:
    """`networks` less every `excluded` range, as few networks as that takes (the AllowedIPs to
    write instead)."""
    out = list(networks)
    for ex in excluded:
        kept: list[IPNetwork] = []
        for net in out:
            if net.version != ex.version or not net.overlaps(ex):
                kept.append(net)
            elif not ex.supernet_of(net):  # type: ignore[arg-type]
                kept.extend(net.address_exclude(ex))  # type: ignore[arg-type]
        out = kept
    v4 = ipaddress.collapse_addresses(n for n in out if isinstance(n, ipaddress.IPv4Network))
    v6 = ipaddress.collapse_addresses(n for n in out if isinstance(n, ipaddress.IPv6Network))
    return [*v4, *v6]
