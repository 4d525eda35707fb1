"""Cache misses only, A/B: splitdns from one or more source trees (and python-floor) under
dnsperf, alternately, each alone on CPU 1, forwarding to NSD on CPU 0 with dnsperf.

    python -m bench.misses [--runs N] [--seconds S] [--src DIR]... [--floor] [--profile DIR]

The tool for a change to the miss path: `make bench`'s miss run (new names, each asked once,
`dnsperf -c 4 -q 100 -n 1`) without the rest of the round, so that two versions can be run
in turns (A B A B ...) within minutes and compared by the median of their q/CPU-s, which a
shared machine moves less than q/s. `--src` names a tree whose `src/` is put first on
PYTHONPATH (default: this one); the same interpreter and uvloop run every version.
`--profile DIR` runs each splitdns under cProfile and writes DIR/<label>-<run>.prof
(slower: the figures of a profiled run are not comparable to the others). As root it
runs in its own network namespace (only `lo`), as bench.run does; loopback only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench import measure, peers, run

ADDR = "127.0.0.10"
FLOOR_ADDR = "127.0.0.15"


def _splitdns(workdir: Path, label: str, src: Path, upstream: str, port: int,
              profile: Path | None) -> peers.Spec:
    spec = peers.splitdns(workdir, ADDR, port, upstream)
    corefile = str(workdir / "splitdns" / "Corefile")
    argv = [str(workdir / label / "Corefile") if a == corefile else a for a in spec.argv]
    if profile is not None:
        argv[1:3] = ["-m", "cProfile", "-o", str(profile), "-m", "splitdns"]
    env_argv = ["env", f"PYTHONPATH={src / 'src'}", *argv]
    return peers.Spec(label, ADDR, port, tuple(env_argv), spec.files)


def user_system(pids: list[int]) -> tuple[float, float]:
    """User and system CPU seconds of these processes."""
    user = system = 0
    for pid in pids:
        fields = measure.stat_fields(pid)
        if fields is not None:
            user, system = user + int(fields[11]), system + int(fields[12])
    return user / measure.CLK_TCK, system / measure.CLK_TCK


def one_run(spec: peers.Spec, workdir: Path, placement: run.Placement, names: Path,
            seconds: float, upstream: peers.Process) -> tuple[measure.Run, float, float]:
    """One miss run; with the server's user and system microseconds per answered query."""
    proc = peers.start(spec, workdir, placement.server)
    try:
        peers.wait_serving(proc, workdir)
        time.sleep(0.5)
        argv = measure.dnsperf_argv(spec.addr, spec.port, names, seconds, once=True)
        pids = proc.pids()
        user0, system0 = user_system(pids)
        got = measure.run_dnsperf(argv, placement.load, pids, upstream.pids(),
                                  workdir / f"{spec.name}-dnsperf.log")
        user1, system1 = user_system(pids)
        answered = max(1, got.result.completed)
        return got, (user1 - user0) / answered * 1e6, (system1 - system0) / answered * 1e6
    finally:
        proc.stop()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m bench.misses", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="runs of each version (3)")
    p.add_argument("--seconds", type=float, default=5.0, help="length of each dnsperf run (5)")
    p.add_argument("--src", action="append", type=Path, help="a source tree (repeatable)")
    p.add_argument("--floor", action="store_true", help="python-floor too, in the same turns")
    p.add_argument("--profile", type=Path, help="cProfile each splitdns run into this directory")
    p.add_argument("--port", type=int, default=peers.PORT)
    a = p.parse_args(argv)
    opts = run.Options(1, a.seconds, 1000, a.port, (), Path("."), False, True)
    network = run.enter_netns(opts, argv, "bench.misses")
    srcs = a.src or [run.REPO]
    placement = run.Placement.choose()
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="splitdns-misses-") as tmp:
        workdir = Path(tmp)
        upstream = peers.start(peers.nsd(workdir, a.port), workdir, placement.load)
        try:
            peers.wait_serving(upstream, workdir)
            upstream_at = f"{peers.UPSTREAM_ADDR}:{a.port}"
            print(f"# {network}; load average {os.getloadavg()}", flush=True)
            for i in range(a.runs):
                turn: list[tuple[str, peers.Spec]] = []
                for k, src in enumerate(srcs):
                    label = f"v{k}"
                    prof = a.profile / f"{label}-{i}.prof" if a.profile else None
                    turn.append((f"{label} ({src})", _splitdns(workdir, label, src.resolve(),
                                                               upstream_at, a.port, prof)))
                if a.floor:
                    turn.append(("python-floor", peers.python_floor(workdir, FLOOR_ADDR, a.port,
                                                                    upstream_at)))
                if i % 2:
                    turn.reverse()
                for label, spec in turn:
                    names = measure.write_names(workdir / "miss.txt", f"r{i}{spec.name}x",
                                                int(60_000 * a.seconds))
                    got, user_us, system_us = one_run(spec, workdir, placement, names, a.seconds,
                                                      upstream)
                    qcpu = got.q_per_cpu_s or 0.0
                    results.setdefault(label, []).append(qcpu)
                    print(f"run {i} {label}: {got.result.qps:.0f} qps, {qcpu:.0f} q/CPU-s, "
                          f"user {user_us:.1f} us + system {system_us:.1f} us a query, "
                          f"server CPU {got.share(got.server_cpu):.0f} %, other "
                          f"{got.share(got.other_cpu):.0f} %, lost {got.result.lost}, "
                          f"load {os.getloadavg()[0]:.2f}", flush=True)
        finally:
            upstream.stop()
    for label, values in results.items():
        print(f"{label}: median {statistics.median(values):.0f} q/CPU-s "
              f"[{min(values):.0f}-{max(values):.0f}] over {len(values)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
