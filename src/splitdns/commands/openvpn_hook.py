"""`splitdns openvpn-hook`: OpenVPN's --up/--down script; writes the tunnel state for `serve`.

OpenVPN runs it with its own variables only (no PATH, nothing inherited), so the pod spec
gives an absolute path: `--up "/usr/local/bin/splitdns openvpn-hook --state F"`, same for
`--down`, with `--script-security 2`. OpenVPN appends its own arguments (device, MTU, ...),
which we ignore.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from splitdns.core import openvpn as openvpn_words
from splitdns.core import tunnel
from splitdns.shell import openvpn

UP_SCRIPTS = ("up", "route-up")
DOWN_SCRIPTS = ("down", "route-pre-down")


def state_of(env: Mapping[str, str]) -> tunnel.TunnelState | None:
    script = env.get("script_type", "")
    if script in UP_SCRIPTS:
        # `dev`: the interface OpenVPN opened, which the zone's upstream sockets are bound to.
        return tunnel.TunnelState(tunnel.UP, f"{script} script ran", openvpn_words.from_env(env),
                                  env.get("dev", ""))
    if script in DOWN_SCRIPTS:
        why = env.get("signal", "")
        return tunnel.TunnelState(tunnel.DOWN, f"{script} script ran" + (f" ({why})" if why else ""),
                                  openvpn_words.from_env(env))
    return None


def run(state_file: str, env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    state = state_of(env)
    if state is None:
        print(f"splitdns openvpn-hook: script_type {env.get('script_type')!r} is not up or down; "
              "use it as --up and --down", file=sys.stderr)
        return 2
    try:
        openvpn.write_state(state_file, state)
    except OSError as err:
        # Non-zero makes OpenVPN stop the connection: better a loud failure than a tunnel
        # whose DNS the resolver never learns.
        print(f"splitdns openvpn-hook: cannot write {state_file}: {err}", file=sys.stderr)
        return 1
    return 0
