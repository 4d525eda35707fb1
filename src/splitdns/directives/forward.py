"""`forward`: send the queries of a zone to upstream servers.

Syntax (CoreDNS's, minus DoH, gRPC and hostnames):

    forward FROM TO... {
        except IGNORED_NAMES...
        force_tcp
        prefer_udp
        policy random|round_robin|sequential
        max_fails INTEGER
        health_check DURATION [no_rec] [domain FQDN]
        read_timeout DURATION
        max_concurrent INTEGER
        max_connect_attempts INTEGER
        failover RCODE...
        next RCODE...
        failfast_all_unhealthy_upstreams [off]
        expire DURATION
        max_age DURATION
        max_idle_conns INTEGER
        source_address IP
        tls_servername NAME
        tls [CERT KEY] [CA]
    }

TO is `IP`, `IP:PORT`, `[IPv6]:PORT`, `dns://` before any of them, the path of a
resolv.conf file whose `nameserver` lines are read once, at load, or a tunnel's word
(`openvpn`, `wireguard`: the registry's tunnel kinds): the DNS servers of the block's tunnel,
learned at run time (the block needs that tunnel's directive). `tls://IP[:PORT]`
is DNS over TLS (port 853 by default): the certificate is verified against the system's
CAs or `tls`'s CA file, for `tls_servername` (else the IP address itself), with a client
certificate when `tls` names one; connections are kept for `expire` and reused, and none
longer than `max_age` (0, the default: no limit). `max_idle_conns` is accepted, as CoreDNS
users write it, and has no effect: plain DNS opens a fresh socket per attempt and keeps
nothing idle, and DNS over TLS keeps at most 8 connections per upstream. `source_address`
is the local address every query to the upstreams leaves from (the pod's own address rather
than the tunnel's, say), over UDP, TCP and TLS, health probes included.

Failing fast is the default here, unlike CoreDNS: once every upstream of a forward is marked
down (more than `max_fails` failures in a row, queries and health probes alike), queries get
SERVFAIL with the reason at once until a health probe gets a reply. In a pod, waiting out
the timeouts on every query of a dead zone is the stall the application cannot afford.
`failfast_all_unhealthy_upstreams off` gives CoreDNS's behaviour back (try one upstream
anyway); `max_fails 0` never marks an upstream down.

`next RCODE...`: a reply with one of these rcodes hands the query to the block's next
`forward` line (in file order) that covers the name, as CoreDNS hands it to its next
`forward` plugin; with none, the reply stands.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection
from dataclasses import dataclass, field, replace

import dns.rcode

from splitdns.corefile import Statement
from splitdns.directives import _args, targets
from splitdns.directives.targets import TLS_PORT, TlsSettings, Upstream, read_resolv_conf, tls_context
from splitdns.directives.targets import address as _address  # noqa: F401 (tests read addresses so)
from splitdns.errors import ConfigError, Location

__all__ = ["MAX_UPSTREAMS", "OPTIONS", "POLICIES", "TLS_PORT", "USAGE", "ForwardSpec", "TlsSettings",
           "Upstream", "parse", "read_resolv_conf", "tls_context"]

USAGE = "forward FROM TO... [{ options }]"
MAX_UPSTREAMS = 15
POLICIES = ("random", "round_robin", "sequential")
OPTIONS = (
    "except", "force_tcp", "prefer_udp", "policy", "max_fails", "health_check",
    "read_timeout", "max_concurrent", "max_connect_attempts", "failover", "next",
    "failfast_all_unhealthy_upstreams", "expire", "max_age", "max_idle_conns", "source_address",
    "tls_servername", "tls",
)


@dataclass(frozen=True)
class ForwardSpec:
    origin: str                       # FROM, normalised
    upstreams: tuple[Upstream, ...]
    files: tuple[str, ...] = ()       # resolv.conf paths named as TO, as written
    tunnel: bool = False              # TO is a tunnel's word: its DNS servers, at run time
    excepts: tuple[str, ...] = ()
    policy: str = "random"
    max_fails: int = 2
    health_check: float = 0.5
    health_check_rd: bool = True
    health_check_name: str = "."
    read_timeout: float = 2.0
    overall_timeout: float = 5.0
    force_tcp: bool = False
    max_concurrent: int = 0
    max_connect_attempts: int | None = None  # None: twice the number of upstreams
    failover: frozenset[int] = frozenset()
    next_rcodes: frozenset[int] = frozenset()  # `next`: hand these replies to the next forward
    failfast_all_unhealthy: bool = True  # CoreDNS: False (see the module docstring)
    expire: float = 10.0
    max_age: float = 0.0              # DNS over TLS: no connection lives longer; 0: no limit
    max_idle_conns: int = 0           # accepted for CoreDNS's sake; nothing here keeps idle sockets
    source: str | None = None         # source_address: every upstream query leaves from it
    where: Location | None = field(default=None, compare=False)  # the `forward` line


def parse(st: Statement, read_files: bool = True, tunnel_words: Collection[str] = ()) -> ForwardSpec:
    """The spec of one `forward` line. With read_files False (linting a Corefile meant for
    another machine), resolv.conf targets are only recorded in `files`, not read.
    `tunnel_words`: the TOs that stand for a tunnel's DNS (the registry's tunnel kinds)."""
    _args.arity(st, 2, None, USAGE)
    # A network stands for its reverse zones, and CoreDNS's forward keeps the first of them
    origin = _args.zones(st, st.args[0], "forward FROM")[0]
    upstreams: list[Upstream] = []
    files: list[str] = []
    tunnel = False
    for text in st.args[1:]:
        if text in tunnel_words:
            tunnel = True
            continue
        if targets.is_file_target(text):
            files.append(text)
            if not read_files:
                continue
            found = targets.resolv_conf(st, text)  # one with no nameserver adds none, as in CoreDNS
        else:
            found = targets.targets(st, text)
        for up in found:
            if up not in upstreams:
                upstreams.append(up)
    if read_files and files and not upstreams and not tunnel:
        raise ConfigError(st.where, f"forward: {', '.join(files)} has no usable nameserver line")
    if len(upstreams) > MAX_UPSTREAMS:
        raise ConfigError(st.where, f"forward: more than {MAX_UPSTREAMS} upstreams")
    if tunnel and (upstreams or files):
        word = next(text for text in st.args[1:] if text in tunnel_words)
        raise ConfigError(st.where, f"forward: `{word}` cannot be mixed with fixed upstreams")
    options: dict[str, object] = {"where": st.where, "files": tuple(files),
                                  "tunnel": tunnel}
    tls: dict[str, str] = {}
    for opt in st.body or ():
        if opt.name in ("tls_servername", "tls"):
            _tls_option(opt, tls)
        else:
            _option(opt, options)
    expire, max_age = options.get("expire", 10.0), options.get("max_age", 0.0)
    if isinstance(max_age, float) and isinstance(expire, float) and 0 < max_age < expire:
        raise ConfigError(st.where, f"forward: max_age ({max_age:g}s) must not be less than expire "
                                    f"({expire:g}s)")
    if any(up.tls for up in upstreams):
        settings = TlsSettings(expire=expire, max_age=max_age, **tls)  # type: ignore[arg-type]
        named = [up for up in upstreams if up.tls and up.tls.servername]
        if named and settings.servername:
            raise ConfigError(st.where, f"forward: {named[0].origin} names its server, and tls_servername "
                                        f"names {settings.servername}: give one of them")
        if read_files:
            _check_tls(st, settings)
        upstreams = [replace(up, tls=replace(settings, servername=up.tls.servername or settings.servername))
                     if up.tls else up for up in upstreams]
    source = options.get("source")
    if isinstance(source, str):
        upstreams = [replace(up, source=source) for up in upstreams]
    return ForwardSpec(origin=origin, upstreams=tuple(upstreams), **options)  # type: ignore[arg-type]


def _tls_option(opt: Statement, out: dict[str, str]) -> None:
    if opt.name == "tls_servername":
        _args.arity(opt, 1, 1, "tls_servername NAME")
        out["servername"] = opt.args[0]
        return
    _args.arity(opt, 0, 3, "tls [CERT KEY] [CA]")
    args = opt.args
    if len(args) in (1, 3):
        out["ca"] = args[-1]
    if len(args) >= 2:
        out["cert"], out["key"] = args[0], args[1]


def _check_tls(st: Statement, settings: TlsSettings) -> None:
    """Read the certificate files now, so a missing or broken one is an error at load."""
    import ssl

    try:
        tls_context(settings)
    except (OSError, ssl.SSLError) as err:
        files = ", ".join(f for f in (settings.cert, settings.key, settings.ca) if f)
        raise ConfigError(st.where, f"forward: cannot use the tls files ({files}): "
                                    f"{getattr(err, 'strerror', None) or err}") from None


def _option(opt: Statement, out: dict[str, object]) -> None:
    name, args = opt.name, opt.args
    if name in ("force_tcp", "prefer_udp"):
        _args.arity(opt, 0, 0, name)
        if name == "force_tcp":
            out["force_tcp"] = True  # prefer_udp is what every attempt does anyway (README)
    elif name == "failfast_all_unhealthy_upstreams":
        _args.arity(opt, 0, 1, "failfast_all_unhealthy_upstreams [off]")
        if args and args[0] not in ("on", "off"):
            raise ConfigError(opt.where, f"failfast_all_unhealthy_upstreams: {args[0]!r} is "
                                         "neither `on` nor `off`; it is on unless you write `off`")
        out["failfast_all_unhealthy"] = not args or args[0] == "on"
    elif name == "except":
        _args.arity(opt, 1, None, "except NAME...")
        out["excepts"] = tuple(_args.zone(opt, a, "except") for a in args)
    elif name == "policy":
        _args.arity(opt, 1, 1, "policy random|round_robin|sequential")
        if args[0] not in POLICIES:
            raise ConfigError(opt.where, f"policy: unknown policy {args[0]!r}; "
                                         f"use one of {', '.join(POLICIES)}")
        out["policy"] = args[0]
    elif name == "max_fails":
        _args.arity(opt, 1, 1, "max_fails INTEGER")
        out["max_fails"] = _args.integer(opt, args[0], "max_fails")
    elif name == "health_check":
        _health_check(opt, out)
    elif name in ("read_timeout", "expire"):
        _args.arity(opt, 1, 1, f"{name} DURATION")
        value = _args.duration(opt, args[0], name)
        if value <= 0:
            raise ConfigError(opt.where, f"{name}: must be more than zero")
        out[name] = value
    elif name == "max_age":
        _args.arity(opt, 1, 1, "max_age DURATION")
        out["max_age"] = _args.duration(opt, args[0], name)  # a negative one is no duration here
    elif name == "max_idle_conns":
        _args.arity(opt, 1, 1, "max_idle_conns INTEGER")
        out["max_idle_conns"] = _args.integer(opt, args[0], "max_idle_conns")
    elif name == "source_address":
        _args.arity(opt, 1, 1, "source_address IP")
        try:
            ip = ipaddress.ip_address(args[0])
        except ValueError:
            raise ConfigError(opt.where, f"source_address: {args[0]!r} is not an IP address") from None
        # Go's net.ParseIP reads ::ffff:192.0.2.1 as the IPv4 address it maps, and so do we
        mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
        out["source"] = str(mapped or ip)
    elif name == "max_concurrent":
        _args.arity(opt, 1, 1, "max_concurrent INTEGER")
        out["max_concurrent"] = _args.integer(opt, args[0], "max_concurrent")
    elif name == "max_connect_attempts":
        _args.arity(opt, 1, 1, "max_connect_attempts INTEGER")
        out["max_connect_attempts"] = _args.integer(opt, args[0], "max_connect_attempts")
    elif name == "failover":
        _args.arity(opt, 1, None, "failover RCODE...")
        out["failover"] = frozenset(_rcode(opt, a) for a in args)
    elif name == "next":
        _args.arity(opt, 1, None, "next RCODE...")
        out["next_rcodes"] = frozenset(_rcode(opt, a, noerror=True) for a in args)
    else:
        raise _args.unknown_option(opt, "forward", OPTIONS)


def _health_check(opt: Statement, out: dict[str, object]) -> None:
    usage = "health_check DURATION [no_rec] [domain FQDN]"
    _args.arity(opt, 1, 4, usage)
    out["health_check"] = _args.duration(opt, opt.args[0], "health_check")
    rest = list(opt.args[1:])
    while rest:
        word = rest.pop(0)
        if word == "no_rec":
            out["health_check_rd"] = False
        elif word == "domain" and rest:
            out["health_check_name"] = _args.zone(opt, rest.pop(0), "health_check domain")
        else:
            raise ConfigError(opt.where, f"health_check: unexpected {word!r}; usage: {usage}")


def _rcode(opt: Statement, text: str, noerror: bool = False) -> int:
    try:
        code = dns.rcode.from_text(text.upper())
    except dns.rcode.UnknownRcode:
        raise ConfigError(opt.where, f"{opt.name}: unknown rcode {text!r}") from None
    if code == dns.rcode.NOERROR and not noerror:
        raise ConfigError(opt.where, "failover: NOERROR cannot trigger a failover")
    return int(code)


