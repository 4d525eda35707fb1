"""`splitdns inject` and the injection function: golden files (tests/data/inject/NAME.yaml ->
NAME.injected.yaml), every output strictly valid for Kubernetes 1.29-1.37, injecting twice equal to
once, and each refusal with its reason.

Set SPLITDNS_UPDATE_GOLDEN=1 to rewrite the expected files after an intended change (then review the
diff). already-injected.yaml is an input made by `splitdns inject` itself: rewrite it too when the
version or the settings change (its output must equal it).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from hypothesis import given
from hypothesis import settings as settings_
from hypothesis import strategies as st

from splitdns import __version__, cli, config
from splitdns.commands import render
from splitdns.kube.deploy import inject

DATA = Path(__file__).parent / "data" / "inject"
CASES = sorted(p.name.removesuffix(".yaml") for p in DATA.glob("*.yaml") if ".injected." not in p.name)
VERSIONS = [f"1.{minor}" for minor in range(29, 38)]
SETTINGS_ARGS = ["--zone", "svc.acme.internal=openvpn", "--cluster-dns", "10.96.0.10"]
# The cases the injection leaves alone, with the reason it gives.
LEFT_ALONE = {"hostnetwork": "hostNetwork pod", "port53": "declares containerPort 53"}


def run_inject(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["inject", *SETTINGS_ARGS, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def settings(*extra: str) -> inject.Settings:
    args = cli.build_parser().parse_args(["inject", *SETTINGS_ARGS, *extra])
    fields = {k: v for k, v in vars(args).items() if k in render.Request.__dataclass_fields__}
    return render.injection_settings(render.Request(**fields))


def expected(case: str) -> Path:
    return DATA / f"{case}.injected.yaml"


def test_every_case_is_there() -> None:
    assert set(CASES) >= {"deployment-init", "job", "cronjob", "statefulset", "pod-dnsconfig",
                          "hostnetwork", "already-injected", "istio", "list", "port53"}


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_inject(capsys, str(DATA / f"{case}.yaml"))
    if case in LEFT_ALONE:
        assert code == 1
        assert LEFT_ALONE[case] in err
        assert out == (DATA / f"{case}.yaml").read_text(), "a refused document must come back byte for byte"
    else:
        assert code == 0, err
        assert "not injected" not in err
    if os.environ.get("SPLITDNS_UPDATE_GOLDEN"):
        expected(case).write_text(out)
    assert expected(case).read_text() == out, f"{expected(case)} differs; SPLITDNS_UPDATE_GOLDEN=1 to rewrite"


@pytest.mark.parametrize("case", CASES)
def test_injecting_twice_equals_once(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, once, _ = run_inject(capsys, str(DATA / f"{case}.yaml"))
    (tmp_path / "once.yaml").write_text(once)
    _, twice, _ = run_inject(capsys, str(tmp_path / "once.yaml"))
    assert twice == once


def test_already_injected_is_left_byte_for_byte(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_inject(capsys, str(DATA / "already-injected.yaml"))
    assert (code, err) == (0, "")
    assert out == (DATA / "already-injected.yaml").read_text()


@pytest.mark.parametrize("version", VERSIONS)
def test_outputs_are_strictly_valid(version: str) -> None:
    count = 0
    for path in sorted(DATA.glob("*.injected.yaml")):
        for top in yaml.safe_load_all(path.read_text()):
            # A List has no schema of its own (it is kubectl's): its items are checked one by one.
            for doc in top["items"] if top["kind"] == "List" else [top]:
                assert kubernetes_validate.validate(doc, version, strict=True) == version, path
                count += 1
    assert count >= len(CASES)


def pod_specs(path: Path) -> list[dict[str, Any]]:
    out = []
    for doc in yaml.safe_load_all(path.read_text()):
        for item in doc.get("items", [doc]):
            spec = item.get("spec", {})
            spec = spec.get("jobTemplate", {}).get("spec", spec)
            out.append(spec.get("template", item)["spec"] if item.get("kind") != "Pod" else spec)
    return out


def test_native_sidecar_is_first_before_other_injectors() -> None:
    spec = pod_specs(expected("istio"))[0]
    assert [c["name"] for c in spec["initContainers"]] == ["splitdns", "istio-init", "istio-proxy"]
    assert spec["initContainers"][0]["restartPolicy"] == "Always"
    spec = pod_specs(expected("deployment-init"))[0]
    assert [c["name"] for c in spec["initContainers"]] == ["splitdns", "wait-for-db", "migrate"]
    # Jobs complete: the resolver is a native sidecar, which ends with the pod.
    for case in ("job", "cronjob"):
        (spec,) = pod_specs(expected(case))
        assert spec["initContainers"][0]["restartPolicy"] == "Always"
        assert all(c["name"] != "splitdns" for c in spec["containers"])


def test_dns_settings_are_merged_never_replaced() -> None:
    (spec,) = pod_specs(expected("pod-dnsconfig"))
    assert spec["dnsPolicy"] == "None"
    assert spec["dnsConfig"] == {
        "nameservers": ["127.0.0.1"],
        "searches": ["shop.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example.com"],
        "options": [{"name": "ndots", "value": "1"}, {"name": "edns0"}],
    }
    assert spec["securityContext"]["sysctls"] == [
        {"name": "net.ipv4.ip_local_port_range", "value": "20000 40000"},
        {"name": "net.ipv4.ip_unprivileged_port_start", "value": "53"}]
    (spec,) = pod_specs(expected("statefulset"))  # ndots from the pod's annotation
    assert spec["dnsConfig"]["options"] == [{"name": "ndots", "value": "2"}]
    assert spec["dnsConfig"]["searches"][0] == "data.svc.cluster.local"
    (spec,) = pod_specs(expected("job"))  # none given: the settings' ndots
    assert spec["dnsConfig"]["options"] == [{"name": "ndots", "value": "5"}]


def test_the_corefile_travels_in_the_pod_and_the_resolver_accepts_it() -> None:
    (spec,) = pod_specs(expected("job"))
    container = spec["initContainers"][0]
    assert container["args"] == ["--corefile-env", inject.COREFILE_ENV]
    (env,) = container["env"]
    loaded = config.loads(env["value"], file="$SPLITDNS_COREFILE")
    assert loaded.blocks[0].name.startswith("svc.acme.internal")
    assert loaded.health is not None and loaded.health.endpoint.port == inject.HEALTH_PORT
    probe = container["startupProbe"]["httpGet"]
    assert probe["port"] == "splitdns-ready" and probe["path"].startswith("/ready?")


def test_status_annotation_says_what_which_version_and_settings() -> None:
    (doc,) = yaml.safe_load_all(expected("job").read_text())
    status = json.loads(doc["spec"]["template"]["metadata"]["annotations"][inject.STATUS])
    s = settings()
    assert status == {"injected": "splitdns", "version": __version__, "sidecar": "native",
                      "settings": s.digest, "ndots": "settings"}
    assert inject.is_injected(doc["spec"]["template"])


POD: dict[str, Any] = {"metadata": {"name": "p", "labels": {"app": "x"}},
                       "spec": {"containers": [{"name": "app", "image": "app:1"}]}}


def with_spec(**fields: Any) -> dict[str, Any]:
    pod = copy.deepcopy(POD)
    pod["spec"].update(fields)
    return pod


@pytest.mark.parametrize(("pod", "namespace", "reason"), [
    (with_spec(hostNetwork=True), "shop", "hostNetwork"),
    (with_spec(dnsPolicy="ClusterFirstWithHostNet"), "shop", "ClusterFirstWithHostNet"),
    (with_spec(dnsPolicy="Default"), "shop", "node's resolver"),
    (POD, "kube-system", "namespace kube-system is never injected"),
    (POD, "kube-public", "namespace kube-public"),
    (POD, "kube-node-lease", "namespace kube-node-lease"),
    (with_spec(containers=[{"name": "dns", "image": "d",
                            "ports": [{"containerPort": 53, "protocol": "UDP"}]}]),
     "shop", "containerPort 53"),
    (with_spec(initContainers=[{"name": "x", "image": "x", "ports": [{"containerPort": 1, "hostPort": 53}]}]),
     "shop", "hostPort 53"),
    (with_spec(containers=[{"name": "app", "image": "a", "ports": [{"containerPort": 15381}]}]),
     "shop", "ready port"),
    (with_spec(containers=[{"name": "splitdns", "image": "someone-elses"}]), "shop", "not ours"),
    (with_spec(securityContext={"sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start",
                                             "value": "1024"}]}), "shop", "needs 53 or lower"),
    ({**POD, "metadata": {"labels": {inject.POD_LABEL: "false"}}}, "shop", "opts out"),
    ({**POD, "metadata": {"annotations": {inject.NDOTS: "many"}}}, "shop", "not a number from 0 to 15"),
    (with_spec(containers="oops"), "shop", "spec.containers is not a list"),
])
def test_refusals_leave_the_pod_unchanged_with_a_reason(pod: dict[str, Any], namespace: str,
                                                        reason: str) -> None:
    before = copy.deepcopy(pod)
    outcome = inject.inject(pod, namespace, settings())
    assert not outcome.injected and not outcome.changed
    assert reason in outcome.reason
    assert outcome.pod == before and pod == before
    assert "object at 0x" not in outcome.reason


def test_the_webhooks_own_namespace_is_excluded() -> None:
    req = render.Request(zones=["svc.acme.internal=openvpn"], cluster_dns="10.96.0.10")
    s = render.injection_settings(req, excluded=("splitdns-system",))
    assert "splitdns-system" in inject.inject(POD, "splitdns-system", s).reason
    assert inject.inject(POD, "shop", s).injected


def test_classic_sidecar_for_old_clusters() -> None:
    classic = settings("--sidecar", "classic")
    outcome = inject.inject(with_spec(initContainers=[{"name": "i", "image": "i"}]), "shop", classic)
    assert outcome.injected
    spec = outcome.pod["spec"]
    assert [c["name"] for c in spec["containers"]] == ["splitdns", "app"]
    # Nothing an old cluster rejects: no restartPolicy on a container, no startupProbe holding init.
    assert "restartPolicy" not in spec["containers"][0]
    assert [c["name"] for c in spec["initContainers"]] == ["i"]
    assert any("init containers run before the resolver" in w for w in outcome.warnings)
    for version in ("1.29", "1.37"):
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod", **outcome.pod}, version, strict=True)
    job = inject.inject(with_spec(restartPolicy="Never"), "shop", classic)
    assert not job.injected and "running forever" in job.reason


def test_reinjection_finds_ours_in_containers_and_init_containers() -> None:
    native, classic = settings(), settings("--sidecar", "classic")
    once = inject.inject(POD, "shop", classic).pod
    again = inject.inject(once, "shop", classic)
    assert again.injected and not again.changed
    moved = inject.inject(once, "shop", native).pod  # settings changed: ours is rebuilt, not added twice
    names = [c["name"] for c in moved["spec"]["initContainers"] + moved["spec"]["containers"]]
    assert names.count("splitdns") == 1 and moved["spec"]["initContainers"][0]["name"] == "splitdns"
    assert json.loads(moved["metadata"]["annotations"][inject.STATUS])["settings"] == native.digest


def test_another_injector_going_first_is_undone_on_reinvocation() -> None:
    s = settings()
    pod = inject.inject(POD, "shop", s).pod
    pod["spec"]["initContainers"].insert(0, {"name": "vault-agent-init", "image": "vault"})
    again = inject.inject(pod, "shop", s)
    assert again.changed
    assert [c["name"] for c in again.pod["spec"]["initContainers"]] == ["splitdns", "vault-agent-init"]


SETTINGS = settings()


def test_bad_input_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Pod\n---\nmetadata: [unclosed\n")
    code, out, err = run_inject(capsys, str(bad))
    assert code == 2 and out == ""
    assert f"{bad}:" in err and "YAML does not parse" in err and "Traceback" not in err
    code, _, err = run_inject(capsys, str(tmp_path / "missing.yaml"))
    assert code == 2 and "cannot read" in err
    assert cli.main(["inject", str(bad)]) == 2  # no catch-all upstream given
    assert "catch-all" in capsys.readouterr().err


def test_injected_outputs_check_clean(capsys: pytest.CaptureFixture[str]) -> None:
    outputs = [str(p) for p in sorted(DATA.glob("*.injected.yaml"))]
    assert cli.main(["check", "--brief", *outputs]) == 0, capsys.readouterr().out


def test_serve_corefile_env_errors_are_clear() -> None:
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "SPLITDNS_TEST_NOPE"}
    done = subprocess.run([sys.executable, "-m", "splitdns", "serve", "--corefile-env", "SPLITDNS_TEST_NOPE"],
                          capture_output=True, text=True, timeout=30, env=env)
    assert done.returncode == 2
    assert "the environment variable SPLITDNS_TEST_NOPE is not set" in done.stderr
    env["SPLITDNS_TEST_NOPE"] = ".:53 {\n    forward . not-an-address\n}\n"
    done = subprocess.run([sys.executable, "-m", "splitdns", "serve", "--corefile-env", "SPLITDNS_TEST_NOPE"],
                          capture_output=True, text=True, timeout=30, env=env)
    assert done.returncode == 2 and "$SPLITDNS_TEST_NOPE:2" in done.stderr and "Traceback" not in done.stderr


def test_ndots_follows_the_settings_but_never_overrides_the_pods_own() -> None:
    five, two = settings(), settings("--ndots", "2")
    plain = inject.inject(POD, "shop", five).pod
    options = inject.inject(plain, "shop", two).pod["spec"]["dnsConfig"]["options"]
    assert options == [{"name": "ndots", "value": "2"}]
    own = with_spec(dnsConfig={"options": [{"name": "ndots", "value": "1"}]})
    again = inject.inject(inject.inject(own, "shop", five).pod, "shop", two).pod
    assert again["spec"]["dnsConfig"]["options"] == [{"name": "ndots", "value": "1"}]


JSON = st.recursive(st.none() | st.booleans() | st.integers(-2, 70000) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                 max_size=3),
                    max_leaves=8)
CONTAINER_FIELDS = st.fixed_dictionaries({}, optional={
    "name": st.sampled_from(["splitdns", "app"]) | JSON, "image": JSON,
    "ports": st.lists(st.fixed_dictionaries({}, optional={"containerPort": st.sampled_from([53, 80]) | JSON,
                                                          "hostPort": JSON, "name": JSON}) | JSON, max_size=2)
    | JSON,
    "env": st.lists(st.fixed_dictionaries({"name": st.just(inject.COREFILE_ENV) | JSON}), max_size=2) | JSON})
POD_SHAPES = st.fixed_dictionaries({}, optional={
    "metadata": st.fixed_dictionaries({}, optional={
        "annotations": st.dictionaries(st.sampled_from([inject.STATUS, inject.NDOTS, inject.POD_LABEL]),
                                       st.text(max_size=20) | JSON, max_size=3) | JSON,
        "labels": JSON}) | JSON,
    "spec": st.fixed_dictionaries({}, optional={
        "containers": st.lists(CONTAINER_FIELDS | JSON, max_size=2) | JSON,
        "initContainers": st.lists(CONTAINER_FIELDS | JSON, max_size=2) | JSON,
        "dnsPolicy": st.sampled_from(["ClusterFirst", "None", "Default"]) | JSON,
        "dnsConfig": st.fixed_dictionaries({}, optional={"nameservers": JSON, "searches": JSON,
                                                         "options": JSON}) | JSON,
        "securityContext": st.fixed_dictionaries({}, optional={"sysctls": JSON}) | JSON,
        "os": JSON, "hostNetwork": JSON, "restartPolicy": JSON}) | JSON,
})


@settings_(max_examples=300, deadline=None)
@given(POD_SHAPES)
def test_any_pod_shape_gets_an_outcome_never_an_exception(pod: dict[str, Any]) -> None:
    before = copy.deepcopy(pod)
    outcome = inject.inject(pod, "shop", SETTINGS)
    assert pod == before  # the input is never modified
    if outcome.injected:
        assert inject.inject(outcome.pod, "shop", SETTINGS).pod == outcome.pod
    else:
        assert outcome.pod == before and outcome.reason


def mounted(*extra: str) -> inject.Settings:
    """render's mode: the Corefile from a ConfigMap, the container named dns."""
    return dataclasses.replace(settings(*extra), configmap="splitdns-corefile")


def test_switching_between_env_and_configmap_corefile_leaves_one_resolver() -> None:
    pod = with_spec(volumes=[{"name": "data", "emptyDir": {}}])
    by_configmap = inject.inject(pod, "shop", mounted()).pod
    spec = by_configmap["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["dns"]
    assert spec["initContainers"][0]["args"] == ["-conf", "/etc/coredns/Corefile"]
    assert [v["name"] for v in spec["volumes"]] == ["splitdns-corefile", "data"]
    assert not inject.inject(by_configmap, "shop", mounted()).changed  # twice == once here too
    by_env = inject.inject(by_configmap, "shop", settings()).pod
    names = [c["name"] for c in by_env["spec"]["initContainers"] + by_env["spec"]["containers"]]
    assert names == ["splitdns", "app"]
    assert [v["name"] for v in by_env["spec"]["volumes"]] == ["data"]  # no volume left for a gone ConfigMap
    back = inject.inject(by_env, "shop", mounted()).pod
    assert back == by_configmap
    for version in ("1.29", "1.37"):
        for p in (by_configmap, by_env):
            kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod", **p}, version, strict=True)


@pytest.mark.parametrize(("pod", "reason"), [
    (with_spec(containers=[{"name": "dns", "image": "someone-elses"}]), "named dns that is not ours"),
    (with_spec(containers=[{"name": "app", "image": "a", "ports": [{"containerPort": 8080}]}]),
     "health port"),
])
def test_configmap_mode_refuses_what_would_clash_with_its_container(pod: dict[str, Any], reason: str) -> None:
    outcome = inject.inject(pod, "shop", mounted())
    assert not outcome.injected and reason in outcome.reason
    assert inject.inject(pod, "shop", settings()).injected  # the env mode's name and ports differ
