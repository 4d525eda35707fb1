"""Health checks of failing upstreams, as CoreDNS's forward does them (not the readiness and
loop queries: those are `Server.ask_upstreams`, run by `lifecycle`).

After an upstream fails once, it is probed (`. IN NS`, RD as `health_check ... no_rec` says)
every `health_check` interval until any reply comes back: a reply of any rcode means the
upstream is alive, and it returns to service at once. Meanwhile `max_fails` failures in a row
mark it down, and exchanges skip it (exchange.Exchange). A live readiness check probes an
upstream that has been silent for a while the same way (`check`).
Tests: tests/test_server_inprocess.py, tests/test_resolve.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine

from splitdns.codec import wire
from splitdns.core.exchange import ForwardState, UpstreamState
from splitdns.shell import logs, upstream

HEALTH_PROBE_TIMEOUT = 1.0
TYPE_NS = 2


class UpstreamHealthChecks:
    def __init__(self, clock: Callable[[], float], counters: upstream.Counters,
                 spawn: Callable[[Coroutine[object, object, None]], None],
                 query_ids: Callable[[], int]) -> None:
        self.clock = clock
        self.counters = counters
        self.spawn = spawn
        self.query_ids = query_ids  # the exchanges' own source (upstream.QueryIds)

    def watch(self, fwd: ForwardState, state: UpstreamState) -> None:
        """A flight named this upstream unwell (core/flight.py: it failed, and max_fails can
        mark it down): probe it, unless a probe already runs."""
        if not state.probing:
            state.probing = True
            self.spawn(self._probe(fwd, state, fwd.spec.health_check))

    def check(self, fwd: ForwardState, state: UpstreamState) -> None:
        """Probe this upstream now (a readiness check found it silent for a while); a failed
        probe goes on as after a failed exchange, so it is marked down as queries would."""
        if not state.probing and fwd.spec.max_fails > 0:
            state.probing = True
            self.spawn(self._probe(fwd, state, 0.0, once_at_least=True))

    async def _probe(self, fwd: ForwardState, state: UpstreamState, wait: float,
                     once_at_least: bool = False) -> None:
        spec = fwd.spec
        question = wire.question_query(wire.name_to_wire(spec.health_check_name), TYPE_NS,
                                       recursion=spec.health_check_rd)
        try:
            while state.fails > 0 or once_at_least:
                once_at_least = False
                await asyncio.sleep(wait)
                began = self.clock()
                probe = wire.upstream_query(question, self.query_ids(), health_probe=True)
                try:
                    await upstream.ask(probe, state.upstream, spec.force_tcp,
                                       min(HEALTH_PROBE_TIMEOUT, spec.read_timeout), self.counters)
                except upstream.UpstreamError as err:
                    state.probe_failures += 1
                    state.failed(f"health probe: {err}", spec.max_fails)
                else:
                    state.replied(self.clock())
                say_news(fwd, state)
                # One probe per interval at most, and a probe that timed out has waited its
                # share: back to back then, so a recovery is seen within one probe timeout.
                wait = max(0.0, spec.health_check - (self.clock() - began))
            say_news(fwd, state)  # back through an exchange's reply, between two probes
        finally:
            state.probing = False


def say_news(fwd: ForwardState, state: UpstreamState) -> None:
    """Log an upstream's going down, and its coming back, once each (the metrics count them)."""
    news = state.news(fwd.spec.max_fails)
    where = f"plugin/forward: zone {fwd.zone or fwd.spec.origin} upstream {state.label}"
    if news is True:
        logs.warning(f"{where} is down: {state.fails} failures in a row, the last: "
                     f"{state.last_error or 'no reason given'}; skipped until a health probe gets "
                     "a reply")
    elif news is False:
        logs.info(f"{where} is back: it answered again")
