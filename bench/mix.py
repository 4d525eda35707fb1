"""A realistic sidecar load: what one pod's resolver costs at 1,000 queries a second.

The figure a platform engineer sizes the sidecar's CPU request by. Per 100 queries:

- 86 repeats of the pod's 100 hot names (NOERROR, answered from the cache);
- 4 search-list expansions of a hot name, as a resolver with `ndots:5` makes them
  (`www-7.bench.test.default.svc.cluster.bench.test`: NXDOMAIN, repeated, so answered
  from the negative cache after the first time);
- 10 new names, each asked once: cache misses, one upstream round trip each.

So 90 % hits, 10 % misses, 4 % NXDOMAIN. dnsperf sends them at a fixed rate, one query
file read once in order. The server's CPU comes from /proc/PID/task/*/schedstat
(nanoseconds), since at a few % of a core the 10 ms ticks of /proc/PID/stat are noise.
"""

from __future__ import annotations

from pathlib import Path

from bench.cells import Metric

RATE = 1000
HOT = 100
SEARCH = ("default.svc.cluster", "svc.cluster", "cluster")  # as kubelet writes, under the zone
MISS_EVERY, NX_EVERY = 10, 25                                # 10 % misses, 4 % NXDOMAIN
MIN_SECONDS = 5.0

FIGURES = (
    Metric("mix_cpu", f"CPU at {RATE:,} q/s of a pod's mix", "% of one core", False),
    Metric("mix_rss", "RSS at the end of it", "MiB", False),
    Metric("mix_qps", "qps reached", "qps"),
    Metric("mix_nxdomain", "NXDOMAIN share", "%"),
    Metric("mix_lost", "lost", "n", False),
)


def hot_name(i: int, zone: str) -> str:
    return f"www-{i}.{zone}"


def nxdomain_names(zone: str) -> list[str]:
    """The search-list expansions of the first few hot names: (kubelet's 3 suffixes) x 4 names."""
    return [f"{hot_name(i, zone)}.{suffix}.{zone}" for i in range(4) for suffix in SEARCH]


def write(directory: Path, seconds: float, zone: str) -> tuple[Path, Path]:
    """(warm-up file, mix file): the warm-up asks each hot and NXDOMAIN name once; the mix holds
    10 % more queries than RATE x seconds, so the time limit ends the run, not the file."""
    directory.mkdir(parents=True, exist_ok=True)
    nx = nxdomain_names(zone)
    warm = directory / "mix-warm.txt"
    warm.write_text("".join(f"{name} A\n" for name in [*(hot_name(i, zone) for i in range(HOT)), *nx]))
    lines, hot = [], 0
    for i in range(int(RATE * max(seconds, MIN_SECONDS) * 1.1)):
        if i % MISS_EVERY == 0:
            lines.append(f"mix-{i}.{zone} A\n")
        elif i % NX_EVERY == 1:
            lines.append(f"{nx[(i // NX_EVERY) % len(nx)]} A\n")
        else:  # every hot name in turn, in a stride that is not the file's order
            lines.append(f"{hot_name(hot * 7 % HOT, zone)} A\n")
            hot += 1
    mix = directory / "mix.txt"
    mix.write_text("".join(lines))
    return warm, mix


def seconds(run_seconds: float) -> float:
    """The mix runs at least MIN_SECONDS: below that a start-up blip weighs too much."""
    return max(run_seconds, MIN_SECONDS)


def cpu_percent(cpu_seconds: float, wall: float) -> float | None:
    """% of one core over the run; None for a run too short to say."""
    return 100.0 * cpu_seconds / wall if wall > 0.5 else None
