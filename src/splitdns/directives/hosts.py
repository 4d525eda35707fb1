"""`hosts`: answer A, AAAA and PTR from a hosts(5) file and lines inlined in the Corefile.

Syntax (CoreDNS's):

    hosts [FILE [ZONES...]] {
        IP NAME...             inline entries, served with the file's
        ttl SECONDS            3600 by default
        no_reverse             no PTR records from the entries
        reload DURATION        how often the file is checked for changes (5s; 0 never)
        fallthrough [ZONES...] pass a name with no entry on to the next plugin
        fallthrough_unsupported  and a question of another type than A, AAAA or PTR too
    }

FILE defaults to /etc/hosts; a missing file serves the inline entries alone, and is read
again when it appears. ZONES default to the block's. As in CoreDNS: a name with an entry
of the other family gets NODATA, a name with none gets SERVFAIL (there is no SOA to say
NXDOMAIN with) unless `fallthrough` covers it, names outside the zones go on, PTR is
answered for any reverse name with an entry, and `*.example.com` matches one label. An
inline entry after `fallthrough` is an error (CoreDNS reads it as an unknown option there).
`HostsTable` is the lookup: pure, built from text, so a reload is a new table.
Tests: tests/test_plugins.py, tests/test_plugins_serve.py.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from splitdns.corefile import Statement
from splitdns.directives import _args
from splitdns.errors import ConfigError

USAGE = ("hosts [FILE [ZONES...]] { IP NAME...; ttl SECONDS; no_reverse; reload DURATION; "
         "fallthrough [ZONES...]; fallthrough_unsupported }")
DEFAULT_FILE = "/etc/hosts"
DEFAULT_TTL = 3600
DEFAULT_RELOAD = 5.0
OPTIONS = ("ttl", "no_reverse", "reload", "fallthrough", "fallthrough_unsupported")


@dataclass(frozen=True)
class HostsSpec:
    file: str = DEFAULT_FILE
    zones: tuple[str, ...] = ()          # empty: the block's zones
    inline: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (address, names) as written
    ttl: int = DEFAULT_TTL
    no_reverse: bool = False
    reload: float = DEFAULT_RELOAD
    fallthrough: tuple[str, ...] | None = None  # None: off; (): every zone
    fallthrough_unsupported: bool = False  # other types than A, AAAA, PTR fall through too


def parse(st: Statement) -> HostsSpec:
    args = st.args
    file = args[0] if args else DEFAULT_FILE
    zones = tuple(z for arg in args[1:] for z in _args.zones(st, arg, "hosts"))
    inline: list[tuple[str, tuple[str, ...]]] = []
    values: dict[str, object] = {}
    for opt in st.body or ():
        if _is_address(opt.name):
            if "fallthrough" in values:
                raise ConfigError(opt.where, f"hosts: the entry {opt.name} comes after fallthrough; "
                                             "put the entries first (CoreDNS refuses them there too)")
            if not opt.args:
                raise ConfigError(opt.where, f"hosts: the entry {opt.name} names no host")
            inline.append((opt.name, opt.args))
            continue
        if opt.name not in OPTIONS:
            raise ConfigError(opt.where, f"hosts: {opt.name!r} is neither an address nor an option "
                                         f"({', '.join(OPTIONS)}); usage: {USAGE}")
        if opt.name == "ttl":
            _args.arity(opt, 1, 1, "ttl SECONDS")
            values["ttl"] = _args.integer(opt, opt.args[0], "hosts ttl", 0, 2**31 - 1)
        elif opt.name == "no_reverse":
            _args.arity(opt, 0, 0, "no_reverse")
            values["no_reverse"] = True
        elif opt.name == "reload":
            _args.arity(opt, 1, 1, "reload DURATION")
            values["reload"] = _args.duration(opt, opt.args[0], "hosts reload")
        elif opt.name == "fallthrough_unsupported":
            _args.arity(opt, 0, 0, "fallthrough_unsupported")
            values["fallthrough_unsupported"] = True
        else:
            values["fallthrough"] = tuple(z for a in opt.args for z in _args.zones(opt, a, "fallthrough"))
    if values.get("fallthrough_unsupported") and "fallthrough" not in values:
        raise ConfigError(st.where, "hosts: fallthrough_unsupported needs fallthrough")
    return HostsSpec(file, zones, tuple(inline), **values)  # type: ignore[arg-type]


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return False
    return True


@dataclass
class HostsTable:
    """Names to addresses and addresses to names, as the lookups want them."""

    v4: dict[str, list[str]] = field(default_factory=dict)
    v6: dict[str, list[str]] = field(default_factory=dict)
    reverse: dict[str, list[str]] = field(default_factory=dict)  # reverse name -> host names

    def __len__(self) -> int:
        return len(set(self.v4) | set(self.v6))

    def add(self, address: str, names: tuple[str, ...] | list[str], zones: tuple[str, ...]) -> None:
        """One line's entries: names outside `zones` are left out, as CoreDNS does."""
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            return  # hosts(5): a line that does not start with an address is skipped
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        text = str(ip)
        table = self.v4 if ip.version == 4 else self.v6
        for raw in names:
            try:
                name = _args.domain_name(raw)
            except ValueError:
                continue
            if not any(in_zone(name, z) for z in zones):
                continue
            kept = table.setdefault(name, [])
            if text not in kept:
                kept.append(text)
            if not name.startswith("*."):
                owners = self.reverse.setdefault(ip.reverse_pointer + ".", [])
                if name not in owners:
                    owners.append(name)

    def addresses(self, name: str, family: int) -> list[str]:
        table = self.v4 if family == 4 else self.v6
        found = table.get(name)
        if found is None and "." in name.rstrip("."):
            found = table.get("*." + name.split(".", 1)[1])  # one label, never the apex
        return found or []

    def known(self, name: str) -> bool:
        return bool(self.addresses(name, 4) or self.addresses(name, 6))


def build(text: str, inline: tuple[tuple[str, tuple[str, ...]], ...], zones: tuple[str, ...]) -> HostsTable:
    """The table for a hosts file's text and the inline entries (the file's first)."""
    table = HostsTable()
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2:
            table.add(fields[0], fields[1:], zones)
    for address, names in inline:
        table.add(address, names, zones)
    return table


def in_zone(name: str, zone: str) -> bool:
    """Whether a lower-case fully qualified name is `zone` or below it."""
    return zone == "." or name == zone or name.endswith("." + zone)
