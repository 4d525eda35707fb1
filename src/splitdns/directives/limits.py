"""`limits`: how much any client, or a dead upstream, may make the server hold. Process-wide.

Syntax (every line optional; the defaults are what you get without the directive):

    limits {
        pending 1000            upstream exchanges in flight per zone; beyond: REFUSED at once
        tcp_connections 256     client TCP connections held at once; beyond: closed at accept
        tcp_queries 128         queries per TCP connection, then it is closed (miekg/dns's 128)
        tcp_buffer 64KB         reply bytes a TCP client may leave unread before it is dropped
        cache_memory 64MB       reply bytes each cache may hold, on top of its entry capacity
    }
Tests: tests/test_config.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from splitdns.corefile import Statement
from splitdns.directives import _args
from splitdns.errors import ConfigError

_SIZE = re.compile(r"(\d+)\s*(|B|KB|KiB|MB|MiB|GB|GiB)$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "kb": 1000, "kib": 1024, "mb": 1000**2, "mib": 1024**2, "gb": 1000**3,
          "gib": 1024**3}
OPTIONS = ("pending", "tcp_connections", "tcp_queries", "tcp_buffer", "cache_memory")


@dataclass(frozen=True)
class Limits:
    pending: int = 1000
    tcp_connections: int = 256
    tcp_queries: int = 128
    tcp_buffer: int = 64 * 1024
    cache_memory: int = 64 * 1024 * 1024


def size(st: Statement, text: str, what: str) -> int:
    match = _SIZE.match(text)
    if not match:
        raise ConfigError(st.where, f"{what}: {text!r} is not a size like 65536, 64KB or 64MiB")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def parse(st: Statement) -> Limits:
    _args.arity(st, 0, 0, "limits { " + "; ".join(f"{o} N" for o in OPTIONS) + " }")
    values: dict[str, int] = {}
    for opt in st.body or ():
        if opt.name not in OPTIONS:
            raise _args.unknown_option(opt, "limits", OPTIONS)
        _args.arity(opt, 1, 1, f"{opt.name} N")
        if opt.name in ("tcp_buffer", "cache_memory"):
            values[opt.name] = size(opt, opt.args[0], opt.name)
        else:
            values[opt.name] = _args.integer(opt, opt.args[0], opt.name, minimum=1)
    return Limits(**values)
