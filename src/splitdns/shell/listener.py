"""A listener: one address and port, its sockets, its routes and the memo of its replies.

Tests: tests/test_datagrams.py.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field

from splitdns.addresses import host_port
from splitdns.core import metrics
from splitdns.core.memo import Memo
from splitdns.core.routing import Router
from splitdns.core.zone import Zone
from splitdns.shell import datagrams

# Reads further apart than this, the last of which found a single datagram, mean queries
# arrive one at a time (a pod's few hundred a second): the next is read by recvfrom. Closer
# reads, or a read that found several, mean they queue: recvmmsg (bench/README.md).
QUIET_GAP = 100e-6

Tally = tuple[Zone, int, int, int]  # what a hit counts under: zone, query type, rcode, a denial


@dataclass
class Listener:
    host: str
    port: int
    router: Router
    udp: socket.socket | None = None
    batch: datagrams.Batch | datagrams.OneByOne | None = None
    single: datagrams.OneByOne | None = None  # the reader of lone datagrams
    tcp: asyncio.Server | None = None
    last_read: float = float("-inf")
    last_count: int = 0  # datagrams the last read found
    # Replies no zone gave (REFUSED for no zone or another class, FORMERR, NOTIMP): counted
    # too, under CoreDNS's zone label "dropped"; shared by the listeners of a port.
    unrouted: metrics.ZoneStats = field(default_factory=metrics.ZoneStats)
    # Replies rendered for this listener's routes (memo.py): it routed them, so new routes
    # start it afresh.
    memo: Memo[Zone] = field(default_factory=Memo)

    def reader(self, now: float) -> datagrams.Batch | datagrams.OneByOne | None:
        """The reader for a wakeup at `now`: one datagram by recvfrom when they come one at a
        time, a batch when they queue (QUIET_GAP)."""
        quiet = self.last_count <= 1 and now - self.last_read > QUIET_GAP
        self.last_read = now
        return self.single if quiet else self.batch

    def route_by(self, router: Router) -> None:
        """New routes (a reload), swapped at once: no query is lost; the memo starts afresh."""
        self.router = router
        self.memo.clear()

    def learn(self, zone: Zone, names: Iterable[str]) -> None:
        """Route names the VPN pushed to `zone`, if this listener serves it."""
        if self.router.owns(zone):
            self.router.learn(zone, names)
            self.memo.clear()

    @property
    def label(self) -> str:
        return f"dns://{host_port(self.host, self.port)}"

    @property
    def family(self) -> str:
        return "2" if ":" in self.host else "1"  # CoreDNS's label values
