"""strongSwan's client configs, read for what the DNS split depends on: strongswan.conf (where
the `resolve` plugin writes the DNS an IKE SA received) and swanctl.conf (the connections: the
virtual IP they ask for, which is what makes charon ask for DNS at all, and the remote traffic
selectors routed into the tunnel). Both are in strongSwan's settings syntax: `name { ... }`
sections and `key = value` lines, `#` comments; `include` is not followed.
Tests: tests/test_check.py, tests/test_vpn_kinds_kube.py, tests/test_vpn_checks.py.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
from dataclasses import dataclass, field

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
STRONGSWAN_CONF, SWANCTL_CONF = "strongswan.conf", "swanctl.conf"
# Top-level sections only these files have (a Corefile's blocks are zones: `name:port {` or `.`).
_CHARON_SECTIONS = ("charon", "charon-systemd", "charon-nm", "libstrongswan", "starter", "swanctl")
_SWANCTL_SECTIONS = ("connections", "secrets", "pools", "authorities")
_SECTION = re.compile(r"^([A-Za-z0-9_.-]+)(?:\s*:\s*[A-Za-z0-9_.,\s-]+?)?\s*\{")
_VALUE = re.compile(r"^([A-Za-z0-9_.-]+)\s*=\s*")


@dataclass(frozen=True)
class Setting:
    key: tuple[str, ...]   # the sections it is in, then its name: ("charon", "plugins", "resolve", "file")
    value: str
    line: int


@dataclass
class Connection:
    name: str
    line: int
    vips: bool = False
    remote_ts: list[tuple[IPNetwork, int]] = field(default_factory=list)


@dataclass
class StrongswanConfig:
    path: str
    which: str                        # STRONGSWAN_CONF or SWANCTL_CONF
    settings: list[Setting] = field(default_factory=list)
    sections: dict[tuple[str, ...], int] = field(default_factory=dict)  # each section's first line
    includes: list[str] = field(default_factory=list)                   # what `include` names (not read)
    connections: list[Connection] = field(default_factory=list)

    def get(self, *key: str) -> Setting | None:
        found = [s for s in self.settings if s.key == key]
        return found[-1] if found else None  # the last one wins, as in strongSwan

    def behind_tunnel(self, address: str) -> bool:
        """Is this address inside a remote traffic selector (routed into the tunnel)?"""
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in net for c in self.connections for net, _ in c.remote_ts)

    def server_names(self) -> list[tuple[str, int]]:
        return []  # remote_addrs: charon resolves them, but no finding of ours reads them yet


def looks_like(text: str) -> bool:
    return _top_sections(text) & {*_CHARON_SECTIONS, *_SWANCTL_SECTIONS} != set()


def _top_sections(text: str) -> set[str]:
    names, depth = set(), 0
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        match = _SECTION.match(line)
        if match and depth == 0:
            names.add(match.group(1))
        depth += line.count("{") - line.count("}")
    return names


def parse(text: str, path: str) -> StrongswanConfig:
    tops = _top_sections(text)
    conf = StrongswanConfig(path, SWANCTL_CONF if tops & set(_SWANCTL_SECTIONS) else STRONGSWAN_CONF)
    stack: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        rest = raw.split("#", 1)[0].strip()
        while rest:  # a line may hold several: `charon { plugins { resolve { file = X } } }`
            if rest.startswith("}"):
                if stack:
                    stack.pop()
                rest = rest[1:].strip()
            elif (match := _SECTION.match(rest)) is not None:
                stack.append(match.group(1))
                conf.sections.setdefault(tuple(stack), number)
                rest = rest[match.end():].strip()
            elif (match := _VALUE.match(rest)) is not None:
                value, rest = _value(rest[match.end():])
                conf.settings.append(Setting((*stack, match.group(1)), value, number))
            else:
                if rest.startswith("include") and len(rest.split()) > 1:
                    conf.includes.append(rest.split()[1])
                break  # or what strongSwan would refuse: not ours to judge
    _connections(conf)
    return conf


def _value(text: str) -> tuple[str, str]:
    """The value (up to the line's end, a `}`, or a section opened on the same line) and the rest."""
    if text.startswith('"') and '"' in text[1:]:
        end = text.index('"', 1)
        return text[1:end], text[end + 1:].strip()
    cut = text.find("}")
    value, rest = (text, "") if cut < 0 else (text[:cut], text[cut:])
    opened = re.search(r"\s+[A-Za-z0-9_.-]+\s*\{", value)
    if opened is not None:
        value, rest = value[:opened.start()], value[opened.start():].strip() + rest
    return value.strip(), rest


def _connections(conf: StrongswanConfig) -> None:
    by_name: dict[str, Connection] = {}
    for s in conf.settings:
        if len(s.key) < 3 or s.key[0] != "connections":
            continue
        conn = by_name.setdefault(s.key[1], Connection(s.key[1], conf.sections.get(s.key[:2], s.line)))
        if s.key[2:] == ("vips",) and s.value:
            conn.vips = True
        elif len(s.key) == 5 and s.key[2] == "children" and s.key[4] == "remote_ts":
            for word in re.split(r"[,\s]+", s.value):
                with contextlib.suppress(ValueError):  # `dynamic`, ranges, protocol/port forms
                    conn.remote_ts.append((ipaddress.ip_network(word, strict=False), s.line))
    conf.connections = list(by_name.values())
