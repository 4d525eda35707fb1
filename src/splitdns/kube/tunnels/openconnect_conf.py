"""The OpenConnect gateway's ocserv.conf, read for what the DNS split of its clients depends on:
the DNS it pushes (`dns =`) and the split-include routes (`route =`, less `no-route =`) that
openconnect's vpnc-script installs in the pod. openconnect's own command line names no route:
they come from the gateway, so the gateway's config is what `check` can read for them.
Tests: tests/test_check.py, tests/test_vpn_checks.py.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
from dataclasses import dataclass, field

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# Keys only ocserv.conf has among the configs check reads (OpenVPN's have no `=`, wg-quick's sections).
_MARKERS = {"auth", "tcp-port", "udp-port", "server-cert", "server-key", "ipv4-network", "ipv4-netmask",
            "ipv6-network", "route", "no-route", "dns", "split-dns", "default-domain", "max-clients",
            "socket-file", "run-as-user", "device", "tunnel-all-dns", "isolate-workers", "ca-cert"}
_LINE = re.compile(r"^([A-Za-z0-9_-]+)\s*=\s*(.*?)\s*$")
_DEFAULT_ROUTE = ("default", "0.0.0.0/0", "::/0")


@dataclass
class GatewayConfig:
    path: str
    dns: list[tuple[str, int]] = field(default_factory=list)
    routes: list[tuple[IPNetwork, int]] = field(default_factory=list)
    no_routes: list[IPNetwork] = field(default_factory=list)
    default_route: int | None = None       # the line of `route = default`, or None
    first_line: int = 1

    @property
    def full_tunnel(self) -> bool:
        """No split-include route (ocserv then pushes none: the client routes everything)."""
        return self.default_route is not None or not self.routes

    def excluded(self, net: IPNetwork) -> bool:
        """A `no-route =` keeps this network out of the tunnel."""
        return any(net.version == n.version and net.subnet_of(n) for n in self.no_routes)  # type: ignore[arg-type]

    def behind_tunnel(self, address: str) -> bool:
        """Is this address a DNS server the gateway pushes, or inside a split-include route? (A
        full tunnel is SD313's: read as everything behind it, every upstream would be.)"""
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        if address in {a for a, _ in self.dns}:
            return True
        return not self.excluded(ipaddress.ip_network(ip)) and any(ip in n for n, _ in self.routes)

    def server_names(self) -> list[tuple[str, int]]:
        return []  # the gateway's own config does not name the address clients dial


def looks_like(text: str) -> bool:
    lines = [ln.split("#", 1)[0].strip() for ln in text.splitlines()]
    if any("{" in ln or ln.startswith("[") for ln in lines):
        return False  # strongSwan's sections, wg-quick's: ocserv.conf has neither
    keys = {m.group(1) for ln in lines if (m := _LINE.match(ln))}
    return len(keys & _MARKERS) >= 3


def parse(text: str, path: str) -> GatewayConfig:
    conf = GatewayConfig(path)
    first = True
    for number, raw in enumerate(text.splitlines(), 1):
        match = _LINE.match(raw.split("#", 1)[0].strip())
        if match is None:
            continue
        if first:
            conf.first_line, first = number, False
        key, value = match.groups()
        if key == "dns" and value:
            conf.dns.append((value, number))
        elif key == "route" and value in _DEFAULT_ROUTE:
            conf.default_route = number
        elif key in ("route", "no-route"):
            with contextlib.suppress(ValueError):  # ocserv's own check refuses what is not a network
                net = ipaddress.ip_network(value, strict=False)
                if key == "route":
                    conf.routes.append((net, number))
                else:
                    conf.no_routes.append(net)
    return conf
