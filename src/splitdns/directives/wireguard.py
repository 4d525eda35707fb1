"""`wireguard`: the zone's upstreams are the DNS servers of a wg-quick tunnel, learned at run time.

Syntax:

    wireguard {
        resolvconf DIR            where our `resolvconf` shim records what wg-quick hands it
        config PATH               a wg-quick config shared with the pod: its DNS = line
        interface NAME            the tunnel's interface (default: the config's name, else wg0)
        max_handshake_age DUR     older than this, the tunnel is down (default 195s)
        domains                   also own the search domains of the DNS = line
        bind_to_tunnel on|off     queries leave only by the interface (default on)
    }

As with `openvpn`, a block with `wireguard` and no `forward` forwards everything to the
tunnel's servers, failing fast; `forward FROM wireguard { ... }` chooses the options. The
zone's upstream sockets are bound to the interface (SO_BINDTODEVICE); `bind_to_tunnel off`
lets the routing table choose, and the zone's queries may then leave by another interface.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from splitdns.corefile import Statement
from splitdns.directives import _args
from splitdns.errors import ConfigError

USAGE = ("wireguard { resolvconf DIR; config PATH; interface NAME; max_handshake_age DURATION; "
         "domains; bind_to_tunnel on|off }")
DEFAULT_INTERFACE = "wg0"
DEFAULT_MAX_AGE = 195.0  # WireGuard's REJECT_AFTER_TIME (180 s) and a margin
_IFACE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_=+.-")


@dataclass(frozen=True)
class WireGuardSpec:
    resolvconf: str | None = None   # the shim's directory: DIR/IFACE, DIR/IFACE.handshakes
    config: str | None = None
    interface: str = DEFAULT_INTERFACE
    max_age: float = DEFAULT_MAX_AGE
    domains: bool = False
    bind_to_tunnel: bool = True

    @property
    def dns_origin(self) -> str:
        return f"the DNS = line of WireGuard interface {self.interface}"

    @property
    def recorded(self) -> str | None:
        return None if self.resolvconf is None else f"{self.resolvconf.rstrip('/')}/{self.interface}"

    @property
    def handshakes(self) -> str | None:
        return None if self.recorded is None else f"{self.recorded}.handshakes"


def parse(st: Statement) -> WireGuardSpec:
    _args.arity(st, 0, 0, USAGE)
    values: dict[str, object] = {}
    for opt in st.body or ():
        if opt.name in ("resolvconf", "config"):
            _args.arity(opt, 1, 1, f"{opt.name} PATH")
            if not opt.args[0].startswith("/"):
                raise ConfigError(opt.where, f"{opt.name}: give an absolute path, not {opt.args[0]!r}")
            values[opt.name] = opt.args[0]
        elif opt.name == "interface":
            _args.arity(opt, 1, 1, "interface NAME")
            values["interface"] = _interface(opt, opt.args[0])
        elif opt.name == "max_handshake_age":
            _args.arity(opt, 1, 1, "max_handshake_age DURATION")
            age = _args.duration(opt, opt.args[0], "max_handshake_age")
            if age <= 0:
                raise ConfigError(opt.where, "max_handshake_age: must be more than 0")
            values["max_age"] = age
        elif opt.name == "domains":
            _args.arity(opt, 0, 0, "domains")
            values["domains"] = True
        elif opt.name == "bind_to_tunnel":
            values["bind_to_tunnel"] = _args.on_off(opt, "bind_to_tunnel")
        else:
            raise _args.unknown_option(opt, "wireguard", ("resolvconf", "config", "interface",
                                                          "max_handshake_age", "domains", "bind_to_tunnel"))
    if "resolvconf" not in values and "config" not in values:
        raise ConfigError(st.where, f"wireguard: say where the tunnel's DNS comes from; usage: {USAGE}")
    if "interface" not in values and isinstance(values.get("config"), str):
        # wg-quick names the interface after its config file (wg0.conf -> wg0).
        stem = PurePosixPath(str(values["config"])).name.removesuffix(".conf")
        values["interface"] = _interface(st, stem)
    return WireGuardSpec(**values)  # type: ignore[arg-type]


def _interface(st: Statement, name: str) -> str:
    if not 0 < len(name) <= 15 or not set(name) <= _IFACE_CHARS:
        raise ConfigError(st.where, f"wireguard: {name!r} is not an interface name wg-quick accepts "
                                    "(1 to 15 of a-z A-Z 0-9 _ = + . -)")
    return name
