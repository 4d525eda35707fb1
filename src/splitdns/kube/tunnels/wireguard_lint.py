"""WireGuard config checks (codes SD302-SD308): AllowedIPs that take the cluster's addresses, a
`DNS =` that is the in-pod resolver itself, no PersistentKeepalive, no `DNS =` address at all
for a `wireguard` block, a tunnel with no IPv6 (`filter_aaaa`), what wg-quick would refuse.
(An Endpoint only the tunnel
can resolve is check/checker.py's, beside OpenVPN's `remote`: it needs the Corefile's routing.)

What the cluster's addresses are: kube/shared/cluster_ranges.py.
Tests: tests/test_vpn_kinds_kube.py, tests/test_tunnel_kinds.py, tests/test_wireguard_check.py.
"""

from __future__ import annotations

import ipaddress

from splitdns import directives
from splitdns.kube.shared.cluster_ranges import ClusterRange, cluster_ranges
from splitdns.kube.shared.findings import Finding
from splitdns.kube.shared.sources import POD, Inputs
from splitdns.kube.tunnels.wireguard_conf import WgConfig, without


def check(inputs: Inputs) -> list[Finding]:
    out: list[Finding] = []
    ranges = cluster_ranges(inputs)
    learners = [f"{src.file}:{src.line(st.where)}" for src in inputs.corefiles if src.context == POD
                for b in src.model.blocks if (st := b.directive(directives.WIREGUARD.name)) is not None]
    filtered = any(b.directive("filter_aaaa") is not None for src in inputs.corefiles if src.context == POD
                   for b in src.model.blocks if b.directive(directives.WIREGUARD.name) is not None)
    for conf in configs(inputs):
        out += [Finding(conf.path, line, "SD308", message) for line, message in conf.errors]
        out += _allowed_ips(conf, ranges)
        out += _dns_loop(conf)
        if conf.addresses and all(net.version == 4 for net, _ in conf.addresses) and not filtered:
            out.append(Finding(conf.path, conf.addresses[0][1], "SD307",
                               "no IPv6 address on this tunnel: add `filter_aaaa` to the tunnel zone "
                               "(splitdns render --filter-aaaa), so AAAA is answered NODATA there"))
        if learners and not conf.dns:
            out.append(Finding(conf.path, conf.interface_line, "SD306",
                               f"no DNS = address, but the `wireguard` block at {learners[0]} takes its "
                               "upstreams from it: the tunnel zone would never answer"))
        for peer in conf.peers:
            if not peer.keepalive:
                out.append(Finding(conf.path, peer.line, "SD305",
                                   "this [Peer] has no PersistentKeepalive: behind NAT an idle tunnel "
                                   "loses its mapping, and its last handshake ages until the resolver "
                                   "reads the tunnel as down"))
    return out


def configs(inputs: Inputs) -> list[WgConfig]:
    """The wg-quick configs among the inputs."""
    found = inputs.tunnel_configs.get(directives.WIREGUARD.name, [])
    return [c for c in found if isinstance(c, WgConfig)]


def _allowed_ips(conf: WgConfig, ranges: list[ClusterRange]) -> list[Finding]:
    out: list[Finding] = []
    for peer in conf.peers:
        nets = [net for net, _ in peer.allowed]
        for net, line in peer.allowed:
            hit = [r for r in ranges if r.network.version == net.version and r.network.overlaps(net)]
            if hit:
                instead = ", ".join(map(str, without(nets, [r.network for r in ranges])))
                out.append(Finding(conf.path, line, "SD302",
                                   f"AllowedIPs {net} routes into the tunnel "
                                   f"{' and '.join(r.what for r in hit)}: cluster names stop resolving. "
                                   f"Write instead: AllowedIPs = "
                                   f"{instead or '(only the networks behind the VPN)'}"))
            elif net.prefixlen == 0:
                out.append(Finding(conf.path, line, "SD302",
                                   f"AllowedIPs {net} sends every address into the tunnel, the cluster's "
                                   "Service and pod ranges and its DNS included: list the networks "
                                   "behind the VPN instead (give the pod's Corefile too, and check "
                                   "computes the list without the cluster DNS)"))
    return out


def _dns_loop(conf: WgConfig) -> list[Finding]:
    return [Finding(conf.path, line, "SD303",
                    f"DNS = {address} is the pod's own resolver: the `wireguard` block would forward the "
                    "tunnel zone to itself, a loop. Name the DNS server behind the tunnel")
            for address, line in conf.dns if ipaddress.ip_address(address).is_loopback]
