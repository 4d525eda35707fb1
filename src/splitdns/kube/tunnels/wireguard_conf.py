"""wg-quick configs, read for what the DNS split depends on: the `DNS =` servers, the `AllowedIPs`
routed into the tunnel, each peer's `Endpoint` (resolved before the tunnel exists) and keepalive;
and what wg-quick would refuse (sections, keys, prefixes, ports), by line.
Tests: tests/test_wireguard_check.py.
"""

from __future__ import annotations

import base64
import binascii
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
    errors: list[tuple[int, str]] = field(default_factory=list)  # (line, what wg-quick would refuse)

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
    """A wg-quick config: an [Interface] or [Peer] section (a Corefile has neither)."""
    sections = {ln.split("#", 1)[0].strip().lower() for ln in text.splitlines()
                if ln.strip().startswith("[")}
    return bool(sections & {"[interface]", "[peer]"})


_KEYS = ("privatekey", "publickey", "presharedkey")
_SECTIONS = ("interface", "peer")


def parse(text: str, path: str) -> WgConfig:
    """The config, and in `errors` what wg-quick (or `wg setconf`) would refuse, by line."""
    conf = WgConfig(path)
    section = ""
    interfaces = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip().lower()
            if section == "interface":
                conf.interface_line = number
                interfaces += 1
            elif section == "peer":
                if not interfaces:
                    conf.errors.append((number, "[Peer] before any [Interface]: a wg-quick config starts "
                                                "with the [Interface] section (PrivateKey, Address, DNS)"))
                conf.peers.append(Peer(number))
            else:
                conf.errors.append((number, f"{line} is no wg-quick section: [Interface] or [Peer]"))
            continue
        key, sep, value = line.partition("=")
        if not sep:
            conf.errors.append((number, f"{line!r} is not KEY = VALUE"))
            continue
        if section not in _SECTIONS:
            conf.errors.append((number, f"{key.strip()} before any section: a wg-quick config starts with "
                                        "[Interface]"))
            continue
        key = key.strip().lower()
        items = [v for v in value.replace(",", " ").split() if v]
        problem = _problem(key, value.strip(), items)
        if problem:
            conf.errors.append((number, problem))
        if section == "interface" and key == "dns":
            conf.dns += [(_address(v), number) for v in items if _address(v)]
        elif section == "interface" and key == "address":
            for item in items:
                with contextlib.suppress(ValueError):
                    conf.addresses.append((ipaddress.ip_network(item, strict=False), number))
        elif section == "peer" and conf.peers:
            _peer_option(conf.peers[-1], key, items, value.strip(), number)
    if not interfaces and not conf.peers and text.strip():
        conf.errors.append((1, "no [Interface] section: wg-quick needs one (PrivateKey, Address, DNS)"))
    return conf


def _problem(key: str, value: str, items: list[str]) -> str:
    """What is wrong with one `KEY = VALUE` line, as wg-quick or `wg` would refuse it, or ""."""
    name = {"privatekey": "PrivateKey", "publickey": "PublicKey", "presharedkey": "PresharedKey",
            "allowedips": "AllowedIPs", "address": "Address", "listenport": "ListenPort",
            "endpoint": "Endpoint", "persistentkeepalive": "PersistentKeepalive"}.get(key, key)
    if key in _KEYS and not _is_key(value):
        return f"{name} is not a WireGuard key: 44 characters of base64 (32 bytes), as `wg genkey` writes"
    if key in ("allowedips", "address"):
        for item in items:
            bad = _network_problem(item)
            if bad:
                return f"{name} {item}: {bad}"
    if key == "listenport" and not _is_port(value):
        return f"ListenPort {value}: not a port number (1 to 65535)"
    if key == "endpoint":
        host, colon, port = value.rpartition(":")
        if not colon or (host.count(":") and not host.endswith("]")):
            return f"Endpoint {value} has no port: write HOST:PORT (IPv6 as [ADDRESS]:PORT), e.g. :51820"
        if not _is_port(port):
            return f"Endpoint {value}: {port} is not a port number (1 to 65535)"
    if key == "persistentkeepalive" and value != "off" and not (value.isdigit() and int(value) <= 65535):
        return f"PersistentKeepalive {value}: seconds (1 to 65535) or off"
    return ""


def _is_key(text: str) -> bool:
    try:
        return len(text) == 44 and len(base64.b64decode(text, validate=True)) == 32
    except (binascii.Error, ValueError):
        return False


def _is_port(text: str) -> bool:
    return text.isascii() and text.isdigit() and 0 < int(text) < 65536


def _network_problem(item: str) -> str:
    address, slash, prefix = item.partition("/")
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return "not an IP address"
    if slash and not (prefix.isdigit() and int(prefix) <= ip.max_prefixlen):
        return f"prefix length {prefix} is not 0 to {ip.max_prefixlen}"
    return ""


def _peer_option(peer: Peer, key: str, items: list[str], value: str, number: int) -> None:
    if key == "allowedips":
        peer.allowed_line = peer.allowed_line or number
        for item in items:
            if not _network_problem(item):
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
