"""The grammar of the scripts the VPN containers run: `openvpn-hook`, `wireguard-shim` and
`openconnect-hook` (cli.parser holds the other commands; these keep that module short).
Tests: tests/test_cli.py, tests/test_openconnect_lab.py.
"""

from __future__ import annotations

import argparse

from splitdns.cli.help import Parser


def add_openvpn_hook(commands: argparse._SubParsersAction[Parser]) -> None:
    p = commands.add_parser(
        "openvpn-hook", help="OpenVPN's --up/--down script: tell splitdns serve what the VPN pushed.",
        description="Meant to be OpenVPN's --up and --down script (with --script-security 2; give "
                    "the absolute path, OpenVPN passes no PATH). Reads the pushed DNS servers and "
                    "domains from OpenVPN's environment (dhcp-option and OpenVPN 2.6 dns options) and "
                    "writes them, with up or down, atomically to the state file that an `openvpn { "
                    "state FILE }` block of splitdns serve watches.",
        epilog="exit codes:\n  0  written\n  1  the file could not be written (OpenVPN then stops the "
               "connection)\n  2  not run by OpenVPN as an up or down script\n"
               "  70 internal error (a bug in splitdns)")
    p.add_argument("--state", required=True, metavar="FILE", help="The state file to write.")
    p.add_argument("openvpn_args", nargs="*", help=argparse.SUPPRESS)


def add_wireguard_shim(commands: argparse._SubParsersAction[Parser]) -> None:
    p = commands.add_parser(
        "wireguard-shim", help="Write a resolvconf for wg-quick that hands its DNS to splitdns serve.",
        description="Write DIR/resolvconf, a POSIX sh script for the WireGuard container's PATH: "
                    "wg-quick calls it at up with the nameserver and search lines of its DNS = line, "
                    "and at down; it records them in $SPLITDNS_RESOLVCONF_DIR (default "
                    "/run/splitdns), a volume the resolver reads through `wireguard { resolvconf DIR "
                    "}`. `resolvconf --watch IFACE` in that container copies the last handshakes "
                    "there too, which the resolver cannot read without CAP_NET_ADMIN.")
    p.add_argument("dir", metavar="DIR",
                   help="Where to write the script (a volume the VPN container mounts).")


def add_openconnect_hook(commands: argparse._SubParsersAction[Parser]) -> None:
    p = commands.add_parser(
        "openconnect-hook", help="Write a vpnc-script for openconnect that hands its DNS to splitdns serve.",
        description="Write DIR/vpnc-script, a POSIX sh script for openconnect's --script: at connect "
                    "and reconnect it records the DNS servers, default domain and split-DNS domains "
                    "the gateway pushed in $SPLITDNS_OPENCONNECT_STATE (default "
                    "/run/splitdns/openconnect), a file the resolver reads through `openconnect { "
                    "state FILE }`, and removes it at disconnect. The tun device and routes are set "
                    "up by the stock vpnc-script ($SPLITDNS_VPNC_SCRIPT, else the usual places), run "
                    "without the DNS variables, so /etc/resolv.conf is never touched.")
    p.add_argument("dir", metavar="DIR",
                   help="Where to write the script (a volume the VPN container mounts).")
