"""Which interface a tunnel zone's queries may leave by, and the canary that proves the path. Pure.

A tunnel zone's upstream sockets are bound to the tunnel's interface (SO_BINDTODEVICE, which a
fresh socket may take without any capability since Linux 5.7): the kernel then sends them by
that interface or not at all, whatever the routing table says. With the tunnel's route gone
they still leave by the tunnel (the kernel takes a bound socket's destination as on-link);
with the interface down or gone, sending fails at once and the zone fails fast. Without the
binding, the same queries would follow the next route that matches, usually the pod's eth0:
private names in clear, to whoever answers there.

The interface comes from the tunnel's watcher (OpenVPN's `dev`, from the UPDOWN block, the
hook's environment or the client's log; the WireGuard interface the zone names) or from the
Corefile (`interface NAME`), which wins. A tunnel that is up on an interface nobody named is
down for the zone: binding to nothing would let the routing table choose.

The canary: at every tunnel-up the zone asks a name nobody has (`splitdns-canary-<random>.`
under the zone) through its upstreams. An answer from the zone's DNS (NXDOMAIN, or NOERROR)
over a socket bound to the tunnel proves the path end to end; `/ready?zone=` and the metrics
say whether it did.

Sans-io: no sockets, no clock (`wall` comes in), no randomness (the token comes in).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Protocol

from splitdns.core.tunnel import DOWN, TunnelState

CANARY_LABEL = "splitdns-canary-"
NONE, PENDING, PASSED, FAILED = "none", "pending", "passed", "failed"
_OPENED = re.compile(r"TUN/TAP device (\S+) opened")
_NOERROR, _NXDOMAIN = 0, 3


class Binding(Protocol):
    """What a tunnel directive says about binding: whether to, and the interface if it names one."""

    @property
    def bind_to_tunnel(self) -> bool: ...

    @property
    def interface(self) -> str | None: ...


def device_from_log(message: str) -> str | None:
    """The interface in OpenVPN's `TUN/TAP device tun0 opened` (its log at verb 1 and up)."""
    m = _OPENED.search(message)
    return m.group(1) if m else None


def confine(state: TunnelState, spec: Binding) -> TunnelState:
    """The state the zone follows: `device` is the interface its upstream sockets are bound to,
    empty when binding is off; up on an unknown interface reads as down."""
    if not spec.bind_to_tunnel:
        return replace(state, device="") if state.device else state
    device = spec.interface or state.device
    if state.up and not device:
        return TunnelState(DOWN, "up, but on an interface nobody named, and the zone's queries may only "
                                 "leave by the tunnel's: name it with `interface NAME`", state.pushed)
    return replace(state, device=device) if device != state.device else state


def canary_due(before: TunnelState | None, after: TunnelState) -> bool:
    """A new path to prove: the tunnel came up, or came up again on another interface or with
    other servers."""
    if not after.up:
        return False
    return before is None or not before.up or before.device != after.device \
        or before.pushed.servers != after.pushed.servers


def canary_name(zone: str, token: str) -> str:
    """A name under the zone that nobody has: its answer can only be a denial."""
    return f"{CANARY_LABEL}{token}.{zone}" if zone != "." else f"{CANARY_LABEL}{token}."


@dataclass
class Canary:
    """The canary of a zone's latest tunnel-up, and the count of every canary's outcome."""

    status: str = NONE
    name: str = ""
    device: str = ""        # the interface its query was bound to ("" when binding is off)
    reason: str = "the tunnel has not come up yet"
    answered_at: float = 0.0  # wall clock of the last outcome
    round: int = 0          # one per tunnel-up: an older canary's outcome does not count
    outcomes: dict[str, int] = field(default_factory=lambda: {PASSED: 0, FAILED: 0})

    def start(self, name: str, device: str) -> int:
        """A tunnel-up: a new canary, pending until its answer; the round it belongs to."""
        self.round += 1
        self.status, self.name, self.device = PENDING, name, device
        via = f" bound to {device}" if device else " (not bound to the tunnel: binding is off)"
        self.reason = f"the tunnel canary {name} has not been answered yet{via}"
        return self.round

    def answered(self, round_: int, rcode: int | None, error: str | None, upstream: str,
                 wall: float) -> str | None:
        """One canary attempt came back: passed (latched for this round) or failed, and the
        line to log; None when it belongs to an older round or the round already passed."""
        if round_ != self.round or self.status == PASSED:
            return None
        self.answered_at = wall
        via = f" through {self.device}" if self.device else ""
        if rcode in (_NOERROR, _NXDOMAIN) and error is None:
            self.status = PASSED
            self.outcomes[PASSED] += 1
            self.reason = f"the tunnel canary {self.name} was answered by {upstream}{via}"
            return self.reason
        self.status = FAILED
        self.outcomes[FAILED] += 1
        why = error or f"answered {_rcode_text(rcode)}"
        self.reason = f"the tunnel canary {self.name} failed{via}: {why}"
        return self.reason

    def stopped(self, why: str) -> None:
        """The tunnel went down before its canary passed (or after): nothing is proven now."""
        self.round += 1
        if self.status != NONE:
            self.status, self.reason = NONE, f"no canary while {why}"

    @property
    def passed(self) -> bool:
        return self.status == PASSED


def _rcode_text(rcode: int | None) -> str:
    names = {1: "FORMERR", 2: "SERVFAIL", 4: "NOTIMP", 5: "REFUSED"}
    return "nothing" if rcode is None else names.get(rcode, f"rcode {rcode}")
