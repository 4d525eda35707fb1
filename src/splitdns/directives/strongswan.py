"""`strongswan`: the zone's upstreams are the DNS servers a strongSwan IKE SA received.

Syntax:

    strongswan {
        resolve PATH            the file charon's resolve plugin writes (its
                                `charon.plugins.resolve.file`; default /run/splitdns/resolv.conf)
        interface NAME          kernel-libipsec's tun device (default ipsec0)
        bind_to_tunnel on|off   queries leave only by that device (default on)
    }

The plugin writes name servers only, never domains: the zone's names are the block's own
keys. As with `openvpn`, a block with `strongswan` and no `forward` forwards everything to
those servers, failing fast.
Tests: tests/test_strongswan.py, tests/test_strongswan_lab.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from splitdns.corefile import Statement
from splitdns.directives import _args
from splitdns.directives.openconnect import absolute_path

USAGE = "strongswan { resolve PATH; interface NAME; bind_to_tunnel on|off }"
OPTIONS = ("resolve", "interface", "bind_to_tunnel")
DEFAULT_RESOLVE = "/run/splitdns/resolv.conf"
DEFAULT_INTERFACE = "ipsec0"


@dataclass(frozen=True)
class StrongSwanSpec:
    resolve_file: str = DEFAULT_RESOLVE
    interface: str = DEFAULT_INTERFACE
    bind_to_tunnel: bool = True

    @property
    def domains(self) -> bool:
        """The resolve plugin names no domains: a strongswan zone owns only its own keys."""
        return False

    @property
    def dns_origin(self) -> str:
        return "handed to charon by the IKE peer"


def parse(st: Statement) -> StrongSwanSpec:
    _args.arity(st, 0, 0, USAGE)
    values: dict[str, object] = {}
    for opt in st.body or ():
        if opt.name == "resolve":
            _args.arity(opt, 1, 1, "resolve PATH")
            values["resolve_file"] = absolute_path(opt, opt.args[0])
        elif opt.name == "interface":
            _args.arity(opt, 1, 1, "interface NAME")
            values["interface"] = _args.interface_name(opt, opt.args[0], "strongswan")
        elif opt.name == "bind_to_tunnel":
            values["bind_to_tunnel"] = _args.on_off(opt, "bind_to_tunnel")
        else:
            raise _args.unknown_option(opt, "strongswan", OPTIONS)
    return StrongSwanSpec(**values)  # type: ignore[arg-type]
