"""Watching a WireGuard tunnel: the shim's files, the wg-quick config, the interface. I/O only;
`core.wireguard` decides.

Everything here works without CAP_NET_ADMIN: files in a volume shared with the VPN container,
and the interface's flags, which any process of the network namespace may read. The last
handshake comes from the file the shim's `--watch` mode writes in the VPN container.
Tests: tests/test_wireguard.py, tests/test_wireguard_lab.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import dns.rdatatype

from splitdns.codec import wire
from splitdns.core import tunnel
from splitdns.core import wireguard as wg
from splitdns.directives.wireguard import WireGuardSpec
from splitdns.shell import tunnel_watcher
from splitdns.shell.attempt import bind_device

POKE_INTERVAL = 5.0  # WireGuard retries a handshake every 5 s (REKEY_TIMEOUT) while there is traffic
SIOCGIFFLAGS = 0x8913
IFF_UP = 0x1
MAX_FILE = 65536
_ROOT_NS = wire.question_query(b"\x00", dns.rdatatype.NS)

Stamp = tuple[int, int, int] | None

# secrets.randbits's source, without importing secrets (whose hmac loads OpenSSL's libcrypto).
_RANDOM = random.SystemRandom()


class Watcher(tunnel_watcher.Polled):
    """Keeps the latest TunnelState for one `wireguard` spec and reports every change."""

    log_as = "plugin/wireguard"
    spec: WireGuardSpec

    def __init__(self, spec: WireGuardSpec, on_change: tunnel_watcher.OnChange,
                 wall: Callable[[], float] = time.time) -> None:
        super().__init__(spec, on_change, tunnel.not_heard("wg-quick"))
        self.wall = wall
        self._files: dict[str, tuple[Stamp, str | None]] = {}
        self._poked = 0.0

    def look(self, probe: socket.socket | None = None) -> tunnel.TunnelState:
        """One look at every source; the new state is reported if it changed."""
        spec = self.spec
        seen = wg.Seen(spec.interface, shim=spec.resolvconf is not None,
                       link=link_up(spec.interface, probe))
        if spec.resolvconf is not None:
            found = self._recorded(Path(spec.resolvconf))
            if found is not None:
                seen = _with(seen, recorded=wg.from_resolvconf(found[0]), recorded_at=found[1])
            watched = self._read(Path(f"{spec.resolvconf.rstrip('/')}/{spec.interface}.handshakes"))
            seen = _with(seen, handshakes=None if watched is None else wg.from_watch(watched))
        if spec.config is not None:
            text = self._read(Path(spec.config))
            if text is None:
                seen = _with(seen, config_error=f"cannot read the wg-quick config {spec.config}")
            else:
                seen = _with(seen, config=wg.from_config(text))
        now = self.wall()
        state = wg.state_of(seen, now, spec.max_age)
        self._set(state)
        if probe is not None and wg.wants_traffic(seen, now, spec.max_age):
            self._poke(probe)
        return state

    def _recorded(self, directory: Path) -> tuple[str, float] | None:
        """The shim's file for our interface (under its name or with wg-quick's order prefix),
        and when it was written."""
        paths = [directory / self.spec.interface]
        with contextlib.suppress(OSError):
            paths += [Path(e.path) for e in os.scandir(directory)
                      if not e.name.startswith(".") and e.name != self.spec.interface
                      and wg.interface_of(e.name, self.spec.interface)]
        for path in paths:
            text = self._read(path)
            stamp = self._files.get(str(path), (None, None))[0]
            if text is not None and stamp is not None:
                return text, stamp[1] / 1e9
        return None

    def _read(self, path: Path) -> str | None:
        """The file's text, read again only when it changed; None when absent or unreadable."""
        try:
            st = path.stat()
        except OSError:
            self._files.pop(str(path), None)
            return None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        known = self._files.get(str(path))
        if known is not None and known[0] == stamp:
            return known[1]
        text: str | None
        try:
            with path.open("rb") as f:
                text = f.read(MAX_FILE).decode("utf-8", "replace")
        except OSError:
            text = None
        self._files[str(path)] = (stamp, text)
        return text

    def _poke(self, probe: socket.socket) -> None:
        """Send one query into the tunnel, so that WireGuard handshakes again (wants_traffic)."""
        now = time.monotonic()
        if now - self._poked < POKE_INTERVAL or not self.state.pushed.servers:
            return
        self._poked = now
        host, port = self.state.pushed.servers[0]
        # `. NS`, recursion desired: any DNS server answers it, and the answer is not awaited.
        query = wire.upstream_query(_ROOT_NS, _RANDOM.getrandbits(16), health_probe=True)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_DGRAM) as s:
            s.setblocking(False)
            if self.spec.bind_to_tunnel:  # as the zone's queries: by the tunnel or not at all
                bind_device(s, self.spec.interface)
            s.sendto(query, (host, port))


def link_up(name: str, probe: socket.socket | None) -> bool:
    """Whether the interface exists in our network namespace and is up (no privilege needed)."""
    try:
        socket.if_nametoindex(name)
    except OSError:
        return False
    if probe is None:
        return True
    try:
        flags = fcntl.ioctl(probe.fileno(), SIOCGIFFLAGS, struct.pack("16sH14x", name.encode(), 0))
    except OSError:
        return False
    return bool(struct.unpack("16sH14x", flags)[1] & IFF_UP)


def _with(seen: wg.Seen, **changes: object) -> wg.Seen:
    return replace(seen, **changes)  # type: ignore[arg-type]
