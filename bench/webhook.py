"""Admission latency of `splitdns webhook`: p50/p99 at fixed rates, and its memory.

    .venv/bin/python -m bench.webhook                      # 50 and 500 reviews/s, 20 s each
    .venv/bin/python -m bench.webhook --rates 50,500,1000 --seconds 30 --server stdlib

The webhook runs as its own process pinned to one core (taskset, when there are two cores or more),
over HTTPS on 127.0.0.1 with a CA made for the run, and is sent real AdmissionReviews (a Deployment's
pod with its own init containers, from tests/data/inject) at a fixed rate, open loop: each review is
due at its own time and its latency counts from then, so a stalled server shows as latency instead
of as fewer requests. The client keeps 8 connections alive, as the API server does. RSS is read from
/proc after each rate (current and peak).

`--server stdlib` runs the same review function behind the standard library's ThreadingHTTPServer with
`ssl` instead of aiohttp, for the comparison that chose aiohttp (bench/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from bench.measure import machine_cpu
from bench.run import wait_quiet

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "inject" / "deployment-init.yaml"
HOST = "127.0.0.1"
SETTINGS = ["--zone", "svc.acme.internal=openvpn", "--cluster-dns", "10.96.0.10"]
CONNECTIONS = 8
REALTIME_PRIORITY = 20
WARM_ROUNDS = 5  # reviews per connection before the clock starts

STDLIB_SERVER = """
import http.server, ssl, sys
from splitdns.commands import render
from splitdns.kube.deploy import admission
settings = render.injection_settings(
    render.Request(zones=["svc.acme.internal=openvpn"], cluster_dns="10.96.0.10"))
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        d = admission.review(body, settings)
        out = (d.body if isinstance(d.body, str) else __import__("json").dumps(d.body)).encode()
        self.send_response(d.status); self.send_header("Content-Length", str(len(out)))
        self.send_header("Content-Type", "application/json"); self.end_headers(); self.wfile.write(out)
    def log_message(self, *a): pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[3])), Handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[1], sys.argv[2])
server.socket = ctx.wrap_socket(server.socket, server_side=True)
print("ready", flush=True)
server.serve_forever()
"""


def review_body() -> bytes:
    doc = yaml.safe_load(FIXTURE.read_text())
    template = doc["spec"]["template"]
    request = {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
               "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "shop",
               "operation": "CREATE", "object": {"apiVersion": "v1", "kind": "Pod", **template}}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": request}).encode()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def pin(core: int) -> list[str]:
    return ["taskset", "-c", str(core)] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 else []


def realtime(on: bool) -> list[str]:
    """`chrt -f`: on a machine shared with other work, the webhook and the generator then run before
    anyone else's process on their cores, so a figure is the webhook's, not the neighbours'. Other
    work still gets the rest of each core (the kernel keeps 5 % of every second for it even when
    a real-time process would take all)."""
    return ["chrt", "-f", str(REALTIME_PRIORITY)] if on else []


def start(server: str, cert: Path, key: Path, port: int, log: Path,
          is_realtime: bool = False) -> subprocess.Popen[bytes]:
    if server == "stdlib":
        argv = [sys.executable, "-c", STDLIB_SERVER, str(cert), str(key), str(port)]
    else:
        argv = [sys.executable, "-m", "splitdns", "webhook", "--tls-cert", str(cert), "--tls-key", str(key),
                "--listen", HOST, "--port", str(port), "--probe-port", str(free_port()), *SETTINGS]
    with log.open("wb") as out:
        return subprocess.Popen([*realtime(is_realtime), *pin(0), *argv], stdout=out,
                                stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)


def server_times(log: Path) -> list[float]:
    """The webhook's own time per review (body read to reply ready), from its JSON log lines."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{") and '"msg":"review"' in line:
            out.append(float(json.loads(line)["ms"]))
    return out


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> tuple[int, int]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                  if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


class GeneratorWatch:
    """The load generator's own health: its collector's pauses, so a slow review the generator caused
    is not blamed on the server."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._started = 0.0

    def __call__(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append(time.perf_counter() - self._started)

    def __enter__(self) -> GeneratorWatch:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *_exc: object) -> None:
        gc.callbacks.remove(self)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] if ordered else float("nan")


async def run_rate(port: int, context: ssl.SSLContext, body: bytes, rate: float,
                   seconds: float) -> dict[str, Any]:
    """Send `rate` reviews a second for `seconds`, open loop, and time each from when it was due.

    The generator must not be what is measured. Each review becomes a task only when it is due: a
    task per review made up front (10,000 at 500/s for 20 s) took longer to start than the run's head
    start and kept the collector walking all of them, and those pauses were counted as the server's
    latency. Every connection is opened (TLS handshake included) before the clock starts, and what
    the warm-up built is frozen out of the collector's sight. How late the generator itself sent each
    review, its CPU per review and its longest collector pause are reported beside the latency."""
    import aiohttp

    latencies: list[float] = []
    late: list[float] = []
    errors = 0
    connector = aiohttp.TCPConnector(limit=CONNECTIONS, ssl=context)
    async with aiohttp.ClientSession(connector=connector) as session:
        url = f"https://{HOST}:{port}/mutate"

        async def one(due: float) -> None:
            nonlocal errors
            late.append(time.perf_counter() - due)
            try:
                async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                    await r.read()
                    if r.status != 200:
                        errors += 1
            except (aiohttp.ClientError, OSError):
                errors += 1
            latencies.append(time.perf_counter() - due)

        for _ in range(WARM_ROUNDS):  # every connection open and every code path warm
            await asyncio.gather(*(one(time.perf_counter()) for _ in range(CONNECTIONS)))
        latencies.clear()
        late.clear()
        gc.collect()
        gc.freeze()
        count = int(rate * seconds)
        in_flight: set[asyncio.Task[None]] = set()
        most_in_flight = 0
        cpu_before = time.process_time()
        with GeneratorWatch() as watch:
            t0 = time.perf_counter() + 0.05
            for i in range(count):
                due = t0 + i / rate
                wait = due - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)
                task = asyncio.create_task(one(due))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
                most_in_flight = max(most_in_flight, len(in_flight))
            await asyncio.gather(*in_flight)
            elapsed = time.perf_counter() - t0
        generator_cpu = time.process_time() - cpu_before
        gc.unfreeze()
    return {"rate": rate, "sent": count, "achieved": count / elapsed, "errors": errors,
            "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": percentile(latencies, 0.99) * 1000,
            "max_ms": max(latencies) * 1000,
            "late_p99_ms": percentile(late, 0.99) * 1000, "late_max_ms": max(late) * 1000,
            "generator_cpu_ms": generator_cpu * 1000 / count, "most_in_flight": most_in_flight,
            "generator_gcs": len(watch.pauses), "generator_gc_max_ms": max(watch.pauses, default=0.0) * 1000}


def own_cpu() -> float:
    """CPU seconds of this process (the generator) so far."""
    times = os.times()
    return times.user + times.system


def run_loop(coroutine: Any) -> Any:
    """The generator runs on uvloop when it is installed, as the webhook does: the stock loop costs
    the generator more CPU per review on the core it has to itself."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


def wait_listening(process: subprocess.Popen[bytes], port: int, log: Path) -> bool:
    import socket

    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection((HOST, port), timeout=1).close()
            return True
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                print(log.read_text(), file=sys.stderr)
                return False
            time.sleep(0.1)


def one_run(server: str, rates: list[float], seconds: float, body: bytes,
            is_realtime: bool = False) -> list[dict[str, Any]] | None:
    """A fresh webhook, each rate in turn; one row per rate."""
    import trustme

    warm = WARM_ROUNDS * CONNECTIONS
    with tempfile.TemporaryDirectory(prefix="splitdns-bench-webhook-") as tmp:
        work = Path(tmp)
        ca = trustme.CA()
        leaf = ca.issue_cert(HOST)
        cert, key = work / "tls.crt", work / "tls.key"
        leaf.cert_chain_pems[0].write_to_path(str(cert))
        leaf.private_key_pem.write_to_path(str(key))
        context = ssl.create_default_context()
        ca.configure_trust(context)
        port = free_port()
        log = work / "server.log"
        process = start(server, cert, key, port, log, is_realtime)
        try:
            if not wait_listening(process, port, log):
                return None
            idle_rss = rss_kib(process.pid)
            rows = []
            seen = 0
            for rate in rates:
                row_busy = wait_quiet()
                load_before = os.getloadavg()[0]
                cpu_before = cpu_seconds(process.pid)
                machine_before, own_before, wall_before = machine_cpu(), own_cpu(), time.monotonic()
                row = run_loop(run_rate(port, context, body, rate, seconds))
                server_cpu = cpu_seconds(process.pid) - cpu_before
                # CPU the webhook spent per review (warm-up included): unlike latency, it does not
                # depend on how busy the machine is; 1000 / it is what one free core could serve.
                row["cpu_ms"] = server_cpu * 1000 / (row["sent"] + warm)
                # What the rest of the machine took meanwhile: near 0 on a quiet machine; tens of
                # percent of a CPU mean other work competed with the webhook's core or the generator's.
                others = (machine_cpu() - machine_before).busy - server_cpu - (own_cpu() - own_before)
                row["others_pct"] = max(0.0, 100 * others / (time.monotonic() - wall_before))
                row["busy_before_pct"] = row_busy
                row["rss_kib"], row["peak_rss_kib"] = rss_kib(process.pid)
                row["idle_rss_kib"] = idle_rss[0]
                row["load"] = (load_before, os.getloadavg()[0])
                served = server_times(log)
                mine, seen = served[seen + warm:], len(served)  # the warm-up reviews left out
                row["server_p50_ms"] = statistics.median(mine) if mine else float("nan")
                row["server_p99_ms"] = percentile(mine, 0.99)
                row["server_max_ms"] = max(mine, default=float("nan"))
                rows.append(row)
            return rows
        finally:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.webhook", description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", default="50,500", help="Reviews per second, comma-separated (50,500).")
    p.add_argument("--seconds", type=float, default=20.0, help="Seconds per rate (20).")
    p.add_argument("--runs", type=int, default=1, help="Runs, each with a fresh webhook (1).")
    p.add_argument("--server", choices=("aiohttp", "stdlib"), default="aiohttp")
    p.add_argument("--realtime", action="store_true",
                   help="Run the webhook and the generator at real-time priority (chrt -f; needs root): "
                        "for a machine that other work keeps busy.")
    args = p.parse_args(argv)
    if args.realtime:
        if not shutil.which("chrt"):
            p.error("--realtime needs chrt (util-linux)")
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(REALTIME_PRIORITY))
        except PermissionError:
            p.error("--realtime needs root (or CAP_SYS_NICE)")

    rates = [float(r) for r in args.rates.split(",")]
    if pin(1):  # the load generator on the other core
        os.sched_setaffinity(0, {1})
    body = review_body()
    pinned = "webhook pinned to core 0, generator to core 1" if pin(0) else "not pinned (one core)"
    pinned += ", both at real-time priority (chrt -f)" if args.realtime else ""
    print(f"splitdns webhook ({args.server}), {pinned}; review body {len(body)} bytes; "
          f"{args.seconds:g} s per rate; {CONNECTIONS} keep-alive connections", flush=True)
    print("| run | rate/s | achieved/s | errors | p50 ms | p99 ms | max ms | in-server p50 ms "
          "| in-server p99/max ms | CPU ms/review | RSS MiB (idle) | most in flight "
          "| generator late p99/max ms | generator CPU ms/review | generator GCs, longest ms "
          "| machine busy % before | others' CPU % | load avg before/after |")
    print("|" + "---:|" * 18, flush=True)
    for run in range(1, args.runs + 1):
        rows = one_run(args.server, rates, args.seconds, body, args.realtime)
        if rows is None:
            return 1
        for r in rows:
            print(f"| {run} | {r['rate']:g} | {r['achieved']:.1f} | {r['errors']} | {r['p50_ms']:.2f} "
                  f"| {r['p99_ms']:.2f} | {r['max_ms']:.2f} | {r['server_p50_ms']:.2f} "
                  f"| {r['server_p99_ms']:.2f}/{r['server_max_ms']:.2f} | {r['cpu_ms']:.2f} "
                  f"| {r['rss_kib'] / 1024:.1f} ({r['idle_rss_kib'] / 1024:.1f}) "
                  f"| {r['most_in_flight']} | {r['late_p99_ms']:.2f}/{r['late_max_ms']:.2f} "
                  f"| {r['generator_cpu_ms']:.2f} "
                  f"| {r['generator_gcs']}, {r['generator_gc_max_ms']:.2f} "
                  f"| {r['busy_before_pct']:.0f} | {r['others_pct']:.0f} "
                  f"| {r['load'][0]:.2f}/{r['load'][1]:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
