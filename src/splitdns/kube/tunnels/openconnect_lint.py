"""OpenConnect checks (codes SD312-SD314): a pod's openconnect container that runs the stock
vpnc-script (which rewrites /etc/resolv.conf); the gateway's split-include routes (ocserv.conf's
`route =`) that take the cluster's addresses, or a full tunnel; a gateway that pushes no DNS for
an `openconnect` block.

The routes and the DNS are the gateway's: openconnect's command line names none, so they are
checked where they are written, in the ocserv.conf given to check (a gateway of another make
is not read). Which cluster ranges are known: kube/shared/cluster_ranges.py.
Tests: tests/test_check.py, tests/test_vpn_kinds_kube.py, tests/test_vpn_checks.py.
"""

from __future__ import annotations

from splitdns import directives
from splitdns.kube.shared.cluster_ranges import ClusterRange, cluster_ranges, taken
from splitdns.kube.shared.findings import Finding
from splitdns.kube.shared.sources import POD, Inputs
from splitdns.kube.tunnels.openconnect_conf import GatewayConfig
from splitdns.kube.tunnels.openconnect_pod import unhooked


def check(inputs: Inputs) -> list[Finding]:
    out: list[Finding] = []
    for w in inputs.workloads:
        out += [Finding(w.file, w.line(key, index), "SD312", f"{w.kind} {w.name}: {message}")
                for key, index, message in unhooked(w.spec)]
    ranges = cluster_ranges(inputs)
    blocks = [f"{src.file}:{src.line(st.where)}" for src in inputs.corefiles if src.context == POD
              for b in src.model.blocks if (st := b.directive(directives.OPENCONNECT.name)) is not None]
    for conf in configs(inputs):
        out += _routes(conf, ranges)
        if blocks and not conf.dns:
            out.append(Finding(conf.path, conf.first_line, "SD314",
                               f"no `dns =` line, but the `openconnect` block at {blocks[0]} takes its "
                               "upstreams from what the gateway pushes: the tunnel zone would never "
                               "answer"))
    return out


def configs(inputs: Inputs) -> list[GatewayConfig]:
    found = inputs.tunnel_configs.get(directives.OPENCONNECT.name, [])
    return [c for c in found if isinstance(c, GatewayConfig)]


def _routes(conf: GatewayConfig, ranges: list[ClusterRange]) -> list[Finding]:
    out: list[Finding] = []
    for net, line in conf.routes:
        hit = [r for r in taken(net, ranges) if not conf.excluded(r.network)]
        if hit:
            out.append(Finding(conf.path, line, "SD313",
                               f"route = {net} sends into the tunnel {' and '.join(r.what for r in hit)}: "
                               "cluster names stop resolving; route only the networks behind the "
                               f"gateway, or add {_no_routes(hit)}"))
    if conf.full_tunnel:
        left = [r for r in ranges if not conf.excluded(r.network)]
        said = ("route = default" if conf.default_route is not None
                else "no `route =` line (ocserv then routes everything)")
        line = conf.default_route or conf.first_line
        if left:
            out.append(Finding(conf.path, line, "SD313",
                               f"{said}: a full tunnel takes {' and '.join(r.what for r in left)}; add "
                               f"{_no_routes(left)}, or route only "
                               "the networks behind the gateway"))
        elif not ranges and not conf.no_routes:
            out.append(Finding(conf.path, line, "SD313",
                               f"{said}: a full tunnel takes the cluster's Service and pod ranges and "
                               "its DNS; route only the networks behind the gateway, or add `no-route =` "
                               "for the cluster's ranges (give the pod's Corefile too, and check names "
                               "them)"))
    return out


def _no_routes(ranges: list[ClusterRange]) -> str:
    """The `no-route =` lines that keep `ranges` out: a range inside another needs none of its own."""
    nets = [r.network for r in ranges]
    widest = [n for n in nets if not any(o != n and o.version == n.version and n.subnet_of(o)  # type: ignore[arg-type]
                                         for o in nets)]
    return " and ".join(f"no-route = {n}" for n in dict.fromkeys(widest))
