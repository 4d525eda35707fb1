"""Custom resources validated strictly against the openAPIV3Schema of their CustomResourceDefinition,
as an API server does with `kubectl apply` (strict field validation, kubectl's default since 1.27): a
field the schema does not name is an error, not silently pruned. Metadata is checked against the
core API's ObjectMeta schema of the chosen Kubernetes version, as the API server checks it.

The CRDs are the ones our manifests use, cert-manager's Issuer and Certificate and
prometheus-operator's PrometheusRule, PodMonitor and ServiceMonitor, vendored in kube/check/crds
(SOURCES.md there says from where, and what of them was cut).
Tests: tests/test_check.py, tests/test_render.py.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import Any

CRDS = resources.files("splitdns.kube.check") / "crds"


def strict(schema: Any) -> Any:
    """The schema with `additionalProperties: false` wherever it names properties and neither allows
    other ones (`additionalProperties`) nor keeps unknown fields (`x-kubernetes-preserve-unknown-fields`):
    the rule by which an API server refuses unknown fields of a custom resource."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    pattern = out.get("pattern")
    if isinstance(pattern, str) and pattern.startswith("^(?i)"):
        # Go's RE2 takes a flag group after `^` (prometheus-operator's `^(?i)(abort|warn)?$`);
        # Python's re wants it first. Same meaning.
        out["pattern"] = "(?i)^" + pattern[len("^(?i)"):]
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


@cache
def _crds() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the served version's openAPIV3Schema, from every vendored CRD."""
    import yaml

    found = {}
    for path in sorted((p for p in CRDS.iterdir() if p.name.endswith(".yaml")), key=lambda p: p.name):
        for crd in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                if version.get("served"):
                    key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                    found[key] = version["schema"]["openAPIV3Schema"]
    return found


def known() -> set[tuple[str, str]]:
    """The (apiVersion, kind) pairs there is a vendored schema for."""
    return set(_crds())


@cache
def _validator(api_version: str, kind: str) -> Any:
    import jsonschema

    schema = strict(copy.deepcopy(_crds()[(api_version, kind)]))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@cache
def _metadata_validator(version: tuple[int, int]) -> Any:
    import jsonschema
    import kubernetes_validate.utils as kv  # type: ignore[import-untyped]
    from referencing import Registry, Resource

    # The newest bundled schemas not newer than the version asked, as kubernetes-validate picks them.
    bundled = [v for v in kv.all_versions() if tuple(map(int, v.split(".")[:2])) <= version][-1]
    folder = resources.files("kubernetes_validate") / "kubernetes-json-schema" / f"v{bundled}-local-strict"
    meta = json.loads((folder / "objectmeta-meta-v1.json").read_text())
    definitions = Resource.from_contents(json.loads((folder / "_definitions.json").read_text()))
    registry: Registry[Any] = definitions @ (Resource.from_contents(meta) @ Registry())
    return jsonschema.Draft202012Validator(meta, registry=registry)


def errors(resource: dict[str, Any], version: tuple[int, int]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(path, message) for each thing wrong with `resource`; none when it is valid. KeyError when no
    vendored CRD defines its apiVersion and kind."""
    for e in _validator(resource["apiVersion"], resource["kind"]).iter_errors(resource):
        yield tuple(e.absolute_path), e.message
    if isinstance(resource.get("metadata"), dict):
        for e in _metadata_validator(version).iter_errors(resource["metadata"]):
            yield ("metadata", *e.absolute_path), e.message
