"""Offline validation of manifests against the Kubernetes JSON schema of one version, strict (an
unknown field, such as a typo, fails), through kubernetes-validate's bundled schemas; the custom
resources our manifests use against their vendored CRDs (kube/check/custom_resources.py).
Tests: tests/test_check.py, tests/test_render.py.
"""

from __future__ import annotations

from typing import Any

from splitdns.kube.shared.findings import Finding
from splitdns.kube.shared.yamlio import Document

# kustomize's own files are not API objects; there is no schema to check them against.
_NOT_API = {"Kustomization", "Component"}


class VersionError(ValueError):
    """A Kubernetes version kubernetes-validate has no schemas for."""


def versions() -> list[str]:
    import kubernetes_validate.utils as kv  # type: ignore[import-untyped]

    return [".".join(v.split(".")[:2]) for v in kv.all_versions()]


def minor(version: str) -> tuple[int, int]:
    """`1.33`, `v1.33.2` -> (1, 33); VersionError when it is not a version we have schemas for."""
    parts = version.removeprefix("v").split(".")
    known = versions()
    try:
        major_minor = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        raise VersionError(f"--kube-version {version!r}: expected MAJOR.MINOR such as 1.33") from None
    if f"{major_minor[0]}.{major_minor[1]}" not in known:
        raise VersionError(f"--kube-version {version}: schemas are bundled for {known[0]} to "
                           f"{known[-1]} only")
    return major_minor


def validate(file: str, doc: Document, version: tuple[int, int]) -> list[Finding]:
    import kubernetes_validate

    value: Any = doc.value
    if not isinstance(value, dict) or value.get("kind") in _NOT_API or "apiVersion" not in value:
        return []
    try:
        kubernetes_validate.validate(value, f"{version[0]}.{version[1]}", strict=True)
    except kubernetes_validate.ValidationError as err:
        path = tuple(err.absolute_path)
        where = ".".join(str(p) for p in path) or "(top level)"
        message = (f"{value.get('kind')} {_name(value)}: Kubernetes {version[0]}.{version[1]}: "
                   f"{where}: {err.message}")
        return [Finding(file, doc.line(path), "SD401", message)]
    except kubernetes_validate.SchemaNotFoundError:
        return _custom_resource(file, doc, value, version)
    return []


def _custom_resource(file: str, doc: Document, value: dict[str, Any],
                     version: tuple[int, int]) -> list[Finding]:
    """A kind the core API does not have: checked against its vendored CRD where we have it (the
    cert-manager kinds our manifests use), else said plainly to be unchecked, as a note: calling a
    fine manifest an error would be a false alarm."""
    from splitdns.kube.check import custom_resources

    if (value.get("apiVersion"), value.get("kind")) in custom_resources.known():
        out = []
        for path, message in custom_resources.errors(value, version):
            where = ".".join(str(p) for p in path) or "(top level)"
            out.append(Finding(file, doc.line(path), "SD401", f"{value.get('kind')} {_name(value)}: "
                               f"{value.get('apiVersion')} (its CRD, as vendored): {where}: {message}"))
        return out
    return [Finding(file, doc.first_line, "SD403",
                        f"{value.get('kind')} {_name(value)} ({value.get('apiVersion')}) is not validated: "
                        f"the Kubernetes {version[0]}.{version[1]} schemas have no such kind "
                        "(a custom resource's schema is its CRD, in the cluster)")]


def _name(value: dict[str, Any]) -> str:
    meta = value.get("metadata")
    return str(meta.get("name", "")) if isinstance(meta, dict) else ""
