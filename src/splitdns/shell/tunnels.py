"""The shell's one table of tunnel kinds: a tunnel directive's name -> the watcher that follows
its spec (`tunnel_watcher.Watcher`). The lifecycle starts one watcher per spec from here and
never asks which kind it is; a new kind is its watcher module and one row below.
Tests: tests/test_tunnel_kinds.py, tests/test_tunnel_serve.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from splitdns import directives
from splitdns.shell import openconnect, openvpn, strongswan, tunnel_watcher, wireguard

MakeWatcher = Callable[[Any, tunnel_watcher.OnChange], tunnel_watcher.Watcher]

WATCHERS: dict[str, MakeWatcher] = {
    directives.OPENVPN.name: openvpn.Watcher,
    directives.WIREGUARD.name: wireguard.Watcher,
    directives.OPENCONNECT.name: openconnect.Watcher,
    directives.STRONGSWAN.name: strongswan.Watcher,
}


def watcher(kind: directives.Directive[directives.TunnelSpec], spec: directives.TunnelSpec,
            on_change: tunnel_watcher.OnChange) -> tunnel_watcher.Watcher:
    """A new watcher for `spec`, a spec of the tunnel directive `kind`."""
    return WATCHERS[kind.name](spec, on_change)
