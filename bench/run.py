"""`make bench`: splitdns and its peers side by side, all forwarding to one local NSD.

    python -m bench.run [--rounds N] [--seconds S] [--rate QPS] [--quick] [--keep]

Each round starts every server fresh, in the order of peers.PEERS and back again in the
next round (so no server always goes first), and measures it alone on CPU 1
while dnsperf and NSD share CPU 0: start-up, idle memory, cache-hit throughput, hit latency
at a fixed rate, a fill of 100k names and the memory after it, cache-miss throughput, miss
latency at a fixed rate. As root it re-executes itself in a new network namespace that has
only `lo`, so nothing it starts can send a packet anywhere but loopback, and no server the
machine already runs can hold its ports. Read bench/README.md for what the figures mean.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from bench import curves, environment, growth, image, measure, mix, peers, report

REPO = Path(__file__).resolve().parent.parent
NETNS_ENV = "SPLITDNS_BENCH_NETNS"
HIT_NAMES = 100
FILL_NAMES = 100_000
MISS_NAMES_PER_SECOND = 200_000  # dnsdist forwarded 130k misses/s here: the file must outlast the run
SETTLE = 1.0                     # let allocators and kernel buffers settle before reading RSS
FILL_LIMIT = 120.0               # seconds; 100k misses take 2–40 s on this machine
BUDGET = 60 * 60.0               # no new round starts after this many seconds
QUIET_WAIT = 15.0                # seconds to wait for other work on the machine to pause
QUIET_BUSY = 15.0                # % of one CPU: below this the machine counts as quiet


@dataclass(frozen=True)
class Options:
    rounds: int
    seconds: float
    rate: int
    port: int
    servers: tuple[str, ...]
    out: Path
    keep: bool
    netns: bool
    curves: tuple[curves.Curve, ...] = ()
    quick: bool = False               # the curves' quick points
    curves_only: bool = False         # skip each server's own sequence


def parse_args(argv: Sequence[str]) -> Options:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="rounds; each figure is their median (3)")
    p.add_argument("--seconds", type=float, default=10.0, help="length of each dnsperf run (10)")
    p.add_argument("--rate", type=int, default=5000, help="fixed rate of the latency runs, qps (5000)")
    p.add_argument("--quick", action="store_true", help="1 round of 3 s runs: a check, not figures")
    p.add_argument("--port", type=int, default=peers.PORT, help=f"port of every server ({peers.PORT})")
    p.add_argument("--servers", help="comma-separated subset of the servers, in order (all "
                   f"but {', '.join(sorted(peers.ON_REQUEST))})",
                   default=",".join(n for n, _, _ in peers.PEERS if n not in peers.ON_REQUEST))
    p.add_argument("--out", type=Path, default=REPO / "bench", help="where results.md/.png go")
    p.add_argument("--keep", action="store_true", help="keep the work directory (configs, dnsperf logs)")
    p.add_argument("--no-netns", action="store_true", help="run on the host's loopback instead")
    p.add_argument("--curves", default="all", metavar="NAMES",
                   help=f"how cost grows: {','.join(curves.BY_NAME)}, all (default) or none")
    p.add_argument("--curves-only", action="store_true", help="the curves without the servers' own runs")
    a = p.parse_args(argv)
    try:
        selected = curves.select(a.curves)
    except ValueError as err:
        p.error(str(err))
    if a.quick:
        a.rounds, a.seconds = 1, 3.0
    known = {name for name, _, _ in peers.PEERS}
    servers = tuple(s for s in a.servers.split(",") if s)
    unknown = set(servers) - known
    if unknown or a.rounds < 1 or a.seconds <= 0 or a.rate <= 0:
        p.error(f"unknown servers {sorted(unknown)}" if unknown else "rounds, seconds, rate must be > 0")
    return Options(a.rounds, a.seconds, a.rate, a.port, servers, a.out, a.keep, not a.no_netns,
                   selected, a.quick, a.curves_only)


def enter_netns(opts: Options, argv: Sequence[str], module: str = "bench.run") -> str:
    """Re-exec `module` inside `unshare --net` when we can; describe the network we run on."""
    if os.environ.get(NETNS_ENV) == "1":
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True, timeout=10)
        return "own network namespace (unshare --net): only lo exists"
    if opts.netns and os.geteuid() == 0 and shutil.which("unshare") and shutil.which("ip"):
        probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=10, check=False)
        if probe.returncode == 0:
            os.environ[NETNS_ENV] = "1"
            os.chdir(REPO)
            os.execvp("unshare", ["unshare", "--net", "--", sys.executable, "-m", module, *argv])
    return "host loopback (no namespace): ports checked free before each start"


@dataclass(frozen=True)
class Placement:
    """Server alone on one CPU; load generator and upstream on the other (None: no pinning)."""

    server: int | None
    load: int | None

    @staticmethod
    def choose() -> Placement:
        cpus = sorted(os.sched_getaffinity(0))
        return Placement(cpus[1], cpus[0]) if len(cpus) >= 2 else Placement(None, None)


@dataclass(frozen=True)
class QueryFiles:
    hit: Path
    fill: Path
    miss: Path
    miss_latency: Path
    mix_warm: Path
    mix: Path

    @staticmethod
    def write(d: Path, opts: Options) -> QueryFiles:
        d.mkdir(parents=True, exist_ok=True)
        misses = int(MISS_NAMES_PER_SECOND * opts.seconds)
        latency_misses = int(opts.rate * opts.seconds * 1.2) + 1000
        # Distinct prefixes: no name of one file is ever a hit left by another.
        return QueryFiles(measure.write_names(d / "hit.txt", "h", HIT_NAMES),
                          measure.write_names(d / "fill.txt", "f", FILL_NAMES),
                          measure.write_names(d / "miss.txt", "m", misses),
                          measure.write_names(d / "miss-latency.txt", "l", latency_misses),
                          *mix.write(d, opts.seconds, peers.ZONE))


@dataclass
class Validity:
    """What can make one server's round untrustworthy, summed or worst over its runs."""

    lost: int = 0
    noerror_min: float = 100.0
    other_cpu: float = 0.0
    steal: float = 0.0

    def add(self, run: measure.Run, full_speed: bool) -> None:
        self.lost += run.result.lost
        self.noerror_min = min(self.noerror_min, run.result.noerror_pct)
        if full_speed:  # CPU accounting is tick-sampled: only full-speed runs are meaningful
            self.other_cpu = max(self.other_cpu, run.share(run.other_cpu))
            total = run.machine.total
            self.steal = max(self.steal, 100.0 * run.machine.steal / total if total else 0.0)


class CheckFailed(RuntimeError):
    pass


Recorder = Callable[[str, float | None], None]  # records one figure of the server being measured


@dataclass
class Bench:
    opts: Options
    workdir: Path
    files: QueryFiles
    placement: Placement
    results: report.Results
    upstream: peers.Process | None = None
    running: list[peers.Process] = field(default_factory=list)

    def start_upstream(self) -> None:
        spec = peers.nsd(self.workdir, self.opts.port)
        self.upstream = peers.start(spec, self.workdir, self.placement.load)
        self.running.append(self.upstream)
        startup = peers.wait_serving(self.upstream, self.workdir)
        log(f"nsd on {spec.addr}:{spec.port} answered {startup * 1000:.0f} ms after exec")

    def stop_all(self) -> None:
        for proc in reversed(self.running):
            proc.stop()
        self.running.clear()

    def run_round(self, round_no: int) -> None:
        assert self.upstream is not None
        upstream = f"{self.upstream.spec.addr}:{self.upstream.spec.port}"
        for name, addr, factory in [] if self.opts.curves_only else round_order(round_no):
            if name not in self.opts.servers or self.results.notes.get(name, "").startswith("skipped"):
                continue
            spec = factory(self.workdir, addr, self.opts.port, upstream)
            if name == "coredns" and shutil.which(spec.binary) is None:
                self.results.notes[name] = "skipped: no coredns binary on PATH"
                continue
            if name == "splitdns-image" and image.root() is None:
                self.results.notes[name] = "skipped: the resolver image was not built (see the log)"
                continue
            if spec.note:
                self.results.notes.setdefault(name, spec.note)
            busy = wait_quiet()
            self.results.record(name, round_no, "busy_at_start", busy)
            if busy >= QUIET_BUSY:
                log(f"  other work keeps {busy:.0f} % of a CPU busy: measuring {name} anyway")
            began = time.monotonic()
            try:
                self.measure_server(round_no, spec)
            except (peers.StartError, measure.DnsperfError, CheckFailed, subprocess.TimeoutExpired,
                    TimeoutError) as err:
                self.results.fail(name, round_no, str(err)[:400])
                log(f"  {name}: FAILED: {err}")
            else:
                log(f"  {name}: done in {time.monotonic() - began:.0f} s")
        growth.run_curves(self, round_no, self.opts.curves, self.opts.quick)

    def measure_server(self, round_no: int, spec: peers.Spec) -> None:
        proc = peers.start(spec, self.workdir, self.placement.server)
        self.running.append(proc)
        try:
            self._measure(round_no, proc)
        finally:
            proc.stop()
            self.running.remove(proc)

    def _measure(self, round_no: int, proc: peers.Process) -> None:
        spec, files, validity = proc.spec, self.files, Validity()

        def rec(key: str, value: float | None) -> None:
            self.results.record(spec.name, round_no, key, value)

        rec("startup_ms", peers.wait_serving(proc, self.workdir) * 1000)
        time.sleep(SETTLE)
        rec("rss_idle", measure.memory_mib(proc.pids())[0])
        if spec.name == report.REFERENCE:  # the loop it says it runs on, not the one we hope for
            loop = environment.logged_event_loop(self.workdir / spec.name / "output.log")
            self.results.env["splitdns event loop"] = loop or "not logged (a splitdns before the log line)"
        built = image.built()
        if spec.name == "splitdns-image" and built:
            rec("image_mb", int(str(built["bytes"])) / 1e6)
            rec("image_gz_mb", int(str(built["gzipped"])) / 1e6)
            loop = environment.logged_event_loop(self.workdir / spec.name / "output.log")
            self.results.env["splitdns-image event loop"] = loop or "not logged"
        problems = measure.check_answers(spec.addr, spec.port,
                                         [f"www.{peers.ZONE}", f"check-{round_no}.{peers.ZONE}"])
        if problems:
            raise CheckFailed(f"wrong answers before the runs: {'; '.join(problems)}")

        self._load(proc, round_no, "warm", files.hit, validity, once=True, limit=10.0)
        hit = self._load(proc, round_no, "hit", files.hit, validity)
        rec("hit_qps", hit.result.qps)
        rec("hit_qcpu", hit.q_per_cpu_s)
        rec("hit_server_cpu", hit.share(hit.server_cpu))
        rec("hit_dnsperf_cpu", hit.share(hit.dnsperf_cpu))
        self._latency(proc, round_no, "hit", files.hit, validity, rec)
        self._mix(proc, round_no, validity, rec)

        fill = self._load(proc, round_no, "fill", files.fill, validity, once=True, limit=FILL_LIMIT)
        rec("fill_qps", fill.result.qps)
        time.sleep(SETTLE)
        rss, hwm = measure.memory_mib(proc.pids())
        if fill.result.completed == FILL_NAMES:
            rec("rss_100k", rss)
            rec("hwm_100k", hwm)
        else:  # a memory figure for fewer names would flatter the server
            self.results.fail(spec.name, round_no, f"fill answered {fill.result.completed} of "
                              f"{FILL_NAMES} names in {FILL_LIMIT:g} s: no RSS-after-100k figure")

        miss = self._load(proc, round_no, "miss", files.miss, validity, once=True)
        rec("miss_qps", miss.result.qps)
        rec("miss_qcpu", miss.q_per_cpu_s)
        rec("miss_server_cpu", miss.share(miss.server_cpu))
        rec("miss_upstream_cpu", miss.share(miss.upstream_cpu))
        rec("miss_lat_qps", self._latency(proc, round_no, "miss", files.miss_latency, validity, rec))
        rec("hwm_end", measure.memory_mib(proc.pids())[1])

        rec("lost", validity.lost)
        rec("noerror_min", validity.noerror_min)
        rec("other_cpu", validity.other_cpu)
        rec("steal", validity.steal)
        log(f"  {spec.name}: hit {hit.result.qps:.0f} qps, miss {miss.result.qps:.0f} qps, "
            f"RSS {rss:.1f} MiB after the fill")

    def _mix(self, proc: peers.Process, round_no: int, validity: Validity, rec: Recorder) -> None:
        """A pod's mix at a fixed 1,000 q/s (bench/mix.py): CPU % of a core, and RSS after it."""
        self._load(proc, round_no, "mix-warm", self.files.mix_warm, validity, once=True, limit=10.0)
        before = measure.run_seconds(proc.pids())
        run = self._load(proc, round_no, "mix", self.files.mix, validity, once=True, rate=mix.RATE,
                         limit=mix.seconds(self.opts.seconds))
        rec("mix_cpu", mix.cpu_percent(measure.run_seconds(proc.pids()) - before, run.result.runtime))
        rec("mix_rss", measure.memory_mib(proc.pids())[0])
        rec("mix_qps", run.result.qps)
        res = run.result
        rec("mix_nxdomain", 100.0 * res.rcodes.get("NXDOMAIN", 0) / res.completed if res.completed else None)
        rec("mix_lost", res.lost)

    def _latency(self, proc: peers.Process, round_no: int, kind: str, names: Path,
                 validity: Validity, rec: Recorder) -> float:
        """Percentiles at the fixed rate; returns the rate reached (below it: a queue was measured)."""
        run = self._load(proc, round_no, f"{kind}-latency", names, validity, once=kind == "miss",
                         rate=self.opts.rate)
        for key, p in (("p50", 50), ("p99", 99), ("p999", 99.9)):
            rec(f"{kind}_{key}", run.result.percentile(p))
        return run.result.qps

    def _load(self, proc: peers.Process, round_no: int, kind: str, names: Path, validity: Validity,
              *, once: bool = False, rate: int | None = None, limit: float | None = None) -> measure.Run:
        assert self.upstream is not None
        spec = proc.spec
        argv = measure.dnsperf_argv(spec.addr, spec.port, names, limit or self.opts.seconds,
                                    once=once, rate=rate, verbose=rate is not None)
        logfile = self.workdir / "logs" / f"r{round_no + 1}-{spec.name}-{kind}.txt"
        logfile.parent.mkdir(exist_ok=True)
        run = measure.run_dnsperf(argv, self.placement.load, proc.pids(), self.upstream.pids(), logfile)
        if not proc.alive():
            raise CheckFailed(f"{spec.name} exited during the {kind} run")
        if run.result.completed == 0:
            raise CheckFailed(f"no query answered in the {kind} run")
        validity.add(run, full_speed=rate is None and not kind.endswith("warm"))
        return run


def round_order(round_no: int) -> list[tuple[str, str, peers.Factory]]:
    """PEERS forwards in even rounds, backwards in odd ones: over rounds, each server is
    measured as often early as late, so a machine that drifts in the course of a round
    (an hour's load, thermal state) does not favour one of them."""
    return list(peers.PEERS) if round_no % 2 == 0 else list(reversed(peers.PEERS))


def wait_quiet() -> float:
    """Wait, at most QUIET_WAIT, for half a second in which the machine is nearly idle.

    On a shared VM other work comes in bursts (test suites); starting a server in a lull
    keeps more runs clean. Returns the busy % of one CPU in the last half second.
    """
    busy = 100.0
    deadline = time.monotonic() + QUIET_WAIT
    for _ in range(int(QUIET_WAIT / 0.5) + 1):
        before = measure.machine_cpu()
        time.sleep(0.5)
        busy = 100.0 * (measure.machine_cpu() - before).busy / 0.5
        if busy < QUIET_BUSY or time.monotonic() >= deadline:
            break
    return busy


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(opts: Options, network: str) -> int:
    try:
        return _run(opts, network)
    finally:
        image.finish()


def _run(opts: Options, network: str) -> int:
    began = time.monotonic()
    # The development tree's splitdns starts from bytecode, as the image's does (which is compiled
    # when built): with PYTHONDONTWRITEBYTECODE set, every start would compile it again.
    compileall.compile_dir(REPO / "src" / "splitdns", quiet=1)
    placement = Placement.choose()
    results = report.Results(opts.rounds, env=environment.describe(opts, network, placement))
    workdir = Path(tempfile.mkdtemp(prefix="splitdns-bench-"))
    bench = Bench(opts, workdir, QueryFiles.write(workdir / "queries", opts), placement, results)
    rounds_done = 0
    try:
        bench.start_upstream()
        for round_no in range(opts.rounds):
            if time.monotonic() - began > BUDGET:
                log(f"time budget of {BUDGET / 60:.0f} min spent: no more rounds")
                break
            log(f"round {round_no + 1}/{opts.rounds}")
            bench.run_round(round_no)
            rounds_done += 1
    except KeyboardInterrupt:
        log("interrupted: stopping every server started; nothing written")
        return 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not skip the clean-up
        bench.stop_all()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if opts.keep:
            log(f"work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    results.env["rounds_done"] = str(rounds_done)
    results.env["duration"] = f"{(time.monotonic() - began) / 60:.1f} min"
    print(report.console(results))
    md, png = report.write(results, opts.out)
    log(f"wrote {md}" + (f" and {png}" if png else " (no chart: matplotlib is not installed)"))
    wanted = "curve." if opts.curves_only else "hit_qps"
    return 0 if any(k.startswith(wanted) and results.values(report.REFERENCE, k)
                    for k in results.figures.get(report.REFERENCE, {})) else 1


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM cleans up exactly like Ctrl-C


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    opts = parse_args(argv)
    if "splitdns-image" in opts.servers and os.environ.get(NETNS_ENV) != "1":
        log("building the resolver image (bench/image.py)")
        why = image.prepare()  # before the namespace: the build needs Debian's and Python's packages
        if why:
            log(f"no splitdns-image row: {why}")
    network = enter_netns(opts, argv)
    signal.signal(signal.SIGTERM, _terminate)
    # Started from a non-interactive shell with `&`, SIGINT arrives ignored: Ctrl-C must still work.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return run(opts, network)


if __name__ == "__main__":
    sys.exit(main())
