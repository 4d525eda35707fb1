"""The inputs of `splitdns check`, recognised and read: Corefiles (plain or inside a ConfigMap),
workloads with their pod spec, VPN client configs, and every YAML document with its lines.
Tests: tests/test_wireguard_check.py, tests/test_vpn_checks.py.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from splitdns.errors import ConfigError, Location
from splitdns.kube.shared import lenient_corefile
from splitdns.kube.shared.findings import Finding
from splitdns.kube.shared.tunnel_kind import ConfigFormat, TunnelConfig

if TYPE_CHECKING:  # PyYAML is read only with a YAML input: the webhook, which has none, loads no YAML
    from splitdns.kube.shared import yamlio

POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
POD = "pod"
CLUSTER = "cluster-wide"


@dataclass
class CorefileSource:
    file: str
    model: lenient_corefile.Model
    context: str = POD
    configmap: str | None = None
    offset: int = 0          # added to Corefile lines to give file lines
    anchor: int | None = None  # when lines cannot be mapped (a quoted scalar): this line for all
    text: str = ""             # the Corefile's own text (a ConfigMap's data.Corefile)

    def line(self, where: Location | None) -> int:
        if where is None:
            return self.anchor or 1
        return self.anchor if self.anchor is not None else where.line + self.offset


@dataclass
class Workload:
    file: str
    kind: str
    name: str
    doc: yamlio.Document
    spec_path: tuple[str, ...]

    @property
    def spec(self) -> dict[str, Any]:
        value: Any = self.doc.value
        for key in self.spec_path:
            value = value.get(key) if isinstance(value, dict) else None
        return value if isinstance(value, dict) else {}

    def line(self, *path: str | int) -> int:
        return self.doc.line((*self.spec_path, *path))


@dataclass
class Inputs:
    corefiles: list[CorefileSource] = field(default_factory=list)
    workloads: list[Workload] = field(default_factory=list)
    documents: list[tuple[str, yamlio.Document]] = field(default_factory=list)
    # Each tunnel kind's client configs, by its word (kube/tunnels/).
    tunnel_configs: dict[str, list[TunnelConfig]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    guess_cluster: bool = True


def kind_of(path: str, text: str, formats: Mapping[str, ConfigFormat] | None = None) -> str:
    """"yaml", a tunnel kind's word (`openvpn`, ...: a client config of one of `formats`, by
    word: kube/tunnels/'s) or "corefile", from the name first and the content second."""
    suffix = Path(path).suffix.lower()
    if suffix in (".yaml", ".yml", ".json"):
        return "yaml"
    for word, fmt in (formats or {}).items():
        if fmt.looks_like(text):
            return word
    for word, fmt in (formats or {}).items():
        if suffix in fmt.suffixes:
            return word
    head = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if head and head[0].startswith(("apiVersion:", "kind:", "---")):
        return "yaml"
    return "corefile"


STDIN = "<stdin>"


def read(paths: list[str], guess_cluster: bool = True,
         formats: Mapping[str, ConfigFormat] | None = None) -> Inputs:
    """`-` reads stdin (named <stdin>). `guess_cluster`: a Corefile with the `kubernetes` plugin is
    taken for the cluster's CoreDNS one. Off when the user said the Corefiles are splitdns's
    (`check --resolver splitdns`): then `kubernetes` is what `serve` refuses, and check must say so.
    `formats`: the VPN client configs to recognise, by kind (kube/tunnels/'s)."""
    inputs = Inputs(guess_cluster=guess_cluster)
    for given in paths:
        path = STDIN if given == "-" else given  # as inject names it
        try:
            text = sys.stdin.read() if given == "-" else Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            reason = err.strerror if isinstance(err, OSError) else "not UTF-8 text"
            inputs.findings.append(Finding(path, 1, "SD001", f"cannot read {path}: {reason}"))
            continue
        kind = kind_of(path, text, formats)
        if kind == "yaml":
            _read_yaml(path, text, inputs)
        elif formats is not None and kind in formats:
            inputs.tunnel_configs.setdefault(kind, []).append(formats[kind].parse(text, path))
        else:
            context = CLUSTER if "cluster-wide" in Path(path).name else POD
            model = lenient_corefile.read(text, path)
            if context == POD and inputs.guess_cluster and _is_cluster_corefile(model):
                context = CLUSTER
            inputs.corefiles.append(CorefileSource(path, model, context, text=text))
    return inputs


def _is_cluster_corefile(model: lenient_corefile.Model) -> bool:
    # The `kubernetes` plugin answers cluster.local from the API: only the cluster's own CoreDNS has it.
    return any(b.directive("kubernetes") is not None for b in model.blocks)


def _read_yaml(path: str, text: str, inputs: Inputs) -> None:
    import yaml

    from splitdns.kube.shared import yamlio

    try:
        docs = yamlio.load_all(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        inputs.findings.append(Finding(path, line, "SD002", f"YAML does not parse: {problem}"))
        return
    for doc in docs:
        value = doc.value
        if not isinstance(value, dict) or "kind" not in value:
            continue
        inputs.documents.append((path, doc))
        kind = str(value.get("kind"))
        meta = value.get("metadata") if isinstance(value.get("metadata"), dict) else {}
        name = str(meta.get("name", "")) if meta else ""
        if kind in POD_SPEC_PATHS:
            inputs.workloads.append(Workload(path, kind, name, doc, POD_SPEC_PATHS[kind]))
        elif kind == "ConfigMap":
            _configmap_corefiles(path, doc, name, str(meta.get("namespace", "")) if meta else "", inputs)


def _configmap_corefiles(path: str, doc: yamlio.Document, name: str, namespace: str, inputs: Inputs) -> None:
    data = doc.value.get("data")
    if not isinstance(data, dict):
        return
    for key, text in data.items():
        if key != "Corefile" or not isinstance(text, str):
            continue
        model = lenient_corefile.read(text, path)
        cluster = (name == "coredns" and namespace == "kube-system") or (
            inputs.guess_cluster and _is_cluster_corefile(model))
        block_start = doc.block_start.get(("data", key))
        source = CorefileSource(path, model, CLUSTER if cluster else POD, configmap=name, text=text)
        if block_start is not None:
            source.offset = block_start - 1
        else:
            source.anchor = doc.line(("data", key))
        inputs.corefiles.append(source)


def corefile_at(path: str) -> CorefileSource:
    """The Corefile at `path`, or the pod's Corefile in the ConfigMap YAML at `path`, read as `check`
    reads it: what `explain -conf` and `render --corefile` take. Raises ConfigError (FileNotFoundError
    when there is no such file, so a caller can say what to pass instead)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) else "not UTF-8 text"
        raise ConfigError(None, f"cannot read {path}: {reason}") from None
    if kind_of(path, text) != "yaml":
        return CorefileSource(path, lenient_corefile.Model(path), text=text)
    inputs = read([path])
    if inputs.findings:
        raise ConfigError(None, inputs.findings[0].message)
    if not inputs.corefiles:
        raise ConfigError(None, f"{path} holds no ConfigMap with a data.Corefile")
    pod_side = [c for c in inputs.corefiles if c.context == POD]
    return (pod_side or inputs.corefiles)[0]
