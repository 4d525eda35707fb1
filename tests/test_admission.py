"""The webhook's decisions without a socket: any JSON body gets an answer (an AdmissionReview or a
400 with the reason), never an exception."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from splitdns.commands import render
from splitdns.kube.deploy import admission

SETTINGS = render.injection_settings(render.Request(zones=["svc.acme.internal=openvpn"],
                                                    cluster_dns="10.96.0.10"))
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                 max_size=3), max_leaves=10)
REQUESTS = st.fixed_dictionaries({}, optional={
    "uid": st.just("u") | JSON, "operation": st.sampled_from(["CREATE", "UPDATE"]) | JSON,
    "resource": st.fixed_dictionaries({}, optional={"resource": st.just("pods") | JSON}) | JSON,
    "kind": JSON, "subResource": JSON, "namespace": st.just("shop") | JSON,
    "object": st.fixed_dictionaries({}, optional={
        "metadata": st.fixed_dictionaries({}, optional={
            "labels": st.just({"splitdns.dev/inject": "true"}) | JSON, "name": JSON}) | JSON,
        "spec": JSON}) | JSON})


@settings(max_examples=300, deadline=None)
@given(REQUESTS, st.sampled_from(["admission.k8s.io/v1", "v1"]))
def test_any_review_gets_an_answer(request: dict[str, Any], api_version: str) -> None:
    body = json.dumps({"apiVersion": api_version, "kind": "AdmissionReview", "request": request}).encode()
    decision = admission.review(body, SETTINGS)
    if decision.status == 400:
        assert isinstance(decision.body, str) and decision.body.startswith("splitdns webhook: ")
    else:
        assert decision.status == 200 and isinstance(decision.body, dict)
        assert decision.body["response"]["uid"] == request["uid"]
        assert decision.body["response"]["allowed"] is True


def _nested_pod(depth: int) -> bytes:
    """A pod CREATE whose container carries a field nested `depth` arrays deep."""
    container = f'{{"name": "a", "image": "a", "x": {"[" * depth}{"]" * depth}}}'
    pod = ('{"metadata": {"name": "p", "labels": {"splitdns.dev/inject": "true"}}, '
           f'"spec": {{"containers": [{container}]}}}}')
    request = ('{"uid": "u", "operation": "CREATE", "resource": {"resource": "pods"}, '
               f'"namespace": "shop", "object": {pod}}}')
    review = f'{{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {request}}}'
    return review.encode()


def test_deeply_nested_json_is_a_400_that_says_so() -> None:
    """100,000 levels run json's decoder out of stack; 900 parse, and would run the injection's copy
    and jsonpatch's diff out of it. Both are refused as input, not answered by a bug's 500."""
    for depth in (100_000, 900, admission.MAX_DEPTH):
        decision = admission.review(_nested_pod(depth), SETTINGS)
        assert decision.status == 400 and decision.outcome == admission.BAD_REQUEST
        assert isinstance(decision.body, str)
        assert f"nests arrays and objects deeper than {admission.MAX_DEPTH} levels" in decision.body
    # Just under the limit (the pod's own levels counted): injected as any pod.
    assert admission.review(_nested_pod(admission.MAX_DEPTH - 10), SETTINGS).outcome == admission.INJECTED
