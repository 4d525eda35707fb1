"""Run `splitdns serve` as a real process for end-to-end tests, on loopback, always stopped."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support import user_text
from tests.support.processes import free_port, poll_until, stop

READY_TIMEOUT = 10.0
BANNER = "splitdns-"


@dataclass
class Resolver:
    port: int
    process: subprocess.Popen[bytes]
    workdir: Path

    def stderr(self) -> str:
        return (self.workdir / "stderr.log").read_text(encoding="utf-8", errors="replace")

    def stdout(self) -> str:
        return (self.workdir / "stdout.log").read_text(encoding="utf-8", errors="replace")


def start(workdir: Path, corefile: str, port: int, *extra: str) -> subprocess.Popen[bytes]:
    path = workdir / "Corefile"
    path.write_text(corefile, encoding="utf-8")
    command = [sys.executable, "-m", "splitdns", "serve", "-conf", str(path),
               "-dns.port", str(port), *extra]
    with (workdir / "stdout.log").open("wb") as out, (workdir / "stderr.log").open("wb") as err:
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=err)


@contextmanager
def splitdns_serve(tmp_path: Path, corefile: str, port: int | None = None) -> Iterator[Resolver]:
    """Start the resolver with this Corefile (its default port is a free one) until ready."""
    workdir = Path(tempfile.mkdtemp(prefix="splitdns-", dir=tmp_path))
    port = port or free_port("127.0.0.1")
    process = start(workdir, corefile, port)
    resolver = Resolver(port, process, workdir)
    try:
        def ready() -> bool | None:
            if process.poll() is not None:
                raise RuntimeError(f"splitdns exited with {process.returncode}:\n{resolver.stderr()}")
            return True if BANNER in resolver.stdout() else None

        poll_until("splitdns serve to listen", READY_TIMEOUT, ready)
        yield resolver
    finally:
        stop(process)
        user_text.seen("serve stdout", resolver.stdout())
        user_text.seen("serve stderr", resolver.stderr())


def run_to_exit(tmp_path: Path, corefile: str, timeout: float = 10.0) -> tuple[int, str]:
    """Start the resolver expecting it to refuse: its exit code and stderr."""
    workdir = Path(tempfile.mkdtemp(prefix="splitdns-", dir=tmp_path))
    process = start(workdir, corefile, free_port("127.0.0.1"))
    try:
        code = process.wait(timeout)
    finally:
        stop(process)
    stderr = (workdir / "stderr.log").read_text(encoding="utf-8", errors="replace")
    user_text.seen("serve stderr", stderr)
    return code, stderr


def http_get(port: int, path: str, timeout: float = 3.0,
             headers: dict[str, str] | None = None) -> tuple[int, str]:
    """GET http://127.0.0.1:port/path: status and body, also for 4xx/5xx."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            status, body = resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        status, body = err.code, err.read().decode()
    if not path.startswith("/metrics"):  # metric names and labels are for machines
        user_text.seen(f"GET {path}", body)
    return status, body


@contextmanager
def dnsmasq_forwarder(tmp_path: Path, addr: str, to: str) -> Iterator[int]:
    """A real dnsmasq on loopback forwarding everything to `to` ("ip#port"); yields its port."""
    from tests.support.processes import assert_loopback

    assert_loopback(addr)
    assert_loopback(to.split("#")[0])
    port = free_port(addr)
    log = tmp_path / f"dnsmasq-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["dnsmasq", "--keep-in-foreground", "--no-resolv", "--no-hosts", "--conf-file=/dev/null",
             f"--listen-address={addr}", f"--port={port}", "--bind-interfaces", f"--server={to}",
             "--pid-file=", "--log-facility=-", "--cache-size=0"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    try:
        poll_until("dnsmasq to start", READY_TIMEOUT,
                   lambda: True if "started" in log.read_text(errors="replace") else None)
        yield port
    finally:
        stop(process)
