"""What every tunnel kind's watcher shares: the latest TunnelState, and one way to report a
change (a log line when the tunnel goes up or down or its DNS changes, then the callback).
Each kind's watcher (shell/openvpn.py, shell/wireguard.py) only reads its sources."""

from __future__ import annotations

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
