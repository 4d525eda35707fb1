"""`bind`: the addresses a server block listens on.

Syntax: `bind ADDRESS...`. Without it splitdns listens on loopback only (127.0.0.1 and
::1), unlike CoreDNS, which listens on every address: an in-pod resolver reachable on the
pod IP would let any pod of the cluster resolve the private zone through this one.
Tests: tests/test_config.py.
"""

from __future__ import annotations

import ipaddress

from splitdns.corefile import Statement
from splitdns.directives import _args
from splitdns.errors import ConfigError

LOOPBACK = ("127.0.0.1", "::1")


def parse(st: Statement) -> tuple[str, ...]:
    _args.arity(st, 1, None, "bind ADDRESS...")
    _args.no_body(st, "bind ADDRESS...")
    out: list[str] = []
    for text in st.args:
        try:
            out.append(str(ipaddress.ip_address(text)))
        except ValueError:
            raise ConfigError(
                st.where, f"bind: {text!r} is not an IP address (interface names are not supported)"
            ) from None
    return tuple(dict.fromkeys(out))
