"""`autopath`: the resolver ends the client's search walk itself, in one trip.

Syntax, as CoreDNS's plugin of the same name:

    autopath [ZONE...] RESOLV-CONF

RESOLV-CONF is a resolv.conf file (in a pod, /etc/resolv.conf: the file the kubelet writes
from the pod's `dnsConfig`); its `search` line (or `domain`, without one) is the search list
every client of the pod walks, and its `ndots` option how many dots a name needs to be tried
as it is first. It is read when the Corefile is loaded and again at each reload. ZONE limits
autopath to names under those zones (the block's zones by default).

A query for NAME.<first search domain> that is answered NXDOMAIN is asked again, by the
resolver, with each later search domain and then as NAME itself, until an answer that is not
NXDOMAIN; the client gets that answer under a CNAME from the name it asked to the name that
answered, so it stops after its first query. When every try is NXDOMAIN the client gets the
first NXDOMAIN and walks on itself, as with CoreDNS. CoreDNS's `@kubernetes` form (the search
list of the client pod, from a watch on every Pod) is refused: an in-pod resolver has one
search list, its own pod's. No sockets, no clock: the file is read here, at load.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from splitdns.corefile import Statement
from splitdns.directives import _args
from splitdns.errors import ConfigError

USAGE = "autopath [ZONE...] RESOLV-CONF"
MAX_SEARCH = 32  # glibc since 2.26 has no limit; a longer list is a mistake, not a pod's
DEFAULT_NDOTS = 1  # resolv.conf(5)


@dataclass(frozen=True)
class AutopathSpec:
    zones: tuple[str, ...]    # where it completes names; empty: the block's zones
    resolv_conf: str          # the file, as written
    search: tuple[str, ...]   # the search list it read, fully qualified ('' when not read)
    ndots: int = DEFAULT_NDOTS
    read: bool = True         # False when the file was left unread (`check` of a pod's Corefile)


def parse(st: Statement, read_files: bool = True) -> AutopathSpec:
    _args.arity(st, 1, None, USAGE)
    _args.no_body(st, USAGE)
    *zone_args, path = st.args
    if path.startswith("@"):
        raise ConfigError(st.where, f"autopath {path}: splitdns completes names with its own pod's "
                                    "search list; name the pod's resolv.conf instead "
                                    "(autopath /etc/resolv.conf)")
    zones = tuple(z for text in zone_args for z in _args.zones(st, text, "autopath"))
    if not read_files:
        return AutopathSpec(zones, path, (), DEFAULT_NDOTS, read=False)
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as err:
        raise ConfigError(st.where, f"autopath: cannot read {path}: {err.strerror or err}") from None
    search, ndots = read_resolv_conf(st, path, lines)
    return AutopathSpec(zones, path, search, ndots)


def read_resolv_conf(st: Statement, path: str, lines: list[str]) -> tuple[tuple[str, ...], int]:
    """The search list and ndots of a resolv.conf, as the C libraries read it: the last
    `search` or `domain` line wins, `options ndots:N` is capped at 15."""
    search: list[str] = []
    ndots = DEFAULT_NDOTS
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split(";", 1)[0].split()
        if not words:
            continue
        if words[0] in ("search", "domain"):
            try:
                search = [_args.domain_name(w) for w in (words[1:] if words[0] == "search" else words[1:2])]
            except ValueError as err:
                raise ConfigError(st.where, f"autopath: {path} line {number}: {err}") from None
        elif words[0] == "options":
            for option in words[1:]:
                if option.startswith("ndots:"):
                    value = option.partition(":")[2]
                    if not value.isdigit():
                        raise ConfigError(st.where, f"autopath: {path} line {number}: "
                                                    f"{option!r} is not ndots:NUMBER")
                    ndots = min(int(value), 15)
    search = [s for s in dict.fromkeys(search) if s != "."]  # none: nothing to complete, as CoreDNS
    if len(search) > MAX_SEARCH:
        raise ConfigError(st.where, f"autopath: {path} lists {len(search)} search domains; "
                                    f"at most {MAX_SEARCH}")
    return tuple(search), ndots
