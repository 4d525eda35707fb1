"""Pod-spec checks (codes SD2xx, SD111, SD402; SD209 in startup_lint): the resolv.conf the kubelet
will write, and whether the DNS container can bind port 53, is probed, and holds the app until it
answers.
Tests: tests/test_check_truth.py.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from splitdns.kube.check import startup_lint
from splitdns.kube.check.corefile_lint import PodResolvConf
from splitdns.kube.deploy.manifests import HEALTH_PORT, READY_PORT, UNPRIVILEGED_PORT_SYSCTL
from splitdns.kube.shared import image
from splitdns.kube.shared.findings import Finding
from splitdns.kube.shared.lenient_corefile import Model
from splitdns.kube.shared.sources import Workload

_RESOLV_EDIT = re.compile(r"(>>?|tee|sed\s+-i|cp|mv|ln\s+-s)[^;&|]*?/etc/resolv\.conf")
_PROBES = ("startupProbe", "readinessProbe", "livenessProbe")
IMAGE_UID = {"splitdns": image.USER_ID}  # USER of our image; a probe of the runtime user when none is set


@dataclass(frozen=True)
class DNSContainer:
    container: dict[str, Any]
    key: str      # "initContainers" or "containers"
    index: int

    @property
    def native(self) -> bool:
        return self.key == "initContainers" and self.container.get("restartPolicy") == "Always"

    @property
    def resolver(self) -> str:
        return "coredns" if "coredns" in str(self.container.get("image", "")) else "splitdns"


# splitdns commands that are not the resolver: the image runs them too (the webhook's Deployment,
# a verify or doctor Job), and such a container has no port 53 to bind nor a resolv.conf to own.
_NOT_RESOLVER = frozenset(("webhook", "doctor", "render", "check", "inject", "verify", "explain",
                           "openvpn-hook", "wireguard-shim"))


def dns_containers(spec: dict[str, Any]) -> Iterator[DNSContainer]:
    """Containers that run the in-pod resolver: our image, CoreDNS's, or anything given `-conf`;
    not our image running another of its commands."""
    for key in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(key) or []):
            if not isinstance(c, dict):
                continue
            image = str(c.get("image", ""))
            argv = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
            if _splitdns_command(c) in _NOT_RESOLVER:
                continue
            if "splitdns" in image or "coredns" in image or "-conf" in argv or "--conf" in argv:
                yield DNSContainer(c, key, i)


def _splitdns_command(c: dict[str, Any]) -> str | None:
    """The splitdns command a container's `command` runs (`splitdns webhook ...`, `python -m splitdns
    verify ...`), or None when its command is not splitdns (the image's entrypoint is `serve`)."""
    words = [str(w) for w in c.get("command") or []] + [str(w) for w in c.get("args") or []]
    for i, word in enumerate(words[:-1]):
        if word.rsplit("/", 1)[-1] in ("splitdns", "kubectl-splitdns"):
            return words[i + 1]
    return None


def resolv_conf(w: Workload) -> PodResolvConf:
    spec = w.spec
    conf = spec.get("dnsConfig") if isinstance(spec.get("dnsConfig"), dict) else {}
    return PodResolvConf(str(spec.get("dnsPolicy", "ClusterFirst")),
                         tuple(str(n) for n in (conf or {}).get("nameservers") or []))


def _edits_resolv_conf(spec: dict[str, Any]) -> str | None:
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            for m in c.get("volumeMounts") or []:
                if isinstance(m, dict) and str(m.get("mountPath", "")).rstrip("/") == "/etc/resolv.conf":
                    return f"container {c.get('name')} mounts a file over /etc/resolv.conf"
            hook = ((c.get("lifecycle") or {}).get("postStart") or {}).get("exec") or {}
            words = " ".join(str(a) for a in (c.get("command") or []) + (c.get("args") or [])
                             + (hook.get("command") or []))
            if _RESOLV_EDIT.search(words):
                return f"container {c.get('name')} rewrites /etc/resolv.conf"
    return None


Add = Callable[[int, str, str], None]


def check(w: Workload, corefiles: list[Model], kube_version: tuple[int, int] | None) -> list[Finding]:
    out: list[Finding] = []

    def add(line: int, code: str, message: str) -> None:
        out.append(Finding(w.file, line, code, f"{w.kind} {w.name}: {message}"))

    spec = w.spec
    dns = list(dns_containers(spec))
    edited = _edits_resolv_conf(spec)
    rc = resolv_conf(w)
    local = bool(dns) or bool(corefiles)
    if rc.policy == "None":
        _policy_none(w, rc, local, add)
    elif dns or edited:
        reason = edited or f"the DNS container {dns[0].container.get('name')} listens on 127.0.0.1"
        add(w.line("dnsPolicy") if "dnsPolicy" in spec else w.line(),
            "SD204", f"dnsPolicy {rc.policy} and {reason}: the kubelet rewrites resolv.conf on every "
                     "container start, so the app never asks 127.0.0.1")
    _unsafe_sysctls(w, kube_version, add)
    for d in dns:
        _dns_container(w, d, add)
        _probe_targets(w, d, corefiles, add)
        startup_lint.check(spec, d.key, d.index, corefiles, w.line(d.key, d.index, "startupProbe")
                           if d.container.get("startupProbe") else w.line(d.key, d.index),
                           str(d.container.get("name")), add)
        if d.native and kube_version is not None and kube_version < (1, 29):
            add(w.line(d.key, d.index, "restartPolicy"), "SD402",
                f"container {d.container.get('name')} is a native sidecar, which Kubernetes "
                f"{kube_version[0]}.{kube_version[1]} does not run by default")
    return out


# Kubernetes' safe sysctls (allowed by every kubelet), with the release that made each safe.
_SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced": (1, 0), "net.ipv4.ip_local_port_range": (1, 0),
    "net.ipv4.tcp_syncookies": (1, 0), "net.ipv4.ping_group_range": (1, 18),
    "net.ipv4.ip_unprivileged_port_start": (1, 22), "net.ipv4.ip_local_reserved_ports": (1, 27),
    "net.ipv4.tcp_keepalive_time": (1, 29), "net.ipv4.tcp_fin_timeout": (1, 29),
    "net.ipv4.tcp_keepalive_intvl": (1, 29), "net.ipv4.tcp_keepalive_probes": (1, 29),
    "net.ipv4.tcp_rmem": (1, 32), "net.ipv4.tcp_wmem": (1, 32),
}


def _unsafe_sysctls(w: Workload, kube_version: tuple[int, int] | None, add: Add) -> None:
    sc = w.spec.get("securityContext")
    sysctls = sc.get("sysctls") if isinstance(sc, dict) else None
    for i, s in enumerate(sysctls if isinstance(sysctls, list) else []):
        name = str(s.get("name", "")) if isinstance(s, dict) else ""
        since = _SAFE_SYSCTLS.get(name)
        if not name or (since is not None and (kube_version is None or kube_version >= since)):
            continue
        on = "" if kube_version is None else f" on Kubernetes {kube_version[0]}.{kube_version[1]}"
        add(w.line("securityContext", "sysctls", i), "SD404",
            f"the pod sets the unsafe sysctl {name}{on}: a kubelet rejects the pod (SysctlForbidden) "
            f"unless it runs with --allowed-unsafe-sysctls={name}")


def _policy_none(w: Workload, rc: PodResolvConf, local: bool, add: Add) -> None:
    spec = w.spec
    line = w.line("dnsConfig") if "dnsConfig" in spec else w.line("dnsPolicy")
    loopback = [ns for ns in rc.nameservers if _is_loopback(ns)]
    if not rc.nameservers:
        add(line, "SD201", "dnsPolicy None without dnsConfig.nameservers: the pod has no resolver at all")
    elif local and not loopback:
        add(w.line("dnsConfig", "nameservers"), "SD201",
            f"dnsPolicy None with nameservers {', '.join(rc.nameservers)}: none is 127.0.0.1, so the "
            "in-pod resolver is bypassed")
    if len(rc.nameservers) > 1 and (local or loopback):
        add(w.line("dnsConfig", "nameservers"), "SD202",
            f"{len(rc.nameservers)} nameservers ({', '.join(rc.nameservers)}): only 127.0.0.1 owns the split")
    conf = spec.get("dnsConfig") if isinstance(spec.get("dnsConfig"), dict) else {}
    if not (conf or {}).get("searches"):
        add(line, "SD203", "dnsPolicy None without dnsConfig.searches: short service names stop resolving")


def _is_loopback(text: str) -> bool:
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def _dns_container(w: Workload, d: DNSContainer, add: Add) -> None:
    c, name = d.container, d.container.get("name")
    at = (d.key, d.index)
    if not c.get("readinessProbe"):
        add(w.line(*at), "SD205", f"DNS container {name} has no readinessProbe")
    if d.native and not c.get("startupProbe"):
        add(w.line(*at), "SD206",
            f"native sidecar {name} has no startupProbe: the app starts before it answers")
    elif d.key == "containers":
        add(w.line(*at), "SD206", f"DNS container {name} is a classic sidecar: nothing holds the app until "
                                  "it answers")
    for probe in _PROBES:
        get = (c.get(probe) or {}).get("httpGet") or {}
        host = str(get.get("host", ""))
        if host in ("localhost", "::1") or _is_loopback(host):
            add(w.line(*at, probe), "SD208",
                f"{probe} of {name} uses httpGet.host {host}, the node's loopback")
    if not _can_bind_53(w.spec, c, d.resolver):
        add(w.line(*at), "SD207", f"DNS container {name} runs as non-root without the pod sysctl "
                                  f"{UNPRIVILEGED_PORT_SYSCTL}=53 (or as root without NET_BIND_SERVICE)")


def _can_bind_53(spec: dict[str, Any], c: dict[str, Any], resolver: str) -> bool:
    pod_sc = spec.get("securityContext") or {}
    sc = c.get("securityContext") or {}
    uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
    non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
    if uid is None and not non_root:
        uid = IMAGE_UID.get(resolver)
    for s in pod_sc.get("sysctls") or []:
        if isinstance(s, dict) and s.get("name") == UNPRIVILEGED_PORT_SYSCTL:
            value = str(s.get("value", ""))
            if value.isdigit() and int(value) <= 53:
                return True
    if uid not in (0, None) or non_root:
        return False
    caps = sc.get("capabilities") or {}
    dropped = {str(x).upper() for x in caps.get("drop") or []}
    added = {str(x).upper() for x in caps.get("add") or []}
    if dropped & {"ALL", "NET_BIND_SERVICE"}:
        return bool(added & {"NET_BIND_SERVICE", "CAP_NET_BIND_SERVICE"})
    return True


def _probe_targets(w: Workload, d: DNSContainer, corefiles: list[Model], add: Add) -> None:
    """A probe on /ready or /health needs the matching directive in the Corefile it runs."""
    if not corefiles:
        return
    c = d.container
    named = {str(p.get("name")): p.get("containerPort") for p in c.get("ports") or [] if isinstance(p, dict)}
    for probe in _PROBES:
        get = (c.get(probe) or {}).get("httpGet") or {}
        path = str(get.get("path", ""))
        directive = {"/ready": "ready", "/health": "health"}.get(path.split("?")[0])
        if directive is None:
            continue
        port = get.get("port")
        port = named.get(str(port), port)
        served = _served_ports(corefiles, directive)
        if not served:
            add(w.line(d.key, d.index, probe), "SD111",
                f"{probe} asks {path} but the Corefile has no `{directive}` directive")
        elif isinstance(port, int) and port not in served:
            add(w.line(d.key, d.index, probe), "SD111",
                f"{probe} asks port {port} but `{directive}` listens on "
                + ", ".join(map(str, sorted(served))))


def _served_ports(corefiles: list[Model], directive: str) -> set[int]:
    default = READY_PORT if directive == "ready" else HEALTH_PORT
    ports: set[int] = set()
    for model in corefiles:
        for block in model.blocks:
            for st in block.statements:
                if st.name == directive:
                    addr = st.args[0] if st.args else ""
                    tail = addr.rpartition(":")[2]
                    ports.add(int(tail) if tail.isdigit() else default)
    return ports
