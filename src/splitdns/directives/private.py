"""`private_addresses`: DNS rebinding protection for the zones an outside server answers.

Syntax:

    private_addresses [CIDR...] {
        allow ZONE...      names whose answers may hold such addresses (Unbound's private-domain)
    }

A and AAAA records pointing into these networks are removed from this block's upstream
replies, as Unbound's `private-address` does; an answer left with no address is NODATA. Without
CIDRs the set is loopback, RFC 1918, CGNAT, link-local (the cloud metadata address among
them), unique-local IPv6, and IPv4-mapped IPv6. Put it in the catch-all block: a public name
that answers 127.0.0.1 or 169.254.169.254 is an attack on whatever in the pod trusts those
addresses. The cluster and tunnel blocks answer private addresses by design and are not
touched unless they carry the directive themselves.
Tests: tests/test_rebinding.py.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from splitdns.corefile import Statement
from splitdns.directives import _args
from splitdns.errors import ConfigError

USAGE = "private_addresses [CIDR...] { allow ZONE... }"
DEFAULT_NETWORKS = ("0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
                    "172.16.0.0/12", "192.168.0.0/16", "::/128", "::1/128", "::ffff:0:0/96",
                    "fc00::/7", "fe80::/10")


@dataclass(frozen=True)
class PrivateSpec:
    networks: tuple[str, ...] = DEFAULT_NETWORKS
    allow: tuple[str, ...] = ()


def parse(st: Statement) -> PrivateSpec:
    networks = []
    for text in st.args:
        try:
            networks.append(str(ipaddress.ip_network(text, strict=False)))
        except ValueError as err:
            raise ConfigError(st.where, f"private_addresses: {text!r} is not a network ({err}); "
                                        f"usage: {USAGE}") from None
    allow: list[str] = []
    for opt in st.body or ():
        if opt.name != "allow":
            raise _args.unknown_option(opt, "private_addresses", ("allow",))
        _args.arity(opt, 1, None, "allow ZONE...")
        allow.extend(_args.zone(opt, zone, "allow") for zone in opt.args)
    return PrivateSpec(tuple(networks) or DEFAULT_NETWORKS, tuple(allow))
