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
        tls_servername NAME
        tls [CERT KEY] [CA]
    }

TO is `IP`, `IP:PORT`, `[IPv6]:PORT`, `dns://` before any of them, the path of a
resolv.conf file whose `nameserver` lines are read once, at load, or `openvpn`: the
servers the VPN server pushes (the block needs an `openvpn` directive), or `wireguard`: the
DNS servers of the block's `wireguard` tunnel. `tls://IP[:PORT]`
is DNS over TLS (port 853 by default): the certificate is verified against the system's
CAs or `tls`'s CA file, for `tls_servername` (else the IP address itself), with a client
certificate when `tls` names one; connections are kept for `expire` and reused.

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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import dns.rcode

from splitdns.addresses import host_port
from splitdns.corefile import Statement
from splitdns.directives import _args
from splitdns.errors import ConfigError, Location

if TYPE_CHECKING:
    import ssl

USAGE = "forward FROM TO... [{ options }]"
MAX_UPSTREAMS = 15
POLICIES = ("random", "round_robin", "sequential")
OPTIONS = (
    "except", "force_tcp", "prefer_udp", "policy", "max_fails", "health_check",
    "read_timeout", "max_concurrent", "max_connect_attempts", "failover", "next",
    "failfast_all_unhealthy_upstreams", "expire", "tls_servername", "tls",
)
TLS_PORT = 853


@dataclass(frozen=True)
class TlsSettings:
    """How to reach a DNS-over-TLS upstream: whom its certificate must name, what to trust."""

    servername: str | None = None     # tls_servername; None: the upstream's IP address
    ca: str | None = None             # a CA file; None: the system's CAs
    cert: str | None = None           # a client certificate and its key, if the server asks
    key: str | None = None
    expire: float = 10.0              # an idle connection is closed after this long


@dataclass(frozen=True)
class Upstream:
    host: str
    port: int
    origin: str  # how the user wrote it, or the resolv.conf it came from
    tls: TlsSettings | None = None  # DNS over TLS (tls://)

    def __str__(self) -> str:
        return host_port(self.host, self.port)


@dataclass(frozen=True)
class ForwardSpec:
    origin: str                       # FROM, normalised
    upstreams: tuple[Upstream, ...]
    files: tuple[str, ...] = ()       # resolv.conf paths named as TO, as written
    tunnel: bool = False              # TO is `openvpn`: the servers the VPN pushes, at run time
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
    where: Location | None = field(default=None, compare=False)  # the `forward` line


def parse(st: Statement, read_files: bool = True) -> ForwardSpec:
    """The spec of one `forward` line. With read_files False (linting a Corefile meant for
    another machine), resolv.conf targets are only recorded in `files`, not read."""
    _args.arity(st, 2, None, USAGE)
    origin = _args.zone(st, st.args[0], "forward FROM")
    upstreams: list[Upstream] = []
    files: list[str] = []
    tunnel = False
    for text in st.args[1:]:
        if text in ("openvpn", "wireguard"):
            tunnel = True
            continue
        if _is_file_target(text):
            files.append(text)
            if not read_files:
                continue
        for up in _targets(st, text):
            if up not in upstreams:
                upstreams.append(up)
    if len(upstreams) > MAX_UPSTREAMS:
        raise ConfigError(st.where, f"forward: more than {MAX_UPSTREAMS} upstreams")
    if tunnel and (upstreams or files):
        raise ConfigError(st.where, "forward: `openvpn` or `wireguard` cannot be mixed with fixed "
                                    "upstreams")
    options: dict[str, object] = {"where": st.where, "files": tuple(files),
                                  "tunnel": tunnel}
    tls: dict[str, str] = {}
    for opt in st.body or ():
        if opt.name in ("tls_servername", "tls"):
            _tls_option(opt, tls)
        else:
            _option(opt, options)
    if any(up.tls for up in upstreams):
        settings = TlsSettings(expire=options.get("expire", 10.0), **tls)  # type: ignore[arg-type]
        if read_files:
            _check_tls(st, settings)
        upstreams = [replace(up, tls=settings) if up.tls else up for up in upstreams]
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


def tls_context(settings: TlsSettings) -> ssl.SSLContext:
    """Certificates verified, the name checked, TLS 1.2 or later (RFC 8310)."""
    import ssl

    context = ssl.create_default_context(cafile=settings.ca)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if settings.cert:
        context.load_cert_chain(settings.cert, settings.key)
    return context


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


def _is_file_target(text: str) -> bool:
    return "/" in text and "://" not in text and _address(text) is None


def _targets(st: Statement, text: str) -> list[Upstream]:
    if text.startswith("tls://"):
        address = _address(text[len("tls://"):], TLS_PORT)
        if address is None:
            raise ConfigError(st.where, f"forward: {text!r} is not tls://IP or tls://IP:PORT "
                                        "(hostnames are not supported: give tls_servername for the name)")
        return [Upstream(address[0], address[1], text, TlsSettings())]
    if text.startswith("dns://"):
        text = text[len("dns://"):]
    elif "://" in text:
        scheme = text.split("://", 1)[0]
        raise ConfigError(st.where, f"forward: {scheme}:// upstreams are not supported; "
                                    "use plain DNS or tls://")
    address = _address(text)
    if address is not None:
        return [Upstream(address[0], address[1], text)]
    if "/" in text:
        return _resolv_conf(st, text)
    raise ConfigError(
        st.where,
        f"forward: {text!r} is neither an IP address (IP, IP:PORT, [IPv6]:PORT) nor a file path; "
        "hostnames are not supported because resolving them would need this resolver",
    )


def _address(text: str, default_port: int = 53) -> tuple[str, int] | None:
    host, port = text, default_port
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        host, rest = text[1:end], text[end + 1:]
        if rest:
            if not rest.startswith(":") or not (rest[1:].isascii() and rest[1:].isdigit()):
                return None
            port = int(rest[1:])
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
        if not (port_text.isascii() and port_text.isdigit()):
            return None
        port = int(port_text)
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if not 0 < port < 65536:
        return None
    return str(ip), port


def _resolv_conf(st: Statement, path: str) -> list[Upstream]:
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as err:
        raise ConfigError(st.where, f"forward: cannot read {path}: {err.strerror or err}") from None
    return resolv_conf_upstreams(st, path, lines)


def read_resolv_conf(st: Statement, path: str) -> list[Upstream] | None:
    """The upstreams `serve` would take from the resolv.conf at `path` on this machine, or None
    when it cannot be read or names none (for `check`, which then cannot tell)."""
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        return resolv_conf_upstreams(st, path, lines)
    except (OSError, ConfigError):
        return None


def resolv_conf_upstreams(st: Statement, path: str, lines: list[str]) -> list[Upstream]:
    found: list[Upstream] = []
    for line in lines:
        words = line.split()
        if len(words) >= 2 and words[0] == "nameserver":
            address = _address(words[1].split("%", 1)[0])
            if address is not None:
                found.append(Upstream(address[0], 53, path))
    if not found:
        raise ConfigError(st.where, f"forward: {path} has no usable nameserver line")
    return found
