"""`openconnect`: the zone's upstreams are the DNS servers an OpenConnect gateway pushes.

Syntax:

    openconnect {
        state PATH              the file our vpnc-script writes (default /run/splitdns/openconnect)
        interface NAME          the tun device (default: the TUNDEV the hook recorded)
        domains                 also own the split-DNS domains the gateway names (else its
                                default domain)
        bind_to_tunnel on|off   queries leave only by the tun device (default on)
    }

openconnect runs `splitdns openconnect-hook`'s vpnc-script as its `--script`; the block
follows the state file it writes. As with `openvpn`, a block with `openconnect` and no
`forward` forwards everything to the pushed servers, failing fast; the zone's upstream
sockets are bound to the tun device the hook recorded, or the one `interface` names.
Tests: tests/test_openconnect.py, tests/test_openconnect_lab.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from splitdns.corefile import Statement
from splitdns.directives import _args
from splitdns.errors import ConfigError

USAGE = "openconnect { state PATH; interface NAME; domains; bind_to_tunnel on|off }"
OPTIONS = ("state", "interface", "domains", "bind_to_tunnel")
DEFAULT_STATE = "/run/splitdns/openconnect"


@dataclass(frozen=True)
class OpenConnectSpec:
    state_file: str = DEFAULT_STATE
    interface: str | None = None        # None: the TUNDEV the hook recorded
    domains: bool = False
    bind_to_tunnel: bool = True

    @property
    def dns_origin(self) -> str:
        return "pushed by the OpenConnect gateway"


def parse(st: Statement) -> OpenConnectSpec:
    _args.arity(st, 0, 0, USAGE)
    values: dict[str, object] = {}
    for opt in st.body or ():
        if opt.name == "state":
            _args.arity(opt, 1, 1, "state PATH")
            values["state_file"] = absolute_path(opt, opt.args[0])
        elif opt.name == "interface":
            _args.arity(opt, 1, 1, "interface NAME")
            values["interface"] = _args.interface_name(opt, opt.args[0], "openconnect")
        elif opt.name == "domains":
            _args.arity(opt, 0, 0, "domains")
            values["domains"] = True
        elif opt.name == "bind_to_tunnel":
            values["bind_to_tunnel"] = _args.on_off(opt, "bind_to_tunnel")
        else:
            raise _args.unknown_option(opt, "openconnect", OPTIONS)
    return OpenConnectSpec(**values)  # type: ignore[arg-type]


def absolute_path(opt: Statement, path: str) -> str:
    """An option's path, which must be absolute: a relative one would depend on the directory
    the resolver happens to start in."""
    if not path.startswith("/"):
        raise ConfigError(opt.where, f"{opt.name}: give an absolute path, not {path!r}")
    return path
