"""The tunnel canary's flight: ask its name through the zone's upstreams, retry a few times
while it fails, record the outcome. What is due, what passes and what it means are
core/confinement.py's; this is the I/O.
Tests: tests/test_confinement_inprocess.py, tests/test_confinement_lab.py.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Coroutine

import dns.rdatatype

from splitdns.core import confinement
from splitdns.core.exchange import Done
from splitdns.core.tunnel import TunnelState
from splitdns.core.zone import Zone
from splitdns.shell import logs

# A tunnel just up may drop its first packets, and its DNS may be down for a while: a failed
# canary is asked again, 1 s later, then twice as late each time up to every 30 s, until it
# passes or the tunnel changes (a new round). `/ready?zone=` says why meanwhile.
FIRST_RETRY, LAST_RETRY = 1.0, 30.0

Ask = Callable[[Zone, str, int], Awaitable[Done]]


def follow(zone: Zone, before: TunnelState | None, after: TunnelState, ask: Ask,
           spawn: Callable[[Coroutine[object, object, None]], None],
           served: Callable[[Zone], bool]) -> None:
    """The zone's tunnel changed from `before` to `after`: start a canary if the path is new,
    forget the last one if the tunnel went down. `served`: whether the zone is still the
    server's (a reload replaces it, and its canary stops)."""
    canary = zone.stats.canary
    if not after.up:
        canary.stopped(after.describe())
    elif confinement.canary_due(before, after):
        name = confinement.canary_name(zone.name, os.urandom(6).hex())
        spawn(_fly(zone, canary.start(name, after.device), ask, served))


async def _fly(zone: Zone, round_: int, ask: Ask, served: Callable[[Zone], bool]) -> None:
    canary = zone.stats.canary
    wait = FIRST_RETRY
    # Ends at a pass, when the tunnel goes down or up anew, or when a reload replaced the zone.
    while canary.round == round_ and served(zone):
        done = await ask(zone, canary.name, int(dns.rdatatype.A))
        rcode = done.reply.rcode() if done.reply is not None else None
        before = canary.status
        line = canary.answered(round_, rcode, done.error if done.reply is None else None,
                               done.upstream, time.time())
        if line is None or canary.passed:
            if line is not None:
                logs.info(f"zone {zone.name}: {line}")
            return
        if before != canary.status:
            logs.error(f"zone {zone.name}: {line}")
        await asyncio.sleep(wait)
        wait = min(wait * 2, LAST_RETRY)
