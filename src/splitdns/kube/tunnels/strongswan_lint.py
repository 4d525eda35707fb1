"""strongSwan config checks (codes SD309-SD311): the `resolve` plugin left writing
/etc/resolv.conf (its default) or a file the `strongswan` block does not read; remote traffic
selectors that route the cluster's addresses into the tunnel; a `strongswan` block whose
connections ask for no DNS.

What check can say of "no DNS": charon sends an IKEv2 configuration request (and with it the
resolve plugin's request for DNS servers) only for a connection with `vips`, so swanctl.conf
connections without `vips` get no DNS, whatever the gateway offers; a `resolve` plugin turned off
(`load = no`) writes none. Whether the gateway hands DNS with the virtual IP is its config, which
check does not see.
Tests: tests/test_check.py, tests/test_vpn_kinds_kube.py, tests/test_vpn_checks.py.
"""

from __future__ import annotations

from splitdns import directives
from splitdns.directives.strongswan import StrongSwanSpec
from splitdns.errors import ConfigError
from splitdns.kube.shared.cluster_ranges import cluster_ranges, taken
from splitdns.kube.shared.findings import Finding
from splitdns.kube.shared.sources import POD, Inputs
from splitdns.kube.tunnels.strongswan_conf import STRONGSWAN_CONF, StrongswanConfig
from splitdns.kube.tunnels.strongswan_pod import RESOLVE_FILE, RESOLVE_SETTINGS

# charon-systemd (what the sidecar runs) reads its own section first, then charon's.
_DAEMONS = ("charon-systemd", "charon")


def check(inputs: Inputs) -> list[Finding]:
    out: list[Finding] = []
    blocks = _blocks(inputs)
    wanted = sorted({file for _, file in blocks}) or [RESOLVE_FILE]
    for conf in configs(inputs):
        if conf.which == STRONGSWAN_CONF:
            out += _resolve_file(conf, wanted)
            out += _resolve_off(conf, blocks)
        else:
            out += _traffic_selectors(conf, inputs)
            out += _no_vips(conf, blocks)
    return out


def configs(inputs: Inputs) -> list[StrongswanConfig]:
    found = inputs.tunnel_configs.get(directives.STRONGSWAN.name, [])
    return [c for c in found if isinstance(c, StrongswanConfig)]


def _blocks(inputs: Inputs) -> list[tuple[str, str]]:
    """Each pod-side `strongswan` block (file:line) and the resolve file it reads."""
    found = []
    for src in inputs.corefiles:
        for block in src.model.blocks if src.context == POD else ():
            st = block.directive(directives.STRONGSWAN.name)
            if st is None:
                continue
            try:
                spec = directives.STRONGSWAN.parse(st)
            except ConfigError:
                continue  # corefile_lint reports it
            if isinstance(spec, StrongSwanSpec):
                found.append((f"{src.file}:{src.line(st.where)}", spec.resolve_file))
    return found


def _setting(conf: StrongswanConfig, *key: str) -> tuple[str, str, int] | None:
    for daemon in _DAEMONS:
        s = conf.get(daemon, "plugins", "resolve", *key)
        if s is not None:
            return daemon, s.value, s.line
    return None


def _resolve_file(conf: StrongswanConfig, wanted: list[str]) -> list[Finding]:
    found = _setting(conf, "file")
    if found is None:
        line = next((conf.sections[(d,)] for d in _DAEMONS if (d,) in conf.sections), 1)
        return [Finding(conf.path, line, "SD309",
                        "the resolve plugin's file is not set, so charon writes the DNS servers to "
                        f"/etc/resolv.conf, the pod's (and the resolver's): set {RESOLVE_SETTINGS}"
                        + _unread(conf))]
    daemon, value, line = found
    if value in wanted:
        return []
    return [Finding(conf.path, line, "SD309",
                    f"{daemon}.plugins.resolve.file = {value}, but the `strongswan` block reads "
                    f"{' and '.join(wanted)}: write the same path in both (the file in the volume "
                    "the resolver shares with the strongSwan container)")]


def _unread(conf: StrongswanConfig) -> str:
    if not conf.includes:
        return ""
    return (f" (check does not follow `include {conf.includes[0]}`: set the file here, where it is seen, "
            "or give the included file to check instead)")


def _resolve_off(conf: StrongswanConfig, blocks: list[tuple[str, str]]) -> list[Finding]:
    found = _setting(conf, "load")
    if not blocks or found is None or found[1].lower() not in ("no", "false", "0"):
        return []
    daemon, value, line = found
    return [Finding(conf.path, line, "SD311",
                    f"{daemon}.plugins.resolve.load = {value}: no plugin writes the DNS an IKE SA "
                    f"receives, yet the `strongswan` block at {blocks[0][0]} takes its upstreams "
                    "from it; the tunnel zone would never answer")]


def _traffic_selectors(conf: StrongswanConfig, inputs: Inputs) -> list[Finding]:
    out: list[Finding] = []
    ranges = cluster_ranges(inputs)
    for conn in conf.connections:
        for net, line in conn.remote_ts:
            hit = taken(net, ranges)
            if hit:
                out.append(Finding(conf.path, line, "SD310",
                                   f"connection {conn.name}: remote_ts {net} routes into the tunnel "
                                   f"{' and '.join(r.what for r in hit)}: cluster names stop resolving; "
                                   "list only the networks behind the gateway"))
            elif net.prefixlen == 0:
                out.append(Finding(conf.path, line, "SD310",
                                   f"connection {conn.name}: remote_ts {net} sends every address into "
                                   "the tunnel, the cluster's Service and pod ranges and its DNS "
                                   "included: list the networks behind the gateway instead"))
    return out


def _no_vips(conf: StrongswanConfig, blocks: list[tuple[str, str]]) -> list[Finding]:
    if not blocks or not conf.connections or any(c.vips for c in conf.connections):
        return []
    conn = conf.connections[0]
    return [Finding(conf.path, conn.line, "SD311",
                    f"no connection asks for a virtual IP (vips), so charon requests no DNS from the "
                    f"gateway, yet the `strongswan` block at {blocks[0][0]} takes its upstreams from "
                    f"it: add `vips = 0.0.0.0` (and `::` for IPv6) to connection {conn.name}")]
