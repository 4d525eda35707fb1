"""Corefile meaning: server blocks to a frozen, typed `Config`; errors name file and line.

Never opens a socket. Reading a resolv.conf named by `forward` is the one file access
besides the Corefile itself, and it happens here, at load, as in CoreDNS.
Tests: tests/test_config.py, tests/test_coredns_parity.py.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from splitdns import corefile, directives
from splitdns.directives import autopath, bind, forward, limits, logging, operations
from splitdns.directives._args import CIDR, domain_name, reverse_zones
from splitdns.errors import ConfigError, Location

S = TypeVar("S")
DEFAULT_PORT = 53

class Specs(dict[str, object]):
    """What each directive of a block says, by directive name: built once, never changed, and
    hashable, since blocks key the server's zones (every spec is a frozen value)."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))


@dataclass(frozen=True)
class Block:
    """One server block: the zones it owns on a port, and what it does with their queries.

    `specs` holds what each directive of the block says, by directive name (the registry in
    `splitdns.directives` says which exist); `block[D]` reads a directive used once,
    `block.every(D)` one that may repeat. `forwards` is `forward`'s, with the tunnel's
    default forward added where a tunnel directive stands alone."""

    zones: tuple[str, ...]
    port: int
    where: Location
    forwards: tuple[forward.ForwardSpec, ...] = ()
    specs: Specs = field(default_factory=Specs)

    def __getitem__(self, directive: directives.Once[S]) -> S | None:
        return self.specs.get(directive.name)  # type: ignore[return-value]

    def every(self, directive: directives.Repeated[S]) -> tuple[S, ...]:
        return self.specs.get(directive.name, ())  # type: ignore[return-value]

    def uses(self, directive: directives.Directive[object]) -> bool:
        return directive.name in self.specs

    @property
    def tunnel(self) -> directives.Directive[directives.TunnelSpec] | None:
        """The block's tunnel kind (its directive), if it follows a tunnel; one at most."""
        return next((d for d in directives.tunnels() if d.name in self.specs), None)

    @property
    def tunnel_spec(self) -> directives.TunnelSpec | None:
        """What the block's tunnel directive says, if it follows a tunnel."""
        kind = self.tunnel
        return None if kind is None else self.specs[kind.name]  # type: ignore[return-value]

    @property
    def bind(self) -> tuple[str, ...]:
        """The addresses the block listens on: loopback only, unless `bind` says otherwise."""
        return self[directives.BIND] or bind.LOOPBACK

    @property
    def explicit_bind(self) -> bool:
        return directives.BIND.name in self.specs

    @property
    def name(self) -> str:
        return " ".join(self.zones) + f":{self.port}"


@dataclass(frozen=True)
class Config:
    blocks: tuple[Block, ...]
    path: str

    @property
    def health(self) -> operations.HealthSpec | None:
        """`health` is process-wide, as in CoreDNS: the first block's wins."""
        return next((h for b in self.blocks if (h := b[directives.HEALTH])), None)

    @property
    def ready(self) -> operations.Endpoint | None:
        return next((r.endpoint for b in self.blocks if (r := b[directives.READY])), None)

    @functools.cached_property
    def limits(self) -> limits.Limits:
        """Process-wide: the first block's `limits`, else the defaults."""
        return next((lim for b in self.blocks if (lim := b[directives.LIMITS])), limits.Limits())

    @property
    def reload(self) -> operations.ReloadSpec | None:
        return next((r for b in self.blocks if (r := b[directives.RELOAD])), None)

    @property
    def prometheus(self) -> tuple[operations.Endpoint, ...]:
        return tuple(dict.fromkeys(p for b in self.blocks if (p := b[directives.PROMETHEUS])))

    def listeners(self) -> dict[tuple[str, int], tuple[Block, ...]]:
        """Which blocks each (address, port) serves."""
        out: dict[tuple[str, int], list[Block]] = {}
        for block in self.blocks:
            for host in block.bind:
                out.setdefault((host, block.port), []).append(block)
        return {k: tuple(v) for k, v in out.items()}


def load(path: str | Path, default_port: int = DEFAULT_PORT,
         env: Mapping[str, str] | None = None, read_files: bool = True) -> Config:
    return build(corefile.load(path, env), str(path), default_port, read_files)


def loads(text: str, file: str = "Corefile", default_port: int = DEFAULT_PORT,
          env: Mapping[str, str] | None = None, read_files: bool = True) -> Config:
    return build(corefile.parse(text, file, env), file, default_port, read_files)


def build(blocks: list[corefile.ServerBlock], path: str, default_port: int,
          read_files: bool = True) -> Config:
    """Blocks to a Config. read_files False leaves resolv.conf targets unread (for linting
    a Corefile meant for a pod): they are then in each ForwardSpec's `files` only."""
    built = tuple(block for b in blocks for block in _blocks(b, default_port, read_files))
    _check_unique(built)
    _check_bind_consistency(built)
    config = Config(built, path)
    _check_self_forward(config)
    return config


def _blocks(sb: corefile.ServerBlock, default_port: int, read_files: bool = True) -> list[Block]:
    """A server block, one Block per port its keys name (`a.example b.example:1053 { ... }`
    serves a.example on the default port and b.example on 1053, as CoreDNS does)."""
    by_port: dict[int, list[str]] = {}
    for key in sb.keys:
        for text in key.text.split(","):
            if text:
                zone_names, port = _key(key, text, default_port)
                by_port.setdefault(port, []).extend(zone_names)
    if not by_port:
        raise ConfigError(sb.where, "a server block needs a zone before its '{' (\".\" for every name)")
    block = _block(sb, read_files)
    return [replace(block, zones=tuple(dict.fromkeys(zones)), port=port) for port, zones in by_port.items()]


def _block(sb: corefile.ServerBlock, read_files: bool = True) -> Block:
    seen: dict[str, corefile.Statement] = {}
    specs: dict[str, object] = {}
    forwards: list[forward.ForwardSpec] = []
    forward_statements: list[corefile.Statement] = []
    for st in sb.directives:
        directive = directives.BY_NAME.get(st.name)
        if directive is None:
            raise _unknown(st)
        name = directive.name
        earlier = specs.get(name)
        if isinstance(earlier, logging.LogSpec):  # several `log` lines: CoreDNS's rules, in order
            specs[name] = earlier.and_then(directives.LOG.parse(st))
            continue
        if isinstance(directive, directives.Once) and name in seen:
            raise ConfigError(st.where, f"{name} can be used only once per server block "
                                        f"(first at {seen[name].where})")
        seen.setdefault(name, st)
        if directive is directives.FORWARD:
            forwards.append(forward.parse(st, read_files, directives.tunnel_words()))
            forward_statements.append(st)
        elif directive is directives.AUTOPATH:
            specs[name] = autopath.parse(st, read_files)
        elif isinstance(directive, directives.Repeated):
            specs[name] = (*specs.get(name, ()), directive.parse(st))  # type: ignore[misc]
        else:
            specs[name] = directive.parse(st)
    tunnels = [d for d in directives.tunnels() if d.name in specs]
    tunnel = tunnels[0] if tunnels else None
    if len(tunnels) > 1:
        first, second = seen[tunnels[0].name], seen[tunnels[1].name]
        raise ConfigError(second.where, f"{second.name}: this block already follows a tunnel "
                                        f"({first.name} at {first.where}); one per block")
    if tunnel is not None and not forwards:
        # The tunnel zone's default: fail fast, since a dead tunnel should not cost a timeout.
        forwards.append(forward.ForwardSpec(origin=".", upstreams=(), tunnel=True, max_fails=1,
                                            failfast_all_unhealthy=True, policy="sequential",
                                            where=seen[tunnel.name].where))
    for spec, st in zip(forwards, forward_statements, strict=False):
        if spec.tunnel and tunnel is None:
            kind = next(d for d in directives.tunnels() if d.tunnel and d.tunnel.word in st.args[1:])
            article = "an" if kind.name[0] in "aeiou" else "a"
            raise ConfigError(st.where, f"forward {spec.origin} {kind.name} needs {article} `{kind.name}` "
                                        "directive in the same block, to say where the tunnel state is")
    return Block(zones=(), port=0, where=sb.where, forwards=tuple(forwards), specs=Specs(specs))


# Plugins CoreDNS itself dropped: what to use instead is the whole answer, not a spelling guess.
RETIRED = {"proxy": "removed from CoreDNS in 1.7 (no CoreDNS since runs it); use `forward`, which "
                    "takes the same FROM TO... arguments"}


def retired(name: str) -> str | None:
    """Why a directive CoreDNS no longer has is refused, and what replaces it; None for others."""
    why = RETIRED.get(name)
    return f"`{name}` was {why}" if why else None


def _unknown(st: corefile.Statement) -> ConfigError:
    supported = ", ".join(directives.SUPPORTED)
    gone = retired(st.name)
    if gone:
        return ConfigError(st.where, gone)
    if st.name in directives.COREDNS_ONLY:
        return ConfigError(st.where, f"{st.name!r} is a CoreDNS plugin that splitdns does not "
                                     f"implement; splitdns supports: {supported}")
    guess = near_miss(st.name)
    hint = f" (did you mean `{guess}`?)" if guess else ""
    return ConfigError(st.where, f"unknown directive {st.name!r}{hint}; splitdns supports: {supported}")


def near_miss(name: str,
              known: tuple[str, ...] = directives.SUPPORTED + directives.COREDNS_ONLY) -> str | None:
    """The known directive a misspelt one most likely meant (`erors` -> `errors`), or None."""
    if len(name) > 2 * max(map(len, known), default=0):
        return None  # no typo of a known name; and difflib's time grows with the word's length
    import difflib  # only for a typo: serving does not load it

    found = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.75)
    return found[0] if found else None


def ports_named(blocks: list[corefile.ServerBlock]) -> bool:
    """Whether every server key names its own port, so that a default port (-dns.port) changes
    nothing. Keys that do not parse count as naming none: their error comes from `build`."""
    for sb in blocks:
        for key in sb.keys:
            for text in key.text.split(","):
                try:
                    if text and _key(key, text, 0)[1] == 0:
                        return False
                except ConfigError:
                    return False
    return True


def _key(tok: corefile.Token, text: str, default_port: int) -> tuple[list[str], int]:
    where = tok.where
    rest = text
    if "://" in rest:
        scheme, rest = rest.split("://", 1)
        if scheme != "dns":
            raise ConfigError(where, f"{scheme}:// servers are not supported; only dns:// (splitdns "
                                     "answers the pod's own queries on loopback, over UDP and TCP)")
    port = default_port
    host = rest
    # An IPv6 network key (2001:db8::/32) has colons but no port unless one follows the prefix.
    ipv6_net = "/" in rest and "/" not in rest.rpartition(":")[0]
    if ":" in rest and not rest.startswith("[") and not ipv6_net:
        host, _, port_text = rest.rpartition(":")
        if not port_text:
            raise ConfigError(where, f"{text!r}: a ':' with no port after it")
        if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
            raise ConfigError(where, f"{text!r}: {port_text!r} is not a port number")
        port = int(port_text)
    if not host:
        host = "."
    if "/" in host and CIDR.fullmatch(host):
        return reverse_zones(where, host), port
    if "/" in host:
        # Not a network: a name, as CoreDNS keeps it, such as an RFC 2317 classless reverse zone
        # (32/27.104.21.172.in-addr.arpa), reached through the CNAMEs its parent zone publishes.
        try:
            return [domain_name(host, slash=True)], port
        except ValueError as err:
            raise ConfigError(where, f"{host!r} is neither a network nor a zone name ({err})") from None
    try:
        return [domain_name(host)], port
    except ValueError as err:
        raise ConfigError(where, f"{host!r} is not a valid zone name ({err})") from None


def _check_unique(blocks: tuple[Block, ...]) -> None:
    """A zone and port once per listening address: as in CoreDNS, blocks that `bind` different
    addresses may serve the same zone on one port (each listener routes by its own blocks)."""
    seen: dict[tuple[str, int, str], Block] = {}
    for block in blocks:
        for zone in block.zones:
            for host in block.bind:
                first = seen.get((zone, block.port, host))
                if first is not None and first is not block:
                    raise ConfigError(block.where, f"cannot serve dns://{zone}:{block.port} - it is "
                                                   f"already defined at {first.where}")
                seen[(zone, block.port, host)] = block


def _check_bind_consistency(blocks: tuple[Block, ...]) -> None:
    by_port: dict[int, list[Block]] = {}
    for block in blocks:
        by_port.setdefault(block.port, []).append(block)
    for port, group in by_port.items():
        explicit = {b.explicit_bind for b in group}
        if len(explicit) > 1:
            lone = next(b for b in group if not b.explicit_bind)
            raise ConfigError(lone.where, f"some blocks on port {port} use bind and this one does "
                                          "not: give every block of a port the same bind")


def _check_self_forward(config: Config) -> None:
    for block in config.blocks:
        for spec in block.forwards:
            for up in spec.upstreams:
                if forwards_to_itself(block, up):
                    raise ConfigError(spec.where, self_forward_message(spec, up, block))


def forwards_to_itself(block: Block, up: forward.Upstream) -> bool:
    """The one self-loop rule, for `serve` and `check` alike: a forward loops only when it
    reaches this very block again, i.e. one of the block's own listeners (same address and
    port; a wildcard listener owns loopback). Another loopback address (Docker's 127.0.0.11)
    or another port (another block, another server) is someone else."""
    return is_ours(up.host, up.port, {(host, block.port) for host in block.bind})


def is_ours(host: str, port: int, ours: set[tuple[str, int]]) -> bool:
    """Whether host:port is one of these listeners (a wildcard listener owns loopback)."""
    ip = ipaddress.ip_address(host)
    for lhost, lport in ours:
        if lport != port:
            continue
        lip = ipaddress.ip_address(lhost)
        if lip == ip or (lip.is_unspecified and (ip.is_loopback or ip.is_unspecified)):
            return True
    return False


def _nameserver_line(path: str, host: str) -> str:
    """Where the resolv.conf at `path` names `host`, quoted: "read from /etc/resolv.conf, line 3:
    `nameserver 127.0.0.1`" (or only the file, when it cannot be read again)."""
    with contextlib.suppress(OSError):
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        for number, text in enumerate(lines, 1):
            words = text.split()
            if len(words) >= 2 and words[0] == "nameserver" and words[1].split("%")[0] == host:
                return f"read from {path}, line {number}: `{text.strip()}`"
    return f"read from {path}"


def self_forward_message(spec: forward.ForwardSpec, up: forward.Upstream, block: Block) -> str:
    via = f" ({_nameserver_line(up.origin, up.host)})" if up.origin.startswith("/") else ""
    return (
        f"forward {spec.origin} sends queries to {up}{via}, which is this server itself "
        f"(block {block.name} listens there): every query there would loop until it times out. "
        "Under dnsPolicy: None the pod's resolv.conf names only 127.0.0.1, so "
        "`forward . /etc/resolv.conf` points the resolver at itself. Forward to a real "
        "upstream instead: the kube-dns Service IP (kubectl -n kube-system get svc kube-dns "
        "-o jsonpath='{.spec.clusterIP}') or the node's resolver."
    )
