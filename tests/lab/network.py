"""The lab's wiring: namespaces, veth pairs, addresses, routes, forwarding and the VPN rules.

All links are created directly inside the lab's namespaces (`link add ... netns A peer ...
netns B`), so no interface ever appears in the host namespace, and every firewall command
runs inside the VPN server's namespace.
"""

from __future__ import annotations

from collections.abc import Callable

from . import configs as c
from .netns import ip_batch, ns_run, run

ROLES = ("pod", "node", "kdns", "vpn", "corp", "db")
MASQUERADE_RULE = ["POSTROUTING", "-s", c.VPN_POOL, "-o", "br0", "-j", "MASQUERADE"]
# The VPN server routes like a node with `hostNetwork: true`: forward tunnel -> corp, let
# replies back, and translate the client pool on the way out (the return-path fix: without it the
# tunnel carries queries but not the replies to the client pool).
VPN_RULES = f"""\
*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -i tun0 -o br0 -s {c.VPN_POOL} -j ACCEPT
-A FORWARD -i br0 -o tun0 -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A {" ".join(MASQUERADE_RULE)}
COMMIT
"""
_LO_UP = "link set lo up"


def build_core(n: Callable[[str], str]) -> None:
    """Everything but the pod; `n(role)` gives a role's namespace name."""
    ip_batch(
        [f"netns add {n(r)}" for r in ROLES if r != "pod"]
        + [
            f"link add eth0 netns {n('kdns')} type veth peer name kdns0 netns {n('node')}",
            f"link add eth0 netns {n('vpn')} type veth peer name vpn0 netns {n('node')}",
            f"link add eth0 netns {n('corp')} type veth peer name corp0 netns {n('vpn')}",
            f"link add eth0 netns {n('db')} type veth peer name db0 netns {n('vpn')}",
        ]
    )
    ip_batch(
        [_LO_UP, f"addr add {c.NODE_SVC_IP}/24 dev kdns0", "link set kdns0 up",
         f"addr add {c.NODE_VPN_IP}/24 dev vpn0", "link set vpn0 up"],
        ns=n("node"),
    )  # fmt: skip
    ip_batch(
        [_LO_UP, f"addr add {c.CLUSTER_DNS_IP}/24 dev eth0", "link set eth0 up",
         f"route add default via {c.NODE_SVC_IP}"],
        ns=n("kdns"),
    )  # fmt: skip
    ip_batch(
        [_LO_UP, f"addr add {c.VPN_SERVER_IP}/24 dev eth0", "link set eth0 up",
         f"route add default via {c.NODE_VPN_IP}",
         # corp and db share one segment behind the VPN server, like a small office LAN.
         "link add br0 type bridge", f"addr add {c.CORP_GW_IP}/24 dev br0",
         "link set corp0 master br0", "link set db0 master br0",
         "link set corp0 up", "link set db0 up", "link set br0 up"],
        ns=n("vpn"),
    )  # fmt: skip
    ip_batch(
        [_LO_UP, f"addr add {c.CORP_DNS_IP}/24 dev eth0", f"addr add {c.CORP_DNS2_IP}/24 dev eth0",
         "link set eth0 up",
         # The DNS host knows the way back to the tunnel; the db (below) does not.
         f"route add {c.VPN_POOL} via {c.CORP_GW_IP}"],
        ns=n("corp"),
    )  # fmt: skip
    ip_batch([_LO_UP, f"addr add {c.DB_IP}/24 dev eth0", "link set eth0 up"], ns=n("db"))
    for role in ("node", "vpn"):
        ns_run(n(role), ["sysctl", "-qw", "net.ipv4.ip_forward=1"])
    ns_run(n("vpn"), ["iptables-restore"], stdin=VPN_RULES)


def build_pod(pod: str, node: str) -> None:
    """The pod's namespace and its link to the node (10.244.0.2 <-> 10.244.0.1)."""
    ip_batch(
        [f"netns add {pod}", f"link add eth0 netns {pod} type veth peer name pod0 netns {node}"]
    )
    ip_batch([f"addr add {c.NODE_POD_GW}/24 dev pod0", "link set pod0 up"], ns=node)
    ip_batch(
        [_LO_UP, f"addr add {c.POD_IP}/24 dev eth0", "link set eth0 up",
         f"route add default via {c.NODE_POD_GW}"],
        ns=pod,
    )  # fmt: skip


def delete_pod(pod: str, node: str) -> None:
    """Remove the pod's namespace (its processes must be gone already)."""
    # Deleting the node end removes the pair at once; `ip netns del` alone frees the veth
    # asynchronously, and an immediate re-create would collide with the old `pod0`.
    run(["ip", "-n", node, "link", "del", "pod0"], check=False)
    run(["ip", "netns", "del", pod], check=False)
