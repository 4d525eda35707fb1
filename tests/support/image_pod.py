"""The image as the rendered pod runs it: `splitdns render`'s manifest turned into `podman run`.

What the kubelet would do with the rendered dns container, done by hand in the lab's pod namespace:
its args after the image's entrypoint, its securityContext as podman options, the pod's sysctls
set in the namespace, the pod's dnsConfig as the container's resolv.conf, the Corefile ConfigMap as
a read-only directory in the kubelet's `..data` symlink layout. A field this module does not know is
an error, so a manifest that grows a setting cannot pass here unread.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.lab import Lab, PodSpec
from tests.lab.netns import Proc, ns_run, proc_start_time
from tests.support.podman import Engine

Doc = dict[str, Any]
CONTAINER = "dns"


def render(corefile: Path, *extra: str) -> list[Doc]:
    """`splitdns render --corefile FILE`'s documents (the ConfigMap and the Deployment)."""
    out = subprocess.run([sys.executable, "-m", "splitdns", "render", "--corefile", str(corefile), *extra],
                         capture_output=True, text=True, check=True, timeout=60)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def pod_spec(docs: list[Doc]) -> Doc:
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    spec: Doc = deployment["spec"]["template"]["spec"]
    return spec


def dns_container(docs: list[Doc]) -> Doc:
    spec = pod_spec(docs)
    return next(c for c in [*spec.get("initContainers", []), *spec["containers"]] if c["name"] == CONTAINER)


def vpn_client_lines(docs: list[Doc]) -> str:
    """The rendered vpn container's flags as client config lines, less the two the lab writes
    itself (`--config`, its file; `--management`, the lab's 127.0.0.1:7505)."""
    spec = pod_spec(docs)
    vpn = next(c for c in [*spec.get("initContainers", []), *spec["containers"]] if c["name"] == "vpn")
    lines, args = [], list(vpn["args"])
    while args:
        flag = args.pop(0).removeprefix("--")
        values = []
        while args and not args[0].startswith("--"):
            values.append(args.pop(0))
        if flag not in ("config", "management"):
            lines.append(" ".join([flag, *values]))
    return "".join(f"{line}\n" for line in lines)


def configmap_corefile(docs: list[Doc]) -> str:
    text: str = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["Corefile"]
    return text


class ConfigMapDir:
    """A ConfigMap volume as the kubelet writes it: the files in a timestamped directory, `..data`
    pointing at it, and each key a symlink through `..data`. An update writes a new directory and
    renames a new `..data` link over the old one (atomic), then removes the old directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(mode=0o755)
        self.generation = 0

    def write(self, files: dict[str, str]) -> None:
        self.generation += 1
        stamp = f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{self.generation}"
        new = self.path / stamp
        new.mkdir(mode=0o755)
        for key, text in files.items():
            (new / key).write_text(text)
            (new / key).chmod(0o644)
        data = self.path / "..data"
        old = os.readlink(data) if data.is_symlink() else None
        (self.path / "..data_tmp").symlink_to(stamp)
        os.rename(self.path / "..data_tmp", data)
        for key in files:
            if not (self.path / key).is_symlink():
                (self.path / key).symlink_to(f"..data/{key}")
        if old is not None:
            for leftover in (self.path / old).iterdir():
                leftover.unlink()
            (self.path / old).rmdir()


def _capabilities(caps: Doc) -> list[str]:
    return [*(f"--cap-drop={c}" for c in caps.get("drop", [])),
            *(f"--cap-add={c}" for c in caps.get("add", []))]


SecurityOption = Callable[[Any, str], list[str]]  # (the field's value, the image's USER) -> options
SECURITY_OPTIONS: dict[str, SecurityOption] = {
    "runAsNonRoot": lambda v, image_user: _non_root(v, image_user),
    "allowPrivilegeEscalation": lambda v, _: [] if v else ["--security-opt=no-new-privileges"],
    "readOnlyRootFilesystem": lambda v, _: ["--read-only", "--read-only-tmpfs=false"] if v else [],
    "capabilities": lambda v, _: _capabilities(v),
    "seccompProfile": lambda v, _: _seccomp(v),
}


def _non_root(required: bool, image_user: str) -> list[str]:
    # The kubelet refuses to start a runAsNonRoot container whose user is not a numeric non-zero uid.
    uid = image_user.split(":")[0]
    if required and not (uid.isdigit() and int(uid) != 0):
        raise AssertionError(f"runAsNonRoot: the image's USER {image_user!r} is not a numeric non-root uid")
    return []


def _seccomp(profile: Doc) -> list[str]:
    kinds = {"RuntimeDefault": [], "Unconfined": ["--security-opt=seccomp=unconfined"]}
    if profile.get("type") not in kinds:
        raise AssertionError(f"seccompProfile {profile} has no podman equivalent here")
    return kinds[profile["type"]]


def podman_run_args(docs: list[Doc], image_user: str, volumes: dict[str, Path]) -> list[str]:
    """`podman run` options and arguments for the rendered dns container (image included)."""
    spec, container = pod_spec(docs), dns_container(docs)
    sc: Doc = dict(container["securityContext"])
    user = sc.pop("runAsUser", None)
    group = sc.pop("runAsGroup", None)
    args = [f"--user={user if user is not None else ''}{f':{group}' if group is not None else ''}"]
    for key, value in sc.items():
        if key not in SECURITY_OPTIONS:
            raise AssertionError(f"securityContext.{key} is not mapped to a podman option")
        args += SECURITY_OPTIONS[key](value, image_user)
    for mount in container.get("volumeMounts", []):
        mode = "ro" if mount.get("readOnly") else "rw"
        args.append(f"--volume={volumes[mount['name']]}:{mount['mountPath']}:{mode}")
    dns = spec.get("dnsConfig", {})
    if spec.get("dnsPolicy") == "None":
        args += [f"--dns={ns}" for ns in dns.get("nameservers", [])]
        args += [f"--dns-search={s}" for s in dns.get("searches", [])]
        args += [f"--dns-option={o['name']}" + (f":{o['value']}" if "value" in o else "")
                 for o in dns.get("options", [])]
    if "command" in container:
        args.append(f"--entrypoint={container['command'][0]}")
    return [*args, container["image"], *container.get("command", [])[1:], *container.get("args", [])]


def pod_sysctls(docs: list[Doc]) -> dict[str, str]:
    return {s["name"]: str(s["value"]) for s in pod_spec(docs).get("securityContext", {}).get("sysctls", [])}


class ImageLab(Lab):
    """The lab whose pod resolver is the built image, run by podman as the rendered manifest says."""

    def __init__(self, pod: PodSpec, engine: Engine, docs: list[Doc], image_user: str, *,
                 extra_volumes: dict[str, tuple[Path, str]] | None = None) -> None:
        super().__init__(pod)
        self.engine, self.docs, self.image_user = engine, docs, image_user
        self.extra_volumes = extra_volumes or {}
        self.container = ""

    @property
    def configmap(self) -> ConfigMapDir:
        return self._configmap

    def _start_resolver(self) -> None:
        for name, value in pod_sysctls(self.docs).items():  # the kubelet sets them in the pod sandbox
            ns_run(self.pod, ["sysctl", "-qw", f"{name}={value}"])
        self._configmap = ConfigMapDir(self.dir / "configmap")
        self._configmap.write({"Corefile": self.pod_spec.corefile})
        volumes = {next(v["name"] for v in pod_spec(self.docs)["volumes"] if "configMap" in v):
                   self._configmap.path}
        run_args = podman_run_args(self.docs, self.image_user, volumes)
        extra = [f"--volume={host}:{path}:rw" for host, path in self.extra_volumes.values()]
        log = self.log("resolver")
        argv = ["run", "--detach", "--pull=never", f"--name={self.prefix}-dns",
                f"--network=ns:/run/netns/{self.pod}",
                "--log-driver=k8s-file", f"--log-opt=path={log}", *extra, *run_args]
        self.container = self.engine.podman(*argv).strip()
        pid = int(self.engine.podman("inspect", "--format", "{{.State.Pid}}", self.container).strip())
        self.procs["resolver"] = Proc("resolver", self.pod, ["podman", *argv], log, pid, proc_start_time(pid))
        self._record()

    def down(self) -> None:
        if self.container:
            self.engine.popen("rm", "--force", "--time", "1", self.container)
            self.container = ""
        super().down()
