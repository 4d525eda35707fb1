"""Whether a zone can answer, decided here for the lifecycle (shell/lifecycle.py) to carry out:
the readiness rule, what proves a zone ready, its live state for `/ready?zone=`, and what the
zone does when its tunnel changes.

Readiness, the rule: `/ready` answers 200 once every zone has answered a real query through
its upstreams (a probe name per zone: `ready { probe NAME... }`, else the zone's apex NS), and
stays 200 after that even if a zone's upstreams fail later. Taking the pod out of its Services
would not bring a tunnel back, and it would cut the cluster names too; the tunnel zone already
answers at once (SERVFAIL with a reason, or stale) while it is down. `/ready` goes 503 again
only for what the pod itself must fix or is doing: a forwarding loop, or shutting down.
`/ready?zone=Z` is live: 503 while Z has not answered yet, while all its upstreams are marked
down, while its tunnel is down or its canary (core/confinement.py) has not been answered
since the tunnel came up, or while it loops.

Sans-io: no sockets, no clock (`now` comes in), no logging (lines are returned); the
zone's readiness and tunnel state are set here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import dns.rcode
import dns.rdatatype

from splitdns import config
from splitdns.codec import wire
from splitdns.core.exchange import Done, ForwardState, UpstreamState
from splitdns.core.tunnel import TunnelState
from splitdns.directives.forward import Upstream

if TYPE_CHECKING:
    from splitdns.core.zone import Zone

T_A, T_NS = int(dns.rdatatype.A), int(dns.rdatatype.NS)


@dataclass(frozen=True)
class Probe:
    """A question whose answer through the zone's upstreams proves the zone works."""

    name: str
    qtype: int


def probes(zone: Zone, chosen: Iterable[str], route: Callable[[bytes], Zone | None]) -> tuple[Probe, ...]:
    """The `ready { probe ... }` names this zone owns, else the zone's apex NS."""
    mine = tuple(Probe(n, T_A) for n in chosen if route(wire.name_to_wire(n)) is zone)
    return mine or (Probe(zone.name, T_NS),)


def waiting(zone: Zone, asked: Sequence[Probe]) -> None:
    """Probing starts: what `/ready` says until the first answers come."""
    ups = ", ".join(str(u.upstream) for f in zone.forwards for u in f.upstreams) or "no upstream"
    zone.not_ready_reason = f"waiting for {', '.join(p.name for p in asked)} to be answered through {ups}"


def proves_ready(zone: Zone, probe: Probe, done: Done) -> bool:
    """NOERROR or NXDOMAIN for a name the user chose proves it. Without one we ask the zone's
    apex only to see the upstream answer at all, so a refusal counts too: a cluster DNS may
    refuse `. NS` and still resolve every name (a pod whose catch-all never became ready
    would never start)."""
    rcode = done.reply.rcode() if done.reply is not None else None
    if rcode in (dns.rcode.NOERROR, dns.rcode.NXDOMAIN):
        return True
    return probe.name == zone.name and rcode == dns.rcode.REFUSED


def probed(zone: Zone, answers: Sequence[tuple[Probe, Done]]) -> str | None:
    """A round of probes came back: the zone is ready (latched; the line to log), or it says
    why not until the next round (None)."""
    reasons = []
    for probe, done in answers:
        if not proves_ready(zone, probe, done):
            rcode = done.reply.rcode() if done.reply is not None else done.rcode
            why = done.error or f"{probe.name} answered {dns.rcode.to_text(dns.rcode.Rcode.make(rcode))}"
            reasons.append(f"probe {probe.name}: {why}")
    if reasons:
        zone.not_ready_reason = "; ".join(reasons)
        return None
    zone.ready = True
    return f"zone {zone.name} is ready: its upstreams answered"


def live(zone: Zone) -> tuple[bool, str]:
    """The zone's live state, for /ready?zone=: a loop, the tunnel down, not answered yet,
    or every upstream of a forward marked down."""
    if zone.loop.error:
        return False, zone.loop.error
    if zone.tunnel is not None and not zone.tunnel.up:
        return False, zone.tunnel.describe()
    if zone.tunnel is not None and not zone.stats.canary.passed:
        return False, zone.stats.canary.reason  # the path is not proven yet (core.confinement)
    if not zone.ready:
        return False, zone.not_ready_reason
    for fwd in zone.forwards:
        if fwd.upstreams and all(u.down(fwd.spec.max_fails) for u in fwd.upstreams):
            return False, f"every upstream of forward {fwd.spec.origin} is down"
    return True, "ok"


def unheard(zone: Zone, now: float, max_age: float) -> list[tuple[ForwardState, UpstreamState]]:
    """Upstreams in service that have not replied for `max_age` seconds: what a live
    readiness check must probe before it can say the zone is up."""
    return [(fwd, u) for fwd in zone.forwards for u in fwd.upstreams
            if fwd.spec.max_fails > 0 and not u.down(fwd.spec.max_fails)
            and now - u.last_reply > max_age]


def problems(zones: Iterable[Zone], wanted: set[str] | None, stopping: bool) -> list[str]:
    """What makes `/ready` (every zone, `wanted` None) or `/ready?zone=` (those zones, live)
    answer 503; none means 200."""
    if wanted is None:
        found = [f"{z.name}: {z.loop.error or z.not_ready_reason}" for z in zones
                 if z.loop.error or not z.ready]
    else:
        found = [f"{z.name}: {why}" for z in zones if set(z.block.zones) & wanted
                 for ok, why in [live(z)] if not ok]
    return ["shutting down", *found] if stopping else found


def proofs(zones: Iterable[Zone], wanted: set[str]) -> list[str]:
    """What a 200 of `/ready?zone=` adds for the tunnel zones asked: their canary's answer."""
    return [f"{z.name}: {z.stats.canary.reason}" for z in zones
            if set(z.block.zones) & wanted and z.tunnel is not None and z.stats.canary.passed]


@dataclass(frozen=True)
class TunnelChange:
    """What the lifecycle carries out after the zone followed its tunnel: names to route to
    the zone (domains the VPN pushed), a loop to log, whether to probe for loops."""

    learn: tuple[str, ...] | None  # None: what was learned before stays
    loop_error: str | None
    probe_loops: bool


def follow_tunnel(zone: Zone, state: TunnelState, ours: set[tuple[str, int]],
                  origin: str = "pushed by the VPN server") -> TunnelChange:
    """The zone takes the tunnel's new state: its tunnel forwards ask the pushed servers (health
    kept for those that stay). A pushed server that is this very server is a loop, said at
    once; other new servers are probed for a loop where the block asks for it (`loop`)."""
    zone.tunnel = state
    learn = state.pushed.domains if zone.learns_domains and state.pushed.domains else None
    device = state.device or None  # core.confinement chose it: the tunnel's interface, or none
    ups = [Upstream(host, port, origin, device=device) for host, port in state.pushed.servers]
    changed = any([f.set_upstreams(ups) for f in zone.forwards if f.spec.tunnel])
    if not (changed and ups):
        return TunnelChange(learn, None, False)
    looped = zone.loop.servers_pushed([str(u) for u in ups if config.is_ours(u.host, u.port, ours)])
    return TunnelChange(learn, looped, looped is None and zone.loops_probed)
