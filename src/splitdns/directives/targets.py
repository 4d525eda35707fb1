"""The TO of a `forward` line: upstream addresses (IP, IP:PORT, [IPv6]:PORT, dns://, tls://
with its server name), resolv.conf files, and how a DNS-over-TLS upstream is reached. What
CoreDNS's parse.HostPortOrFile and forward's splitZone read, read the same way.
Tests: tests/test_config.py, tests/test_coredns_parity.py.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from splitdns.addresses import host_port
from splitdns.corefile import Statement
from splitdns.errors import ConfigError

if TYPE_CHECKING:
    import ssl

TLS_PORT = 853


@dataclass(frozen=True)
class TlsSettings:
    """How to reach a DNS-over-TLS upstream: whom its certificate must name, what to trust."""

    servername: str | None = None     # tls_servername; None: the upstream's IP address
    ca: str | None = None             # a CA file; None: the system's CAs
    cert: str | None = None           # a client certificate and its key, if the server asks
    key: str | None = None
    expire: float = 10.0              # an idle connection is closed after this long
    max_age: float = 0.0              # and any connection after this long; 0: no limit


@dataclass(frozen=True)
class Upstream:
    host: str
    port: int
    origin: str  # how the user wrote it, or the resolv.conf it came from
    tls: TlsSettings | None = None  # DNS over TLS (tls://)
    source: str | None = None  # `source_address`: the local address queries leave from
    device: str | None = None  # the interface queries may only leave by (a tunnel's: SO_BINDTODEVICE)

    def __str__(self) -> str:
        return host_port(self.host, self.port)


def tls_context(settings: TlsSettings) -> ssl.SSLContext:
    """Certificates verified, the name checked, TLS 1.2 or later (RFC 8310)."""
    import ssl

    context = ssl.create_default_context(cafile=settings.ca)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if settings.cert:
        context.load_cert_chain(settings.cert, settings.key)
    return context


def is_file_target(text: str) -> bool:
    """A resolv.conf path: one with a slash, or a file of that name in the working directory
    (CoreDNS's parse.HostPortOrFile tries the file when the text is no address)."""
    if "://" in text or address(text) is not None:
        return False
    try:
        return "/" in text or Path(text).is_file()
    except OSError:  # a name too long for a file name is none
        return False


def targets(st: Statement, text: str) -> list[Upstream]:
    if text.startswith("tls://"):
        host, servername = split_servername(text[len("tls://"):])
        at = address(host, TLS_PORT)
        if at is None:
            raise ConfigError(st.where, f"forward: {text!r} is not tls://IP or tls://IP:PORT "
                                        "(hostnames are not supported: give tls_servername for the name, "
                                        "or write IP%NAME)")
        return [Upstream(at[0], at[1], text, TlsSettings(servername=servername))]
    if text.startswith("dns://"):
        text = text[len("dns://"):]
    elif "://" in text:
        scheme = text.split("://", 1)[0]
        raise ConfigError(st.where, f"forward: {scheme}:// upstreams are not supported; "
                                    "use plain DNS or tls://")
    ambiguous = _port_without_brackets(text)
    if ambiguous is not None:
        raise ConfigError(st.where, f"forward: {text} {ambiguous}")
    at = address(text)
    if at is not None:
        return [Upstream(at[0], at[1], text)]
    out_of_range = _port_out_of_range(text)
    if out_of_range is not None:
        raise ConfigError(st.where, f"forward: {text}: port {out_of_range} out of range (1 to 65535)")
    if "/" in text:
        return resolv_conf(st, text)
    raise ConfigError(
        st.where,
        f"forward: {text!r} is neither an IP address (IP, IP:PORT, [IPv6]:PORT) nor a file path; "
        "hostnames are not supported because resolving them would need this resolver",
    )


def _port_without_brackets(text: str) -> str | None:
    """Why `::1:5300` is refused: an IPv6 address whose last group could be a port. As an address it
    is ::1:5300 on port 53, which is rarely what was meant; brackets say which."""
    if text.startswith("[") or text.count(":") < 2:
        return None
    head, _, last = text.rpartition(":")
    if not (last.isascii() and last.isdigit() and len(last) >= 2):
        return None
    try:
        ipaddress.IPv6Address(text)
        ipaddress.ip_address(head)
    except ValueError:
        return None
    return (f"is ambiguous: for port {last} of {head} write [{head}]:{last}; for the address {text} "
            f"on port 53 write [{text}]")


def _port_out_of_range(text: str) -> str | None:
    """The port of `IP:PORT` or `[IPv6]:PORT` when it is a number out of 1-65535, else None."""
    host, _, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not (port.isascii() and port.isdigit()) or 0 < int(port) < 65536:
        return None
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return None
    return port


def split_servername(host: str) -> tuple[str, str | None]:
    """CoreDNS's splitZone: `IP%NAME[:PORT]` or `[IPv6%NAME]:PORT` is the address and the name
    its certificate must carry (a tls_servername for that upstream alone)."""
    if "%" not in host:
        return host, None
    cut = host.rindex("%")
    ip, name, port = host[:cut], host[cut + 1:], ""
    if ip.startswith("["):
        ip += "]"
    if ":" in name:
        colon = name.rindex(":")
        name, port = name[:colon].removesuffix("]"), name[colon:]
    return ip + port, name


def address(text: str, default_port: int = 53) -> tuple[str, int] | None:
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
        if port_text and not (port_text.isascii() and port_text.isdigit()):
            return None
        port = int(port_text) if port_text else default_port  # `IP:` is IP on the default port
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if not 0 < port < 65536:
        return None
    return str(ip), port


def resolv_conf(st: Statement, path: str) -> list[Upstream]:
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as err:
        raise ConfigError(st.where, f"forward: cannot read {path}: {err.strerror or err}") from None
    try:
        return resolv_conf_upstreams(st, path, lines)
    except ConfigError:
        return []  # no usable nameserver: `parse` says so when no other upstream is left


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
            at = address(words[1].split("%", 1)[0])
            if at is not None:
                found.append(Upstream(at[0], 53, path))
    if not found:
        raise ConfigError(st.where, f"forward: {path} has no usable nameserver line")
    return found
