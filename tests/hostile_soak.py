"""Hostile catalogue G3: a soak with faults injected on a schedule; writes the results file.

    .venv/bin/python -m tests.hostile_soak --minutes 10 --figures results/hostile-figures.txt \\
        --out results/hostile.md

Runs the real resolver (wrapped so that it also reports its asyncio task count) against three
scripted upstreams on 127.0.0.x, sends mixed traffic for the whole run, and every minute
goes through the same fault schedule: tunnel blackholed, tunnel slow, cluster SERVFAIL,
catch-all truncating (TCP fallback), forged replies, malformed replies, a burst of garbage
packets and stalled TCP clients. It samples RSS, open fds, asyncio tasks and merged
in-flight exchanges every 2 s and checks that they stay flat: samples taken at the same
point of each minute (a quiet second, after the faults of the previous minute have cleared)
must not grow. The caches are kept small (1,024 entries a kind) so that they are full after
the first minute: growth after that would be a leak, not a cache filling up. Then it writes
the results file: the figures the pytest run printed (read
from --figures) and the soak's own. Exit status 1 if a check failed.

Every packet goes to 127.0.0.0/8; every loop is bounded by the run's end time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from tests.helpers import query
from tests.support.hostile import (
    RESOLVER,
    ask_tcp,
    fd_count,
    rcode_of,
    rss_kib,
    udp_burst,
    wire_of,
)
from tests.support.processes import free_port, poll_until, scripted_upstream, stop
from tests.test_hostile_upstream import compression_attacks

SAMPLE_EVERY = 2.0
QUIET_SECOND = 8  # of each minute: every fault of the previous minute is over by then


# --- the resolver, wrapped ---------------------------------------------------------------

def child(conf: str, port: int, stats_path: str) -> int:
    """Run `splitdns serve` in this process, and write its figures to stats_path every second."""
    from splitdns import __version__, config
    from splitdns.commands.serve import run_loop
    from splitdns.shell.lifecycle import Runtime
    from splitdns.shell.server import Server

    async def main() -> int:
        runtime = Runtime(Server(config.load(conf, default_port=port)), conf, port)
        await runtime.start()
        print(f"splitdns-{__version__}", flush=True)

        async def monitor() -> None:
            server = runtime.server
            while True:
                stats = {"t": time.monotonic(), "tasks": len(asyncio.all_tasks()),
                         "inflight": len(server.flights.table), "tcp": server.tcp_connections,
                         "pending": sum(z.pending for z in server.zones.values()),
                         "cache": sum(len(z.cache) for z in server.zones.values() if z.cache),
                         "mismatched": server.counters.mismatched, "unparseable": server.counters.unparseable,
                         "internal_errors": server.internal_errors}
                tmp = stats_path + ".tmp"
                Path(tmp).write_text(json.dumps(stats))
                os.replace(tmp, stats_path)
                await asyncio.sleep(1)

        watcher = asyncio.ensure_future(monitor())
        try:
            return await runtime.run_until_signalled()
        finally:
            watcher.cancel()

    return run_loop(main())


# --- traffic -----------------------------------------------------------------------------

class Traffic:
    """Mixed client traffic until stopped: cache hits, misses in every zone, TCP, garbage."""

    def __init__(self, port: int, end: float) -> None:
        self.port, self.end = port, end
        self.stop = threading.Event()
        self.counts: dict[str, int] = {}
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._udp, daemon=True),
                        threading.Thread(target=self._tcp, daemon=True)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(15)

    def _count(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def _udp(self) -> None:
        rng = random.Random(7)
        batch = 0
        while not self.stop.is_set() and time.monotonic() < self.end:
            names = []
            for i in range(100):  # about 200 queries a second
                roll = rng.random()
                if roll < 0.5:
                    names.append(f"hot{rng.randrange(200)}.public.test.")
                elif roll < 0.7:
                    names.append(f"m{batch}-{i}.public.test.")
                elif roll < 0.85:
                    names.append(f"m{batch}-{i}.corp.example.")
                else:
                    names.append(f"m{batch}-{i}.default.svc.cluster.local.")
            out = udp_burst(self.port, [wire_of(query(n)) for n in names], rate=200, timeout=3)
            for o in out:
                self._count(o.rcode)
            batch += 1

    def _tcp(self) -> None:
        i = 0
        while not self.stop.is_set() and time.monotonic() < self.end:
            data, _ = ask_tcp(self.port, query(f"hot{i % 200}.public.test."), timeout=3)
            self._count("tcp " + rcode_of(data))
            i += 1
            time.sleep(0.1)


# --- faults ------------------------------------------------------------------------------

GOOD_ANY = [{"suffix": ".", "records": ["{qname} 60 IN A 192.0.2.1"]}]
GOOD_TUNNEL = [{"suffix": ".", "records": ["{qname} 60 IN A 10.8.0.5"]}]
GOOD_CLUSTER = [{"suffix": ".", "records": ["{qname} 30 IN A 10.96.0.1"]}]


def schedule(second: int, ups: dict[str, Any], port: int, rng: random.Random) -> str | None:
    """The fault for this second of the minute (applied once when its window starts)."""
    any_, tunnel, cluster = ups["any"], ups["tunnel"], ups["cluster"]
    if second == 10:
        tunnel.set_rules([{"suffix": ".", "action": "drop"}])
        return "tunnel blackholed"
    if second == 20:
        tunnel.set_rules([{"suffix": ".", "delay_ms": 800, "records": GOOD_TUNNEL[0]["records"]}])
        return "tunnel slow (800 ms)"
    if second == 30:
        tunnel.set_rules(GOOD_TUNNEL)
        cluster.set_rules([{"suffix": ".", "action": "servfail"}])
        return "cluster SERVFAIL"
    if second == 38:
        cluster.set_rules(GOOD_CLUSTER)
        any_.set_rules([{"suffix": ".", "action": "truncate", "records": GOOD_ANY[0]["records"]}])
        return "catch-all truncates (TCP fallback)"
    if second == 44:
        any_.set_rules([{"suffix": ".", "delay_ms": 30, "records": GOOD_ANY[0]["records"],
                         "forge": {"wrong_id": 20, "wrong_port": 5, "wrong_question": 5, "wrong_qtype": 5}}])
        return "forged replies"
    if second == 50:
        attacks = compression_attacks("public.test")
        rules: list[dict[str, Any]] = [{"qname": q, "action": "raw", "hex": h, "patch_id": True}
                                       for q, h in attacks.values()]
        rules.append({"suffix": "public.test", "rcode": "NOERROR", "action": "raw", "patch_id": True,
                      "hex": "0000" + "8180" + "0001" + "0000" * 3 + "c00c00010001"})
        any_.set_rules(rules + GOOD_ANY)
        garbage(port, rng, 3000)
        stall_clients(port, 20)
        return "malformed replies, garbage flood, stalled TCP clients"
    if second == 56:
        any_.set_rules(GOOD_ANY)
        return "all good"
    return None


def garbage(port: int, rng: random.Random, n: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setblocking(False)
        for i in range(n):
            with contextlib.suppress(BlockingIOError):
                s.sendto(rng.randbytes(rng.randrange(0, 600)), (RESOLVER, port))
            if i % 200 == 0:
                time.sleep(0.01)


def stall_clients(port: int, n: int) -> None:
    def hold() -> None:
        socks = []
        try:
            for _ in range(n):
                c = socket.create_connection((RESOLVER, port), timeout=2)
                c.sendall(b"\x00")
                socks.append(c)
            time.sleep(5)
        except OSError:
            pass
        finally:
            for c in socks:
                c.close()

    threading.Thread(target=hold, daemon=True).start()


# --- the run -----------------------------------------------------------------------------

COREFILE = """
. {{
    prometheus 127.0.0.1:{mport}
    cache 30 {{
        success 1024
        denial 1024
    }}
    forward . {any} {{
        read_timeout 1s
    }}
}}
corp.example {{
    cache 30 {{
        success 1024
        denial 1024
        serve_stale 1m
    }}
    forward . {tunnel} {{
        read_timeout 500ms
        failfast_all_unhealthy_upstreams
    }}
}}
cluster.local {{
    cache 30 {{
        success 1024
        denial 1024
    }}
    forward . {cluster} {{
        read_timeout 500ms
    }}
}}
"""


def soak(minutes: float, workdir: Path) -> tuple[bool, list[str], list[dict[str, Any]]]:
    lines: list[str] = []
    samples: list[dict[str, Any]] = []
    rng = random.Random(11)
    with ExitStack() as stack:
        ups = {
            "any": stack.enter_context(scripted_upstream(workdir, GOOD_ANY, "127.0.0.30")),
            "tunnel": stack.enter_context(scripted_upstream(workdir, GOOD_TUNNEL, "127.0.0.20")),
            "cluster": stack.enter_context(scripted_upstream(workdir, GOOD_CLUSTER, "127.0.0.10")),
        }
        port, mport = free_port(RESOLVER), free_port(RESOLVER)
        conf = workdir / "Corefile"
        conf.write_text(COREFILE.format(mport=mport, any=ups["any"].target, tunnel=ups["tunnel"].target,
                                        cluster=ups["cluster"].target))
        stats_path = workdir / "stats.json"
        out, err = (workdir / "stdout.log").open("wb"), (workdir / "stderr.log").open("wb")
        proc = subprocess.Popen([sys.executable, "-m", "tests.hostile_soak", "--child", str(conf), str(port),
                                 str(stats_path)], stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                cwd=Path(__file__).resolve().parent.parent)
        stack.callback(stop, proc)
        poll_until("the soaked resolver", 15, lambda: True if b"splitdns-" in
                   (workdir / "stdout.log").read_bytes() else None)
        started = time.monotonic()
        end = started + minutes * 60
        traffic = Traffic(port, end)
        traffic.start()
        events: list[str] = []
        last_second = -1
        next_sample = started
        for _ in range(int(minutes * 60 * 20) + 100):  # 20 steps a second, bounded
            now = time.monotonic()
            if now >= end:
                break
            elapsed = now - started
            second = int(elapsed) % 60
            if int(elapsed) != last_second:
                last_second = int(elapsed)
                fault = schedule(second, ups, port, rng)
                if fault:
                    events.append(f"{elapsed:6.1f}s {fault}")
            if now >= next_sample:
                next_sample += SAMPLE_EVERY
                try:
                    stats = json.loads(stats_path.read_text())
                except (OSError, ValueError):
                    stats = {}
                samples.append({"elapsed": elapsed, "second": second, "rss": rss_kib(proc.pid),
                                "fds": fd_count(proc.pid), **stats})
            time.sleep(0.05)
        traffic.join()
        alive = proc.poll() is None
        stderr = (workdir / "stderr.log").read_text(errors="replace")

    quiet = [s for s in samples if QUIET_SECOND <= s["second"] < QUIET_SECOND + SAMPLE_EVERY]
    warm = [s for s in quiet if s["elapsed"] >= 60] or quiet
    first, last = warm[0], warm[-1]
    rss_growth = (last["rss"] - first["rss"]) / first["rss"]
    tasks = [s.get("tasks", 0) for s in warm]
    fds = [s["fds"] for s in warm]
    inflight = [s.get("inflight", 0) for s in warm]
    total = sum(traffic.counts.values())
    errors_logged = sum(1 for ln in stderr.splitlines() if "[ERROR]" in ln)
    checks = {
        "resolver alive at the end": alive,
        "no traceback or internal error": "Traceback" not in stderr and last.get("internal_errors", 0) == 0,
        f"RSS growth {rss_growth * 100:.1f} % < 5 % (quiet samples, first vs last after warm-up)":
            rss_growth < 0.05,
        f"fds at quiet points {min(fds)}..{max(fds)} (flat within 3)": max(fds) - min(fds) <= 3,
        f"asyncio tasks at quiet points {min(tasks)}..{max(tasks)} (no growth)":
            max(tasks[len(tasks) // 2:]) <= max(tasks[:len(tasks) // 2 + 1]) + 5,
        f"merged exchanges in flight at quiet points {min(inflight)}..{max(inflight)}":
            max(inflight) <= 200,
        f"error lines logged {errors_logged} (no storm: < 1 a second)": errors_logged < minutes * 60,
    }
    ok = all(checks.values())
    lines.append(f"G3: {minutes:g} min soak, {total} client queries {dict(sorted(traffic.counts.items()))}; "
                 f"RSS {first['rss']} -> {last['rss']} KiB, fds {first['fds']} -> {last['fds']}, tasks "
                 f"{first.get('tasks')} -> {last.get('tasks')} at the quiet second of each minute; "
                 f"{len(events)} faults injected")
    for name, passed in checks.items():
        lines.append(f"    {'PASS' if passed else 'FAIL'}  {name}")
    lines.append("    fault schedule (first minute): " + "; ".join(e.split("s ", 1)[1] for e in events[:8]))
    return ok, lines, samples


def write_results(out: Path, figures: Path | None, soak_lines: list[str], samples: list[dict[str, Any]],
                  minutes: float) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    figs = figures.read_text().splitlines() if figures is not None and figures.exists() else []
    rows = ["# Hostile-input and fault suite: results", "",
            f"Written by `make test-hostile` ({time.strftime('%Y-%m-%d %H:%M:%S')}, {os.cpu_count()} cores). "
            "Catalogue: the hostile-input tests, tests/test_hostile_*.py. "
            "Each line is the figure a test printed; "
            "each test asserts its pass criterion, and the run's pytest summary says which passed (the "
            "lines that say 'known gap, xfail' are the expected failures).", "",
            "## Catalogue tests (pytest)", ""]
    rows += [f"- {line}" for line in figs] or ["- (no figures file: run the pytest part first)"]
    rows += ["", f"## G3 soak ({minutes:g} minutes)", "", "```", *soak_lines, "```", "",
             "Samples (every 2 s; the quiet second of each minute is what the checks compare):", "",
             "| t (s) | second | RSS KiB | fds | tasks | in flight | pending | cache entries |",
             "|---|---|---|---|---|---|---|---|"]
    for s in samples[:: max(1, len(samples) // 60)]:
        rows.append(f"| {s['elapsed']:.0f} | {s['second']} | {s['rss']} | {s['fds']} | "
                    f"{s.get('tasks', '')} | {s.get('inflight', '')} | {s.get('pending', '')} | "
                    f"{s.get('cache', '')} |")
    out.write_text("\n".join(rows) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--figures", type=Path, default=None, help="figures printed by the pytest run")
    parser.add_argument("--out", type=Path, default=Path("results/hostile.md"))
    parser.add_argument("--child", nargs=3, metavar=("COREFILE", "PORT", "STATS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child[0], int(args.child[1]), args.child[2])
    with tempfile.TemporaryDirectory(prefix="splitdns-soak-") as folder:
        ok, lines, samples = soak(args.minutes, Path(folder))
    for line in lines:
        print(line)
    write_results(args.out, args.figures, lines, samples, args.minutes)
    print(f"results written to {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
