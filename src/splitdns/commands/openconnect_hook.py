"""`splitdns openconnect-hook DIR`: write our vpnc-script for openconnect into DIR.

openconnect hands what the gateway pushed to its `--script` in environment variables
(INTERNAL_IP4_DNS, INTERNAL_IP6_DNS, CISCO_DEF_DOMAIN, CISCO_SPLIT_DNS, TUNDEV, the routes).
The stock vpnc-script then configures the tun device and routes, and rewrites /etc/resolv.conf
(or calls resolvconf/resolvectl), which a pod's resolver must own. This one records the DNS
part in a state file in a volume shared with the resolver (an `openconnect { state FILE }`
block follows it) and runs the stock vpnc-script without the DNS variables, so the device
and routes are set up exactly as vpnc-script does (split-include and exclude routes, MTU,
IPv6, the route to the gateway) and resolv.conf is left alone: vpnc-script only touches it
when INTERNAL_IP4_DNS is set. Plain POSIX sh with mkdir, tr, date and mv, so it runs in any
image that has openconnect; no Python there.

The state file's lines are `NAME=value`, one line each, written to a temporary file and
renamed over the old one (a reader never sees half a file); `core.openconnect` parses them.
Tests: tests/test_openconnect.py, tests/test_openconnect_lab.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

from splitdns.commands import vpn_script

DEFAULT_STATE = "/run/splitdns/openconnect"
HOOK_NAME = "vpnc-script"

SCRIPT = r"""#!/bin/sh
# vpnc-script for openconnect in a pod, written by `splitdns openconnect-hook`.
#   openconnect --script THIS ...
# At connect and reconnect it records the pushed DNS in $SPLITDNS_OPENCONNECT_STATE (default
# /run/splitdns/openconnect), a file the splitdns resolver of the pod reads (`openconnect {
# state FILE }`); at attempt-reconnect it marks it reconnecting; at disconnect it removes it.
# The tun device and routes are the stock vpnc-script's ($SPLITDNS_VPNC_SCRIPT, else the
# usual places), run without the DNS variables, so it never touches /etc/resolv.conf.
set -u
state=${SPLITDNS_OPENCONNECT_STATE:-/run/splitdns/openconnect}
real=${SPLITDNS_VPNC_SCRIPT:-}
if [ -z "$real" ]; then
    for candidate in /usr/share/vpnc-scripts/vpnc-script /etc/vpnc/vpnc-script \
        /usr/libexec/vpnc-scripts/vpnc-script /usr/local/share/vpnc-scripts/vpnc-script; do
        if [ -x "$candidate" ]; then real=$candidate; break; fi
    done
fi
if [ -z "$real" ] || [ ! -x "$real" ]; then
    echo "splitdns vpnc-script: no stock vpnc-script to set up the tun device and routes" \
        "(install vpnc-scripts, or set SPLITDNS_VPNC_SCRIPT)" >&2
    exit 1
fi

# One line per value: a newline in a pushed value must not make a second entry.
line() { printf '%s=%s\n' "$1" "$(printf '%s' "$2" | tr -d '\r\n')"; }

record() {
    dir=${state%/*}
    [ "$dir" != "$state" ] || dir=.
    mkdir -p "$dir" || return 1
    tmp="$dir/.${state##*/}.$$"
    {
        echo "# splitdns openconnect state: what the VPN gateway pushed"
        line reason "$1"
        line written_at "$(date +%s)"
        line TUNDEV "${TUNDEV:-}"
        line INTERNAL_IP4_ADDRESS "${INTERNAL_IP4_ADDRESS:-}"
        line INTERNAL_IP4_DNS "${INTERNAL_IP4_DNS:-}"
        line INTERNAL_IP6_DNS "${INTERNAL_IP6_DNS:-}"
        line CISCO_DEF_DOMAIN "${CISCO_DEF_DOMAIN:-}"
        line CISCO_SPLIT_DNS "${CISCO_SPLIT_DNS:-}"
    } > "$tmp" && mv -f "$tmp" "$state" || { rm -f "$tmp"; return 1; }
}

reason=${reason:-}
case $reason in
    disconnect) rm -f "$state" ;;
    attempt-reconnect) [ ! -e "$state" ] || record attempt-reconnect ;;
esac
(
    unset INTERNAL_IP4_DNS INTERNAL_IP6_DNS CISCO_DEF_DOMAIN CISCO_SPLIT_DNS
    exec "$real"
)
rc=$?
if [ $rc -eq 0 ]; then
    # After the device and routes are up: the resolver must not send into a tunnel being built.
    case $reason in
        connect | reconnect)
            record "$reason" || { echo "splitdns vpnc-script: cannot write $state" >&2; exit 1; } ;;
    esac
fi
exit $rc
"""


def install(directory: str) -> Path:
    """Write the script as DIR/vpnc-script, executable by everyone (the VPN container's user)."""
    return vpn_script.install(directory, HOOK_NAME, SCRIPT)


def run(directory: str) -> int:
    try:
        target = install(directory)
    except OSError as err:
        print(f"splitdns openconnect-hook: cannot write {directory}/{HOOK_NAME}: "
              f"{err.strerror or err}", file=sys.stderr)
        return 1
    print(f"wrote {target}: run openconnect with --script {target}")
    return 0
