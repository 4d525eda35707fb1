"""`splitdns render --form webhook`: a golden file, strictly valid for Kubernetes 1.29-1.37, and the
rendered Deployment's own arguments start a webhook that injects with the settings it announces.

cert-manager's Issuer and Certificate are validated, just as strictly, against the openAPIV3Schema of
cert-manager's own CRDs, vendored in src/splitdns/kube/check/crds (kubernetes-validate bundles only the core
API's schemas; `check --kube-version` uses them too: see tests/support/crds.py).
Set SPLITDNS_UPDATE_GOLDEN=1 to rewrite the golden file after an intended change.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from splitdns import cli
from splitdns.kube.deploy import inject
from tests.support import crds, webhook

GOLDEN = Path(__file__).parent / "data" / "webhook" / "splitdns-webhook.yaml"
VERSIONS = [f"1.{minor}" for minor in range(29, 38)]
ARGS = ["render", "--form", "webhook", "--zone", "svc.acme.internal=openvpn", "--cluster-dns", "10.96.0.10"]
CERT_MANAGER = "cert-manager.io/v1"


def rendered(capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main(ARGS) == 0
    return capsys.readouterr().out


def docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(GOLDEN.read_text()) if d is not None]


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in docs() if d["kind"] == kind]


def test_golden(capsys: pytest.CaptureFixture[str]) -> None:
    text = rendered(capsys)
    if os.environ.get("SPLITDNS_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert GOLDEN.read_text() == text, f"{GOLDEN} differs; SPLITDNS_UPDATE_GOLDEN=1 to rewrite"


@pytest.mark.parametrize("version", VERSIONS)
def test_strictly_valid(version: str) -> None:
    checked = []
    for doc in docs():
        if doc["apiVersion"] == CERT_MANAGER:
            continue  # cert-manager's CRDs: test_cert_manager_resources_match_cert_managers_schema
        assert kubernetes_validate.validate(doc, version, strict=True) == version
        checked.append(doc["kind"])
    assert sorted(checked) == ["Deployment", "MutatingWebhookConfiguration", "Namespace",
                               "PodDisruptionBudget", "Service", "ServiceAccount"]


def test_webhook_configuration_opt_in_exclusions_and_failure() -> None:
    (config,) = by_kind("MutatingWebhookConfiguration")
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "None"
    assert hook["reinvocationPolicy"] == "IfNeeded" and 1 <= hook["timeoutSeconds"] <= 10
    assert hook["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                              "resources": ["pods"], "scope": "Namespaced"}]
    assert hook["objectSelector"] == {"matchLabels": {inject.POD_LABEL: "true"}}
    expressions = hook["namespaceSelector"]["matchExpressions"]
    assert {"key": inject.NAMESPACE_LABEL, "operator": "In", "values": ["enabled"]} in expressions
    (not_in,) = [e for e in expressions if e["operator"] == "NotIn"]
    assert set(not_in["values"]) == {"kube-system", "kube-public", "kube-node-lease", "splitdns-system"}
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
        "splitdns-system/splitdns-webhook"


def test_cert_manager_resources_match_cert_managers_schema() -> None:
    ours = [d for d in docs() if d["apiVersion"] == CERT_MANAGER]
    assert sorted(d["kind"] for d in ours) == ["Certificate", "Certificate", "Issuer", "Issuer"]
    assert {(d["apiVersion"], d["kind"]) for d in ours} <= crds.known()
    for doc in ours:
        assert crds.errors(doc) == [], doc["metadata"]["name"]


def _changed(kind: str, name: str, path: str, value: Any, rename: str = "") -> dict[str, Any]:
    """The rendered resource with the field at `path` (dotted) set to `value`, or renamed to `rename`."""
    (doc,) = [d for d in by_kind(kind) if d["metadata"]["name"] == name]
    *parents, key = path.split(".")
    node = doc
    for part in parents:
        node = node[part]
    if rename:
        node[rename] = node.pop(key)
    else:
        node[key] = value
    return doc


@pytest.mark.parametrize(("kind", "name", "path", "value", "rename", "expected"), [
    # a misspelt field: refused by name (and a required field it stood for goes missing)
    ("Certificate", "splitdns-webhook", "spec.dnsNames", None, "dnsName", "'dnsName' was unexpected"),
    ("Certificate", "splitdns-webhook", "spec.privateKey.rotationPolicy", None, "rotationpolicy",
     "'rotationpolicy' was unexpected"),
    ("Issuer", "splitdns-webhook-selfsigned", "spec.selfSigned", None, "selfsigned",
     "'selfsigned' was unexpected"),
    ("Issuer", "splitdns-webhook-ca", "spec.ca.secretName", None, "secretname",
     "'secretName' is a required property"),
    ("Certificate", "splitdns-webhook", "metadata.namespace", None, "namspace", "'namspace' was unexpected"),
    # a value cert-manager does not take
    ("Certificate", "splitdns-webhook", "spec.privateKey.algorithm", "EC", "", "'EC' is not one of"),
    ("Certificate", "splitdns-webhook-ca", "spec.isCA", "true", "", "'true' is not of type 'boolean'"),
], ids=["spec-field", "nested-field", "issuer-field", "issuer-required", "metadata", "enum", "type"])
def test_cert_manager_schema_refuses_a_misspelt_resource(kind: str, name: str, path: str, value: Any,
                                                         rename: str, expected: str) -> None:
    found = crds.errors(_changed(kind, name, path, value, rename))
    assert any(expected in line for line in found), found


def test_cert_manager_chain_references() -> None:
    issuers = {d["metadata"]["name"]: d for d in by_kind("Issuer")}
    certs = {d["metadata"]["name"]: d for d in by_kind("Certificate")}
    assert all(d["apiVersion"] == CERT_MANAGER for d in [*issuers.values(), *certs.values()])
    serving = certs["splitdns-webhook"]["spec"]
    assert serving["issuerRef"]["name"] in issuers
    ca_issuer = issuers[serving["issuerRef"]["name"]]["spec"]["ca"]
    assert certs[ca_issuer["secretName"]]["spec"]["isCA"] is True
    assert "splitdns-webhook.splitdns-system.svc" in serving["dnsNames"]
    (deployment,) = by_kind("Deployment")
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": serving["secretName"]}} in volumes


def test_deployment_is_highly_available_and_hardened() -> None:
    (deployment,) = by_kind("Deployment")
    (pdb,) = by_kind("PodDisruptionBudget")
    spec = deployment["spec"]
    assert spec["replicas"] == 2 and pdb["spec"]["minAvailable"] == 1
    pod = spec["template"]["spec"]
    assert pod["affinity"]["podAntiAffinity"]
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] and sc["runAsNonRoot"] and sc["capabilities"] == {"drop": ["ALL"]}
    assert pod["automountServiceAccountToken"] is False
    assert not by_kind("Role") and not by_kind("ClusterRole")  # it never calls the API server


def test_the_rendered_arguments_run_a_webhook_with_the_announced_settings() -> None:
    (deployment,) = by_kind("Deployment")
    template = deployment["spec"]["template"]
    args = template["spec"]["containers"][0]["args"]
    flags = args[args.index("--namespace"):]  # the TLS paths and ports are the test's own
    with webhook.running(settings=flags) as hook:
        pod = {"metadata": {"name": "p", "labels": {inject.POD_LABEL: "true"}},
               "spec": {"containers": [{"name": "a", "image": "a"}]}}
        response = hook.review(webhook.pod_request(pod, "shop"))
    ops = json.loads(base64.b64decode(response["patch"]))
    (status,) = [op["value"] for op in ops if op["path"] == "/metadata/annotations"]
    assert json.loads(status[inject.STATUS])["settings"] == template["metadata"]["annotations"][
        "splitdns.dev/settings"]


def test_the_webhook_runs_from_the_tools_image_and_injects_the_resolver_image(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*ARGS, "--image", "registry.example.com/team/splitdns:1.2.3"]) == 0
    deployment = next(d for d in yaml.safe_load_all(capsys.readouterr().out)
                      if d and d["kind"] == "Deployment")
    webhook_container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert webhook_container["image"] == "registry.example.com/team/splitdns-tools:1.2.3"
    flags = webhook_container["args"]
    assert flags[flags.index("--image") + 1] == "registry.example.com/team/splitdns:1.2.3"
