"""The WireGuard sidecar the injection adds with `--vpn wireguard`: wg-quick from a Secret, our
resolvconf shim on its PATH, and the volume it shares with the resolver.

```
 initContainers: dns (native sidecar) -> splitdns-wireguard-shim (writes /splitdns/bin/resolvconf)
                 -> wireguard (native sidecar: started once wg-quick handed its DNS over) -> app
 volumes: splitdns-run (emptyDir: DNS lines, handshakes), splitdns-shim (emptyDir: the script),
          splitdns-wireguard-config (the Secret wireguard-client: wg0.conf), splitdns-dev-tun
          (/dev/net/tun, for wireguard-go)
```

The wireguard container gets NET_ADMIN and nothing else (interface, addresses, routes, rules).
Only when asked does the pod get `net.ipv4.conf.all.src_valid_mark=1`, which wg-quick needs for
AllowedIPs 0.0.0.0/0 (its fwmark routing): it is an unsafe sysctl, which a stock kubelet
refuses, so by default the pod starts anywhere with an AllowedIPs that leaves the cluster out.
The resolver mounts splitdns-run read-only and reads it through `wireguard { resolvconf
/run/splitdns }`. Pure data, as `manifests`.
Tests: tests/test_wireguard_kube.py, tests/test_image.py, tests/test_render.py.
"""

from __future__ import annotations

from splitdns.kube.shared.tunnel_kind import Doc, PlanView, Steps

INTERFACE = "wg0"
CONTAINER = "wireguard"
SHIM_CONTAINER = "splitdns-wireguard-shim"
SECRET = "wireguard-client"
DEFAULT_IMAGE = "your-wireguard-image"
CONFIG_DIR = "/etc/wireguard"
RUN_DIR = "/run/splitdns"
BIN_DIR = "/splitdns/bin"
RUN_VOLUME, BIN_VOLUME = "splitdns-run", "splitdns-shim"
# Names of ours alone, so a re-injection never takes a volume of the pod's own.
CONFIG_VOLUME, TUN_VOLUME = "splitdns-wireguard-config", "splitdns-dev-tun"
VOLUMES = (RUN_VOLUME, BIN_VOLUME, CONFIG_VOLUME, TUN_VOLUME)
STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SRC_VALID_MARK = {"name": "net.ipv4.conf.all.src_valid_mark", "value": "1"}
CONFIG = f"{CONFIG_DIR}/{INTERFACE}.conf"
# wg-quick up, then the shim's handshake watcher; on SIGTERM wg-quick down, so the shim takes the
# DNS back and the resolver fails the zone fast at once. A leftover interface (a restarted
# container with the kernel module) is taken down first, or `up` would refuse it.
SCRIPT = (f"wg-quick down {CONFIG} 2>/dev/null || true\n"
          f"wg-quick up {CONFIG}\n"
          f"trap 'wg-quick down {CONFIG}; exit 0' TERM INT\n"
          f"resolvconf --watch {INTERFACE} & wait $!\n")


def shim_container(image: str, security: Doc) -> Doc:
    """Writes our resolvconf into the shared volume, once, before the wireguard container starts."""
    return {
        "name": SHIM_CONTAINER,
        "image": image,
        "command": ["splitdns", "wireguard-shim", BIN_DIR],
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
        "securityContext": dict(security),
        "volumeMounts": [{"name": BIN_VOLUME, "mountPath": BIN_DIR}],
    }


def wireguard_container(image: str, sidecar: str) -> Doc:
    container: Doc = {
        "name": CONTAINER,
        "image": image,
        "command": ["/bin/sh", "-c", SCRIPT],
        "env": [
            {"name": "PATH", "value": f"{BIN_DIR}:{STANDARD_PATH}"},
            {"name": "SPLITDNS_RESOLVCONF_DIR", "value": RUN_DIR},
            # Without the kernel module, wg-quick runs this userspace implementation on /dev/net/tun.
            {"name": "WG_QUICK_USERSPACE_IMPLEMENTATION", "value": "wireguard-go"},
        ],
    }
    if sidecar == "native":
        container["restartPolicy"] = "Always"
        # Started (and the app let in) once wg-quick has handed its DNS over.
        container["startupProbe"] = {"exec": {"command": ["cat", f"{RUN_DIR}/{INTERFACE}"]},
                                     "periodSeconds": 1, "failureThreshold": 120}
    container["resources"] = {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}}
    container["securityContext"] = {"capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]}}
    container["volumeMounts"] = [
        {"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": BIN_VOLUME, "mountPath": BIN_DIR, "readOnly": True},
        {"name": RUN_VOLUME, "mountPath": RUN_DIR},
        {"name": TUN_VOLUME, "mountPath": "/dev/net/tun"},
    ]
    return container


def volumes(secret: str) -> list[Doc]:
    return [
        {"name": RUN_VOLUME, "emptyDir": {}},
        {"name": BIN_VOLUME, "emptyDir": {}},
        # 0400: wg-quick warns about a config others can read (it holds the private key).
        {"name": CONFIG_VOLUME, "secret": {"secretName": secret, "defaultMode": 0o400}},
        {"name": TUN_VOLUME, "hostPath": {"path": "/dev/net/tun", "type": "CharDevice"}},
    ]


def is_ours(container: Doc) -> bool:
    """The shim by name; the wireguard container by name and the volume it shares with the resolver."""
    if container.get("name") == SHIM_CONTAINER:
        return True
    mounts = container.get("volumeMounts")
    return container.get("name") == CONTAINER and isinstance(mounts, list) and any(
        isinstance(m, dict) and m.get("name") == RUN_VOLUME for m in mounts)


def remove(spec: Doc) -> None:
    """Take out what an earlier injection added (re-injection rebuilds it, or drops it)."""
    for key in ("initContainers", "containers"):
        items = spec.get(key)
        if isinstance(items, list):
            spec[key] = [c for c in items if not (isinstance(c, dict) and is_ours(c))]
            for c in spec[key]:
                mounts = c.get("volumeMounts") if isinstance(c, dict) else None
                if isinstance(mounts, list):
                    kept = [m for m in mounts if not (isinstance(m, dict) and m.get("name") == RUN_VOLUME)]
                    c["volumeMounts"] = kept
                    if not kept:
                        del c["volumeMounts"]
            if not spec[key] and key == "initContainers":
                del spec[key]
    vols = spec.get("volumes")
    if isinstance(vols, list):
        spec["volumes"] = [v for v in vols if not (isinstance(v, dict) and v.get("name") in VOLUMES)]
        if not spec["volumes"]:
            del spec["volumes"]
    sc = spec.get("securityContext")
    sysctls = sc.get("sysctls") if isinstance(sc, dict) else None
    if isinstance(sysctls, list):
        sc["sysctls"] = [s for s in sysctls if s != SRC_VALID_MARK]  # type: ignore[index]


def conflict(spec: Doc) -> str | None:
    """Why the pod cannot take our WireGuard sidecar (a container or volume of that name of its own)."""
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if isinstance(c, dict) and c.get("name") in (CONTAINER, SHIM_CONTAINER) and not is_ours(c):
                return f"{key} already has a container named {c.get('name')} that is not ours"
    for v in spec.get("volumes") or []:
        if isinstance(v, dict) and v.get("name") in VOLUMES:
            return f"the pod already has a volume named {v.get('name')}"
    return None


def prepare(spec: Doc, injected_before: bool, wanted: bool) -> str | None:
    """Ours from an earlier injection out (rebuilt by `add`, or gone with the settings); then why
    the pod cannot take the sidecar, if it is wanted and cannot."""
    if injected_before:
        remove(spec)
    return conflict(spec) if wanted else None


def add(spec: Doc, resolver: Doc, image: str, vpn_image: str, secret: str, sidecar: str,
        src_valid_mark: bool) -> None:
    """After the resolver (already in place): the shim, the wireguard container, volumes, and the
    unsafe sysctl only when asked (`src_valid_mark`: a stock kubelet refuses the pod with it)."""
    mount = {"name": RUN_VOLUME, "mountPath": RUN_DIR, "readOnly": True}
    resolver.setdefault("volumeMounts", []).append(mount)
    shim = shim_container(image, resolver.get("securityContext", {}))
    wireguard = wireguard_container(vpn_image, sidecar)
    init = spec.setdefault("initContainers", [])
    at = next((i + 1 for i, c in enumerate(init) if c is resolver), 0)
    if sidecar == "native":
        init[at:at] = [shim, wireguard]
    else:
        init.insert(0, shim)
        containers = spec.setdefault("containers", [])
        at = next((i + 1 for i, c in enumerate(containers) if c is resolver), 0)
        containers.insert(at, wireguard)
    spec["volumes"] = [*(spec.get("volumes") or []), *volumes(secret)]
    if src_valid_mark:
        sc = spec.setdefault("securityContext", {})
        sc["sysctls"] = [*(sc.get("sysctls") or []), dict(SRC_VALID_MARK)]


def replacement(deployment: str, key: str) -> Doc:
    """The component's kustomize replacement that appends the sysctl to the Deployment's own (a
    strategic merge would replace that list), copied from the wireguard container's env, as
    `manifests.sysctl_replacement` does for the port sysctl."""
    name = SRC_VALID_MARK["name"]
    return {
        "source": {"kind": "Deployment", "name": deployment,
                   "fieldPath": f"spec.template.spec.{key}.[name={CONTAINER}].env.[name={name}]"},
        "targets": [{
            "select": {"kind": "Deployment", "name": deployment},
            "fieldPaths": [f"spec.template.spec.securityContext.sysctls.[name={name}]"],
            "options": {"create": True},
        }],
    }


def patched(containers: list[Doc]) -> None:
    """render's patch: the wireguard container carries the sysctl for `replacement` to copy."""
    for c in containers:
        if c["name"] == CONTAINER:
            c["env"].append(dict(SRC_VALID_MARK))


def corefile(plan: PlanView) -> list[str]:
    indent = "    "
    return ["wireguard {", f"{indent}resolvconf {RUN_DIR}", f"{indent}interface {INTERFACE}",
            f"{indent}domains", "}"]


def apply_steps(plan: PlanView) -> Steps:
    ns, conf = plan.namespace, f"{INTERFACE}.conf"
    return [
        [f"Check the wg-quick config against the cluster first (AllowedIPs must not take the cluster's "
         f"ranges): splitdns check {conf} splitdns.yaml",
         f"Then the Secret {SECRET}, holding it as {conf} (the wireguard container runs "
         f"wg-quick up {CONFIG}):",
         f"  kubectl -n {ns} create secret generic {SECRET} --from-file={conf}={conf}"],
        [sysctl_step(plan.unsafe_sysctls)],
        ["The wireguard image needs wg-quick and, without the kernel module, wireguard-go; the "
         "container runs it as root with NET_ADMIN only, with our resolvconf first on its PATH."],
    ]


def sysctl_step(src_valid_mark: bool) -> str:
    name = SRC_VALID_MARK["name"]
    if src_valid_mark:
        return (f"The pod sets the sysctl {name}=1 (--wireguard-src-valid-mark), which wg-quick needs for "
                "AllowedIPs = 0.0.0.0/0. It is not in Kubernetes' safe set: every node's kubelet must run "
                f"with --allowed-unsafe-sysctls={name}, or the pod is rejected (SysctlForbidden).")
    return (f"wg0.conf's AllowedIPs must leave the cluster out (what `splitdns check` computes): the pod "
            f"does not set {name}, which wg-quick needs for AllowedIPs = 0.0.0.0/0 and a stock kubelet "
            "refuses (SysctlForbidden). For a full tunnel render with --wireguard-src-valid-mark and "
            f"run the kubelets with --allowed-unsafe-sysctls={name}.")
