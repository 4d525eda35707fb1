"""`--vpn wireguard` for render, inject and the webhook: the WireGuard sidecar the injection adds,
strictly valid for every Kubernetes version we render for, and the Corefile that follows it."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from splitdns import cli, config, directives
from splitdns.commands import render
from splitdns.kube.check import checker
from splitdns.kube.deploy import inject, webhook_manifests
from splitdns.kube.deploy.plan import PlanError
from splitdns.kube.tunnels import wireguard_pod

VERSIONS = [f"1.{minor}" for minor in range(29, 38)]
ZONES = ["--zone", "svc.acme.internal=wireguard", "--cluster-dns", "10.96.0.10"]
INJECT_DATA = Path(__file__).parent / "data" / "inject"


def request(command: str, *args: str) -> render.Request:
    parsed = cli.build_parser().parse_args([command, *args])
    fields = render.Request.__dataclass_fields__
    return render.Request(**{k: v for k, v in vars(parsed).items() if k in fields})


def rendered(*args: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(_rendered_text(args)))


@functools.cache
def _rendered_text(args: tuple[str, ...]) -> str:
    """Rendered once per argument list: the tests read it, none changes it (each parses its own)."""
    return render.files(request("render", *ZONES, "--namespace", "shop", *args))["splitdns.yaml"]


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("version", VERSIONS)
def test_the_rendered_deployment_is_strictly_valid(version: str) -> None:
    for doc in rendered():
        assert kubernetes_validate.validate(doc, version, strict=True) == version


def test_the_sidecar_starts_after_the_resolver_and_the_shim_and_before_the_app() -> None:
    spec = pod_spec(rendered())
    assert [c["name"] for c in spec["initContainers"]] == ["dns", wireguard_pod.SHIM_CONTAINER, "wireguard"]
    assert [c["name"] for c in spec["containers"]] == ["app"]
    wg = spec["initContainers"][2]
    assert wg["restartPolicy"] == "Always"  # a native sidecar: the app waits for its startupProbe
    assert wg["startupProbe"]["exec"]["command"] == ["cat", "/run/splitdns/wg0"]
    # Only what wg-quick needs: NET_ADMIN. No unsafe sysctl by default: a stock kubelet would refuse it.
    assert wg["securityContext"] == {"capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]}}
    assert spec["securityContext"]["sysctls"] == [{"name": "net.ipv4.ip_unprivileged_port_start",
                                                   "value": "53"}]
    env = {e["name"]: e["value"] for e in wg["env"]}
    assert env["PATH"].startswith("/splitdns/bin:") and env["SPLITDNS_RESOLVCONF_DIR"] == "/run/splitdns"
    assert "wg-quick up /etc/wireguard/wg0.conf" in wg["command"][2]
    volumes = {v["name"]: v for v in spec["volumes"]}
    secret = volumes["splitdns-wireguard-config"]["secret"]
    assert secret == {"secretName": "wireguard-client", "defaultMode": 0o400}
    dns = spec["initContainers"][0]
    assert {"name": "splitdns-run", "mountPath": "/run/splitdns", "readOnly": True} in dns["volumeMounts"]
    shim = spec["initContainers"][1]
    assert shim["command"] == ["splitdns", "wireguard-shim", "/splitdns/bin"]
    assert shim["securityContext"]["runAsNonRoot"] is True


def test_the_shim_container_command_writes_what_the_sidecar_runs(tmp_path: Path) -> None:
    command = pod_spec(rendered())["initContainers"][1]["command"]
    assert cli.main([*command[1:-1], str(tmp_path)]) == 0
    assert (tmp_path / "resolvconf").read_text().startswith("#!/bin/sh\n")


def test_the_rendered_corefile_follows_the_sidecars_files() -> None:
    (configmap,) = [d for d in rendered() if d["kind"] == "ConfigMap"]
    loaded = config.loads(configmap["data"]["Corefile"], read_files=False)
    (block,) = [b for b in loaded.blocks if b.uses(directives.WIREGUARD)]
    spec = block[directives.WIREGUARD]
    assert block.zones == ("svc.acme.internal.",) and spec is not None
    assert spec.resolvconf == wireguard_pod.RUN_DIR and spec.interface == "wg0" and spec.domains


def test_the_default_starts_on_a_stock_kubelet_and_check_says_so_of_the_option(tmp_path: Path) -> None:
    """A stock kubelet refuses a pod with an unsafe sysctl (SysctlForbidden): the default pod has
    none; --wireguard-src-valid-mark adds src_valid_mark, and the header and check name the kubelet
    flag it takes."""
    name = "net.ipv4.conf.all.src_valid_mark"
    flag = f"--allowed-unsafe-sysctls={name}"
    for args, wanted in (((), []), (("--wireguard-src-valid-mark",), ["SD404"])):
        text = _rendered_text(args)
        path = tmp_path / "splitdns.yaml"
        path.write_text(text)
        found = checker.check([str(path)], checker.Options(kube_version=(1, 33)))
        assert [f.code for f in found] == wanted, [f.text(False) for f in found]
        sysctls = pod_spec(list(yaml.safe_load_all(text)))["securityContext"]["sysctls"]
        assert ({"name": name, "value": "1"} in sysctls) == bool(args)
        assert flag in text.split("apiVersion", 1)[0]
        if args:
            assert flag in found[0].message and "SysctlForbidden" in found[0].message
    spec = inject.inject({"spec": {"containers": [{"name": "app", "image": "a"}]}}, "shop",
                         render.injection_settings(request("inject", *ZONES, "--wireguard-src-valid-mark")))
    assert {"name": name, "value": "1"} in spec.pod["spec"]["securityContext"]["sysctls"]
    webhook = webhook_manifests.settings_args(render.injection_settings(
        request("inject", *ZONES, "--wireguard-src-valid-mark")))
    assert "--wireguard-src-valid-mark" in webhook


def test_the_header_says_what_to_create_first() -> None:
    text = render.files(request("render", *ZONES))["splitdns.yaml"]
    header = text.split("apiVersion", 1)[0]
    assert "kubectl -n default create secret generic wireguard-client --from-file=wg0.conf=wg0.conf" in header
    assert "--allowed-unsafe-sysctls=net.ipv4.conf.all.src_valid_mark" in header
    assert "--vpn-image (now your-wireguard-image)" in header


def test_openvpn_stays_as_it_was() -> None:
    spec = pod_spec(list(yaml.safe_load_all(render.files(request(
        "render", "--zone", "svc.acme.internal=openvpn", "--cluster-dns", "10.96.0.10"))["splitdns.yaml"])))
    names = [c["name"] for c in spec["initContainers"]]
    assert names == ["dns", "vpn"] and "wireguard" not in str(spec)


@pytest.mark.parametrize(("args", "error"), [
    (["--vpn", "openvpn"], "--vpn openvpn, but zone svc.acme.internal. is learned from wireguard"),
    (["--zone", "corp.example=openvpn"], "zones learned from both OpenVPN and WireGuard"),
])
def test_contradictions_are_refused_with_a_reason(args: list[str], error: str) -> None:
    with pytest.raises(PlanError) as err:
        render.files(request("render", *ZONES, *args))
    assert error in str(err.value)


def injected(path: Path, *extra: str) -> list[dict[str, Any]]:
    settings = render.injection_settings(request("inject", *ZONES, *extra))
    out = []
    for doc in yaml.safe_load_all(path.read_text()):
        template = doc["spec"]["template"]
        outcome = inject.inject(template, "shop", settings)
        assert outcome.injected, outcome.reason
        doc["spec"]["template"] = outcome.pod
        out.append(doc)
    return out


def test_inject_adds_the_sidecar_after_the_resolver_and_before_the_pods_own_init_containers() -> None:
    (doc,) = injected(INJECT_DATA / "deployment-init.yaml", "--vpn", "wireguard")
    spec = doc["spec"]["template"]["spec"]
    names = [c["name"] for c in spec["initContainers"]]
    assert names[:3] == [inject.CONTAINER, wireguard_pod.SHIM_CONTAINER, "wireguard"]
    assert names[3:] == ["wait-for-db", "migrate"]  # the pod's own, which now resolve both zones
    for version in VERSIONS:
        assert kubernetes_validate.validate(doc, version, strict=True) == version


def test_injecting_twice_equals_once_and_dropping_wireguard_takes_it_all_out() -> None:
    settings = render.injection_settings(request("inject", *ZONES))
    (doc,) = yaml.safe_load_all((INJECT_DATA / "deployment-init.yaml").read_text())
    once = inject.inject(doc["spec"]["template"], "shop", settings).pod
    twice = inject.inject(once, "shop", settings)
    assert twice.pod == once and not twice.changed
    plain = render.injection_settings(request("inject", "--zone", "svc.acme.internal=192.168.240.1",
                                              "--cluster-dns", "10.96.0.10"))
    without = inject.inject(once, "shop", plain).pod
    text = str(without["spec"])
    assert "wireguard" not in text and "splitdns-run" not in text and "src_valid_mark" not in text
    names = [c["name"] for c in without["spec"]["initContainers"]]
    assert names == [inject.CONTAINER, "wait-for-db", "migrate"]


def test_a_pod_with_its_own_wireguard_container_is_left_alone_with_the_reason() -> None:
    settings = render.injection_settings(request("inject", *ZONES))
    pod = {"metadata": {}, "spec": {"containers": [{"name": "wireguard", "image": "x"}]}}
    outcome = inject.inject(pod, "shop", settings)
    assert not outcome.injected
    assert "already has a container named wireguard that is not ours" in outcome.reason
    assert outcome.pod == pod


def test_the_webhooks_arguments_carry_the_wireguard_settings() -> None:
    settings = render.injection_settings(request("inject", *ZONES, "--vpn-image", "registry.example/wg:1"))
    args = webhook_manifests.settings_args(settings)
    assert args[args.index("--vpn") + 1] == "wireguard" and "svc.acme.internal=wireguard" in args
    again = render.injection_settings(request("inject", *args))
    assert again.adds_vpn and again.plan.vpn == "wireguard" and again.vpn_image == "registry.example/wg:1"
    routes = [(r.zone, r.upstreams, r.vpn) for r in settings.plan.routes]
    assert [(r.zone, r.upstreams, r.vpn) for r in again.plan.routes] == routes


def test_the_rendered_pod_and_a_good_config_check_clean(tmp_path: Path) -> None:
    """The shim's init container runs our image but is no resolver: check must not want probes on it."""
    (tmp_path / "splitdns.yaml").write_text(_rendered_text(()))
    good = tmp_path / "wg0.conf"
    good.write_text("[Interface]\nPrivateKey = yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=\n"
                    "DNS = 192.168.240.1\n\n[Peer]\n"
                    "PublicKey = xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=\n"
                    "AllowedIPs = 192.168.240.0/24\nEndpoint = 203.0.113.9:51820\nPersistentKeepalive = 25\n")
    found = checker.check([str(good), str(tmp_path / "splitdns.yaml")], checker.Options(kube_version=(1, 33)))
    assert [f.text(False) for f in found] == []


BASE = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: shop-api
spec:
  replicas: 1
  selector:
    matchLabels: {app: shop-api}
  template:
    metadata:
      labels: {app: shop-api}
    spec:
      securityContext:
        sysctls:
          - {name: net.ipv4.ip_local_port_range, value: "20000 60999"}
      containers:
        - name: api
          image: registry.example.com/shop/api:2.4.1
"""


@pytest.mark.parametrize("mark", [False, True], ids=["default", "src-valid-mark"])
def test_the_component_adds_the_sidecar_and_both_sysctls_with_kubectl_kustomize(tmp_path: Path,
                                                                               mark: bool) -> None:
    """The pod's own sysctl stays; ours are appended by replacements (a strategic merge would
    replace the list). Built by a real kustomize where a kubectl of 1.21 or later is installed."""
    from tests.test_render import kubectl_for_components

    kubectl = kubectl_for_components()
    parts = {"base/deployment.yaml": BASE, "base/kustomization.yaml": "resources:\n  - deployment.yaml\n",
             "overlay/kustomization.yaml": "resources:\n  - ../base\ncomponents:\n  - ../splitdns\n"}
    for part, text in parts.items():
        (tmp_path / part).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / part).write_text(text)
    files = render.files(request("render", *ZONES, "--namespace", "shop", "--form", "component",
                                 "--name", "shop-api", *(["--wireguard-src-valid-mark"] if mark else [])))
    (tmp_path / "splitdns").mkdir()
    (tmp_path / "splitdns" / "kustomization.yaml").write_text(files["kustomization.yaml"])
    # No cluster is involved: KUBECONFIG points nowhere, so kubectl cannot reach one by accident.
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "none")}
    built = subprocess.run([kubectl, "kustomize", str(tmp_path / "overlay")], capture_output=True,
                           text=True, env=env, timeout=30, check=True).stdout
    docs = list(yaml.safe_load_all(built))
    for version in VERSIONS:
        for doc in docs:
            kubernetes_validate.validate(doc, version, strict=True)
    spec = pod_spec(docs)
    assert [c["name"] for c in spec["initContainers"]] == ["dns", wireguard_pod.SHIM_CONTAINER, "wireguard"]
    assert spec["securityContext"]["sysctls"] == [
        {"name": "net.ipv4.ip_local_port_range", "value": "20000 60999"},
        {"name": "net.ipv4.ip_unprivileged_port_start", "value": "53"},
        *([{"name": "net.ipv4.conf.all.src_valid_mark", "value": "1"}] if mark else [])]
    (tmp_path / "built.yaml").write_text(built)
    found = checker.check([str(tmp_path / "built.yaml")], checker.Options(kube_version=(1, 33)))
    assert [f.code for f in found] == (["SD404"] if mark else []), [f.text(False) for f in found]

