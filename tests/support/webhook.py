"""Run `splitdns webhook` as a real process over real HTTPS on loopback, with a CA made here (trustme),
and speak AdmissionReview to it with the standard library's HTTPS client."""

from __future__ import annotations

import http.client
import json
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trustme

from tests.support.processes import free_port, poll_until, stop

HOST = "127.0.0.1"
SERVICE_NAME = "splitdns-webhook.splitdns-system.svc"
SETTINGS = ["--zone", "svc.acme.internal=openvpn", "--cluster-dns", "10.96.0.10"]
READY_TIMEOUT = 20.0


def write_pair(ca: trustme.CA, cert_path: Path, key_path: Path, first: str = "cert",
               gap: float = 0.0) -> trustme.LeafCert:
    """A new leaf from `ca`, each file replaced whole (never seen half-written), one after the
    other: `first` ("cert" or "key") first, the other `gap` seconds later (a careless rotation by
    hand; the kubelet swaps a Secret volume's files at once)."""
    leaf = ca.issue_cert(HOST, SERVICE_NAME)
    writes = [(cert_path, b"".join(b.bytes() for b in leaf.cert_chain_pems)),
              (key_path, leaf.private_key_pem.bytes())]
    for n, (path, blob) in enumerate(writes if first == "cert" else writes[::-1]):
        if n:
            time.sleep(gap)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(blob)
        tmp.replace(path)
    return leaf


@dataclass
class Webhook:
    port: int
    probe_port: int
    process: subprocess.Popen[bytes]
    workdir: Path
    ca: trustme.CA
    cert: Path
    key: Path
    client_context: ssl.SSLContext = field(init=False)

    def __post_init__(self) -> None:
        self.client_context = ssl.create_default_context()
        self.ca.configure_trust(self.client_context)

    def stderr(self) -> str:
        return (self.workdir / "stderr.log").read_text(encoding="utf-8", errors="replace")

    def logs(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stderr().splitlines() if line.strip()]

    def connect(self, timeout: float = 5.0) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(HOST, self.port, context=self.client_context, timeout=timeout)

    def post(self, body: bytes, conn: http.client.HTTPSConnection | None = None,
             path: str = "/mutate") -> tuple[int, bytes]:
        own = conn is None
        conn = conn or self.connect()
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            if own:
                conn.close()

    def review(self, request: dict[str, Any]) -> dict[str, Any]:
        status, body = self.post(json.dumps(admission_review(request)).encode())
        assert status == 200, body
        response: dict[str, Any] = json.loads(body)["response"]
        return response

    def get(self, path: str) -> tuple[int, str]:
        conn = http.client.HTTPConnection(HOST, self.probe_port, timeout=5)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read().decode()
        finally:
            conn.close()

    def served_certificate(self) -> bytes:
        """The DER certificate a new handshake presents."""
        conn = self.connect()
        try:
            conn.connect()
            assert conn.sock is not None
            der = conn.sock.getpeercert(binary_form=True)  # type: ignore[attr-defined]
            assert der is not None
            return bytes(der)
        finally:
            conn.close()


def admission_review(request: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def pod_request(pod: dict[str, Any], namespace: str, operation: str = "CREATE") -> dict[str, Any]:
    """What the API server sends for a pod CREATE (the fields a webhook reads, as the API server
    fills them)."""
    return {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
        "object": {"apiVersion": "v1", "kind": "Pod", **pod},
        "oldObject": None,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }


@contextmanager
def running(*extra: str, settings: list[str] | None = None) -> Iterator[Webhook]:
    """A webhook process on loopback with a fresh CA; always stopped, its files removed."""
    with tempfile.TemporaryDirectory(prefix="splitdns-webhook-") as tmp:
        workdir = Path(tmp)
        ca = trustme.CA()
        cert, key = workdir / "tls.crt", workdir / "tls.key"
        write_pair(ca, cert, key)
        port, probe_port = free_port(HOST), free_port(HOST)
        command = [sys.executable, "-m", "splitdns", "webhook", "--tls-cert", str(cert),
                   "--tls-key", str(key),
                   "--listen", HOST, "--port", str(port), "--probe-port", str(probe_port),
                   *(SETTINGS if settings is None else settings), *extra]
        with (workdir / "stderr.log").open("wb") as err:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=err)
        hook = Webhook(port, probe_port, process, workdir, ca, cert, key)
        try:
            poll_until("the webhook to be ready", READY_TIMEOUT, lambda: _ready(hook))
            yield hook
        finally:
            stop(process)


def _ready(hook: Webhook) -> bool | None:
    if hook.process.poll() is not None:
        raise AssertionError(f"the webhook exited with {hook.process.returncode}: {hook.stderr()}")
    try:
        return True if hook.get("/readyz")[0] == 200 else None
    except OSError:
        return None
