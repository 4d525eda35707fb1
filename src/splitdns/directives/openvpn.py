"""`openvpn`: the zone's upstreams are the DNS servers the VPN server pushes, learned at run time.

Syntax:

    openvpn {
        management ADDRESS|PATH [PASSWORD_FILE]   the client's --management (TCP or unix socket)
        state PATH                                the file `splitdns openvpn-hook` writes
        domains                                   also own the domains the server pushes
        interface NAME                            the tunnel's interface (default: OpenVPN's `dev`)
        bind_to_tunnel on|off                     queries leave only by the tunnel (default on)
    }

A block with `openvpn` and no `forward` forwards everything to the pushed servers, failing
fast: `failfast_all_unhealthy_upstreams`, `max_fails 1`. `forward FROM openvpn { ... }`
does the same with the options you choose.

The zone's upstream sockets are bound to the tunnel's interface (SO_BINDTODEVICE), which
OpenVPN names: `dev` in its UPDOWN block and its scripts' environment, `TUN/TAP device X
opened` in its log. `interface` names it when none of those reach us; `bind_to_tunnel off`
lets the routing table choose, and the zone's queries may then leave by another interface.
"""

from __future__ import annotations

from dataclasses import dataclass

from splitdns.corefile import Statement
from splitdns.directives import _args
from splitdns.errors import ConfigError

USAGE = ("openvpn { management ADDRESS|PATH [PASSWORD_FILE]; state PATH; domains; interface NAME; "
         "bind_to_tunnel on|off }")
OPTIONS = ("management", "state", "domains", "interface", "bind_to_tunnel")


@dataclass(frozen=True)
class OpenVPNSpec:
    management: str | None = None       # "host:port" or a unix socket path
    password_file: str | None = None
    state_file: str | None = None
    domains: bool = False
    interface: str | None = None        # None: the `dev` OpenVPN reports
    bind_to_tunnel: bool = True

    @property
    def dns_origin(self) -> str:
        return "pushed by the VPN server"

    @property
    def management_tcp(self) -> tuple[str, int] | None:
        if self.management is None or self.management.startswith("/"):
            return None
        host, _, port = self.management.rpartition(":")
        return host.strip("[]") or "127.0.0.1", int(port)


def parse(st: Statement) -> OpenVPNSpec:
    _args.arity(st, 0, 0, USAGE)
    values: dict[str, object] = {}
    for opt in st.body or ():
        if opt.name == "management":
            _args.arity(opt, 1, 2, "management ADDRESS|PATH [PASSWORD_FILE]")
            target = opt.args[0]
            if not target.startswith("/"):
                _, sep, port = target.rpartition(":")
                if not sep or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
                    raise ConfigError(opt.where, f"management: {target!r} is neither HOST:PORT nor an "
                                                 "absolute unix socket path")
            values["management"] = target
            if len(opt.args) > 1:
                values["password_file"] = opt.args[1]
        elif opt.name == "state":
            _args.arity(opt, 1, 1, "state PATH")
            values["state_file"] = opt.args[0]
        elif opt.name == "domains":
            _args.arity(opt, 0, 0, "domains")
            values["domains"] = True
        elif opt.name == "interface":
            _args.arity(opt, 1, 1, "interface NAME")
            values["interface"] = _args.interface_name(opt, opt.args[0], "openvpn")
        elif opt.name == "bind_to_tunnel":
            values["bind_to_tunnel"] = _args.on_off(opt, "bind_to_tunnel")
        else:
            raise _args.unknown_option(opt, "openvpn", OPTIONS)
    if "management" not in values and "state_file" not in values:
        raise ConfigError(st.where, f"openvpn: say where the tunnel's state comes from; usage: {USAGE}")
    return OpenVPNSpec(**values)  # type: ignore[arg-type]
