"""The tunnel canary's flight: ask its name through the zone's upstreams, retry a few times
while it fails, record the outcome. What is due, what passes and what it means are
core/confinement.py's; this is the I/O."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable, Coroutine

import dns.rdatatype

from splitdns.core import confinement
from splitdns.core.exchange import Done
from splitdns.core.tunnel import TunnelState
from splitdns.core.zone import Zone
from splitdns.shell import logs

ATTEMPTS = 10      # a tunnel just up may drop its first packets; after that, /ready?zone= says why
RETRY_AFTER = 1.0

Ask = Callable[[Zone, str, int], Awaitable[Done]]


def follow(zone: Zone, before: TunnelState | None, after: TunnelState, ask: Ask,
           spawn: Callable[[Coroutine[object, object, None]], None]) -> None:
    """The zone's tunnel changed from `before` to `after`: start a canary if the path is new,
    forget the last one if the tunnel went down."""
    canary = zone.stats.canary
    if not after.up:
        canary.stopped(after.describe())
    elif confinement.canary_due(before, after):
        name = confinement.canary_name(zone.name, secrets.token_hex(6))
        spawn(_fly(zone, canary.start(name, after.device), ask))


async def _fly(zone: Zone, round_: int, ask: Ask) -> None:
    canary = zone.stats.canary
    for _ in range(ATTEMPTS):
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
        await asyncio.sleep(RETRY_AFTER)
