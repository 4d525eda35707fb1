"""AdmissionReview v1 in, AdmissionReview v1 out: the webhook's decisions, without a socket.

The patch is the difference between the pod before and after `inject.inject`, computed by the
`jsonpatch` library (RFC 6902, with the `~1` escaping annotation keys need), never written by hand.
A pod is never refused by us: a pod we cannot or will not inject is allowed unchanged, with the
reason as an admission warning (the user sees it in `kubectl apply`).
Tests: tests/test_admission.py, tests/test_start_order.py, tests/test_serve.py.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

from splitdns.kube.deploy import inject

API_VERSION = "admission.k8s.io/v1"
# Outcomes, the label of the reviews counter.
INJECTED, UNCHANGED, SKIPPED, REFUSED = "injected", "unchanged", "skipped", "refused"
BAD_REQUEST = "bad_request"
WARNING_LIMIT = 200  # characters: the API server passes warnings on to kubectl, keep them one line
# Arrays and objects inside one another: a pod is about 15 deep, the API server's own decoder stops
# at 10,000. Far above any pod, and far below what the recursive walks after parsing (the injection's
# copy, jsonpatch's diff, json.dumps) survive within Python's recursion limit.
MAX_DEPTH = 100


@dataclass(frozen=True)
class Decision:
    status: int                 # HTTP status
    body: dict[str, Any] | str  # an AdmissionReview, or a plain-text error for a request we cannot read
    outcome: str
    reason: str = ""
    log: dict[str, Any] = field(default_factory=dict)  # fields for the structured log line


class BadRequest(ValueError):
    """Not an AdmissionReview we can answer; the message is for the caller."""


def parse(body: bytes) -> dict[str, Any]:
    """The request part of an AdmissionReview v1, or BadRequest saying what is wrong."""
    try:
        review = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise BadRequest(f"the body is not JSON: {err}") from None
    except RecursionError:  # json's decoder recurses once per level
        raise BadRequest(f"the body nests arrays and objects deeper than {MAX_DEPTH} levels") from None
    # Fewer openers than the limit cannot nest past it: most reviews skip the walk (C-speed count).
    if body.count(b"[") + body.count(b"{") > MAX_DEPTH and _deeper_than(review, MAX_DEPTH):
        raise BadRequest(f"the body nests arrays and objects deeper than {MAX_DEPTH} levels") from None
    if not isinstance(review, dict):
        raise BadRequest("the body is not a JSON object")
    if review.get("kind") != "AdmissionReview" or review.get("apiVersion") != API_VERSION:
        raise BadRequest(f"expected kind AdmissionReview, apiVersion {API_VERSION}; got kind "
                         f"{_short(review.get('kind'))}, apiVersion {_short(review.get('apiVersion'))}")
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadRequest("the AdmissionReview has no request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadRequest("the AdmissionReview's request has no uid")
    return request


def _deeper_than(value: Any, limit: int) -> bool:
    """Without recursion, so that the check itself cannot run out of stack."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def _mapping(value: Any, key: str) -> dict[str, Any]:
    inner = value.get(key) if isinstance(value, dict) else None
    return inner if isinstance(inner, dict) else {}


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."


def review(body: bytes, settings: inject.Settings) -> Decision:
    try:
        request = parse(body)
    except BadRequest as err:
        return Decision(400, f"splitdns webhook: {err}\n", BAD_REQUEST, str(err))
    uid = request["uid"]
    namespace = str(request.get("namespace") or "")
    pod = request.get("object")
    meta = _mapping(pod, "metadata")
    name = str(meta.get("name") or meta.get("generateName") or "")
    log = {"uid": uid, "namespace": namespace, "pod": name}
    kind = _mapping(request, "resource").get("resource") or _mapping(request, "kind").get("kind")
    if kind not in ("pods", "Pod") or request.get("subResource") or request.get("operation") != "CREATE":
        reason = f"only pod CREATE is injected, not {request.get('operation')} of {kind}"
        return _answer(uid, SKIPPED, reason, [], log)
    if not isinstance(pod, dict) or not isinstance(pod.get("spec"), dict):
        return _answer(uid, REFUSED, "the request carries no pod with a spec", [], log)
    if not namespace:
        return _answer(uid, REFUSED, "the request names no namespace", [], log)
    if str(_mapping(meta, "labels").get(inject.POD_LABEL, "")).lower() != "true":
        return _answer(uid, SKIPPED, f"the pod does not ask ({inject.POD_LABEL}: \"true\")", [], log)
    outcome = inject.inject(pod, namespace, settings)
    if not outcome.injected:
        return _answer(uid, REFUSED, outcome.reason, list(outcome.warnings), log)
    if not outcome.changed:
        return _answer(uid, UNCHANGED, "already injected with these settings", list(outcome.warnings), log)
    import jsonpatch

    ops = jsonpatch.make_patch(pod, outcome.pod).patch
    response = _response(uid, list(outcome.warnings))
    response["patchType"] = "JSONPatch"
    response["patch"] = base64.b64encode(json.dumps(ops, separators=(",", ":")).encode()).decode()
    return Decision(200, _envelope(response), INJECTED, "", {**log, "ops": len(ops)})


def _answer(uid: str, outcome: str, reason: str, warnings: list[str], log: dict[str, Any]) -> Decision:
    if outcome == REFUSED:
        warnings = [f"splitdns: not injected: {reason}", *warnings]
    return Decision(200, _envelope(_response(uid, warnings)), outcome, reason, {**log, "reason": reason})


def _response(uid: str, warnings: list[str]) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if warnings:
        response["warnings"] = [w if len(w) <= WARNING_LIMIT else w[:WARNING_LIMIT - 3] + "..."
                                for w in warnings]
    return response


def _envelope(response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}
