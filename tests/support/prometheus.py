"""A real Prometheus (Debian's package) on loopback, with its own data directory, for the monitoring
end-to-end test: it scrapes the targets it is given every second and evaluates the rules given."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.processes import assert_loopback, free_port, poll_until, stop

HOST = "127.0.0.1"


@dataclass
class Prometheus:
    port: int
    process: subprocess.Popen[bytes]
    workdir: Path

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/PATH: the `data` of a success; AssertionError with Prometheus's error else."""
        url = f"http://{HOST}:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as err:
            body = json.loads(err.read())
        assert body.get("status") == "success", f"{path} {params}: {body.get('error')}"
        return body["data"]

    def query_range(self, expr: str, start: float, end: float, step: str = "1s") -> list[Any]:
        result: list[Any] = self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}",
                                     step=step)["result"]
        return result

    def targets_up(self) -> int:
        return sum(1 for t in self.api("targets")["activeTargets"] if t["health"] == "up")

    def log(self) -> str:
        return (self.workdir / "prometheus.log").read_text(encoding="utf-8", errors="replace")


def binary() -> str | None:
    return shutil.which("prometheus")


@contextmanager
def running(targets: dict[str, str], rules: dict[str, Any] | None = None) -> Iterator[Prometheus]:
    """Prometheus scraping `targets` (job -> host:port, loopback only) every second."""
    found = binary()
    assert found is not None
    for target in targets.values():
        assert_loopback(target.rpartition(":")[0])
    with tempfile.TemporaryDirectory(prefix="splitdns-prometheus-") as tmp:
        workdir = Path(tmp)
        config: dict[str, Any] = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "900ms"},
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [target]}]}
                               for job, target in targets.items()]}
        if rules is not None:
            (workdir / "rules.yaml").write_text(yaml.safe_dump(rules))
            config["rule_files"] = [str(workdir / "rules.yaml")]
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port(HOST)
        with (workdir / "prometheus.log").open("wb") as log:
            process = subprocess.Popen(
                [found, f"--config.file={workdir / 'prometheus.yml'}",
                 f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address={HOST}:{port}",
                 "--log.level=warn"], stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=workdir)
        running = Prometheus(port, process, workdir)
        try:
            def ready() -> bool | None:
                if process.poll() is not None:
                    raise RuntimeError(f"prometheus exited with {process.returncode}:\n{running.log()}")
                try:
                    with urllib.request.urlopen(f"http://{HOST}:{port}/-/ready", timeout=1) as response:
                        return True if response.status == 200 else None
                except OSError:
                    return None

            poll_until("prometheus to be ready", 30, ready)
            yield running
        finally:
            stop(process)
