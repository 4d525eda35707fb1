"""`splitdns wireguard-shim DIR`: write our `resolvconf` for wg-quick into DIR.

wg-quick applies its `DNS =` line by piping `nameserver`/`search` lines into `resolvconf -a
IFACE -m 0 -x` at `up`, and calls `resolvconf -d IFACE -f` at `down`. A container has no
resolvconf, so `wg-quick up` fails there. This one records the lines as resolvconf itself
does (one file per interface, deleted at `down`) in a directory shared with the resolver:
a `wireguard { resolvconf DIR }` block follows it. Plain POSIX sh with cat, mv and date,
so it runs in any image that has wg-quick (which is bash); no Python there.

`resolvconf --watch IFACE [SECONDS]` is the liveness half: run in the VPN container (which has
CAP_NET_ADMIN), it copies `wg show IFACE latest-handshakes` beside the DNS lines every few
seconds, with the time it read them, for a resolver that cannot read them itself.
Tests: tests/test_wireguard.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

from splitdns.commands import vpn_script

DEFAULT_DIR = "/run/splitdns"

SCRIPT = r"""#!/bin/sh
# resolvconf for wg-quick in a container, written by `splitdns wireguard-shim`.
#   resolvconf -a IFACE [-m N] [-x] < lines   record the DNS lines wg-quick hands over (at up)
#   resolvconf -d IFACE [-f]                  forget them (at down)
#   resolvconf -l [IFACE]                     print them (wg-quick save)
#   resolvconf --watch IFACE [SECONDS]        copy `wg show IFACE latest-handshakes` every SECONDS
# Files go to $SPLITDNS_RESOLVCONF_DIR (default /run/splitdns), a volume the splitdns resolver
# of the pod reads (`wireguard { resolvconf DIR }`): DIR/IFACE and DIR/IFACE.handshakes.
set -eu
dir=${SPLITDNS_RESOLVCONF_DIR:-/run/splitdns}
usage() {
    echo "usage: resolvconf -a IFACE [-m N] [-x] | -d IFACE [-f] | -l [IFACE] | -u |" \
        "--watch IFACE [SECONDS]" >&2
    exit 2
}
# An interface name as wg-quick gives it (maybe with an order prefix, tun.wg0): a file name.
name() {
    case ${1:-} in
        '' | .* | */* | *[!A-Za-z0-9_=+.-]*) echo "resolvconf: bad interface name '${1:-}'" >&2; exit 2 ;;
    esac
}
[ $# -ge 1 ] || usage
cmd=$1
shift
case $cmd in
    -a)
        name "${1:-}"
        mkdir -p "$dir"
        tmp="$dir/.$1.$$"
        head -c 65536 > "$tmp"
        mv -f "$tmp" "$dir/$1"
        ;;
    -d)
        name "${1:-}"
        rm -f "$dir/$1"
        ;;
    -l)
        if [ $# -ge 1 ]; then name "$1"; cat "$dir/$1" 2>/dev/null || true; fi
        ;;
    -u | -I | -i) ;;
    --watch)
        name "${1:-}"
        every=${2:-5}
        mkdir -p "$dir"
        while :; do
            read_at=$(date +%s)
            if out=$(wg show "$1" latest-handshakes 2>&1); then
                body=$out
            else
                body="error: $(printf '%s\n' "$out" | head -n 1)"
            fi
            printf '%s\n%s\n' "$read_at" "$body" > "$dir/.$1.handshakes.$$"
            mv -f "$dir/.$1.handshakes.$$" "$dir/$1.handshakes"
            sleep "$every"
        done
        ;;
    *) usage ;;
esac
"""


def install(directory: str) -> Path:
    """Write the script as DIR/resolvconf, executable by everyone (the VPN container's user)."""
    return vpn_script.install(directory, "resolvconf", SCRIPT)


def run(directory: str) -> int:
    try:
        target = install(directory)
    except OSError as err:
        print(f"splitdns wireguard-shim: cannot write {directory}/resolvconf: {err.strerror or err}",
              file=sys.stderr)
        return 1
    print(f"wrote {target}: put {target.parent} first on wg-quick's PATH")
    return 0
