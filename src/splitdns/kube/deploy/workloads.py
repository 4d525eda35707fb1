"""`inject` over YAML streams: find each pod template in a document (Pod, Deployment, StatefulSet,
DaemonSet, ReplicaSet, Job, CronJob, and those inside a List), inject it, and write the stream back.

A document that is not changed is written back as it was read, byte for byte (comments included).
A changed document is written from its parsed value: its keys keep their order, but its comments and
quoting style are lost (PyYAML keeps neither).
Tests: tests/test_webhook.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from splitdns.kube.deploy.inject import Outcome, Settings, inject
from splitdns.kube.shared import yamlio

Doc = dict[str, Any]

TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": (),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
# A line `---` (optionally followed by a space and more) starts a document; `...` ends one.
_SEPARATOR = re.compile(r"^(---(?:[ \t].*)?|\.\.\.[ \t]*)$", re.MULTILINE)


class InputError(ValueError):
    """The input is not YAML we can read; the message says where."""


@dataclass(frozen=True)
class Report:
    what: str          # "Deployment web" (namespace shop)
    outcome: Outcome


def inject_object(obj: Any, settings: Settings, namespace: str) -> tuple[Any, list[Report]]:
    """One parsed document -> (the injected document, one report per pod template)."""
    if not isinstance(obj, dict):
        return obj, []
    kind = str(obj.get("kind", ""))
    if kind == "List" or (kind.endswith("List") and isinstance(obj.get("items"), list)):
        items, reports = [], []
        for item in obj["items"] if isinstance(obj.get("items"), list) else []:
            new, more = inject_object(item, settings, namespace)
            items.append(new)
            reports.extend(more)
        if not reports:
            return obj, []
        return {**obj, "items": items}, reports
    path = TEMPLATE_PATHS.get(kind)
    if path is None:
        return obj, []
    meta: Doc = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
    ns = str(meta.get("namespace") or namespace)
    what = f"{kind} {meta.get('name', '(unnamed)')} (namespace {ns})"
    template = _get(obj, path)
    if not isinstance(template, dict):
        return obj, [Report(what, Outcome(obj, False, False, "no pod template"))]
    outcome = inject(template, ns, settings)
    if not outcome.changed:
        return obj, [Report(what, outcome)]
    return _set(obj, path, outcome.pod), [Report(what, outcome)]


def _get(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _set(obj: Doc, path: tuple[str, ...], value: Doc) -> Doc:
    if not path:
        return value
    inner = obj.get(path[0])
    return {**obj, path[0]: _set(inner if isinstance(inner, dict) else {}, path[1:], value)}


def split_documents(text: str) -> Iterator[tuple[str, str]]:
    """(separator line with its newline, or "", document text) for each document of a stream."""
    pos, sep = 0, ""
    for m in _SEPARATOR.finditer(text):
        yield sep, text[pos:m.start()]
        end = m.end() + (1 if text[m.end():m.end() + 1] == "\n" else 0)
        sep, pos = text[m.start():end], end
    yield sep, text[pos:]


def inject_text(text: str, settings: Settings, namespace: str,
                source: str = "<stdin>") -> tuple[str, list[Report]]:
    """A YAML stream -> (the stream with every pod template injected, the reports)."""
    out: list[str] = []
    reports: list[Report] = []
    line = 1
    for sep, chunk in split_documents(text):
        try:
            value = yaml.safe_load(chunk) if chunk.strip() else None
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            at = line + (sep.count("\n")) + (mark.line if mark is not None else 0)
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            raise InputError(f"{source}:{at}: YAML does not parse: {problem}") from None
        line += sep.count("\n") + chunk.count("\n")
        new, more = inject_object(value, settings, namespace)
        reports.extend(more)
        out.append(sep)
        out.append(chunk if new is value else yamlio.dump(new))
    return "".join(out), reports
