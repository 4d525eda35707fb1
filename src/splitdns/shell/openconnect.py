"""Watching an OpenConnect tunnel: our vpnc-script's state file and the tun device. I/O only;
`core.openconnect` decides.

Everything here works without privileges: a file in a volume shared with the VPN container,
and the device's flags, which any process of the pod's network namespace may read.
Tests: tests/test_openconnect.py, tests/test_openconnect_lab.py.
"""

from __future__ import annotations

import socket
from pathlib import Path

from splitdns.core import openconnect as oc
from splitdns.core import tunnel
from splitdns.directives.openconnect import OpenConnectSpec
from splitdns.shell import tunnel_watcher
from splitdns.shell.watched_file import WatchedFile
from splitdns.shell.wireguard import link_up


class Watcher(tunnel_watcher.Polled):
    """Keeps the latest TunnelState for one `openconnect` spec and reports every change."""

    log_as = "plugin/openconnect"
    spec: OpenConnectSpec

    def __init__(self, spec: OpenConnectSpec, on_change: tunnel_watcher.OnChange) -> None:
        super().__init__(spec, on_change, tunnel.not_heard("openconnect"))
        self.file = WatchedFile(Path(spec.state_file))
        self._recorded: oc.Recorded | None = None
        self._error = ""

    def look(self, probe: socket.socket | None = None) -> tunnel.TunnelState:
        """One look at the state file and the device; the new state is reported if it changed."""
        if self.file.read():
            self._recorded, self._error = None, self.file.error
            if self.file.text is not None:
                try:
                    self._recorded = oc.parse(self.file.text, str(self.file.path))
                except oc.StateError as err:
                    self._error = str(err)
        recorded = self._recorded
        iface = self.spec.interface or (recorded.tundev if recorded is not None else "")
        link = link_up(iface, probe) if iface and recorded is not None else None
        state = oc.state_of(oc.Seen(str(self.file.path), recorded, self._error, iface, link))
        self._set(state)
        return state
