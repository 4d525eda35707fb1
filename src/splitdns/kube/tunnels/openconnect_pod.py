"""The OpenConnect sidecar the injection adds with `--vpn openconnect`: openconnect with our
vpnc-script as its `--script`, written into a shared volume by an init container of our image.

```
 initContainers: dns (native sidecar) -> splitdns-openconnect-hook (writes /splitdns/bin/vpnc-script)
                 -> openconnect (native sidecar: started once the hook recorded the pushed DNS) -> app
 volumes: splitdns-openconnect-run (emptyDir: the state file), splitdns-openconnect-hook (emptyDir:
          the script), splitdns-openconnect-client (Secret: server, user, password),
          splitdns-openconnect-tun (/dev/net/tun)
```

The openconnect container gets NET_ADMIN and nothing else (the tun device, its address and
routes: the namespace lab runs openconnect so); the resolver mounts the run volume read-only and
follows it through `openconnect { state /run/splitdns/openconnect }`. `advice` is the trap of a
pod's own openconnect container: without our `--script`, the stock vpnc-script rewrites the
resolver's /etc/resolv.conf (`check` reports it of any pod spec: `unhooked`, SD312). Pure data,
as `manifests`.
Tests: tests/test_vpn_kinds_kube.py.
"""

from __future__ import annotations

import shlex

from splitdns.kube.shared.tunnel_kind import Doc, PlanView, Steps
from splitdns.kube.tunnels.file_sidecar import Parts

DEFAULT_IMAGE = "your-openconnect-image"
HOOK_NAME = "vpnc-script"  # what `splitdns openconnect-hook DIR` writes in DIR
# Where images keep the stock vpnc-script (which has the same name as ours).
STOCK_SCRIPTS = ("/usr/share/vpnc-scripts/vpnc-script", "/etc/vpnc/vpnc-script",
                 "/usr/libexec/vpnc-scripts/vpnc-script", "/usr/local/share/vpnc-scripts/vpnc-script")
SECRET = "openconnect-client"
CONTAINER, HOOK_CONTAINER = "openconnect", "splitdns-openconnect-hook"
RUN_DIR, BIN_DIR, SECRET_DIR = "/run/splitdns", "/splitdns/bin", "/etc/openconnect"
STATE = f"{RUN_DIR}/openconnect"
HOOK = f"{BIN_DIR}/{HOOK_NAME}"
RUN_VOLUME, BIN_VOLUME = "splitdns-openconnect-run", "splitdns-openconnect-hook"
# Names of ours alone, so a re-injection never takes a volume of the pod's own.
SECRET_VOLUME, TUN_VOLUME = "splitdns-openconnect-client", "splitdns-openconnect-tun"
VOLUMES = (RUN_VOLUME, BIN_VOLUME, SECRET_VOLUME, TUN_VOLUME)
INDENT = "    "
# The gateway, the user and the password from the Secret; our hook as --script. `exec`: SIGTERM
# from the kubelet reaches openconnect, which logs off and runs the hook's `disconnect`.
SCRIPT = (f'exec openconnect --non-inter --passwd-on-stdin --user "$(cat {SECRET_DIR}/user)" '
          f'--interface tun0 --script {HOOK} "$(cat {SECRET_DIR}/server)" < {SECRET_DIR}/password')


def corefile(plan: PlanView) -> list[str]:
    return ["openconnect {", f"{INDENT}state {STATE}", f"{INDENT}domains", "}"]


def hook_container(image: str, security: Doc) -> Doc:
    """Writes our vpnc-script into the shared volume, once, before the vpn container starts."""
    return {
        "name": HOOK_CONTAINER,
        "image": image,
        "command": ["splitdns", "openconnect-hook", BIN_DIR],
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
        "securityContext": dict(security),
        "volumeMounts": [{"name": BIN_VOLUME, "mountPath": BIN_DIR}],
    }


def openconnect_container(image: str, sidecar: str) -> Doc:
    c: Doc = {
        "name": CONTAINER,
        "image": image,
        "command": ["/bin/sh", "-c", SCRIPT],
        "env": [{"name": "SPLITDNS_OPENCONNECT_STATE", "value": STATE}],
    }
    if sidecar == "native":
        c["restartPolicy"] = "Always"
        # Started (and the app let in) once the hook recorded what the gateway pushed.
        c["startupProbe"] = {"exec": {"command": ["cat", STATE]}, "periodSeconds": 1,
                             "failureThreshold": 120}
    c["securityContext"] = {"capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]}}
    c["volumeMounts"] = [
        {"name": SECRET_VOLUME, "mountPath": SECRET_DIR, "readOnly": True},
        {"name": BIN_VOLUME, "mountPath": BIN_DIR, "readOnly": True},
        {"name": RUN_VOLUME, "mountPath": RUN_DIR},
        {"name": TUN_VOLUME, "mountPath": "/dev/net/tun"},
    ]
    return c


def volumes(secret: str) -> list[Doc]:
    return [
        {"name": RUN_VOLUME, "emptyDir": {}},
        {"name": BIN_VOLUME, "emptyDir": {}},
        # 0400: it holds the password.
        {"name": SECRET_VOLUME, "secret": {"secretName": secret, "defaultMode": 0o400}},
        {"name": TUN_VOLUME, "hostPath": {"path": "/dev/net/tun", "type": "CharDevice"}},
    ]


PARTS = Parts((HOOK_CONTAINER, CONTAINER), RUN_VOLUME, RUN_DIR, VOLUMES)
is_ours, prepare = PARTS.is_ours, PARTS.prepare


def add(spec: Doc, resolver: Doc, image: str, vpn_image: str, secret: str, sidecar: str,
        unsafe_sysctls: bool = False) -> None:
    """After the resolver (already in place): the hook, the openconnect container, volumes; the
    kind asks for no unsafe sysctl."""
    hook = hook_container(image, resolver.get("securityContext", {}))
    PARTS.place(spec, resolver, [hook], openconnect_container(vpn_image, sidecar), volumes(secret), sidecar)


def patched(containers: list[Doc]) -> None:
    """render's patch: nothing to adjust (the sidecar needs no sysctl)."""


def apply_steps(plan: PlanView) -> Steps:
    return [[
        f"The Secret {SECRET}: the gateway (server), the user and the password openconnect logs in "
        "with (the openconnect image must trust the gateway's certificate):",
        f"  kubectl -n {plan.namespace} create secret generic {SECRET} --from-literal=server=vpn.example.com "
        "--from-literal=user=USER --from-file=password=./password"]]


def advice(spec: Doc, plan: PlanView) -> str | None:
    """A sentence for the first openconnect container of the pod that runs without our vpnc-script
    (the stock one rewrites the resolver's /etc/resolv.conf), or None."""
    found = unhooked(spec)
    return found[0][2] if found else None


def unhooked(spec: Doc) -> list[tuple[str, int, str]]:
    """Each openconnect container of the pod that runs without our vpnc-script: where it is
    (containers key, index) and what to say of it (what `check` reports, SD312)."""
    out = []
    for key in ("initContainers", "containers"):
        for index, c in enumerate(spec.get(key) or []):
            if not isinstance(c, dict) or is_ours(c):
                continue
            words = _words(c)
            if not any(w.rsplit("/", 1)[-1] == "openconnect" for w in words):
                continue
            script = _script(words)
            if script is not None and script.rsplit("/", 1)[-1] == HOOK_NAME and script not in STOCK_SCRIPTS:
                continue
            said = f"with --script {script}" if script else "without --script"
            out.append((key, index,
                        f"container {c.get('name')} runs openconnect {said}: the stock vpnc-script "
                        "rewrites /etc/resolv.conf, which is the resolver's; run it with --script "
                        f"{HOOK} (written by `splitdns openconnect-hook {BIN_DIR}`), which records the "
                        "pushed DNS for the resolver and leaves resolv.conf alone"))
    return out


def _words(c: Doc) -> list[str]:
    """The command line's words, a shell script's (`sh -c "openconnect ..."`) included."""
    words = [str(w) for key in ("command", "args") for w in c.get(key) or []]
    found: list[str] = []
    for word in words:
        try:
            found += shlex.split(word) if " " in word else [word]
        except ValueError:
            found.append(word)
    return found


def _script(words: list[str]) -> str | None:
    for i, word in enumerate(words):
        if word in ("--script", "-s") and i + 1 < len(words):
            return words[i + 1]
        if word.startswith("--script="):
            return word.split("=", 1)[1]
    return None
