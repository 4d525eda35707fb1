"""The flags that say which VPN a rendered or injected pod runs and what its tunnel carries,
shared by render, inject and the webhook.

Tests: tests/test_cli.py, tests/test_render.py
"""

from __future__ import annotations

import argparse

from splitdns import directives


def add_vpn(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vpn", choices=sorted(directives.tunnel_words()),
                   help="The pod's VPN (default: the one the tunnel zones name, else openvpn). With "
                        "wireguard, the pod also gets a WireGuard sidecar running wg-quick from the "
                        "Secret wireguard-client (wg0.conf), with our resolvconf shim on its PATH.")
    p.add_argument("--vpn-image", default="your-openvpn-client-image", help="The VPN client image: "
                   "OpenVPN's in the full example, or the WireGuard sidecar's (wg-quick; wireguard-go "
                   "without the kernel module; default your-wireguard-image then).")
    p.add_argument("--filter-aaaa", action="store_true", help="The tunnel carries no IPv6: its zones "
                   "answer AAAA with NODATA (filter_aaaa) instead of handing out unreachable addresses.")
    p.add_argument("--no-autopath", action="store_true", dest="no_autopath", help="Leave out autopath and "
                   "k8s_schema: every try of the pod's search walk then goes upstream.")
