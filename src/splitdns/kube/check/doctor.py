"""`splitdns doctor`, the judgement: which pods asked for the resolver and did not get it, and which
run an injection older than the webhook's. Pure: API objects (plain dicts, as the API returns them)
in, findings out; commands/doctor.py reads the cluster.

With `failurePolicy: Ignore` a pod created while the webhook was down starts without the resolver
(and so with plain cluster DNS); this is how such pods are found.
Tests: tests/test_doctor.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from splitdns.kube.deploy import inject

Doc = dict[str, Any]
SETTINGS_ANNOTATION = "splitdns.dev/settings"

# Finding kinds, worst first.
NOT_INJECTED = "not-injected"
NAMESPACE_NOT_ENABLED = "namespace-not-enabled"
STALE = "stale"
NO_WEBHOOK = "no-webhook"


@dataclass(frozen=True)
class Finding:
    kind: str
    namespace: str
    pod: str
    message: str


def _meta(obj: Doc) -> Doc:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _labels(obj: Doc) -> Doc:
    labels = _meta(obj).get("labels")
    return labels if isinstance(labels, dict) else {}


def _owner(pod: Doc) -> str:
    owners = _meta(pod).get("ownerReferences") or []
    return f" (owned by {owners[0].get('kind')} {owners[0].get('name')})" if owners else ""


def diagnose(namespaces: list[Doc], pods: list[Doc], webhook: Doc | None) -> list[Finding]:
    """`namespaces`: all of them (for their labels); `pods`: those labelled to ask; `webhook`: its
    Deployment, or None when it is not there."""
    enabled = {_meta(n).get("name") for n in namespaces
               if _labels(n).get(inject.NAMESPACE_LABEL) == "enabled"}
    current = None
    out: list[Finding] = []
    if webhook is None:
        out.append(Finding(NO_WEBHOOK, "", "", "the webhook's Deployment was not found: no pod is injected "
                                                "at admission"))
    else:
        template = (webhook.get("spec") or {}).get("template") or {}
        current = (_meta(template).get("annotations") or {}).get(SETTINGS_ANNOTATION)
    for pod in pods:
        meta = _meta(pod)
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        if str(_labels(pod).get(inject.POD_LABEL, "")).lower() != "true":
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if not inject.is_injected(pod):
            if ns not in enabled:
                out.append(Finding(NAMESPACE_NOT_ENABLED, ns, name,
                                   f"asks for the resolver but namespace {ns} lacks the label "
                                   f"{inject.NAMESPACE_LABEL}=enabled{_owner(pod)}"))
            else:
                out.append(Finding(NOT_INJECTED, ns, name,
                                   "asked for the resolver and runs without it (created while the "
                                   "webhook was unreachable?): it uses plain cluster DNS; re-create it"
                                   + _owner(pod)))
            continue
        status = inject.status_of(pod)
        if current is not None and status.get("settings") != current:
            out.append(Finding(STALE, ns, name,
                               f"injected by splitdns {status.get('version', '?')} with settings "
                               f"{status.get('settings', '?')}; the webhook now injects {current}: "
                               f"re-create it to get the current zones{_owner(pod)}"))
    order = [NO_WEBHOOK, NOT_INJECTED, NAMESPACE_NOT_ENABLED, STALE]
    return sorted(out, key=lambda f: (order.index(f.kind), f.namespace, f.pod))


def report(findings: list[Finding], pods_seen: int) -> str:
    if not findings:
        return (f"{pods_seen} pod(s) ask for the resolver; all are injected with the webhook's current "
                "settings.\n")
    lines = [f"{f.namespace}/{f.pod}: {f.kind}: {f.message}" if f.pod else f"{f.kind}: {f.message}"
             for f in findings]
    return "\n".join(lines) + (f"\n{len(findings)} finding(s) among {pods_seen} pod(s) that ask for "
                                "the resolver.\n")
