"""Which zone owns a name on one listener: the longest whole-label suffix, the root last.

Tests: tests/test_resolve.py, tests/test_datagrams.py.
"""

from __future__ import annotations

from collections.abc import Iterable

import dns.rcode

from splitdns import directives
from splitdns.codec import wire
from splitdns.config import Block
from splitdns.core.zone import Zone


class Router:
    """A listener's zones by name: `svc.acme.internal` owns `db.svc.acme.internal` and the
    apex but never `svc.acme.internal.example.net`; `.` catches what nothing else owns."""

    def __init__(self, zones: Iterable[Zone]) -> None:
        self.table: dict[bytes, Zone] = {}
        self.learned: dict[bytes, Zone] = {}
        for zone in zones:
            for name in zone.block.zones:
                self.table[wire.name_to_wire(name)] = zone

    def owns(self, zone: Zone) -> bool:
        return any(z is zone for z in self.table.values())

    def learn(self, zone: Zone, names: Iterable[str]) -> None:
        """Route these names to `zone` too (domains the VPN pushed); a block of the Corefile
        that names the same zone keeps it. Replaces what was learned for `zone` before."""
        for key in [k for k, z in self.learned.items() if z is zone]:
            del self.learned[key]
            del self.table[key]
        for name in names:
            key = wire.name_to_wire(name)
            if key not in self.table:
                self.table[key] = self.learned[key] = zone

    def route(self, name: bytes) -> Zone | None:
        table = self.table
        pos = 0
        while name[pos]:
            zone = table.get(name[pos:])
            if zone is not None:
                return zone
            pos += name[pos] + 1
        return table.get(b"\x00")


def unrouted(q: wire.Query) -> bytes:
    """The answer to a name no zone of the listener owns: REFUSED, as CoreDNS."""
    return wire.error_reply(q, dns.rcode.REFUSED)


def cache_key(block: Block) -> tuple[object, ...]:
    """What a cache's content depends on: a reload keeps a block's cache only when this is
    the same. Answers from old upstreams, or that an old `private_addresses` let through,
    must not outlive the swap, nor answers to names an old `rewrite` asked for: every
    directive the registry marks `stored` is part of it. The bind too: two blocks may serve
    one zone on one port from different addresses, each with a cache of its own."""
    routes = tuple((f.origin, f.excepts, f.upstreams, f.files, f.tunnel) for f in block.forwards)
    stored = tuple((d.name, block.specs.get(d.name)) for d in directives.REGISTRY
                   if d.stored and d is not directives.FORWARD)
    return (block.zones, block.port, block.bind, routes, stored)
