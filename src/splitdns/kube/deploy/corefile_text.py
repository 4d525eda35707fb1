"""Corefile text for a plan: for the in-pod splitdns, for an in-pod CoreDNS, or the cluster-wide block.

Each starts with the ownership record: zone -> owner -> upstream -> source.
Tests: tests/test_inject.py, tests/test_render.py, tests/test_wireguard_kube.py, tests/test_start_order.py.
"""

from __future__ import annotations

from splitdns import __version__
from splitdns.kube import tunnels
from splitdns.kube.deploy.plan import Plan, PlanError, Route

INDENT = "    "
CACHE_SECONDS = 30
# CoreDNS listens on every address by default; the in-pod copy must not answer the private zone to
# other pods through the pod IP, so it binds loopback (splitdns does that without being told).
COREDNS_BIND = "127.0.0.1"


def ownership(plan: Plan, owner: str, routes: tuple[Route, ...] | None = None) -> list[str]:
    lines = ["Who answers each zone (zone -> owner -> upstream -> where the address came from):"]
    for r in plan.routes if routes is None else routes:
        upstream = r.upstream_text() + (tunnels.of(r.vpn).ownership_note(plan) if r.tunnel else "")
        lines.append(f"  {r.zone} -> {owner} -> {upstream} -> {r.source}")
    return lines


def _comment(lines: list[str]) -> str:
    return "".join(f"# {line}".rstrip() + "\n" for line in lines)


METRICS = ":9153"  # on the pod IP, for a PodMonitor: the series carry no names or clients


def in_pod(plan: Plan, health: str = "", ready: str = "", by: str = "splitdns render",
           metrics: str = METRICS, reload: bool = True) -> str:
    """The Corefile mounted into the DNS container of the pod. `health`, `ready` and `metrics`
    are the endpoints' addresses (default: the directives' own, :8080 and :8181, and :9153);
    `reload` False where the Corefile is no file (an environment variable)."""
    return in_pod_changes(plan, health, ready, by, metrics, reload)[0]


def in_pod_changes(plan: Plan, health: str = "", ready: str = "", by: str = "splitdns render",
                   metrics: str = METRICS, reload: bool = True) -> tuple[str, tuple[str, ...]]:
    """`in_pod` and, for a Corefile carried into the pod (`plan.corefile`), what was changed in it."""
    head = [f"Rendered by `{by}` (splitdns {__version__}) for the in-pod {plan.resolver}; "
            "it listens on 127.0.0.1:53 only.", *ownership(plan, plan.owner)]
    if plan.corefile is None:
        blocks = [_block(plan, r, health, ready, metrics, reload) for r in plan.routes]
        return _comment(head) + "\n".join(blocks), ()
    from splitdns.kube.deploy import corefile_carry

    carried = corefile_carry.zones_of(plan.corefile)
    extra = [r for r in plan.routes if r.zone not in carried]
    generated_root = any(r.zone == "." for r in extra)
    coredns = plan.resolver == "coredns"
    wanted = corefile_carry.Wanted(health, ready, metrics, reload, COREDNS_BIND if coredns else None,
                                   add_endpoints=not generated_root, splitdns=not coredns)
    present = corefile_carry.endpoints_in(plan.corefile) if generated_root else frozenset()
    blocks = [_block(plan, r, health, ready, metrics, reload, leave_out=present) for r in extra]
    out = corefile_carry.carry(plan.corefile, wanted, blocks)
    head[1:1] = [f"Carried from {plan.corefile.path} as it is, but for what the pod needs:"
                 if out.changes else f"Carried from {plan.corefile.path} as it is.",
                 *(f"  {change}" for change in out.changes)]
    return _comment(head) + out.text, out.changes


def _block(plan: Plan, r: Route, health: str = "", ready: str = "", metrics: str = METRICS,
           reload: bool = True, leave_out: frozenset[str] = frozenset()) -> str:
    body: list[str] = []
    coredns = plan.resolver == "coredns"
    if coredns:
        body.append(f"bind {COREDNS_BIND}")
    body += ["errors", f"cache {CACHE_SECONDS}"]
    body += _names(plan, r)
    if r.tunnel:
        body += tunnels.of(r.vpn).corefile(plan)
    else:
        body.append("forward . " + " ".join(r.upstreams))
    # Per-zone readiness is ours; CoreDNS's `ready` is process-wide and ignores `forward`.
    ready_key = f"ready {ready}".rstrip()
    ready_lines = [f"{ready_key} {{", f"{INDENT}probe {r.probe}", "}"] if r.probe and not coredns else []
    if r.zone == ".":
        # Process-wide endpoints and checks live in the catch-all block, once.
        endpoints = {"health": [f"health {health}".rstrip()], "ready": ready_lines or [ready_key],
                     "prometheus": [f"prometheus {metrics}"]}
        body += [line for name, lines in endpoints.items() if name not in leave_out for line in lines]
        body += ["reload", "loop"] if reload else ["loop"]
    else:
        body += ready_lines
    return _text(r.zone, body)


# The resolv.conf the kubelet writes from the pod's dnsConfig (dnsPolicy None): its search list is
# the one `autopath` completes, read again at each reload.
RESOLV_CONF = "/etc/resolv.conf"


def _names(plan: Plan, r: Route) -> list[str]:
    """What the block knows of the pod's names: the cluster block (else the catch-all) completes
    the search walk and answers what the Kubernetes schema rules out; tunnel zones of a tunnel
    with no IPv6 answer AAAA here. Never for CoreDNS, whose autopath stays in one block."""
    if plan.resolver != "splitdns":
        return []
    cluster = plan.cluster_domain + "."
    has_cluster = any(route.zone == cluster for route in plan.routes)
    lines = []
    if plan.autopath and (r.zone == cluster or (r.zone == "." and not has_cluster)):
        lines.append(f"autopath {RESOLV_CONF}")
    if plan.autopath and r.zone == cluster:
        lines.append("k8s_schema")
    if plan.filter_aaaa and r.tunnel:
        lines.append("filter_aaaa")
    return lines


def _text(zone: str, body: list[str]) -> str:
    key = "." if zone == "." else zone.rstrip(".")
    inner = "".join(f"{INDENT}{line}\n" for line in body)
    return f"{key}:53 {{\n{inner}}}\n"


def cluster_wide(plan: Plan) -> str:
    """The server block(s) to add to kube-system/coredns, for the private zones only, never the root."""
    private = [r for r in plan.routes if r.zone not in (".", plan.cluster_domain + ".")]
    if not private:
        raise PlanError("--cluster-wide renders only private zones; give one with --zone ZONE=IP "
                        "(never `.`: the cluster's catch-all stays where it is)")
    for r in private:
        if r.tunnel:
            raise PlanError(f"zone {r.zone}: the cluster's CoreDNS cannot learn a pod's tunnel DNS at run "
                            "time; give the address it must forward to (--zone ZONE=IP)")
    zones = ", ".join(r.zone for r in private)
    head = [
        f"Rendered by `splitdns render --cluster-wide` (splitdns {__version__}).",
        "Add these server blocks to the Corefile key of the ConfigMap kube-system/coredns",
        "(kubectl -n kube-system edit configmap coredns), beside the existing `.:53` block, then",
        "let CoreDNS reload it (its `reload` plugin; allow about two minutes) or restart it.",
        "",
        "BLAST RADIUS: this changes DNS for EVERY pod of the cluster. The upstream below becomes the",
        f"resolver of {zones} for all workloads, and it must be reachable from the CoreDNS pods",
        "themselves (through a route to the VPN, not through one pod's tunnel). The day that tunnel",
        "or route is down, the whole cluster loses these names. Needs cluster-admin rights and a",
        "restart of a Deployment everyone depends on. Restricted to the private zone on purpose:",
        "never forward `.` there. The in-pod sidecar (`splitdns render`, the default) keeps the",
        "blast radius to one pod.",
        "",
        *ownership(plan, "cluster CoreDNS (kube-system/coredns)", tuple(private)),
    ]
    blocks = [_text(r.zone, ["errors", f"cache {CACHE_SECONDS}", "forward . " + " ".join(r.upstreams)])
              for r in private]
    return _comment(head) + "\n".join(blocks)
