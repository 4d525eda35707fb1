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

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "inject" / "deployment-init.yaml"
HOST = "127.0.0.1"
SETTINGS = ["--zone", "svc.acme.internal=openvpn", "--cluster-dns", "10.96.0.10"]
CONNECTIONS = 8

STDLIB_SERVER = """
import http.server, ssl, sys
from splitdns.commands import render
from splitdns.kube import admission
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


def start(server: str, cert: Path, key: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    if server == "stdlib":
        argv = [sys.executable, "-c", STDLIB_SERVER, str(cert), str(key), str(port)]
    else:
        argv = [sys.executable, "-m", "splitdns", "webhook", "--tls-cert", str(cert), "--tls-key", str(key),
                "--listen", HOST, "--port", str(port), "--probe-port", str(free_port()), *SETTINGS]
    with log.open("wb") as out:
        return subprocess.Popen([*pin(0), *argv], stdout=out, stderr=subprocess.STDOUT,
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


async def run_rate(port: int, context: ssl.SSLContext, body: bytes, rate: float,
                   seconds: float) -> dict[str, Any]:
    import aiohttp

    latencies: list[float] = []
    errors = 0
    connector = aiohttp.TCPConnector(limit=CONNECTIONS, ssl=context)
    async with aiohttp.ClientSession(connector=connector) as session:
        url = f"https://{HOST}:{port}/mutate"

        async def one(due: float) -> None:
            nonlocal errors
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            try:
                async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                    await r.read()
                    if r.status != 200:
                        errors += 1
            except (aiohttp.ClientError, OSError):
                errors += 1
            latencies.append(time.perf_counter() - due)

        for _ in range(20):  # warm the connections and the code paths
            await one(time.perf_counter())
        latencies.clear()
        count = int(rate * seconds)
        t0 = time.perf_counter() + 0.1
        await asyncio.gather(*(one(t0 + i / rate) for i in range(count)))
        elapsed = time.perf_counter() - t0
    latencies.sort()
    return {"rate": rate, "sent": count, "achieved": count / elapsed, "errors": errors,
            "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
            "max_ms": latencies[-1] * 1000}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.webhook", description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", default="50,500", help="Reviews per second, comma-separated (50,500).")
    p.add_argument("--seconds", type=float, default=20.0, help="Seconds per rate (20).")
    p.add_argument("--server", choices=("aiohttp", "stdlib"), default="aiohttp")
    args = p.parse_args(argv)
    import trustme

    rates = [float(r) for r in args.rates.split(",")]
    if pin(1):  # the load generator on the other core
        os.sched_setaffinity(0, {1})
    body = review_body()
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
        process = start(args.server, cert, key, port, work / "server.log")
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    import socket

                    socket.create_connection((HOST, port), timeout=1).close()
                    break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        print((work / "server.log").read_text(), file=sys.stderr)
                        return 1
                    time.sleep(0.1)
            idle_rss = rss_kib(process.pid)
            rows = []
            seen = 0
            for rate in rates:
                cpu_before = cpu_seconds(process.pid)
                row = asyncio.run(run_rate(port, context, body, rate, args.seconds))
                # CPU the webhook spent per review (warm-up included): unlike latency, it does not
                # depend on how busy the machine is; 1000 / it is what one free core could serve.
                row["cpu_ms"] = (cpu_seconds(process.pid) - cpu_before) * 1000 / (row["sent"] + 20)
                row["rss_kib"], row["peak_rss_kib"] = rss_kib(process.pid)
                served = server_times(work / "server.log")
                mine, seen = served[seen + 20:], len(served)  # the 20 warm-up reviews left out
                row["server_p50_ms"] = statistics.median(mine) if mine else float("nan")
                row["server_p99_ms"] = sorted(mine)[int(len(mine) * 0.99)] if mine else float("nan")
                rows.append(row)
        finally:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
    pinned = "pinned to core 0" if pin(0) else "not pinned (one core)"
    print(f"splitdns webhook ({args.server}), {pinned}; review body {len(body)} bytes; "
          f"{args.seconds:g} s per rate; {CONNECTIONS} keep-alive connections; "
          f"idle RSS {idle_rss[0] / 1024:.1f} MiB")
    print("| rate/s | achieved/s | errors | p50 ms | p99 ms | max ms | in-server p50 ms | in-server p99 ms "
          "| CPU ms/review | RSS MiB | peak RSS MiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['rate']:g} | {r['achieved']:.1f} | {r['errors']} | {r['p50_ms']:.2f} "
              f"| {r['p99_ms']:.2f} "
              f"| {r['max_ms']:.2f} | {r['server_p50_ms']:.2f} | {r['server_p99_ms']:.2f} "
              f"| {r['cpu_ms']:.2f} "
              f"| {r['rss_kib'] / 1024:.1f} | {r['peak_rss_kib'] / 1024:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
