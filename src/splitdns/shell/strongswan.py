"""Watching a strongSwan tunnel: the resolve plugin's file and kernel-libipsec's tun device.
I/O only; `core.strongswan` decides.

Everything here works without privileges: a file in a volume shared with the VPN container,
and the device's index and flags, which any process of the pod's network namespace may read.
The device's index when the file last changed is remembered, so a file left by a charon that
died reads as stale once a new charon (a new device) runs without having written it again.
Tests: tests/test_strongswan.py, tests/test_strongswan_lab.py.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

from splitdns.core import strongswan as ss
from splitdns.core import tunnel
from splitdns.directives.strongswan import StrongSwanSpec
from splitdns.shell import tunnel_watcher
from splitdns.shell.watched_file import WatchedFile
from splitdns.shell.wireguard import link_up


class Watcher(tunnel_watcher.Polled):
    """Keeps the latest TunnelState for one `strongswan` spec and reports every change."""

    log_as = "plugin/strongswan"
    spec: StrongSwanSpec

    def __init__(self, spec: StrongSwanSpec, on_change: tunnel_watcher.OnChange,
                 index: Callable[[str], int | None] | None = None) -> None:
        super().__init__(spec, on_change, tunnel.not_heard("charon"))
        self.index = index or interface_index
        self.file = WatchedFile(Path(spec.resolve_file))
        self._servers: tuple[str, ...] | None = None
        self._error = ""
        self._written_under: int | None = None
        self._looked = False

    def look(self, probe: socket.socket | None = None) -> tunnel.TunnelState:
        """One look at the file and the device; the new state is reported if it changed."""
        iface = self.spec.interface
        ifindex = self.index(iface)
        if self.file.read():
            self._servers, self._error = None, self.file.error
            if self.file.text is not None:
                try:
                    self._servers = ss.nameservers(self.file.text, str(self.file.path))
                except ss.ResolveFileError as err:
                    self._error = str(err)
            # Written under this device; on the first look we did not see it written: no claim.
            self._written_under = ifindex if self._looked else None
        self._looked = True
        seen = ss.Seen(str(self.file.path), iface, self._servers, self._error, ifindex,
                       ifindex is not None and link_up(iface, probe), self._written_under)
        state = ss.state_of(seen)
        self._set(state)
        return state


def interface_index(name: str) -> int | None:
    """The interface's index in our network namespace, or None when there is none."""
    try:
        return socket.if_nametoindex(name)
    except OSError:
        return None
