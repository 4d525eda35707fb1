"""Watching OpenVPN: its management interface or the hook's state file. I/O only; `tunnel` parses.

The management client is the recommended source: it hears RECONNECTING the moment OpenVPN
does, so the tunnel zone fails fast instead of timing out. OpenVPN takes one management
client at a time, so the state file (written by `splitdns openvpn-hook` as `--up`/`--down`
script) is there for setups where something else holds the management port.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from dataclasses import replace
from pathlib import Path

from splitdns.core import confinement, tunnel
from splitdns.core import openvpn as openvpn_words
from splitdns.directives.openvpn import OpenVPNSpec
from splitdns.shell import interfaces, tunnel_watcher

RETRY = 1.0
POLL = 0.2          # the state file: a change is seen within 200 ms
CONNECT_TIMEOUT = 2.0
MAX_LINE = 65536


class Watcher(tunnel_watcher.Watcher):
    """Keeps the latest TunnelState for one `openvpn` spec and reports every change."""

    log_as = "plugin/openvpn"
    dns_words = "pushed DNS"
    spec: OpenVPNSpec

    def __init__(self, spec: OpenVPNSpec, on_change: tunnel_watcher.OnChange) -> None:
        super().__init__(spec, on_change, tunnel.not_heard("OpenVPN"))
        self.pushed = tunnel.Pushed()
        self.device = ""  # the interface OpenVPN opened, as it last said
        self.local_address = ""  # the tunnel's address on our side, from the CONNECTED line

    def _set(self, state: tunnel.TunnelState) -> None:
        if state.status == tunnel.UP and not state.device:
            # Attached late, the log line naming the interface may be out of OpenVPN's history:
            # the interface that holds the tunnel's address is the tunnel's.
            device = self.device or (interfaces.holding(self.local_address) or "")
            if device:
                state = replace(state, device=device)
        super()._set(state)

    async def run(self) -> None:
        jobs = []
        if self.spec.management:
            jobs.append(self._management())
        if self.spec.state_file:
            jobs.append(self._state_file(Path(self.spec.state_file)))
        await asyncio.gather(*jobs)

    # -- the management interface --------------------------------------------------------------

    async def _management(self) -> None:
        target = self.spec.management
        while True:
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT):
                    reader, writer = await self._connect()
            except (OSError, TimeoutError) as err:
                self._set(tunnel.TunnelState(tunnel.DOWN, f"cannot reach OpenVPN's management "
                                                          f"interface at {target}: {_why(err)}", self.pushed))
                await asyncio.sleep(RETRY)
                continue
            try:
                await self._session(reader, writer)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
                pass
            finally:
                writer.close()
            self._set(tunnel.TunnelState(tunnel.DOWN, "OpenVPN's management interface closed "
                                                      "(OpenVPN stopped or restarted)", self.pushed))
            await asyncio.sleep(RETRY / 2)

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        tcp = self.spec.management_tcp
        if tcp is not None:
            return await asyncio.open_connection(tcp[0], tcp[1], limit=MAX_LINE)
        assert self.spec.management is not None
        return await asyncio.open_unix_connection(self.spec.management, limit=MAX_LINE)

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session = _Session(self)
        # History first, so we know where the tunnel stands; the log history holds the
        # PUSH_REPLY when we attach after the tunnel came up.
        for command in ("state on all", "log on all"):
            writer.write(f"{command}\n".encode())
            await writer.drain()
            await session.read_until_end(reader, writer)
        while True:
            line = await reader.readline()
            if not line:
                return
            await session.line(line.decode("utf-8", "replace").rstrip("\r\n"), writer)

    # -- the state file ------------------------------------------------------------------------

    async def _state_file(self, path: Path) -> None:
        seen: tuple[int, int, int] | None = None
        while True:
            try:
                st = path.stat()
                stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            except FileNotFoundError:
                stamp = None
                if self.state.status == tunnel.UNKNOWN or seen is not None:
                    self._set(tunnel.TunnelState(tunnel.UNKNOWN, f"no state file at {path} yet (is "
                                                 "`splitdns openvpn-hook` OpenVPN's --up and --down?)"))
            if stamp is not None and stamp != seen:
                try:
                    data = json.loads(path.read_text(encoding="utf-8"))
                except (OSError, ValueError) as err:
                    self._set(tunnel.TunnelState(tunnel.DOWN, f"cannot read {path}: {err}"))
                else:
                    self._set(openvpn_words.from_json(data))
            seen = stamp
            await asyncio.sleep(POLL)


class _Session:
    """One management connection: parses what OpenVPN says, in history and in real time."""

    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher
        self.env: dict[str, str] | None = None
        self.updown = ""

    async def read_until_end(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(100_000):  # bounded: a history is at most a few thousand lines
            raw = await reader.readline()
            if not raw:
                raise ConnectionError("closed")
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line == "END":
                return
            if line.startswith((">", "SUCCESS:", "ERROR:")):
                await self.line(line, writer)
            else:
                self.history(line)

    def history(self, line: str) -> None:
        fields = line.split(",")
        self._connected_at(fields)
        state = openvpn_words.state_from_line(fields, self.watcher.pushed)
        if state is not None:
            self.watcher._set(state)
        elif len(fields) >= 3:
            self._log(",".join(fields[2:]))

    async def line(self, line: str, writer: asyncio.StreamWriter) -> None:
        w = self.watcher
        if line.startswith(">STATE:"):
            fields = line[len(">STATE:"):].split(",")
            self._connected_at(fields)
            state = openvpn_words.state_from_line(fields, w.pushed)
            if state is not None:
                w._set(state)
        elif line.startswith(">UPDOWN:"):
            self._updown(line[len(">UPDOWN:"):])
        elif line.startswith(">LOG:"):
            self._log(line[len(">LOG:"):].split(",", 2)[-1])
        elif line.startswith(">HOLD:"):
            # Started with --management-hold: it waits for us, so we cannot miss the UP block.
            writer.write(b"hold release\n")
            await writer.drain()
        elif line.startswith("ENTER PASSWORD:"):
            writer.write(_password(w.spec.password_file).encode() + b"\n")
            await writer.drain()

    def _connected_at(self, fields: list[str]) -> None:
        """`time,CONNECTED,SUCCESS,local address,...`: the tunnel's address on our side."""
        if len(fields) > 3 and fields[1] == "CONNECTED":
            self.watcher.local_address = fields[3]

    def _updown(self, text: str) -> None:
        w = self.watcher
        if text in ("UP", "DOWN"):
            self.updown, self.env = text, {}
        elif text == "ENV,END" and self.env is not None:
            if self.updown == "UP":
                w.pushed = openvpn_words.from_env(self.env)
                w.device = self.env.get("dev", w.device)
                w._set(tunnel.TunnelState(tunnel.UP, "up (UPDOWN)", w.pushed))
            else:
                w._set(tunnel.TunnelState(tunnel.DOWN, "the tunnel went down", w.pushed))
            self.env = None
        elif text.startswith("ENV,") and self.env is not None:
            name, _, value = text[4:].partition("=")
            self.env[name] = value

    def _log(self, message: str) -> None:
        device = confinement.device_from_log(message)
        if device is not None:  # after the PUSH_REPLY in OpenVPN's log, and after CONNECTED here
            w = self.watcher
            w.device = device
            if w.state.status == tunnel.UP and w.state.device != device:
                w._set(replace(w.state, device=device))
            return
        pushed = openvpn_words.from_push_reply(message)
        if pushed is not None and pushed.servers:
            w = self.watcher
            w.pushed = pushed
            if w.state.status == tunnel.UP:
                w._set(tunnel.TunnelState(tunnel.UP, w.state.reason, pushed))


def _password(path: str | None) -> str:
    if path is None:
        return ""
    with contextlib.suppress(OSError):
        return Path(path).read_text(encoding="utf-8").splitlines()[0]
    return ""


def _why(err: BaseException) -> str:
    if isinstance(err, TimeoutError):
        return "timed out"
    return getattr(err, "strerror", None) or str(err)


def write_state(path: str, state: tunnel.TunnelState) -> None:
    """Atomically, so the watcher never reads half a file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(openvpn_words.to_json(state)), encoding="utf-8")
    os.replace(tmp, target)
