"""Where a WireGuard tunnel stands, from what a process without CAP_NET_ADMIN can read. Pure.

WireGuard has no DNS push and no "down" event. What there is:

- the DNS wg-quick hands to `resolvconf` at `up` (its config's `DNS =` line: addresses become
  `nameserver` lines, names `search` lines) and takes back at `down`. Our `resolvconf` shim
  records it as resolvconf itself does, one file per interface (the lines wg-quick piped in),
  and deletes that file at `down`;
- the config file itself, for its `DNS =` line, when it is shared with the resolver;
- whether the interface exists and is up: any process in the network namespace may ask;
- the last handshake per peer (`wg show IFACE latest-handshakes`), which only a process with
  CAP_NET_ADMIN can read. The shim's `--watch` mode, run in the VPN container, copies it to a
  file beside the DNS lines, with the time it read it.

A session key is rejected REJECT_AFTER_TIME (180 s) after its handshake; a healthy tunnel in
use (or with PersistentKeepalive) handshakes again every REKEY_AFTER_TIME (120 s). A newest
handshake older than 180 s plus a margin means no peer has answered for that long.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from splitdns.core import tunnel
from splitdns.core.tunnel import DOWN, UNKNOWN, UP, Pushed, TunnelState

REJECT_AFTER_TIME = 180.0
REKEY_AFTER_TIME = 120.0
MARGIN = 15.0
# The watcher writes every few seconds; a report older than this is a watcher that stopped,
# and says nothing either way about the tunnel.
REPORT_FRESH_FOR = 30.0
# The interface-order prefix wg-quick puts before the interface name (`tun.wg0`), from
# /etc/resolvconf/interface-order; the same pattern as wg-quick's resolvconf_iface_prefix.
_PREFIX = re.compile(r"[A-Za-z0-9-]+\.")
_IFACE = re.compile(r"[A-Za-z0-9_=+.-]{1,15}")


def interface_of(recorded: str, wanted: str) -> bool:
    """Whether the name wg-quick gave resolvconf (maybe `tun.wg0`) is the interface `wanted`."""
    if recorded == wanted:
        return True
    prefix = recorded[: len(recorded) - len(wanted)]
    return recorded.endswith("." + wanted) and _PREFIX.fullmatch(prefix) is not None


def valid_interface(name: str) -> bool:
    """A name wg-quick accepts for an interface (its own check: [a-zA-Z0-9_=+.-]{1,15})."""
    return _IFACE.fullmatch(name) is not None


@dataclass(frozen=True)
class Dns:
    """The DNS part of a wg-quick `DNS =` line: addresses, and names as search domains."""

    servers: tuple[str, ...] = ()
    search: tuple[str, ...] = ()

    def pushed(self) -> Pushed:
        # wg-quick has one list of names, used as search domains; with `domains` the zone owns
        # them, as it owns the domains an OpenVPN server names for its DNS server.
        search = tuple(dict.fromkeys(_domain(s) for s in self.search if _domain(s)))
        return Pushed(tuple((s, 53) for s in self.servers), search, search)


def from_resolvconf(text: str) -> Dns:
    """The lines wg-quick pipes into `resolvconf -a`: `nameserver IP`, `search NAME...`."""
    servers: list[str] = []
    search: list[str] = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) >= 2 and words[0] == "nameserver":
            address = tunnel.address(words[1])
            if address is not None and address not in servers:
                servers.append(address)
        elif words and words[0] in ("search", "domain"):
            search.extend(words[1:])
    return Dns(tuple(servers), tuple(search))


def from_config(text: str) -> Dns:
    """The `DNS =` lines of a wg-quick config's [Interface] section, split as wg-quick does."""
    servers: list[str] = []
    search: list[str] = []
    section = ""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip().lower()
            continue
        key, sep, value = line.partition("=")
        if not sep or section != "interface" or key.strip().lower() != "dns":
            continue
        for item in value.replace(",", " ").split():
            address = tunnel.address(item)
            if address is not None:
                if address not in servers:
                    servers.append(address)
            else:
                search.append(item)
    return Dns(tuple(servers), tuple(search))


@dataclass(frozen=True)
class Handshakes:
    """What the watcher read with `wg show IFACE latest-handshakes`, and when."""

    read_at: float
    latest: tuple[float, ...]  # per peer, Unix time; 0: never
    error: str = ""            # `wg show` failed (the interface is gone, or no permission)


def from_watch(text: str) -> Handshakes | None:
    """The watcher's file: the time of reading, then `wg show`'s lines or `error: ...`."""
    lines = text.splitlines()
    if not lines:
        return None
    try:
        read_at = float(lines[0].strip())
    except ValueError:
        return None
    latest: list[float] = []
    for line in lines[1:]:
        if line.startswith("error:"):
            return Handshakes(read_at, (), line[len("error:"):].strip() or "wg show failed")
        words = line.split()
        if len(words) == 2 and words[1].isdigit():
            latest.append(float(words[1]))
    return Handshakes(read_at, tuple(latest))


@dataclass(frozen=True)
class Seen:
    """One look at the sources; None where a source is not configured or not readable."""

    interface: str
    recorded: Dns | None = None         # the shim's file for the interface; None: no such file
    recorded_at: float = 0.0            # when the shim wrote it (Unix time)
    shim: bool = False                  # the shim is a configured source
    config: Dns | None = None           # the config file's DNS line; None: not configured
    config_error: str = ""
    link: bool | None = None            # the interface exists and is up; None: unknown
    handshakes: Handshakes | None = None


def state_of(seen: Seen, now: float, max_age: float = REJECT_AFTER_TIME + MARGIN) -> TunnelState:
    """The tunnel's state from one look at its sources. `now` is Unix time (the watcher's
    clock and ours are the node's)."""
    iface = seen.interface
    if seen.shim and seen.recorded is None:
        return TunnelState(DOWN, f"wg-quick has not handed {iface}'s DNS to resolvconf (not up, "
                                 "or brought down)", _pushed(seen))
    dns = seen.recorded if seen.recorded is not None else seen.config
    if dns is None:
        why = seen.config_error or "no DNS source"
        return TunnelState(UNKNOWN, why)
    pushed = dns.pushed()
    if not pushed.servers:
        return TunnelState(DOWN, f"the wg-quick config of {iface} has no DNS = address", pushed)
    if seen.link is False:
        return TunnelState(DOWN, f"interface {iface} is gone or down (wg-quick down, or the VPN "
                                 "container stopped)", pushed)
    report = seen.handshakes
    # A report read before wg-quick last came up speaks of the interface before it (`date +%s`
    # counts whole seconds, hence the second of slack).
    if report is not None and now - report.read_at <= REPORT_FRESH_FOR \
            and report.read_at + 1 >= seen.recorded_at:
        if report.error:
            return TunnelState(DOWN, f"wg show {iface}: {report.error}", pushed)
        newest = max(report.latest, default=0.0)
        # Never handshaken: traffic (the first query) starts the handshake, so not down yet.
        if newest > 0 and report.read_at - newest > max_age:
            return TunnelState(DOWN, f"the last handshake on {iface} was {report.read_at - newest:.0f} s "
                                     f"ago (WireGuard drops a session after {REJECT_AFTER_TIME:.0f} s)",
                               pushed)
    return TunnelState(UP, f"wg-quick up ({iface})", pushed)


def wants_traffic(seen: Seen, now: float, max_age: float = REJECT_AFTER_TIME + MARGIN) -> bool:
    """Whether to send a query into the tunnel now. WireGuard handshakes again only when there
    is traffic and the session is older than REKEY_AFTER_TIME: an idle tunnel without
    PersistentKeepalive would age past `max_age` though its peer is fine, and, once the zone
    fails fast, nothing would ever send the traffic that revives it."""
    report = seen.handshakes
    if report is None or report.error or now - report.read_at > REPORT_FRESH_FOR:
        return False
    newest = max(report.latest, default=0.0)
    return newest > 0 and report.read_at - newest > max(0.0, max_age - (REJECT_AFTER_TIME + MARGIN
                                                                         - REKEY_AFTER_TIME))


def _pushed(seen: Seen) -> Pushed:
    return seen.config.pushed() if seen.config is not None else Pushed()


def _domain(text: str) -> str:
    # `~corp.example`: systemd-resolved's spelling of a routing-only domain; the name is the same.
    return tunnel.domain(text.strip().lstrip("~"))
