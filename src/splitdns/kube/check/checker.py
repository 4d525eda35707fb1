"""`splitdns check`: Corefiles, Kubernetes YAML and VPN client configs read together, because the
DNS of a pod is only right when the three agree.

Which Corefile belongs to which pod: a workload that mounts a ConfigMap by name gets that ConfigMap's
Corefile; when nothing says, every pod-side Corefile given is taken as the pod's.
Tests: tests/test_corefile_compat.py, tests/test_render.py, tests/test_wireguard_check.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from splitdns.codec.wire import name_to_wire
from splitdns.core.routing import Router
from splitdns.core.zone import Zone
from splitdns.kube import tunnels
from splitdns.kube.check import corefile_lint, pod_lint, schema, zone_names
from splitdns.kube.shared import sources
from splitdns.kube.shared.findings import Finding, ordered
from splitdns.kube.shared.lenient_corefile import Block, Model
from splitdns.kube.shared.sources import CLUSTER, POD, CorefileSource, Inputs, Workload

_NOT_PRIVATE = ("cluster.local.", "in-addr.arpa.", "ip6.arpa.")


@dataclass(frozen=True)
class Options:
    resolver: str = "auto"                      # "auto", "splitdns" or "coredns"
    kube_version: tuple[int, int] | None = None  # None: no schema validation


def check(paths: Sequence[str], opts: Options) -> list[Finding]:
    inputs = sources.read(list(paths), guess_cluster=opts.resolver != "splitdns", formats=tunnels.formats())
    out = list(inputs.findings)
    for file, doc in inputs.documents:
        if opts.kube_version is not None:
            out += schema.validate(file, doc, opts.kube_version)
    for src in inputs.corefiles:
        pods = _pods_of(src, inputs)
        resolver = _resolver(opts.resolver, pods)
        rcs = [pod_lint.resolv_conf(w) for w in pods]
        out += corefile_lint.check(src, resolver, rcs, _tunnel_test(src, inputs))
    for w in inputs.workloads:
        models = [src.model for src in _corefiles_of(w, inputs)]
        out += pod_lint.check(w, models, opts.kube_version)
    out += _vpn_servers(inputs)
    for kind in tunnels.KINDS.values():
        out += kind.lints(inputs)
    return ordered(out)


def _mounted_configmaps(w: Workload) -> set[str]:
    return {str((v.get("configMap") or {}).get("name")) for v in w.spec.get("volumes") or []
            if isinstance(v, dict) and v.get("configMap")}


def _corefiles_of(w: Workload, inputs: Inputs) -> list[CorefileSource]:
    pod_side = [s for s in inputs.corefiles if s.context == POD]
    mounted = _mounted_configmaps(w)
    named = [s for s in pod_side if s.configmap is not None and s.configmap in mounted]
    if named:
        return named
    if not list(pod_lint.dns_containers(w.spec)):
        return []
    return [s for s in pod_side if s.configmap is None or not any(
        s.configmap in _mounted_configmaps(other) for other in inputs.workloads)]


def _pods_of(src: CorefileSource, inputs: Inputs) -> list[Workload]:
    if src.context != POD:
        return []
    return [w for w in inputs.workloads if src in _corefiles_of(w, inputs)]


def _resolver(choice: str, pods: list[Workload]) -> str:
    if choice != "auto":
        return choice
    for w in pods:
        for d in pod_lint.dns_containers(w.spec):
            return d.resolver
    return "splitdns"


def _tunnel_test(src: CorefileSource, inputs: Inputs) -> corefile_lint.IsTunnel:
    """An upstream is the tunnel when a VPN client config routes it through the VPN, or, where a tunnel
    is in sight (a VPN config given, or a tunnel block in this Corefile), when a private zone
    (not the cluster's, not `.`) forwards to the same address: that zone's server is behind the VPN.
    A cluster-wide Corefile always has a tunnel in sight: its private zones are some workload's.
    Without a tunnel, a private zone and `.` sharing an upstream is just a shared upstream."""
    private: dict[str, str] = {}
    configs = [conf for found in inputs.tunnel_configs.values() for conf in found]
    # In the cluster's own CoreDNS a private zone's upstream is a workload's tunnel DNS whether or
    # not its VPN config is given: no node reaches it otherwise.
    tunnel_in_sight = bool(configs) or any(b.tunnel for b in src.model.blocks) or src.context == CLUSTER
    for block in src.model.blocks if tunnel_in_sight else ():
        if not block.zones or block.is_root or any(z.endswith(_NOT_PRIVATE) or zone_names.cluster_slip(z)
                                                   for z in block.zones):
            continue  # a slip of the cluster domain is the cluster's zone misspelt (SD116), not private
        for fwd in block.forwards:
            for up in fwd.spec.upstreams:
                private.setdefault(up.host, block.zones[0])

    def is_tunnel(address: str) -> str | None:
        for conf in configs:
            if conf.behind_tunnel(address):
                return f"{address} is behind the tunnel of {conf.path}"
        if address in private:
            return f"{address} is the upstream of the private zone {private[address]}"
        return None

    return is_tunnel


def _vpn_servers(inputs: Inputs) -> list[Finding]:
    """A VPN server's name that only the tunnel can resolve (`remote`, `Endpoint`), for any kind."""
    out: list[Finding] = []
    pod_models = [s for s in inputs.corefiles if s.context == POD]
    for word, found in inputs.tunnel_configs.items():
        fmt = tunnels.formats()[word]
        for conf in found:
            for host, line in conf.server_names():
                for src in pod_models:
                    why = _tunnel_owner(src.model, host, _tunnel_test(src, inputs))
                    if why:
                        out.append(Finding(conf.path, line, fmt.server_code,
                                           f"{fmt.server_word} {host}: {why} in {src.file}"))
    return out


def _tunnel_owner(model: Model, host: str, is_tunnel: corefile_lint.IsTunnel) -> str | None:
    """Why the block that owns `host` sends it into the tunnel, or None."""
    if model.error is not None or not model.blocks:
        return None
    by_zone: dict[int, Block] = {}
    zones = []
    for block in model.blocks:
        if not block.zones:
            continue  # its keys did not parse; check reports that
        zone = Zone(block.to_config_block())
        by_zone[id(zone)] = block
        zones.append(zone)
    try:
        wire = name_to_wire(host.rstrip(".") + ".")
    except (UnicodeEncodeError, ValueError):
        return None
    owner = Router(zones).route(wire)
    if owner is None:
        return None
    block = by_zone[id(owner)]
    if block.tunnel_kind is not None:
        return f"it falls in block {block.name}, which takes its upstreams from {block.tunnel_kind.display}"
    fwd = owner.forward_for(wire)
    for up in fwd.spec.upstreams if fwd is not None else ():
        why = is_tunnel(up.host)
        if why:
            return f"it falls in block {block.name}, forwarded to {up.host} ({why})"
    return None
