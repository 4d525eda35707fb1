"""The strongSwan sidecar the injection adds with `--vpn strongswan`: charon from the user's image
and Secret, its `resolve` plugin writing to a volume shared with the resolver.

```
 initContainers: dns (native sidecar) -> strongswan (native sidecar: started once an IKE SA
                 handed DNS) -> app
 volumes: splitdns-strongswan-run (emptyDir: the resolve plugin's file), splitdns-strongswan-client
          (Secret: strongswan.conf and swanctl.conf), splitdns-strongswan-tun (/dev/net/tun, for
          kernel-libipsec)
```

The strongswan container gets NET_ADMIN (the tun device, addresses, routes) and
NET_BIND_SERVICE (IKE's UDP ports 500 and 4500): the namespace lab runs charon so, and it cannot
bind those ports without the second. It empties the resolve file before charon starts: an
emptyDir outlives a container restart, and lines a killed charon left would name a server no SA
holds. The resolver mounts the run volume read-only and follows it through `strongswan {
resolve ... }`. The traps of the user's strongswan.conf and swanctl.conf (a `resolve` plugin
still writing /etc/resolv.conf, ...) are `check`'s: strongswan_lint. Pure data, as `manifests`.
Tests: tests/test_vpn_kinds_kube.py, tests/test_vpn_checks.py.
"""

from __future__ import annotations

from splitdns.kube.shared.tunnel_kind import Doc, PlanView, Steps
from splitdns.kube.tunnels.file_sidecar import Parts

DEFAULT_IMAGE = "your-strongswan-image"
SECRET = "strongswan-client"
CONTAINER = "strongswan"
RUN_DIR, SECRET_DIR = "/run/splitdns", "/etc/strongswan-client"
RESOLVE_FILE = f"{RUN_DIR}/resolv.conf"
INTERFACE = "ipsec0"
RUN_VOLUME, SECRET_VOLUME = "splitdns-strongswan-run", "splitdns-strongswan-client"
TUN_VOLUME = "splitdns-strongswan-tun"
VOLUMES = (RUN_VOLUME, SECRET_VOLUME, TUN_VOLUME)
INDENT = "    "
# charon in the foreground reading the Secret's strongswan.conf, the connections loaded and
# started by swanctl; `wait` keeps charon the container's life.
SCRIPT = (f": > {RESOLVE_FILE}\n"
          f"STRONGSWAN_CONF={SECRET_DIR}/strongswan.conf /usr/sbin/charon-systemd &\n"
          "for i in $(seq 50); do swanctl --stats >/dev/null 2>&1 && break; sleep 0.1; done\n"
          f"swanctl --load-all --file {SECRET_DIR}/swanctl.conf\n"
          "trap 'kill $!' TERM INT\n"
          "wait $!\n")
# What the user's strongswan.conf must say, for apply_steps and check's SD309.
RESOLVE_SETTINGS = (f"charon {{ plugins {{ resolve {{ file = {RESOLVE_FILE}  resolvconf {{ path = "
                    "/nonexistent } } } }")


def corefile(plan: PlanView) -> list[str]:
    return ["strongswan {", f"{INDENT}resolve {RESOLVE_FILE}", f"{INDENT}interface {INTERFACE}", "}"]


def strongswan_container(image: str, sidecar: str) -> Doc:
    c: Doc = {"name": CONTAINER, "image": image, "command": ["/bin/sh", "-c", SCRIPT]}
    if sidecar == "native":
        c["restartPolicy"] = "Always"
        # Started (and the app let in) once an IKE SA handed its DNS to the resolve plugin.
        c["startupProbe"] = {"exec": {"command": ["grep", "-q", "^nameserver", RESOLVE_FILE]},
                             "periodSeconds": 1, "failureThreshold": 120}
    c["securityContext"] = {"capabilities": {"add": ["NET_ADMIN", "NET_BIND_SERVICE"], "drop": ["ALL"]}}
    c["volumeMounts"] = [
        {"name": SECRET_VOLUME, "mountPath": SECRET_DIR, "readOnly": True},
        {"name": RUN_VOLUME, "mountPath": RUN_DIR},
        {"name": TUN_VOLUME, "mountPath": "/dev/net/tun"},
    ]
    return c


def volumes(secret: str) -> list[Doc]:
    return [
        {"name": RUN_VOLUME, "emptyDir": {}},
        # 0400: swanctl.conf holds the secrets.
        {"name": SECRET_VOLUME, "secret": {"secretName": secret, "defaultMode": 0o400}},
        {"name": TUN_VOLUME, "hostPath": {"path": "/dev/net/tun", "type": "CharDevice"}},
    ]


PARTS = Parts((CONTAINER,), RUN_VOLUME, RUN_DIR, VOLUMES)
is_ours, prepare = PARTS.is_ours, PARTS.prepare


def add(spec: Doc, resolver: Doc, image: str, vpn_image: str, secret: str, sidecar: str,
        unsafe_sysctls: bool = False) -> None:
    """After the resolver (already in place): the strongswan container and its volumes; the kind
    asks for no unsafe sysctl."""
    PARTS.place(spec, resolver, [], strongswan_container(vpn_image, sidecar), volumes(secret), sidecar)


def patched(containers: list[Doc]) -> None:
    """render's patch: nothing to adjust (the sidecar needs no sysctl)."""


def apply_steps(plan: PlanView) -> Steps:
    return [[
        f"The Secret {SECRET}: strongswan.conf (with {RESOLVE_SETTINGS}, and kernel-libipsec "
        "loaded where kernel XFRM is not allowed) and swanctl.conf (the connection, `vips = 0.0.0.0` "
        "to be handed a virtual IP and DNS, start_action = start):",
        f"  kubectl -n {plan.namespace} create secret generic {SECRET} --from-file=strongswan.conf "
        "--from-file=swanctl.conf"]]
