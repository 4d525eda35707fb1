"""The shell side of `hosts`: read each block's hosts file, and again when it changes.

CoreDNS checks the file every `reload` interval (5 s by default) and reads it again when
its modification time or size changed; a missing file leaves the inline entries serving,
and is read once it appears. The table itself is built in the core (`local.Local`).
Tests: tests/test_plugins_serve.py.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable

from splitdns.core.zone import Zone
from splitdns.shell import logs

MIN_INTERVAL = 0.2  # a `reload 1ms` still leaves the loop time for queries


def refresh(zone: Zone) -> bool:
    """Read the zone's hosts file if it changed since it was last read; True if it did."""
    local = zone.local
    if local is None or local.hosts_spec is None:
        return False
    path = local.hosts_spec.file
    try:
        st = os.stat(path)
        seen: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
    except OSError:
        seen = None
    if seen == local.hosts_file_seen and local.hosts is not None:
        return False
    text = ""
    if seen is not None:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError as err:
            logs.warning(f"plugin/hosts: cannot read {path}: {err.strerror}; serving the inline entries")
            seen = None
    local.load_hosts(text, seen)
    return True


def refresh_all(zones: Iterable[Zone]) -> None:
    for zone in zones:
        refresh(zone)


def interval(zones: Iterable[Zone]) -> float | None:
    """How often to look: the shortest `reload` of the blocks that read a file; None: never."""
    periods = [z.local.hosts_spec.reload for z in zones if z.local is not None
               and z.local.hosts_spec is not None and z.local.hosts_spec.reload > 0]
    return max(MIN_INTERVAL, min(periods)) if periods else None


async def watch(zones: Callable[[], Iterable[Zone]]) -> None:
    """Look at the files until cancelled (the server cancels this when it stops)."""
    while True:
        period = interval(zones())
        await asyncio.sleep(period if period is not None else 1.0)
        if period is not None:
            refresh_all(z for z in zones() if z.local is not None and z.local.hosts_spec is not None
                        and z.local.hosts_spec.reload > 0)
