"""Manifests as data: the ConfigMap, the DNS container, and the kustomize Component around
render's patch (a VPN container is its kind's: kube/tunnels/). The pod-spec changes are the injection's.

Plain dicts in the order a reader expects (apiVersion, kind, metadata, spec); YAML is `yamlio`'s job.
Tests: tests/test_image.py, tests/test_image_defaults.py, tests/test_render.py, tests/test_serve.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from splitdns.directives.operations import HealthSpec, ReadySpec
from splitdns.kube import tunnels
from splitdns.kube.deploy import sizing
from splitdns.kube.deploy.plan import Plan, PlanError
from splitdns.kube.shared.image import COREFILE, COREFILE_DIR, DEFAULT_IMAGE, USER_ID

Doc = dict[str, Any]

ANNOTATION_OWNERS = "splitdns.dev/zone-owners"
ANNOTATION_COREFILE = "splitdns.dev/corefile-sha256"
UNPRIVILEGED_PORT_SYSCTL = "net.ipv4.ip_unprivileged_port_start"
HEALTH_PORT, READY_PORT = HealthSpec.endpoint.port, ReadySpec.endpoint.port  # the directives' own
METRICS_PORT, METRICS_PORT_NAME = 9153, "dns-metrics"  # what `render --form monitoring` scrapes
COREFILE_VOLUME = "splitdns-corefile"
DEFAULT_COREDNS_IMAGE = "coredns/coredns:1.12.1"
DEFAULT_APP_IMAGE = "your-app-image"
DEFAULT_VPN_IMAGE = tunnels.default().default_image  # a placeholder: the default kind's

def copied(value: Any) -> Any:
    """A deep copy of parsed YAML or JSON (dicts, lists, scalars): 5x faster than copy.deepcopy,
    which the webhook would pay twice per review."""
    if isinstance(value, dict):
        return {k: copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copied(v) for v in value]
    return value


def cpu_request(qps: int) -> str:
    """The DNS container's CPU request for `qps` queries a second of a pod's mix (kube.deploy.sizing)."""
    return sized_cpu(
        f"--expected-qps {qps}", qps, sizing.dns_millicores(qps), "the queries a second one pod asks",
        f"the measured {sizing.DNS_MILLICORES_PER_1000_QPS}m per 1,000 q/s, and the resolver answers",
        f"{sizing.most_qps()} q/s is the most one DNS container is sized for")


def sized_cpu(flag: str, rate: int, millicores: int, rate_is: str, cost: str, most: str) -> str:
    """A CPU request of `millicores` for `rate` (what `flag` gave), or why there can be none: a rate
    under 1, or one needing more than the one core a process answers on (kube.deploy.sizing)."""
    if rate < 1:
        raise PlanError(f"{flag}: give {rate_is}, 1 or more")
    if millicores > sizing.MAX_MILLICORES:
        raise PlanError(f"{flag}: more than one core ({millicores}m) at {cost} on one; {most}")
    return f"{millicores}m"


@dataclass(frozen=True)
class Options:
    name: str = "app"
    image: str = DEFAULT_IMAGE
    coredns_image: str = DEFAULT_COREDNS_IMAGE
    app_image: str = DEFAULT_APP_IMAGE
    vpn_image: str = DEFAULT_VPN_IMAGE
    sidecar: str = "native"
    configmap: str = "splitdns-corefile"
    expected_qps: int = sizing.TYPICAL_QPS  # what one pod asks: the DNS container's CPU request


def owners(plan: Plan) -> str:
    """The ownership record as one annotation value (JSON: annotation keys cannot hold zone names)."""
    rows = [json.dumps({"zone": r.zone, "owner": plan.owner, "upstream": r.upstream_text(),
                        "source": r.source}) for r in plan.routes]
    # One zone per line, so the annotation reads as a table in `kubectl get -o yaml`.
    return "[\n" + ",\n".join(f"  {row}" for row in rows) + "\n]\n"


def configmap(plan: Plan, opts: Options, corefile: str) -> Doc:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": opts.configmap, "annotations": {ANNOTATION_OWNERS: owners(plan)}},
        "data": {"Corefile": corefile},
    }


def _probe(path: str, port: str | int, period: int, failures: int) -> Doc:
    return {"httpGet": {"path": path, "port": port}, "periodSeconds": period, "failureThreshold": failures}


def dns_container(plan: Plan, opts: Options) -> Doc:
    coredns = plan.resolver == "coredns"
    container: Doc = {
        "name": "dns",
        "image": opts.coredns_image if coredns else opts.image,
        # Our image's entrypoint is `splitdns serve`, so CoreDNS's own arguments work for both.
        "args": ["-conf", COREFILE],  # CoreDNS's path too (kube.shared.image)
        "ports": [
            {"name": "health", "containerPort": HEALTH_PORT, "protocol": "TCP"},
            {"name": "ready", "containerPort": READY_PORT, "protocol": "TCP"},
            {"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
    }
    if opts.sidecar == "native":
        container["restartPolicy"] = "Always"
        # A native sidecar counts as started once this passes, and only then does the app start.
        container["startupProbe"] = _probe(*startup_probe(plan), 1, 120)
    container["readinessProbe"] = _probe("/ready", "ready", 5, 2)
    container["livenessProbe"] = _probe("/health", "health", 10, 3)
    # CPU: for the rate the pod is expected to ask (kube.deploy.sizing). No CPU limit: a CFS quota
    # throttles in bursts, which clients see as DNS timeouts. Memory: the image's RSS after 1,000
    # q/s of the mix, a quarter above (kube.deploy.sizing); 97 MiB with a full cache (`limits {
    # cache_memory }`, 64 MB by default, counted at what an entry costs the process under a flood
    # of new names); the limit leaves room for it and the queries in flight.
    memory = f"{sizing.dns_memory_request_mib()}Mi"
    container["resources"] = {"requests": {"cpu": cpu_request(opts.expected_qps), "memory": memory},
                              "limits": {"memory": "128Mi"}}
    container["securityContext"] = {
        "runAsNonRoot": True,
        "runAsUser": USER_ID,
        "runAsGroup": USER_ID,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        # Port 53 is bound thanks to the pod sysctl, not a capability: NET_BIND_SERVICE does not
        # reach a non-root process in Kubernetes (kubernetes#56374).
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    container["volumeMounts"] = [{"name": COREFILE_VOLUME, "mountPath": COREFILE_DIR, "readOnly": True}]
    return container


def startup_probe(plan: Plan) -> tuple[str, str]:
    """(path, port name) of the DNS sidecar's startup probe: what holds the app and every later
    container. Native sidecars start one after the other, each only once the one before it has
    passed its startup probe, and the resolver is the first: nothing the VPN brings up exists yet.
    So it waits only for the zones answered through the cluster DNS (`Plan.answerable_at_start`):
    a tunnel zone, and a private zone at a fixed address too, is reached through the VPN, which
    starts after it. The readiness probe (/ready) covers every zone, and the VPN container's own
    startup probe holds the app until the tunnel zone answers (`vpn_container`)."""
    if plan.resolver == "coredns":
        return "/ready", "ready"  # CoreDNS's /ready is its plugins', never an upstream's
    first = plan.answerable_at_start()
    if not first:  # nothing answers before the VPN: the process listening is all there is to wait for
        return "/health", "health"
    if len(first) == len(plan.routes):
        return "/ready", "ready"
    return "/ready?" + "&".join(f"zone={r.zone.rstrip('.') or '.'}" for r in first), "ready"


def follow_ready_port(spec: Doc, old: int, new: int) -> None:
    """A probe of another container that asks the resolver's /ready on `old` (render's VPN
    container does) asks `new` instead: a re-injection moved the resolver's endpoints there."""
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                get = (c.get(probe) or {}).get("httpGet") if isinstance(c, dict) else None
                if isinstance(get, dict) and get.get("port") == old and \
                        str(get.get("path", "")).startswith("/ready"):
                    get["port"] = new


def containers_key(opts: Options) -> str:
    return "initContainers" if opts.sidecar == "native" else "containers"


def component(plan: Plan, opts: Options, corefile: str, patch_text: str) -> Doc:
    """A kustomize Component: the ConfigMap from a generator (its hash suffix rolls the pods when
    the Corefile changes) and the patch inline, so the component is one self-contained file."""
    return {
        "apiVersion": "kustomize.config.k8s.io/v1alpha1",
        "kind": "Component",
        "configMapGenerator": [{
            "name": opts.configmap,
            "options": {"annotations": {ANNOTATION_OWNERS: owners(plan)}},
            "literals": [f"Corefile={corefile}"],
        }],
        "patches": [{"target": {"kind": "Deployment", "name": opts.name}, "patch": patch_text}],
        "replacements": [sysctl_replacement(opts)],
    }


def sysctl_replacement(opts: Options) -> Doc:
    """Adds the port sysctl to the pod's `sysctls`, keeping the ones the Deployment has: kustomize's
    `create` on a `[name=...]` path appends an element (or updates that one sysctl) where a strategic
    merge would replace the list. The element is copied whole from the dns container's env, so
    its value stays the string "53" (a scalar copied into a created field would turn into a number)."""
    path = f"spec.template.spec.{containers_key(opts)}.[name=dns].env.[name={UNPRIVILEGED_PORT_SYSCTL}]"
    return {
        "source": {"kind": "Deployment", "name": opts.name, "fieldPath": path},
        "targets": [{
            "select": {"kind": "Deployment", "name": opts.name},
            "fieldPaths": [f"spec.template.spec.securityContext.sysctls.[name={UNPRIVILEGED_PORT_SYSCTL}]"],
            "options": {"create": True},
        }],
    }
