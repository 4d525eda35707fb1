"""Start-order check (SD209): a native sidecar resolver whose startup probe waits for a zone that
only a container listed after it can bring up.

Kubernetes starts native sidecars one after the other, each once the one before it has passed its
startupProbe. Before the VPN container runs, the only upstream the resolver can reach is the
cluster DNS: a tunnel zone (`openvpn`, `wireguard`) is certainly behind the VPN, and a private
zone forwarded elsewhere than the cluster DNS most likely is (check cannot see the node's routes,
so it says "unless").
Tests: tests/test_check_truth.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

from splitdns import directives
from splitdns.kube.deploy.inject import COREFILE_ENV
from splitdns.kube.shared import lenient_corefile
from splitdns.kube.shared.lenient_corefile import Block, Model

Add = Callable[[int, str, str], None]
CLUSTER_DOMAIN = "cluster.local."


def vpn_containers_after(spec: dict[str, Any], key: str, index: int) -> list[str]:
    """Names of the VPN containers that start after the one at spec[key][index]."""
    later = (spec.get("initContainers") or [])[index + 1:] if key == "initContainers" else []
    later = [*later, *(spec.get("containers") or [])]
    return [str(c.get("name")) for c in later if isinstance(c, dict) and _runs_a_vpn(c)]


def _runs_a_vpn(c: dict[str, Any]) -> bool:
    words = [str(c.get("image", "")), *map(str, c.get("command") or []), *map(str, c.get("args") or [])]
    text = " ".join(words).lower()
    return any(program in text for d in directives.tunnels() if d.tunnel is not None
               for program in d.tunnel.programs)


def waited_zones(path: str, models: list[Model]) -> list[tuple[str, Block]]:
    """(zone, its block) for each zone a GET of `path` on the resolver's ready endpoint waits for."""
    url = urlsplit(path)
    blocks = [(z, b) for m in models for b in m.blocks for z in b.zones]
    if url.path != "/ready":
        return []
    named = parse_qs(url.query).get("zone")
    if named is None:
        return blocks
    wanted = {n.rstrip(".").lower() + "." for n in named}
    return [(z, b) for z, b in blocks if z in wanted]


def behind_the_vpn(zone: str, block: Block, models: list[Model]) -> str | None:
    """Why only the VPN can bring the zone up, or None when the cluster DNS answers it."""
    if block.tunnel:
        statement = block.tunnel_statement
        assert statement is not None
        return f"its upstreams are learned from the tunnel (`{statement.name}`)"
    if zone in (".", CLUSTER_DOMAIN) or zone.endswith("." + CLUSTER_DOMAIN):
        return None
    # Where the cluster domain and the catch-all go is reachable outside the tunnel (SD104).
    cluster = {str(u) for m in models for b in m.blocks if {CLUSTER_DOMAIN, "."} & set(b.zones)
               for f in b.forwards for u in f.spec.upstreams}
    targets = [str(u) for f in block.forwards for u in f.spec.upstreams]
    outside = [t for t in targets if t not in cluster]
    if not outside:
        return None
    return f"it is forwarded to {', '.join(outside)}, reached through the VPN unless the node routes it"


def check(spec: dict[str, Any], key: str, index: int, models: list[Model],
          line: int, name: str, add: Add) -> None:
    c = spec[key][index]
    get = (c.get("startupProbe") or {}).get("httpGet") or {}
    later = vpn_containers_after(spec, key, index)
    if not later or key != "initContainers" or c.get("restartPolicy") != "Always":
        return
    if "coredns" in str(c.get("image", "")):
        return  # CoreDNS's /ready is its plugins' readiness: it never waits for an upstream
    models = models or _injected_corefile(c, name)
    path = str(get.get("path", ""))
    if not models:
        return
    for zone, block in waited_zones(path, models):
        why = behind_the_vpn(zone, block, models)
        if why is not None:
            vpn = ", ".join(later)
            add(line, "SD209",
                f"startupProbe of {name} (GET {path}) waits for zone {zone.rstrip('.') or '.'}, and {why}; "
                f"container {vpn} starts only once {name} has passed it, so it never does")
            return


def _injected_corefile(c: dict[str, Any], name: str) -> list[Model]:
    """The Corefile `splitdns inject` puts in the container's environment, when it is there."""
    for env in c.get("env") or []:
        if isinstance(env, dict) and env.get("name") == COREFILE_ENV and isinstance(env.get("value"), str):
            model = lenient_corefile.read(env["value"], f"{name}'s {COREFILE_ENV}")
            return [model] if model.error is None else []
    return []
