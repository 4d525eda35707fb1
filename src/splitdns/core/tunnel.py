"""A tunnel's state, whatever its kind: up or down and why, and the DNS it gives the zone. Pure.

Each kind reads its own sources into this (core/openvpn.py: what an OpenVPN server pushed;
core/wireguard.py: a wg-quick tunnel's DNS line and handshakes); the zone and the metrics read
only this.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

UP, DOWN, UNKNOWN = "up", "down", "unknown"


@dataclass(frozen=True)
class Pushed:
    """The DNS part of what the tunnel gives: its servers, the names they own, search domains."""

    servers: tuple[tuple[str, int], ...] = ()
    domains: tuple[str, ...] = ()         # names the pushed servers own (split DNS)
    search: tuple[str, ...] = ()


@dataclass(frozen=True)
class TunnelState:
    status: str = UNKNOWN
    reason: str = "no word from the tunnel yet"
    pushed: Pushed = Pushed()
    device: str = ""  # the tunnel's network interface, when its watcher knows it (tun0, wg0)

    @property
    def up(self) -> bool:
        return self.status == UP and bool(self.pushed.servers)

    def describe(self) -> str:
        if self.status == UP and not self.pushed.servers:
            return "the tunnel is up but the VPN server pushed no DNS server"
        if self.status == UP:
            return "the tunnel is up"
        return f"the tunnel is down ({self.reason})"


def not_heard(display: str) -> TunnelState:
    """The state before the tunnel's first word, named after its kind ("OpenVPN")."""
    return TunnelState(UNKNOWN, f"no word from {display} yet")


def address(text: str) -> str | None:
    """An IP address as the tunnel wrote it (maybe in brackets), normalised; None if it is none."""
    try:
        return str(ipaddress.ip_address(text.strip().strip("[]")))
    except ValueError:
        return None


def domain(text: str) -> str:
    """A domain the tunnel names, lower case and fully qualified; "" for none."""
    text = text.strip().lower().rstrip(".")
    return f"{text}." if text else ""
