"""`splitdns webhook` as a real process over real HTTPS with a CA made in the test: its patches, applied
with jsonpatch, give exactly `splitdns inject`'s golden outputs; bad input gets a clear error and the
next request is served; the certificate is rotated while requests flow; SIGTERM drains.
"""

from __future__ import annotations

import base64
import copy
import json
import signal
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Any

import jsonpatch  # type: ignore[import-untyped,unused-ignore]
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from splitdns.kube.deploy import inject
from splitdns.kube.deploy.workloads import TEMPLATE_PATHS
from tests.support import webhook
from tests.support.processes import poll_until

DATA = Path(__file__).parent / "data" / "inject"
RENDERED = Path(__file__).parent / "data" / "kube" / "golden" / "deployment" / "splitdns.yaml"
CASES = sorted(p.name.removesuffix(".yaml") for p in DATA.glob("*.yaml") if ".injected." not in p.name)


@pytest.fixture(scope="module")
def hook() -> Any:
    with webhook.running("--cert-poll", "0.2", "--read-timeout", "1", "--idle-timeout", "3") as running:
        yield running


def templates(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(namespace, pod template) of every workload in a file, lists unrolled."""
    out = []
    for doc in yaml.safe_load_all(path.read_text()):
        for item in doc["items"] if doc["kind"] == "List" else [doc]:
            if item["kind"] not in TEMPLATE_PATHS:
                continue
            template = item
            for key in TEMPLATE_PATHS[item["kind"]]:
                template = template[key]
            pod = {"metadata": copy.deepcopy(template.get("metadata", {})), "spec": template["spec"]}
            if item["kind"] == "Pod":
                pod["metadata"] = {k: v for k, v in pod["metadata"].items() if k != "namespace"}
            out.append((item["metadata"].get("namespace", "default"), pod))
    return out


def opted_in(pod: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"].setdefault("labels", {})[inject.POD_LABEL] = "true"
    return pod


def apply(response: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
    if "patch" not in response:
        return pod
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    patched: dict[str, Any] = jsonpatch.apply_patch(pod, ops)
    return patched


@pytest.mark.parametrize("case", CASES)
def test_patch_applied_equals_inject_output(hook: webhook.Webhook, case: str) -> None:
    before = templates(DATA / f"{case}.yaml")
    after = templates(DATA / f"{case}.injected.yaml")
    assert len(before) == len(after) > 0
    for (namespace, pod), (_, expected) in zip(before, after, strict=True):
        request = webhook.pod_request(opted_in(pod), namespace)
        response = hook.review(request)
        assert response["uid"] == request["uid"] and response["allowed"] is True
        assert apply(response, request["object"]) == {"apiVersion": "v1", "kind": "Pod", **opted_in(expected)}
        if case in ("hostnetwork", "port53", "already-injected"):
            assert "patch" not in response
        if case in ("hostnetwork", "port53"):
            assert any(w.startswith("splitdns: not injected:") for w in response["warnings"])


def test_a_rendered_pod_labelled_for_injection_is_turned_into_the_webhooks_env_var_mode(
        hook: webhook.Webhook) -> None:
    """`splitdns render`'s Deployment (Corefile from a mounted ConfigMap, container `dns`) labelled for
    injection: the webhook rebuilds the resolver its own way (container `splitdns`, Corefile in an env
    var), drops the ConfigMap's volume, leaves the rest alone (docs/kubernetes.md says so)."""
    (namespace, template), = templates(RENDERED)
    before = opted_in(template)
    assert [c["name"] for c in before["spec"]["initContainers"]] == ["dns", "vpn"]
    response = hook.review(webhook.pod_request(before, namespace))
    pod = apply(response, {"apiVersion": "v1", "kind": "Pod", **before})
    spec = pod["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["splitdns", "vpn"]
    (env,) = spec["initContainers"][0]["env"]
    assert env["name"] == inject.COREFILE_ENV and "svc.acme.internal" in env["value"]
    assert "volumeMounts" not in spec["initContainers"][0]
    assert [v["name"] for v in spec["volumes"]] == ["openvpn-client", "dev-tun"]
    # The rest is left alone, but for the vpn's startup probe on the resolver's /ready, which
    # follows the resolver to its new port (else the vpn would never start).
    vpn = before["spec"]["initContainers"][1]
    assert vpn["startupProbe"]["httpGet"] == {"path": "/ready", "port": 8181}
    vpn["startupProbe"]["httpGet"]["port"] = inject.READY_PORT
    assert spec["initContainers"][1:] == before["spec"]["initContainers"][1:]
    assert spec["containers"] == before["spec"]["containers"]
    assert json.loads(pod["metadata"]["annotations"][inject.STATUS])["settings"] != json.loads(
        before["metadata"]["annotations"][inject.STATUS])["settings"]
    for version in ("1.29", "1.37"):
        kubernetes_validate.validate(pod, version, strict=True)


def test_excluded_everywhere_and_only_pod_create(hook: webhook.Webhook) -> None:
    pod = {"metadata": {"name": "p", "labels": {inject.POD_LABEL: "true"}},
           "spec": {"containers": [{"name": "a", "image": "a"}]}}
    for namespace in ("kube-system", "kube-public", "kube-node-lease", "splitdns-system"):
        response = hook.review(webhook.pod_request(pod, namespace))
        assert "patch" not in response and f"namespace {namespace}" in response["warnings"][0]
    response = hook.review(webhook.pod_request(pod, "shop", operation="UPDATE"))
    assert "patch" not in response and "warnings" not in response
    unlabelled = {**pod, "metadata": {"name": "p"}}
    assert "patch" not in hook.review(webhook.pod_request(unlabelled, "shop"))
    assert "patch" in hook.review(webhook.pod_request(pod, "shop"))


def good(hook: webhook.Webhook) -> None:
    """The next request after a bad one is served."""
    pod = {"metadata": {"name": "p", "labels": {inject.POD_LABEL: "true"}},
           "spec": {"containers": [{"name": "a", "image": "a"}]}}
    assert "patch" in hook.review(webhook.pod_request(pod, "shop"))


@pytest.mark.parametrize(("body", "status", "message"), [
    (b"{not json", 400, "the body is not JSON"),
    (b"\xff\xfe", 400, "the body is not JSON"),
    (b"[1, 2]", 400, "not a JSON object"),
    (json.dumps({"apiVersion": "v1", "kind": "Pod"}).encode(), 400, "expected kind AdmissionReview"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview",
                 "request": {"uid": "u"}}).encode(), 400, "apiVersion admission.k8s.io/v1"),
    (json.dumps(webhook.admission_review({"object": {}})).encode(), 400, "has no uid"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(), 400,
     "no request"),
    (b"x" * (10 * 1024 * 1024), 413, "larger than"),
    (b"[" * 100_000 + b"]" * 100_000, 400, "deeper than 100 levels"),
])
def test_bad_input_gets_a_clear_error_and_the_next_request_is_served(
        hook: webhook.Webhook, body: bytes, status: int, message: str) -> None:
    got, text = hook.post(body)
    assert got == status
    assert message in text.decode() and "Traceback" not in text.decode()
    good(hook)


def test_missing_fields_are_admitted_with_a_warning(hook: webhook.Webhook) -> None:
    create = {"operation": "CREATE", "resource": {"resource": "pods"}}
    for request in ({"uid": "u1", **create, "namespace": "shop"},
                    {"uid": "u2", **create, "namespace": "shop",
                     "object": {"metadata": "oops", "spec": {"containers": "oops"}}},
                    {"uid": "u3", **create, "object": {"metadata": {}, "spec": {}}}):
        response = hook.review(request)
        assert response["allowed"] is True and "patch" not in response
    good(hook)


def test_a_slow_client_gets_408_and_others_are_served_meanwhile(hook: webhook.Webhook) -> None:
    raw = socket.create_connection((webhook.HOST, hook.port), timeout=10)
    slow = hook.client_context.wrap_socket(raw, server_hostname=webhook.HOST)
    try:
        slow.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"apiVersion\"")
        good(hook)  # while the slow one holds its connection
        reply = slow.recv(4096).decode()
    finally:
        slow.close()
    assert reply.startswith("HTTP/1.1 408") and "did not arrive within 1s" in reply
    good(hook)


def test_a_client_stuck_in_its_headers_is_closed_at_the_idle_timeout(hook: webhook.Webhook) -> None:
    raw = socket.create_connection((webhook.HOST, hook.port), timeout=30)
    stuck = hook.client_context.wrap_socket(raw, server_hostname=webhook.HOST)
    try:
        start = time.monotonic()
        stuck.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\n")
        for _ in range(4):  # a header now and then, never the end of them
            good(hook)
            stuck.sendall(b"X-Slow: 1\r\n")
            time.sleep(0.25)
        assert stuck.recv(100) == b""  # closed by the server
        assert 2.5 < time.monotonic() - start < 20
    finally:
        stuck.close()
    good(hook)


@pytest.mark.parametrize("sent", [b"", b"\x16\x03\x01\x02\x00"], ids=["silent", "half-a-hello"])
def test_a_connection_that_never_finishes_tls_is_dropped_at_the_read_timeout(
        hook: webhook.Webhook, sent: bytes) -> None:
    """The fixture's read timeout is 1 s; asyncio's own bound on a TLS handshake is 60 s."""
    raw = socket.create_connection((webhook.HOST, hook.port), timeout=15)
    try:
        start = time.monotonic()
        raw.sendall(sent)
        good(hook)  # served meanwhile
        assert raw.recv(100) == b""  # closed by the server, not by our 15 s
        assert time.monotonic() - start < 10
    finally:
        raw.close()
    good(hook)


def test_health_readiness_metrics_and_structured_logs(hook: webhook.Webhook) -> None:
    good(hook)
    assert hook.get("/healthz") == (200, "OK\n")
    assert hook.get("/readyz") == (200, "ready\n")
    status, text = hook.get("/metrics")
    assert status == 200
    injected = [line for line in text.splitlines()
                if line.startswith('splitdns_webhook_reviews_total{outcome="injected"}')]
    assert injected and float(injected[0].split()[-1]) >= 1
    assert "splitdns_webhook_review_duration_seconds_bucket" in text
    reviews = [r for r in hook.logs() if r["msg"] == "review"]
    assert reviews and {"uid", "namespace", "pod", "outcome", "ms", "time", "level"} <= set(reviews[-1])


def metric(hook: webhook.Webhook, name: str) -> float:
    for line in hook.get("/metrics")[1].splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"no metric {name}")


def test_certificate_rotation_while_requests_flow(hook: webhook.Webhook) -> None:
    errors: list[str] = []
    served = 0
    stop = threading.Event()

    def flow() -> None:
        nonlocal served
        deadline = time.monotonic() + 30
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                good(hook)  # a new connection, so a new handshake, each time
                served += 1
            except (OSError, AssertionError, ssl.SSLError) as err:
                errors.append(repr(err))

    thread = threading.Thread(target=flow)
    thread.start()
    try:
        old = hook.served_certificate()
        leaf = webhook.write_pair(hook.ca, hook.cert, hook.key)
        new = ssl.PEM_cert_to_DER_cert(leaf.cert_chain_pems[0].bytes().decode())
        assert new != old
        poll_until("the new certificate to be served", 10, lambda: True if hook.served_certificate() == new
                   else None)
        # A pair that does not match (cert of one, key of another) is refused; the good one stays.
        other = hook.ca.issue_cert(webhook.HOST)
        hook.key.write_bytes(other.private_key_pem.bytes())
        failures = metric(hook, "splitdns_webhook_certificate_load_failures_total")
        poll_until("the failed load to be counted", 10, lambda: True if metric(
            hook, "splitdns_webhook_certificate_load_failures_total") > failures else None)
        assert hook.served_certificate() == new
        reloads = metric(hook, "splitdns_webhook_certificate_reloads_total")
        leaf = webhook.write_pair(hook.ca, hook.cert, hook.key)
        newer = ssl.PEM_cert_to_DER_cert(leaf.cert_chain_pems[0].bytes().decode())
        poll_until("the third certificate to be served", 10,
                   lambda: True if hook.served_certificate() == newer else None)
    finally:
        stop.set()
        thread.join()
    assert errors == [] and served > 0
    assert metric(hook, "splitdns_webhook_certificate_reloads_total") == reloads + 1


@pytest.mark.parametrize("first", ["cert", "key"])
def test_a_rotation_in_either_order_fails_no_handshake_under_load(hook: webhook.Webhook, first: str) -> None:
    """One file of the new pair written 1.5 s before the other, while three clients each open a
    new connection (a new handshake) per review: the half-written pair is refused (counted), the
    previous one is served whole meanwhile, then the new one; no handshake fails."""
    errors: list[str] = []
    served = [0, 0]  # reviews served in all, and after the new certificate was seen
    lock = threading.Lock()
    stop = threading.Event()
    swapped = threading.Event()

    def flow() -> None:
        deadline = time.monotonic() + 40
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                good(hook)
            except (OSError, AssertionError, ssl.SSLError) as err:
                with lock:
                    errors.append(repr(err))
                continue
            with lock:
                served[0] += 1
                served[1] += swapped.is_set()

    clients = [threading.Thread(target=flow) for _ in range(3)]
    for client in clients:
        client.start()
    try:
        poll_until("the clients to be served", 10, lambda: True if served[0] >= 10 else None)
        failures = metric(hook, "splitdns_webhook_certificate_load_failures_total")
        old = hook.served_certificate()
        leaf = webhook.write_pair(hook.ca, hook.cert, hook.key, first=first, gap=1.5)
        new = ssl.PEM_cert_to_DER_cert(leaf.cert_chain_pems[0].bytes().decode())
        poll_until("the new certificate to be served", 10,
                   lambda: True if hook.served_certificate() == new else None)
        swapped.set()
        poll_until("reviews after the swap", 10, lambda: True if served[1] >= 10 else None)
    finally:
        stop.set()
        for client in clients:
            client.join()
    assert new != old
    # The half-written pair was there to be seen: refused once, not loaded.
    assert metric(hook, "splitdns_webhook_certificate_load_failures_total") == failures + 1
    assert errors == [], f"{len(errors)} of {len(errors) + served[0]} reviews failed: {errors[:3]}"
    assert served[0] >= 20


def test_sigterm_fails_readiness_serves_then_drains() -> None:
    with webhook.running("--shutdown-delay", "1.5") as hook:
        hook.process.send_signal(signal.SIGHUP)  # a closing terminal: logged, ignored
        poll_until("the SIGHUP line", 5, lambda: True if any(
            r.get("signal") == "SIGHUP" for r in hook.logs()) else None)
        assert hook.process.poll() is None
        hook.process.send_signal(signal.SIGTERM)
        poll_until("readiness to fail", 5, lambda: True if hook.get("/readyz")[0] == 503 else None)
        good(hook)  # still served during the delay, while the Service forgets this endpoint
        assert hook.process.wait(10) == 0
        messages = [r["msg"] for r in hook.logs()]
        assert messages[-1] == "stopped" and "review" in messages[messages.index("stopping"):]


def test_unreadable_certificate_is_exit_1_with_a_reason(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "tls.crt").write_text("not a certificate")
    bad = str(tmp_path / "tls.crt")
    result = subprocess.run([sys.executable, "-m", "splitdns", "webhook", "--tls-cert", bad, "--tls-key", bad,
                             "--listen", "127.0.0.1", "--port", "0", "--probe-port", "0", *webhook.SETTINGS],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    record = json.loads(result.stderr.splitlines()[-1])
    assert record["msg"] == "cannot start" and "cannot load the TLS certificate" in record["error"]


def test_the_webhook_needs_only_its_extra_not_the_render_dependencies() -> None:
    """What an image must hold to run `splitdns webhook`: the serving dependencies plus the `webhook`
    extra (aiohttp, jsonpatch); PyYAML, kubernetes-validate and lightkube stay out."""
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        "from splitdns import cli\n"
        "from splitdns.commands import render, webhook\n"
        "from splitdns.kube.deploy import admission\n"
        "s = render.injection_settings(\n"
        "    render.Request(zones=['svc.acme.internal=openvpn'], cluster_dns='10.96.0.10'))\n"
        "pod = {'metadata': {'labels': {'splitdns.dev/inject': 'true'}}, 'spec': {'containers': []}}\n"
        "req = {'uid': 'u', 'operation': 'CREATE', 'resource': {'resource': 'pods'}, 'namespace': 'x',"
        " 'object': pod}\n"
        "d = admission.review(json.dumps({'apiVersion': 'admission.k8s.io/v1', 'kind': 'AdmissionReview',"
        " 'request': req}).encode(), s)\n"
        "assert d.outcome == 'injected', d\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.replace("'", '"')))
    assert "jsonpatch" in loaded
    assert not loaded & {"yaml", "kubernetes_validate", "lightkube", "jsonschema", "httpx"}


def test_a_bug_in_one_review_costs_that_review_only(tmp_path: Path) -> None:
    """The handler's last guard, driven by settings that raise (a stand-in for a bug of ours), in a
    webhook run in this process over real HTTPS."""
    import asyncio
    import http.client

    import trustme

    from splitdns.commands import render
    from splitdns.commands import webhook as server
    from tests.support.processes import free_port

    class Broken(inject.Settings):
        def status(self, ndots_from_settings: bool = False) -> str:
            raise RuntimeError("a bug")

    good_settings = render.injection_settings(render.Request(zones=["svc.acme.internal=openvpn"],
                                                             cluster_dns="10.96.0.10"))
    broken = Broken(good_settings.plan)
    ca = trustme.CA()
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    webhook.write_pair(ca, cert, key)
    port, probe_port = free_port(webhook.HOST), free_port(webhook.HOST)
    context = ssl.create_default_context()
    ca.configure_trust(context)
    pod = {"metadata": {"name": "p", "labels": {inject.POD_LABEL: "true"}}, "spec": {"containers": []}}
    body = json.dumps(webhook.admission_review(webhook.pod_request(pod, "shop"))).encode()

    def post() -> tuple[int, str]:
        conn = http.client.HTTPSConnection(webhook.HOST, port, context=context, timeout=10)
        try:
            conn.request("POST", "/mutate", body=body)
            response = conn.getresponse()
            return response.status, response.read().decode()
        finally:
            conn.close()

    async def scenario() -> tuple[tuple[int, str], tuple[int, str]]:
        hook = server.Webhook(broken, server.Options(cert=str(cert), key=str(key), host=webhook.HOST,
                                                     port=port, probe_port=probe_port))
        runners = await hook.start()
        try:
            first = await asyncio.to_thread(post)
            hook.settings = good_settings
            second = await asyncio.to_thread(post)
        finally:
            for runner in runners:
                await runner.cleanup()
        return first, second

    first, second = asyncio.run(scenario())
    assert first[0] == 500 and "internal error (logged)" in first[1] and "Traceback" not in first[1]
    assert second[0] == 200 and '"patch"' in second[1]
