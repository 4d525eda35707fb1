"""The injection: one pod (metadata + spec) and the settings in, the injected pod out.

Pure and deterministic: no I/O, no clock, the input never modified. `splitdns inject`, the admission
webhook and `render --form webhook` (through the settings it writes) all go through `inject`, so one
set of golden files proves the three.

All or nothing: the resolver container, its Corefile, dnsPolicy/dnsConfig and the sysctl arrive
together, or the pod is returned unchanged with the reason. A pod that is not injected therefore keeps
plain cluster DNS, which is what makes `failurePolicy: Ignore` safe.

The Corefile travels in the pod spec itself (an environment variable of the resolver container that
`splitdns serve --corefile-env` reads), so no ConfigMap is needed in the pod's namespace. `render`'s
deployment and component forms ship a ConfigMap instead (`Settings.configmap`): the container is
then `dns`, mounts it and keeps the resolver's own endpoint ports, which is what those forms document.
Tests: tests/test_inject.py, tests/test_inject_lab.py, tests/test_wireguard_kube.py, tests/test_render.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from splitdns import __version__
from splitdns.kube import tunnels
from splitdns.kube.deploy import corefile_text, manifests, pod_dns, sizing
from splitdns.kube.deploy.plan import Plan
from splitdns.kube.shared.image import DEFAULT_IMAGE

Doc = dict[str, Any]

CONTAINER = "splitdns"
MOUNTED_CONTAINER = "dns"  # the name with a ConfigMap-mounted Corefile (`verify -c`'s default)
COREFILE_ENV = "SPLITDNS_COREFILE"
NAMESPACE_LABEL = "splitdns.dev/injection"   # on a Namespace: "enabled"
POD_LABEL = "splitdns.dev/inject"            # on a pod (template): "true" to ask, "false" to refuse
STATUS = "splitdns.dev/status"               # written by the injection: what, version, settings hash
NDOTS = pod_dns.NDOTS_ANNOTATION              # optional per-pod ndots
# Not the resolver defaults (8080, 8181): the app next to it often listens on 8080 already.
HEALTH_PORT, READY_PORT, METRICS_PORT = 15380, 15381, 15382
ALWAYS_EXCLUDED = ("kube-system", "kube-public", "kube-node-lease")
PORT_SYSCTL = {"name": manifests.UNPRIVILEGED_PORT_SYSCTL, "value": "53"}
# A pod that runs to completion: a classic sidecar would keep it running forever.
_COMPLETING = ("Never", "OnFailure")


@dataclass(frozen=True)
class Settings:
    """What every injected pod gets. `plan.namespace` is ignored: each pod's own namespace counts."""

    plan: Plan
    image: str = DEFAULT_IMAGE
    sidecar: str = "native"
    excluded_namespaces: tuple[str, ...] = ALWAYS_EXCLUDED
    # Empty: the Corefile is an env var of the container. A name: it is that ConfigMap's `Corefile`
    # key, mounted (a changed ConfigMap then reaches running pods, through the resolver's `reload`).
    configmap: str = ""
    expected_qps: int = sizing.TYPICAL_QPS  # queries a second per pod: the CPU request
    vpn_image: str = ""   # the sidecar of the plan's VPN kind, if it has one (kube/tunnels/); "": its
    vpn_secret: str = ""  # default image and Secret

    def __post_init__(self) -> None:
        kind = tunnels.of(self.plan.vpn)
        object.__setattr__(self, "vpn_image", self.vpn_image or kind.default_image)
        object.__setattr__(self, "vpn_secret", self.vpn_secret or tunnels.secret_of(kind))

    @property
    def adds_vpn(self) -> bool:
        """The injection adds the kind's VPN sidecar: it has one, and a zone learns from it."""
        return tunnels.of(self.plan.vpn).sidecar is not None and any(r.tunnel for r in self.plan.routes)

    @property
    def container(self) -> str:
        return MOUNTED_CONTAINER if self.configmap else CONTAINER

    @property
    def ports(self) -> dict[int, str]:
        """What the resolver listens on, for the conflict check."""
        health, ready, metrics = (manifests.HEALTH_PORT, manifests.READY_PORT, manifests.METRICS_PORT) \
            if self.configmap else (HEALTH_PORT, READY_PORT, METRICS_PORT)
        return {53: "port 53", health: "the resolver's health port", ready: "its ready port",
                metrics: "its metrics port"}

    @property
    def corefile(self) -> str:
        return self.corefile_changes[0]

    @cached_property
    def corefile_changes(self) -> tuple[str, tuple[str, ...]]:
        """The Corefile and what changed in a carried one; in an env var: no file, so no reload."""
        if self.configmap:
            return corefile_text.in_pod_changes(self.plan)
        return corefile_text.in_pod_changes(self.plan, health=f":{HEALTH_PORT}", ready=f":{READY_PORT}",
                                        by="splitdns inject", metrics=f":{METRICS_PORT}", reload=False)

    @cached_property
    def digest(self) -> str:
        """The settings' fingerprint in the status annotation: what changes the injected pod."""
        data = {"corefile": self.corefile, "image": self.image, "sidecar": self.sidecar,
                "expected_qps": self.expected_qps,
                **({"configmap": self.configmap} if self.configmap else {}),
                **({"vpn_image": self.vpn_image, "vpn_secret": self.vpn_secret,
                    "unsafe_sysctls": self.plan.unsafe_sysctls} if self.adds_vpn else {}),
                "ndots": self.plan.ndots, "cluster_domain": self.plan.cluster_domain}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def status(self, ndots_from_settings: bool = False) -> str:
        status = {"injected": CONTAINER, "version": __version__, "sidecar": self.sidecar,
                  "settings": self.digest}
        if ndots_from_settings:  # ours to change when the settings change; the pod's own ndots never
            status["ndots"] = "settings"
        return json.dumps(status, separators=(",", ":"))


@dataclass(frozen=True)
class Outcome:
    pod: Doc                      # the injected pod, or the input (a copy) when not injected
    injected: bool                # the pod now carries our injection (newly or already)
    changed: bool                 # pod differs from the input
    reason: str = ""              # why it was not injected (empty when injected)
    warnings: tuple[str, ...] = field(default_factory=tuple)


class Refused(Exception):
    """The pod cannot take the resolver; the message says why, for the user."""


def inject(pod: Doc, namespace: str, settings: Settings) -> Outcome:
    """`pod` is a Pod or a pod template ({metadata, spec}); `namespace` is where it runs."""
    before = manifests.copied(pod)
    after = manifests.copied(pod)
    warnings: list[str] = []
    try:
        _refuse_scope(after, namespace, settings)
        _apply(after, namespace, settings, warnings)
    except Refused as why:
        return Outcome(before, False, False, str(why))
    return Outcome(after, True, after != before, "", tuple(warnings))


def is_injected(pod: Doc) -> bool:
    """Our status annotation and our container, looked for in initContainers and containers."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    return STATUS in _annotations(pod) and bool(_ours(spec or {}))


def status_of(pod: Doc) -> dict[str, str]:
    """The decoded status annotation ({} when absent or unreadable)."""
    try:
        text = _annotations(pod).get(STATUS, "")
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _annotations(pod: Doc) -> dict[str, Any]:
    meta = pod.get("metadata")
    ann = meta.get("annotations") if isinstance(meta, dict) else None
    return ann if isinstance(ann, dict) else {}


def _labels(pod: Doc) -> dict[str, Any]:
    meta = pod.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels if isinstance(labels, dict) else {}


# -- refusals ------------------------------------------------------------------------------------


def _refuse_scope(pod: Doc, namespace: str, settings: Settings) -> None:
    if not isinstance(pod.get("spec"), dict):
        raise Refused("no pod spec")
    if namespace in settings.excluded_namespaces:
        raise Refused(f"namespace {namespace} is never injected (system or the injector's own)")
    if str(_labels(pod).get(POD_LABEL, "")).lower() == "false" or \
            str(_annotations(pod).get(POD_LABEL, "")).lower() == "false":
        raise Refused(f"the pod opts out ({POD_LABEL}: \"false\")")
    spec = pod["spec"]
    if spec.get("hostNetwork"):
        raise Refused("hostNetwork pod: 127.0.0.1:53 would be the node's, shared with every other "
                      "hostNetwork pod")
    policy = spec.get("dnsPolicy", "ClusterFirst")
    if not isinstance(policy, str):
        raise Refused("spec.dnsPolicy is not a string")
    if policy == "ClusterFirstWithHostNet":
        raise Refused("dnsPolicy ClusterFirstWithHostNet is meant for hostNetwork pods")
    if policy == "Default":
        raise Refused("dnsPolicy Default: the pod asks for the node's resolver, not the cluster's")
    if policy not in ("ClusterFirst", "None"):
        raise Refused(f"dnsPolicy {policy} is not one the resolver can merge with")
    if _mapping(spec, "os", "spec.os").get("name") == "windows":
        raise Refused("Windows pod: the resolver image is Linux only")
    if settings.sidecar == "classic" and spec.get("restartPolicy") in _COMPLETING:
        raise Refused(f"restartPolicy {spec.get('restartPolicy')} with a classic sidecar: the resolver "
                      "would keep the pod running forever (use the native sidecar, Kubernetes >= 1.29)")


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise Refused(f"{where} is not a list")
    return value


def _mapping(parent: Doc, key: str, where: str) -> Doc:
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Refused(f"{where} is not a mapping")
    return value


def _containers(spec: Doc) -> list[tuple[str, int, Doc]]:
    out = []
    for key in ("initContainers", "containers"):
        items = spec.get(key)
        if items is not None and not isinstance(items, list):
            raise Refused(f"spec.{key} is not a list")
        for i, c in enumerate(items or []):
            if not isinstance(c, dict):
                raise Refused(f"spec.{key}[{i}] is not a container")
            out.append((key, i, c))
    return out


def _is_ours(c: Doc) -> bool:
    """Ours by name and by how it gets its Corefile: the env var, or the ConfigMap volume."""
    env, mounts = c.get("env"), c.get("volumeMounts")
    if c.get("name") == CONTAINER:
        return isinstance(env, list) and any(isinstance(e, dict) and e.get("name") == COREFILE_ENV
                                             for e in env)
    return c.get("name") == MOUNTED_CONTAINER and isinstance(mounts, list) and any(
        isinstance(m, dict) and m.get("name") == manifests.COREFILE_VOLUME for m in mounts)


def _ours(spec: Doc) -> list[tuple[str, int]]:
    return [(key, i) for key, i, c in _containers(spec) if _is_ours(c)]


def _refuse_conflicts(spec: Doc, settings: Settings) -> None:
    taken = settings.ports
    for key, _i, c in _containers(spec):
        if _is_ours(c):
            continue
        name = c.get("name")
        if name == settings.container:
            raise Refused(f"{key} already has a container named {name} that is not ours")
        for p in _list(c.get("ports"), f"ports of container {name}"):
            if not isinstance(p, dict):
                continue
            for port_key in ("containerPort", "hostPort"):
                if isinstance(p.get(port_key), int) and p[port_key] in taken:
                    raise Refused(f"container {name} declares {port_key} {p[port_key]}, "
                                  f"{taken[p[port_key]]}, which the resolver listens on")
            if str(p.get("name", "")).startswith(f"{CONTAINER}-"):
                raise Refused(f"container {name} has a port named {p['name']}, a name the resolver uses")
    sysctls = _mapping(spec, "securityContext", "spec.securityContext").get("sysctls")
    for s in _list(sysctls, "spec.securityContext.sysctls"):
        if isinstance(s, dict) and s.get("name") == manifests.UNPRIVILEGED_PORT_SYSCTL:
            value = str(s.get("value", ""))
            if not (value.isdigit() and int(value) <= 53):
                raise Refused(f"the pod sets {manifests.UNPRIVILEGED_PORT_SYSCTL}={value}; the resolver "
                              "needs 53 or lower to bind port 53 without root")


# -- the changes ---------------------------------------------------------------------------------


def _apply(pod: Doc, namespace: str, settings: Settings, warnings: list[str]) -> None:
    spec: Doc = pod["spec"]
    _refuse_conflicts(spec, settings)
    kind = tunnels.of(settings.plan.vpn)
    if (why := tunnels.prepare(spec, STATUS in _annotations(pod), kind if settings.adds_vpn else None)):
        raise Refused(why)
    mounted_before = False
    for key, i in reversed(_ours(spec)):  # re-injection: ours is rebuilt, in first place
        mounted_before |= spec[key][i].get("name") == MOUNTED_CONTAINER
        del spec[key][i]
    if spec.get("initContainers") == []:
        del spec["initContainers"]
    container = _container(settings)
    if mounted_before and not settings.configmap:  # render's vpn probe follows the resolver's port
        manifests.follow_ready_port(spec, manifests.READY_PORT, READY_PORT)
    if settings.sidecar == "native":
        # First, so the app's own init containers and other injectors' can resolve both zones.
        if "initContainers" not in spec and "containers" in spec:
            # Written before `containers`, where a reader looks for it.
            items = list(spec.items())
            at = [k for k, _ in items].index("containers")
            spec = dict([*items[:at], ("initContainers", []), *items[at:]])
            pod["spec"] = spec
        spec["initContainers"] = [container, *(spec.get("initContainers") or [])]
    else:
        spec["containers"] = [container, *(spec.get("containers") or [])]
        if spec.get("initContainers"):
            warnings.append("classic sidecar: the pod's init containers run before the resolver and "
                            "cannot resolve names")
    try:
        ndots_from_settings = pod_dns.merge(spec, dataclasses.replace(settings.plan, namespace=namespace),
                                            _annotations(pod).get(NDOTS),
                                            status_of(pod).get("ndots") == "settings", warnings)
    except pod_dns.Unmergeable as err:
        raise Refused(str(err)) from None
    vpn = kind.advice(spec, settings.plan)
    if vpn:
        warnings.append(vpn)
    _sysctl(spec)
    if settings.adds_vpn and kind.sidecar is not None:
        kind.sidecar.add(spec, container, settings.image, settings.vpn_image, settings.vpn_secret,
                         settings.sidecar, settings.plan.unsafe_sysctls)
    if settings.configmap or mounted_before:  # the Corefile volume follows our container (in or out)
        volumes = [v for v in _list(spec.get("volumes"), "spec.volumes")
                   if not (isinstance(v, dict) and v.get("name") == manifests.COREFILE_VOLUME)]
        if settings.configmap:
            volumes.insert(0, {"name": manifests.COREFILE_VOLUME, "configMap": {"name": settings.configmap}})
        if volumes:
            spec["volumes"] = volumes
        else:
            spec.pop("volumes", None)
    meta = pod.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise Refused("metadata is not a mapping")
    annotations = meta.get("annotations")
    if annotations is None:
        annotations = meta["annotations"] = {}
    if not isinstance(annotations, dict):
        raise Refused("metadata.annotations is not a mapping")
    annotations[STATUS] = settings.status(ndots_from_settings)


def _container(settings: Settings) -> Doc:
    plan = settings.plan
    base = manifests.dns_container(plan, manifests.Options(image=settings.image, coredns_image=settings.image,
                                                           sidecar=settings.sidecar,
                                                           expected_qps=settings.expected_qps))
    if settings.configmap:  # as it is: the Corefile mounted at CoreDNS's path, the default ports
        return base
    ports = {"health": f"{CONTAINER}-health", "ready": f"{CONTAINER}-ready"}
    container: Doc = {
        "name": CONTAINER,
        "image": settings.image,
        # The image's entrypoint is `splitdns serve`.
        "args": ["--corefile-env", COREFILE_ENV],
        "env": [{"name": COREFILE_ENV, "value": settings.corefile}],
        "ports": [{"name": ports["health"], "containerPort": HEALTH_PORT, "protocol": "TCP"},
                  {"name": ports["ready"], "containerPort": READY_PORT, "protocol": "TCP"},
                  {"name": manifests.METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"}],
    }
    for key in ("restartPolicy", "startupProbe", "readinessProbe", "livenessProbe"):
        if key in base:
            container[key] = manifests.copied(base[key])
            get = container[key].get("httpGet") if isinstance(container[key], dict) else None
            if get is not None:
                get["port"] = ports[get["port"]]
    container["resources"] = base["resources"]
    container["securityContext"] = base["securityContext"]
    return container


def _sysctl(spec: Doc) -> None:
    sc = spec.get("securityContext")
    if sc is None:
        sc = spec["securityContext"] = {}
    if not isinstance(sc, dict):
        raise Refused("spec.securityContext is not a mapping")
    sysctls = _list(sc.get("sysctls"), "spec.securityContext.sysctls")
    if not any(isinstance(s, dict) and s.get("name") == manifests.UNPRIVILEGED_PORT_SYSCTL for s in sysctls):
        sysctls = [*sysctls, dict(PORT_SYSCTL)]
    sc["sysctls"] = sysctls
