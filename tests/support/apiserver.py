"""The plumbing of a STAND-IN for the Kubernetes API server, NOT a real one: no kube-apiserver can
run on this machine (no package, no container engine). A test subclasses `StandInHandler` with the
reads its command makes, and `serving` runs it on 127.0.0.1 behind a real kubeconfig, so lightkube
talks real HTTP to it."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml


class StandInHandler(http.server.BaseHTTPRequestHandler):
    def reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def not_found(self, message: str) -> None:
        self.reply(404, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                         "message": message, "reason": "NotFound", "code": 404})

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serving(handler: type[StandInHandler], directory: Path) -> Iterator[Path]:
    """The stand-in on a free loopback port; yields the path of a kubeconfig (context `stand-in`,
    token `stand-in-token`) that points at it."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "stand-in",
        "clusters": [{"name": "stand-in", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "dev", "user": {"token": "stand-in-token"}}],
        "contexts": [{"name": "stand-in", "context": {"cluster": "stand-in", "user": "dev"}}],
    }))
    try:
        yield path
    finally:
        server.shutdown()
        server.server_close()
