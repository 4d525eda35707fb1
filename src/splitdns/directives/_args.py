"""Argument helpers shared by the directive parsers: durations, counts, names, one-liners.

Tests: tests/test_config.py, tests/test_plugins.py.
"""

from __future__ import annotations

import ipaddress
import re
import string

from splitdns.corefile import Statement
from splitdns.errors import ConfigError, Location

CIDR = re.compile(r"[0-9a-fA-F.:]+/[0-9]+")  # what CoreDNS would read as a network

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration(st: Statement, text: str, what: str) -> float:
    """A Go-style duration (`500ms`, `2s`, `1m30s`), as CoreDNS writes them, in seconds. A bare
    `0` is one too, as Go's time.ParseDuration reads it (the only number without a unit)."""
    if text == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(text):
        match = _DURATION_PART.match(text, pos)
        if not match:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ConfigError(st.where, f"{what}: {text!r} is not a duration (like 500ms, 2s, 1m)")
    return total


MAX_REGEX = 10000  # CoreDNS's maxRegexpLen (errors, rewrite, template)


def regex(st: Statement, text: str, what: str) -> re.Pattern[str]:
    """A regular expression, no longer than CoreDNS allows."""
    if len(text) > MAX_REGEX:
        raise ConfigError(st.where, f"{what}: the regular expression is too long "
                                    f"({len(text)} > {MAX_REGEX} characters)")
    try:
        return re.compile(text)
    except re.error as err:
        raise ConfigError(st.where, f"{what}: {text[:80]!r} is not a regular expression ({err})") from None


def integer(st: Statement, text: str, what: str, minimum: int = 0, maximum: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(st.where, f"{what}: {text!r} is not a whole number") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"from {minimum} to {maximum}" if maximum is not None else f"at least {minimum}"
        raise ConfigError(st.where, f"{what}: {value} is out of range ({bound})")
    return value


def zone(st: Statement, text: str, what: str) -> str:
    """A domain name normalised as CoreDNS does: lower case, fully qualified."""
    try:
        return domain_name(text)
    except ValueError as err:
        raise ConfigError(st.where, f"{what}: {text!r} is not a domain name ({err})") from None


def zones(st: Statement, text: str, what: str) -> list[str]:
    """A zone argument as CoreDNS's plugin.Host reads it: a network (10.0.0.0/15) stands for its
    reverse zones, anything else is one domain name."""
    if "/" in text and CIDR.fullmatch(text):
        return reverse_zones(st.where, text)
    return [zone(st, text, what)]


# The transports CoreDNS's parse.Transport takes off a zone argument before it reads the name.
TRANSPORTS = ("tls://", "dns://", "quic://", "grpc://", "https3://", "https://", "unix://")


def origins(st: Statement, text: str, what: str) -> list[str]:
    """A plugin's ZONE argument as CoreDNS's plugin.Host(...).NormalizeExact reads it: a
    transport prefix (dns://, tls://, ...) and a trailing :PORT are dropped, then `zones`.
    CoreDNS skips an argument that is not a name without a word; here it is an error, so a
    typo does not leave the plugin matching nothing."""
    name = next((text[len(t):] for t in TRANSPORTS if text.startswith(t)), text)
    host, colon, port = name.rpartition(":")
    if colon and port.isdigit() and host:
        name = host
    return zones(st, name, what)


def reverse_zones(where: Location, cidr: str) -> list[str]:
    """A network's reverse zones, split on octet (nibble for IPv6) boundaries, as CoreDNS's
    cidr.Split does; host bits are dropped, as Go's net.ParseCIDR drops them (10.9.3.0/18 is
    10.9.0.0/18)."""
    try:
        net = ipaddress.ip_network(cidr, strict=False)
    except ValueError as err:
        raise ConfigError(where, f"{cidr!r} is not a network: {err}") from None
    if cidr.startswith(":") or (cidr.startswith("0") and ":" in cidr):
        # CoreDNS refuses these spellings (::ffff:..., 0:...), whose reverse zones are ambiguous
        raise ConfigError(where, f"{cidr!r} is not a network CoreDNS accepts: write the IPv6 "
                                 "network without a leading '::' or '0:'")
    step = 8 if net.version == 4 else 4
    boundary = -(-net.prefixlen // step) * step
    found = []  # at most 128 (an IPv4 prefix 7 bits short of an octet)
    for sub in net.subnets(new_prefix=boundary) if boundary != net.prefixlen else [net]:
        labels = sub.network_address.reverse_pointer.split(".")
        host_labels = (32 if net.version == 4 else 128) // step - boundary // step
        found.append(".".join(labels[host_labels:]) + ".")
    return found


_LABEL_CHARACTERS = frozenset(string.ascii_lowercase + string.digits + "-_*")


def domain_name(text: str, slash: bool = False) -> str:
    """`text` lower-cased and fully qualified; ValueError says what breaks RFC 1035's limits.

    By hand rather than with dns.name: dnspython's name module imports importlib.metadata,
    which costs this process 6 MiB of its 30 MiB when idle (bench/). Zone names in a
    Corefile are host names; an internationalised one is written in its xn-- form. `slash`
    also allows `/`, for RFC 2317 classless reverse zones (`32/27.104.21.172.in-addr.arpa`).
    """
    name = text.lower().removesuffix(".")
    if not name:
        return "."
    labels = name.split(".")
    for label in labels:
        if not label:
            raise ValueError("an empty label (two dots in a row, or a leading dot)")
        if len(label) > 63:
            raise ValueError(f"the label {label[:20]!r}... is longer than 63 characters")
        odd = sorted(set(label) - _LABEL_CHARACTERS - ({"/"} if slash else set()))
        if odd:
            idn = not all(c.isascii() for c in odd)
            raise ValueError(f"{''.join(odd)!r} is not allowed in a zone name (letters, digits, '-', '_', "
                             f"'*'){'; write an internationalised name in its xn-- form' if idn else ''}")
    if sum(len(label) + 1 for label in labels) + 1 > 255:
        raise ValueError("longer than 255 octets")
    return name + "."


def arity(st: Statement, low: int, high: int | None, usage: str) -> None:
    n = len(st.args)
    if n < low or (high is not None and n > high):
        raise ConfigError(st.where, f"{st.name}: wrong number of arguments; usage: {usage}")


def no_body(st: Statement, usage: str) -> None:
    if st.body is not None:
        raise ConfigError(st.where, f"{st.name} takes no block; usage: {usage}")


def unknown_option(opt: Statement, directive: str, known: tuple[str, ...]) -> ConfigError:
    if len(opt.name) > 2 * max(map(len, known), default=0):  # difflib's time grows with it
        guess: list[str] = []
    else:
        import difflib  # only for a typo: serving does not load it

        guess = difflib.get_close_matches(opt.name.lower(), known, n=1, cutoff=0.75)
    hint = f" (did you mean `{guess[0]}`?)" if guess else ""
    return ConfigError(
        opt.where,
        f"{directive}: unknown option {opt.name!r}{hint}; supported: {', '.join(known)}",
    )


def on_off(opt: Statement, what: str) -> bool:
    """`WHAT on|off`, nothing else: a switch whose default matters says so in the file."""
    arity(opt, 1, 1, f"{what} on|off")
    word = opt.args[0].lower()
    if word not in ("on", "off"):
        raise ConfigError(opt.where, f"{what}: say on or off, not {opt.args[0]!r}")
    return word == "on"


def interface_name(st: Statement, name: str, directive: str) -> str:
    """A Linux interface name (IFNAMSIZ: 1 to 15 bytes, no slash, colon or white space)."""
    if not 0 < len(name.encode()) <= 15 or any(c in name for c in "/: \t") or name in (".", ".."):
        raise ConfigError(st.where, f"{directive}: {name!r} is not a network interface name "
                                    "(1 to 15 characters, no slash, colon or space)")
    return name
