"""The cluster's addresses a VPN must leave out of its tunnel, as `check` can know them: the
upstream of the pod-side Corefiles' catch-all and cluster blocks is the cluster DNS (a Service
IP), and where it lies in a distribution's default Service range (kubeadm's 10.96.0.0/12, k3s's
10.43.0.0/16) that range is named too. Nothing else is guessed: the corp network behind the VPN
is private too. Every kind's lints of routes into the tunnel read it.
Tests: tests/test_wireguard_check.py, tests/test_check.py, tests/test_vpn_kinds_kube.py.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from splitdns.kube.shared.sources import POD, Inputs

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
_DEFAULT_SERVICE_RANGES = (("10.96.0.0/12", "kubeadm's default Service range"),
                           ("10.43.0.0/16", "k3s's default Service range"))
_CLUSTER_ZONE = "cluster.local."


@dataclass(frozen=True)
class ClusterRange:
    network: IPNetwork
    what: str


def cluster_ranges(inputs: Inputs) -> list[ClusterRange]:
    """The cluster DNS addresses the pod-side Corefiles forward to, and the Service ranges they
    reveal."""
    found: dict[IPNetwork, str] = {}
    for src in inputs.corefiles:
        if src.context != POD:
            continue
        for block in src.model.blocks:
            if block.tunnel or not (block.is_root or any(z.endswith(_CLUSTER_ZONE) for z in block.zones)):
                continue
            for fwd in block.forwards:
                for up in fwd.spec.upstreams:
                    ip = ipaddress.ip_address(up.host)
                    if ip.is_loopback:
                        continue
                    found.setdefault(ipaddress.ip_network(ip), f"the cluster DNS {ip} (forward of block "
                                                               f"{block.name} in {src.file})")
                    for text, what in _DEFAULT_SERVICE_RANGES:
                        net = ipaddress.ip_network(text)
                        if ip in net:
                            found.setdefault(net, f"{what} {net}, where the cluster DNS {ip} lies")
    return [ClusterRange(net, what) for net, what in found.items()]


def taken(net: IPNetwork, ranges: list[ClusterRange]) -> list[ClusterRange]:
    """The cluster's ranges that `net`, routed into a tunnel, takes."""
    return [r for r in ranges if r.network.version == net.version and r.network.overlaps(net)]
