"""Forwarding-loop detection: a zone's loop state, and every decision that changes it.

Two ways to find a loop, as CoreDNS's `loop` plugin and more. A probe: the shell asks a
random name (HINFO) through the zone's upstreams; if that query reaches this server again,
the upstreams lead back here. A push: the VPN server names this very server as the tunnel's
DNS server. While a loop is known, the zone answers SERVFAIL with the reason (and `/ready`
says it); a probe that an upstream answers without the query coming back clears it, and so
do new pushed servers that are not ours.

The probes in flight are shared by every zone of a server (`LoopProbes`): a probe may come
back on another listener, to another zone, and still proves the loop of the zone that sent
it. When to probe again is decided here too (`LoopProbing`); the shell only asks and waits.
Pure: no sockets, no clock, no random numbers (the shell picks the probe's labels).
Tests: tests/test_zone.py (loops), tests/test_lifecycle_inprocess.py.
"""

from __future__ import annotations

from collections.abc import Callable

import dns.rcode

from splitdns.codec import wire
from splitdns.core.exchange import EDE_NOT_READY
from splitdns.core.metrics import ZoneStats

TYPE_HINFO = 13
LOOP_PROBE_ATTEMPTS = 30  # CoreDNS: a probe every second for up to 30 s until one teaches something

LoopProbes = dict[bytes, "LoopGuard"]  # probe names in flight, by wire name, to their zone's guard


class LoopGuard:
    """One zone's forwarding-loop state. `error` is set while a loop is known; only the
    methods below change it."""

    def __init__(self, zone: str, stats: ZoneStats, upstreams: Callable[[], str],
                 probes: LoopProbes | None = None) -> None:
        self.zone = zone                # the zone's name, for messages
        self.stats = stats              # loops_detected is counted here
        self.upstreams = upstreams      # "a:53, b:53": where the zone forwards, for messages
        self.probes: LoopProbes = {} if probes is None else probes
        self.error: str | None = None

    def probe_name(self, first: str, second: str) -> str:
        """The name a probe asks: two random labels under the zone."""
        return f"{first}.{second}.{self.zone}".replace("..", ".")

    def probe_sent(self, name: bytes) -> int:
        """A probe for `name` goes out; returns the count to hand to `probe_finished`."""
        self.probes[name] = self
        return self.stats.loops_detected

    def probe_finished(self, name: bytes, answered: bool, detected_before: int) -> bool:
        """The probe's exchange ended (`answered`: an upstream replied). True when probing
        may stop: the probe came back (a loop), or an upstream answered and it did not (no
        loop). False: nothing was learned, ask again later."""
        self.probes.pop(name, None)
        if self.stats.loops_detected > detected_before:
            return True
        if answered:
            self.cleared()
            return True
        return False

    def probing(self, attempts: int = LOOP_PROBE_ATTEMPTS) -> LoopProbing:
        """A round of probes (at start, after a reload, when the upstreams change)."""
        return LoopProbing(self, attempts)

    def returned(self, q: wire.Query) -> LoopGuard | None:
        """The guard whose probe this query is, if it is one (it came back to us)."""
        if q.qtype != TYPE_HINFO or not self.probes:
            return None
        return self.probes.get(q.name)

    def probe_returned(self, q: wire.Query) -> tuple[bytes, str]:
        """Our own probe reached us again: the zone loops. The reply to the looping query,
        and the line to log."""
        self.error = (f"forwarding loop detected for zone {self.zone}: a probe sent to "
                      f"{self.upstreams()} came back to this server; fix the forward target")
        self.stats.loops_detected += 1
        log = f"plugin/loop: {self.error}. Query: \"HINFO {wire.wire_to_text(q.name)}\""
        return self.refusal(q), log

    def servers_pushed(self, ours: list[str]) -> str | None:
        """The VPN server pushed new DNS servers, of which `ours` are this very server: a
        loop (the line to log), or none any more."""
        if ours:
            return self.pushed_ourselves(ours[0])
        self.cleared()
        return None

    def pushed_ourselves(self, server: str) -> str:
        """The VPN server pushed this server itself as the tunnel's DNS server; the line to log."""
        self.error = (f"forwarding loop: the VPN server pushed {server} as DNS server for "
                      f"{self.zone}, which is this server itself")
        self.stats.loops_detected += 1
        return f"plugin/loop: {self.error}"

    def cleared(self) -> None:
        """No loop (any more): an upstream answered a probe, or new servers were pushed."""
        self.error = None

    def refusal(self, q: wire.Query) -> bytes:
        """What a query to a looping zone gets: SERVFAIL, with the reason as an Extended DNS
        Error (RFC 8914: Not Ready)."""
        assert self.error is not None
        return wire.error_reply(q, dns.rcode.SERVFAIL, (EDE_NOT_READY, self.error))


class LoopProbing:
    """One round of loop probes, as CoreDNS's `loop` runs them: a probe, and after each that
    taught nothing another (the shell waits its interval between them), until one comes back
    or is answered, at most `attempts` of them."""

    def __init__(self, guard: LoopGuard, attempts: int) -> None:
        self.guard = guard
        self.left = attempts
        self.over = attempts <= 0  # learned something, or out of attempts
        self.asking: tuple[bytes, int] | None = None  # the probe out: its name, and the count before

    def next(self, first: str, second: str) -> str | None:
        """The name the next probe asks (two random labels the shell picks), None when the
        round is over."""
        if self.over:
            return None
        if self.asking is not None:
            raise RuntimeError("a loop probe is still out: `finished` comes first")
        name = self.guard.probe_name(first, second)
        key = wire.name_to_wire(name)
        self.asking = (key, self.guard.probe_sent(key))
        self.left -= 1
        return name

    def finished(self, answered: bool) -> None:
        """The probe's exchange ended (`answered`: an upstream replied)."""
        assert self.asking is not None
        key, before = self.asking
        self.asking = None
        learned = self.guard.probe_finished(key, answered, before)
        self.over = learned or self.left <= 0
