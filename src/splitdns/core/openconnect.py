"""Where an OpenConnect tunnel stands, from the state file our vpnc-script writes. Pure.

openconnect runs its `--script` with what the gateway pushed in environment variables; our
hook (`splitdns openconnect-hook`) copies the DNS part to a file of `NAME=value` lines at
`connect` and `reconnect`, rewrites it with `reason=attempt-reconnect` while openconnect tries
to get the session back, and deletes it at `disconnect`:

- INTERNAL_IP4_DNS, INTERNAL_IP6_DNS: the DNS servers (space separated; ocserv's `dns =`);
- CISCO_DEF_DOMAIN: the default domain (ocserv's `default-domain =`; space or comma
  separated): a search domain;
- CISCO_SPLIT_DNS: the split-DNS domains (ocserv's `split-dns =`; comma separated): the names
  the pushed servers answer for;
- TUNDEV: the tun device, whose presence any process of the pod may check.

Which names the zone owns (with `domains`): the split-DNS domains where the gateway names
some (AnyConnect sends only those to the tunnel's servers), else the default domain, as for
OpenVPN's `dhcp-option DOMAIN`.

A pod's openconnect is killed without running `disconnect` when its container dies; the
state file then stays, and the tun device going (openconnect holds it open) is what tells.
Tests: tests/test_openconnect.py.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from splitdns.core.tunnel import DOWN, UP, Pushed, TunnelState

REASONS = ("connect", "reconnect", "attempt-reconnect")
_IFACE = re.compile(r"[A-Za-z0-9_.:+=-]{1,15}")
_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
MAX_LINES = 200


class StateError(ValueError):
    """The state file is not one our hook wrote; the message names the file and line."""

    def __init__(self, where: str, line: int, message: str) -> None:
        super().__init__(f"{where} line {line}: {message}" if line else f"{where}: {message}")


@dataclass(frozen=True)
class Recorded:
    """One state file, parsed."""

    reason: str
    tundev: str = ""
    written_at: float = 0.0
    servers: tuple[str, ...] = ()          # IPv4 first, then IPv6, as pushed
    default_domains: tuple[str, ...] = ()  # fully qualified, lower case
    split_domains: tuple[str, ...] = ()

    def pushed(self) -> Pushed:
        owned = self.split_domains or self.default_domains
        return Pushed(tuple((s, 53) for s in self.servers), owned, self.default_domains)


def parse(text: str, where: str) -> Recorded:
    """The state file's text; `where` (its path) names it in errors."""
    values: dict[str, tuple[int, str]] = {}
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        raise StateError(where, MAX_LINES + 1,
                         f"more than {MAX_LINES} lines: not a state file our hook wrote")
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise StateError(where, number, "expected NAME=value")
        values[name.strip()] = (number, value.strip())
    if "reason" not in values:
        raise StateError(where, 0, "no reason= line: not a state file splitdns's vpnc-script wrote")
    number, reason = values["reason"]
    if reason not in REASONS:
        raise StateError(where, number, f"reason {reason!r} is not one of {', '.join(REASONS)}")
    number, tundev = values.get("TUNDEV", (0, ""))
    if tundev and not _IFACE.fullmatch(tundev):
        raise StateError(where, number, f"TUNDEV {tundev!r} is not an interface name")
    servers = [*_addresses(where, values, "INTERNAL_IP4_DNS", 4),
               *_addresses(where, values, "INTERNAL_IP6_DNS", 6)]
    return Recorded(reason, tundev, _stamp(values.get("written_at", (0, ""))[1]),
                    tuple(dict.fromkeys(servers)), _domains(where, values, "CISCO_DEF_DOMAIN"),
                    _domains(where, values, "CISCO_SPLIT_DNS"))


def _addresses(where: str, values: dict[str, tuple[int, str]], name: str, version: int) -> list[str]:
    number, text = values.get(name, (0, ""))
    found = []
    for item in text.replace(",", " ").split():
        try:
            address = ipaddress.ip_address(item)
        except ValueError:
            raise StateError(where, number, f"{name}: {item!r} is not an IP address") from None
        if address.version != version:
            raise StateError(where, number, f"{name}: {item} is not an IPv{version} address")
        found.append(str(address))
    return found


def _domains(where: str, values: dict[str, tuple[int, str]], name: str) -> tuple[str, ...]:
    number, text = values.get(name, (0, ""))
    found = []
    for item in text.replace(",", " ").split():
        domain = item.lower().rstrip(".")
        if not all(_LABEL.fullmatch(label) for label in domain.split(".")) or len(domain) > 253:
            raise StateError(where, number, f"{name}: {item!r} is not a domain name")
        found.append(f"{domain}.")
    return tuple(dict.fromkeys(found))


def _stamp(text: str) -> float:
    return float(text) if text.isdigit() else 0.0


@dataclass(frozen=True)
class Seen:
    """One look at the sources."""

    path: str
    recorded: Recorded | None = None  # None: no state file (or `error`)
    error: str = ""                   # the file exists but cannot be read or parsed
    interface: str = ""               # the device to check: the directive's, else TUNDEV
    link: bool | None = None          # that device exists and is up; None: not checked


def state_of(seen: Seen) -> TunnelState:
    """The tunnel's state from one look."""
    if seen.error:
        return TunnelState(DOWN, seen.error)
    recorded = seen.recorded
    if recorded is None:
        return TunnelState(DOWN, f"no state file at {seen.path}: openconnect is not connected, or its "
                                 "--script is not splitdns's vpnc-script")
    pushed = recorded.pushed()
    if recorded.reason == "attempt-reconnect":
        return TunnelState(DOWN, "openconnect lost the gateway and is reconnecting", pushed)
    if seen.link is False:
        return TunnelState(DOWN, f"interface {seen.interface} is gone or down (openconnect stopped "
                                 "without disconnecting: the VPN container died?)", pushed)
    return TunnelState(UP, f"openconnect {recorded.reason}ed ({recorded.tundev or 'tun'})", pushed,
                       seen.interface)
