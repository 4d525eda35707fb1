"""What every tunnel kind's watcher shares: the latest TunnelState, and one way to report a
change (a log line when the tunnel goes up or down or its DNS changes, then the callback).
Each kind's watcher (shell/openvpn.py, shell/wireguard.py) only reads its sources.
Tests: tests/test_tunnel_kinds.py, tests/test_tunnel_serve.py.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

from splitdns.addresses import host_port
from splitdns.core import tunnel
from splitdns.shell import logs

OnChange = Callable[[tunnel.TunnelState], None]


class Watcher:
    """Keeps the latest TunnelState of one tunnel spec and reports every change. A kind sets
    `log_as` (its log lines' prefix) and `dns_words` (how its log names the DNS servers)."""

    log_as = "plugin/tunnel"
    dns_words = "DNS"

    def __init__(self, spec: Any, on_change: OnChange, state: tunnel.TunnelState) -> None:
        self.spec = spec
        self.on_change = on_change
        self.state = state

    async def run(self) -> None:
        """Follow the tunnel's sources until cancelled, `_set` on every look."""
        raise NotImplementedError

    def _set(self, state: tunnel.TunnelState) -> None:
        if state == self.state:
            return
        if state.status != self.state.status or state.pushed != self.state.pushed:
            servers = ", ".join(host_port(h, p) for h, p in state.pushed.servers)
            logs.info(f"{self.log_as}: {state.describe()}"
                      + (f", {self.dns_words} {servers}" if state.up else ""))
        self.state = state
        self.on_change(state)


class Polled(Watcher):
    """A watcher whose sources are files and interfaces it looks at every POLL seconds (WireGuard,
    OpenConnect, strongSwan); `look` is the kind's one look, with a socket for interface lookups."""

    POLL = 0.2  # a change is seen within 200 ms

    async def run(self) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            while True:
                self.look(probe)
                await asyncio.sleep(self.POLL)

    def look(self, probe: socket.socket | None = None) -> tunnel.TunnelState:
        """One look at every source; the new state is reported if it changed."""
        raise NotImplementedError
