"""Validate custom resources strictly against the openAPIV3Schema of their CustomResourceDefinition, as
an API server does with `kubectl apply` (strict field validation, kubectl's default since 1.27): a
field the schema does not name is an error, not silently pruned. Metadata is checked against the
core API's ObjectMeta schema that kubernetes-validate bundles, as the API server checks it.

The CRDs are cert-manager's own, vendored in tests/data/cert-manager (see SOURCES.md there).
"""

from __future__ import annotations

import copy
import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from referencing import Registry, Resource

CRDS = Path(__file__).resolve().parents[1] / "data" / "cert-manager"
# The newest schemas kubernetes-validate bundles: ObjectMeta has not changed in the versions we render for.
KUBERNETES_SCHEMAS = "v1.37.0-local-strict"


def strict(schema: Any) -> Any:
    """The schema with `additionalProperties: false` wherever it names properties and neither allows
    other ones (`additionalProperties`) nor keeps unknown fields (`x-kubernetes-preserve-unknown-fields`):
    the rule by which an API server refuses unknown fields of a custom resource."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


@cache
def _crds() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the served version's openAPIV3Schema, from every vendored CRD."""
    found = {}
    for path in sorted(CRDS.glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                if version.get("served"):
                    key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                    found[key] = version["schema"]["openAPIV3Schema"]
    return found


def known() -> set[tuple[str, str]]:
    return set(_crds())


@cache
def _metadata_validator() -> jsonschema.protocols.Validator:
    folder = resources.files("kubernetes_validate") / "kubernetes-json-schema" / KUBERNETES_SCHEMAS
    meta = json.loads((folder / "objectmeta-meta-v1.json").read_text())
    definitions = Resource.from_contents(json.loads((folder / "_definitions.json").read_text()))
    registry: Registry[Any] = definitions @ (Resource.from_contents(meta) @ Registry())
    return jsonschema.Draft202012Validator(meta, registry=registry)


@cache
def _validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    schema = strict(copy.deepcopy(_crds()[(api_version, kind)]))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def errors(resource: dict[str, Any]) -> list[str]:
    """What is wrong with `resource`, one line each, where; empty when it is valid. KeyError when no
    vendored CRD defines its apiVersion and kind."""
    validator = _validator(resource["apiVersion"], resource["kind"])
    found = [f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
             for e in validator.iter_errors(resource)]
    if isinstance(resource.get("metadata"), dict):
        found += [f"metadata.{'.'.join(map(str, e.absolute_path))}: {e.message}"
                  for e in _metadata_validator().iter_errors(resource["metadata"])]
    return found
