"""Where a strongSwan IPsec tunnel stands, from what a process without privileges can read. Pure.

What there is:

- the file charon's `resolve` plugin writes (`charon.plugins.resolve.file`, pointed at the
  volume shared with the resolver): a `nameserver ADDRESS   # by strongSwan` line for each DNS
  server an IKE SA received, added when the SA comes up and taken out when it goes (the
  file itself stays, maybe empty). It holds **no domains**: the plugin writes none (RFC 8598
  INTERNAL_DNS_DOMAIN is received but unused in strongSwan 5.9), so the zone's names are the
  Corefile's. Point the plugin at a file of its own: every `nameserver` line counts;
- whether the tun device of `kernel-libipsec` (`ipsec0`) exists and is up: any process of the
  pod's network namespace may ask. charon makes it when it starts and it goes when charon
  stops, so it says whether charon runs, not whether an SA is up;
- that device's interface index: a new charon makes a new device, with a new index.

What it cannot know without privileges: the IKE and CHILD SA states themselves (they are on
charon's vici socket, which also controls charon: not for a DNS container), DPD results, or
rekeying. A charon killed outright leaves its lines in the file: the device going says so, and
a file last written under an older device (a restarted charon with no SA yet) is stale.
Tests: tests/test_strongswan.py.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from splitdns.core.tunnel import DOWN, UP, Pushed, TunnelState

DEFAULT_INTERFACE = "ipsec0"
MAX_LINES = 1000


class ResolveFileError(ValueError):
    """A `nameserver` line without an address; the message names the file and line."""


def nameservers(text: str, where: str) -> tuple[str, ...]:
    """The addresses of the file's `nameserver` lines, in order, once each. Comments and other
    lines (`search`, `options`) are ignored: the plugin writes none."""
    found: list[str] = []
    for number, line in enumerate(text.splitlines()[:MAX_LINES], start=1):
        words = line.split("#", 1)[0].split()
        if not words or words[0] != "nameserver":
            continue
        if len(words) != 2:
            raise ResolveFileError(f"{where} line {number}: expected `nameserver ADDRESS`")
        try:
            address = str(ipaddress.ip_address(words[1].split("%", 1)[0]))
        except ValueError:
            raise ResolveFileError(f"{where} line {number}: {words[1]!r} is not an IP address") from None
        if address not in found:
            found.append(address)
    return tuple(found)


@dataclass(frozen=True)
class Seen:
    """One look at the sources."""

    path: str
    interface: str = DEFAULT_INTERFACE
    servers: tuple[str, ...] | None = None  # None: no file (or `error`)
    error: str = ""
    ifindex: int | None = None              # the device's index now; None: no such device
    up: bool = False                        # the device is up
    written_under: int | None = None        # the index when the file's content last changed


def state_of(seen: Seen, domains: tuple[str, ...] = ()) -> TunnelState:
    """The tunnel's state from one look; `domains` are the zone's (the file names none)."""
    if seen.error:
        return TunnelState(DOWN, seen.error)
    if seen.servers is None:
        return TunnelState(DOWN, f"no file at {seen.path}: charon's resolve plugin has written no "
                                 "DNS server yet (no IKE SA up, or its `file` is elsewhere)")
    pushed = Pushed(tuple((s, 53) for s in seen.servers), domains)
    if not seen.servers:
        return TunnelState(DOWN, f"{seen.path} lists no name server: no IKE SA with DNS is up", pushed)
    if seen.ifindex is None or not seen.up:
        return TunnelState(DOWN, f"interface {seen.interface} is gone or down (charon stopped: the "
                                 "VPN container died?)", pushed)
    if seen.written_under is not None and seen.written_under != seen.ifindex:
        return TunnelState(DOWN, f"{seen.path} was written before charon last started (interface "
                                 f"{seen.interface} is new): no IKE SA has handed DNS since", pushed)
    return TunnelState(UP, f"an IKE SA handed DNS ({seen.interface})", pushed, seen.interface)
