"""Turning per-round figures into the printed table, bench/results.md and the PNG chart.

Every figure is kept per round; a cell shows the median over rounds and [min–max]. Ratios
to splitdns are taken round by round (peer and splitdns measured minutes apart, on the
same machine state) and then summarised the same way.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from bench import curves, mix
from bench.cells import Metric, cell
from bench.cells import number as _number
from bench.cells import table as _table

REFERENCE = "splitdns"
TARGET_PEER = "unbound-1t"
FLOOR = "python-floor"  # bench/floor.py: whether a target is reachable in CPython at all


THROUGHPUT = (
    Metric("hit_qps", "cache-hit qps", "qps"),
    Metric("hit_qcpu", "hit q/CPU-s", "q/CPU-s"),
    Metric("miss_qps", "cache-miss qps", "qps"),
    Metric("miss_qcpu", "miss q/CPU-s", "q/CPU-s"),
)
LATENCY = (
    Metric("hit_p50", "hit p50", "ms", False),
    Metric("hit_p99", "hit p99", "ms", False),
    Metric("hit_p999", "hit p99.9", "ms", False),
    Metric("miss_p50", "miss p50", "ms", False),
    Metric("miss_p99", "miss p99", "ms", False),
    Metric("miss_p999", "miss p99.9", "ms", False),
)
FOOTPRINT = (
    Metric("rss_idle", "RSS idle", "MiB", False),
    Metric("rss_100k", "RSS, 100k names cached", "MiB", False),
    Metric("hwm_100k", "peak RSS (VmHWM) after the fill", "MiB", False),
    Metric("hwm_end", "peak RSS (VmHWM) after all runs", "MiB", False),
    Metric("startup_ms", "exec to first answer", "ms", False),
    Metric("image_mb", "image, uncompressed", "MB", False),
    Metric("image_gz_mb", "image, gzipped", "MB", False),
)
HEADLINE = THROUGHPUT + LATENCY + FOOTPRINT

# Validity of the runs: not figures to compare, but reasons to distrust one.
CHECKS = (
    Metric("hit_server_cpu", "hit: server CPU %", "%"),
    Metric("hit_dnsperf_cpu", "hit: dnsperf CPU %", "%"),
    Metric("miss_server_cpu", "miss: server CPU %", "%"),
    Metric("miss_upstream_cpu", "miss: NSD CPU %", "%"),
    Metric("fill_qps", "fill (100k misses) qps", "qps"),
    Metric("miss_lat_qps", "miss latency run: qps reached", "qps"),
    Metric("lost", "queries lost, all runs", "n"),
    Metric("noerror_min", "NOERROR % (lowest run)", "%"),
    Metric("busy_at_start", "machine busy % before start", "%"),
    Metric("other_cpu", "other processes' CPU % (max)", "%"),
    Metric("steal", "steal % (max)", "%"),
)

NOISY_CPU = 25.0  # % of one CPU used by other processes during a run: a noisy run

# The performance targets: (metric, splitdns ÷ unbound limit, or an absolute limit).
RATIO_TARGETS = (
    (THROUGHPUT[0], ">=", 1.0), (THROUGHPUT[1], ">=", 1.0),
    (THROUGHPUT[2], ">=", 1.0), (THROUGHPUT[3], ">=", 1.0),
    (LATENCY[1], "<=", 1.5),
)
ABSOLUTE_TARGETS = ((FOOTPRINT[0], 30.0), (FOOTPRINT[1], 60.0), (FOOTPRINT[4], 300.0))


@dataclass
class Results:
    """Figures per server, per metric, per round (None where a run failed or did not apply)."""

    rounds: int
    servers: list[str] = field(default_factory=list)
    figures: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)
    failures: dict[str, list[str]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    def record(self, server: str, round_no: int, key: str, value: float | None) -> None:
        if server not in self.servers:
            self.servers.append(server)
        row = self.figures.setdefault(server, {}).setdefault(key, [None] * self.rounds)
        row[round_no] = value

    def fail(self, server: str, round_no: int, why: str) -> None:
        if server not in self.servers:
            self.servers.append(server)
        self.failures.setdefault(server, []).append(f"round {round_no + 1}: {why}")

    def values(self, server: str, key: str) -> list[float]:
        return [v for v in self.figures.get(server, {}).get(key, []) if v is not None]

    def ratios(self, server: str, key: str, reference: str = REFERENCE) -> list[float]:
        """server ÷ reference, for each round where both were measured."""
        mine = self.figures.get(server, {}).get(key, [])
        ref = self.figures.get(reference, {}).get(key, [])
        return [m / r for m, r in zip(mine, ref, strict=False) if m is not None and r]


# --- formatting --------------------------------------------------------------------------------


def figures_table(results: Results, metrics: tuple[Metric, ...]) -> str:
    header = ["server"] + [m.title for m in metrics]
    rows = [[s] + [cell(results.values(s, m.key), m.unit) for m in metrics] for s in results.servers]
    return _table(header, rows)


def ratio_table(results: Results) -> str:
    metrics = THROUGHPUT + LATENCY[:3] + LATENCY[3:5] + FOOTPRINT
    header = ["peer ÷ splitdns"] + [m.label for m in metrics]
    rows = [[s] + [cell(results.ratios(s, m.key), "ratio") for m in metrics]
            for s in results.servers if s != REFERENCE]
    return _table(header, rows)


def targets_table(results: Results) -> str:
    """splitdns against each target, and beside it the floor's figure, judged the same way."""
    rows = []
    for metric, op, limit in RATIO_TARGETS:
        ratios = results.ratios(REFERENCE, metric.key, TARGET_PEER)
        floor = results.ratios(FLOOR, metric.key, TARGET_PEER)
        rows.append([f"{metric.label}: splitdns ÷ {TARGET_PEER} {op} {limit:g}",
                     cell(results.values(REFERENCE, metric.key), metric.unit),
                     cell(results.values(TARGET_PEER, metric.key), metric.unit),
                     cell(ratios, "ratio"), _verdict(ratios, op, limit),
                     _judged(floor, "ratio", op, limit)])
    for metric, limit in ABSOLUTE_TARGETS:
        values = results.values(REFERENCE, metric.key)
        rows.append([f"{metric.label} <= {limit:g} {metric.unit}", cell(values, metric.unit),
                     cell(results.values(TARGET_PEER, metric.key), metric.unit), "–",
                     _verdict(values, "<=", limit),
                     _judged(results.values(FLOOR, metric.key), metric.unit, "<=", limit)])
    return _table(["target", "splitdns", TARGET_PEER, "per-round ratio", "met (median)",
                   f"{FLOOR}, the same way"], rows)


def _judged(values: list[float], unit: str, op: str, limit: float) -> str:
    return "–" if not values else f"{cell(values, unit)}: {_verdict(values, op, limit)}"


def _verdict(values: list[float], op: str, limit: float) -> str:
    if not values:
        return "not measured"
    mid = statistics.median(values)
    return "yes" if (mid >= limit if op == ">=" else mid <= limit) else "no"


def checks_table(results: Results) -> str:
    header = ["server"] + [m.label for m in CHECKS] + ["failures"]
    rows = []
    for s in results.servers:
        rows.append([s, *(cell(results.values(s, m.key), m.unit) for m in CHECKS),
                     str(len(results.failures.get(s, [])))])
    return _table(header, rows)


def per_round_table(results: Results) -> str:
    header = ["server", "figure"] + [f"round {i + 1}" for i in range(results.rounds)]
    rows = []
    for s in results.servers:
        for m in HEADLINE + mix.FIGURES:
            row = results.figures.get(s, {}).get(m.key, [None] * results.rounds)
            if any(v is not None for v in row):
                rows.append([s, m.title] +
                            ["–" if v is None else _number(v, m.unit) for v in row])
    return _table(header, rows)


def measured(results: Results, metrics: tuple[Metric, ...]) -> bool:
    """Whether any server has any of these figures (a run with --curves-only has none of the rest)."""
    return any(results.values(s, m.key) for s in results.servers for m in metrics)


def console(results: Results) -> str:
    """What `make bench` prints: the figures, the ratios and the targets, then the curves."""
    headline, mixed = measured(results, HEADLINE), measured(results, mix.FIGURES)
    sections = [
        (headline, "Throughput, dnsperf at full speed — median [min–max] over rounds",
         lambda: figures_table(results, THROUGHPUT)),
        (headline, f"Latency at a fixed rate ({results.env.get('rate', '?')} qps), ms",
         lambda: figures_table(results, LATENCY)),
        (headline, "Memory and start-up", lambda: figures_table(results, FOOTPRINT)),
        (mixed, f"A realistic sidecar load: {mix.RATE:,} q/s of a pod's mix (90 % hits, 10 % misses, "
         "4 % NXDOMAIN through the search list)", lambda: figures_table(results, mix.FIGURES)),
        (headline, "Ratio to splitdns, per round (peer ÷ splitdns)", lambda: ratio_table(results)),
        (headline, "Performance targets", lambda: targets_table(results)),
        (headline or mixed, "Validity of the runs", lambda: checks_table(results)),
    ]
    parts = [part for shown, title, make in sections if shown for part in (title, make())]
    for title, tab, _ in curves.tables(results):
        parts += [f"How cost grows: {title}", tab]
    failures = _failure_lines(results)
    if failures:
        parts += ["Failures", "\n".join(failures)]
    return "\n\n".join(parts)


def _failure_lines(results: Results) -> list[str]:
    return [f"- {s}: {why}" for s in results.servers for why in results.failures.get(s, [])]


def markdown(results: Results, chart_name: str | None = None) -> str:
    env = results.env
    out = [
        "# splitdns benchmark results",
        "",
        "Written by `make bench` (`python -m bench.run`); how to read it: `bench/README.md`. "
        f"{env.get('rounds_done', results.rounds)} round(s); every figure is the median over rounds "
        "with [min–max]; ratios are taken per round, then summarised the same way.",
        "",
    ]
    if chart_name:
        out += [f"![chart]({chart_name})", ""]
    sections = [
        ("Throughput: dnsperf at full speed", figures_table(results, THROUGHPUT),
         "q/CPU-s: answered queries per CPU-second of the server's process tree. dnsperf tops "
         "out around 130–160k qps on one core, so hit qps near that is the generator's limit, "
         "not the server's; q/CPU-s stays comparable."),
        (f"Latency at a fixed {env.get('rate', '?')} qps (ms, from dnsperf -v per-query times)",
         figures_table(results, LATENCY),
         "p99.9 on this VM moves by an order of magnitude between rounds; compare p50 and p99."),
        ("Memory and start-up", figures_table(results, FOOTPRINT),
         "RSS is VmRSS summed over the process tree: idle 1 s after the first answer, and 1 s "
         "after 100k distinct names were asked once. Start-up is exec to the first NOERROR answer "
         "to a query sent every 2 ms."),
        (f"A realistic sidecar load: {mix.RATE:,} q/s of a pod's mix", figures_table(results, mix.FIGURES),
         "90 % hits on 100 hot names (4 % of all queries are NXDOMAIN search-list expansions under "
         "ndots:5, answered from the negative cache), 10 % new names (misses), at a fixed rate. CPU "
         "is the server's time on a CPU (schedstat, ns) over dnsperf's run: the figure to size the "
         "sidecar's CPU request by. dnsmasq keeps its default 150-entry cache, which the misses flush."),
        *((f"How cost grows: {title}", tab, note) for title, tab, note in curves.tables(results)),
        ("Ratio to splitdns, per round (peer ÷ splitdns)", ratio_table(results),
         "Above 1: the peer's figure is larger — better for throughput, worse for latency, "
         "memory and start-up."),
        ("Performance targets", targets_table(results),
         "Ratios here are splitdns ÷ Unbound, per round; 'met' judges the median. MB is read as MiB. "
         f"The last column holds {FLOOR} (bench/floor.py: a bare Python loop, no DNS checks) to "
         "the same targets: where even it misses one, CPython on this machine cannot reach it."),
        ("Validity of the runs", checks_table(results),
         "CPU % is of one CPU over the run. 'other processes' is machine CPU that neither the "
         "server, NSD nor dnsperf used: other work on the VM, a reason to distrust that run."),
    ]
    headline, mixed = measured(results, HEADLINE), measured(results, mix.FIGURES)
    skip = set() if headline else {"Throughput", "Latency", "Memory", "Ratio", "Performance targets"}
    if not mixed:
        skip.add("A realistic")
    if not (headline or mixed):
        skip.add("Validity")
    for title, table, note in sections:
        if not any(title.startswith(s) for s in skip):
            out += [f"## {title}", "", table, "", note, ""]
    notes = [f"- {s}: {n}" for s, n in results.notes.items()] + _failure_lines(results)
    noisy = [s for s in results.servers if any(v > NOISY_CPU for v in results.values(s, "other_cpu"))]
    if noisy:
        notes.append(f"- other work used more than {NOISY_CPU:g} % of a CPU during some full-speed runs of "
                     f"{', '.join(noisy)} (validity table): read their spreads as the machine's noise, "
                     "prefer q/CPU-s, or rerun on a quiet machine.")
    if notes:
        out += ["## Notes and failures", "", *notes, ""]
    out += ["## Set-up", "", _table(["", ""], [[k, v] for k, v in env.items()]), ""]
    out += ["## Per-round figures", "", "<details><summary>every round</summary>", "",
            per_round_table(results), "", "</details>", ""]
    return "\n".join(out)


# --- chart -------------------------------------------------------------------------------------

CHART_METRICS = (THROUGHPUT[1], THROUGHPUT[0], THROUGHPUT[3], THROUGHPUT[2],
                 LATENCY[1], LATENCY[4], FOOTPRINT[1], FOOTPRINT[4])


def chart(results: Results, path: Path) -> Path | None:
    """Bars of the medians with min–max whiskers, one panel per headline figure; then one line
    panel per curve figure, each server a line."""
    try:
        import matplotlib
    except ImportError:
        return None  # the `bench` extra is not installed: tables only
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = tuple(m for m in CHART_METRICS + mix.FIGURES[:2] if measured(results, (m,)))
    lines = curves.panels(results)
    if not (bars or lines):
        return None  # nothing measured: no chart
    rows = -(-(len(bars) + len(lines)) // 4)
    fig, grid = plt.subplots(rows, 4, figsize=(16, 3.75 * rows), squeeze=False)
    axes = list(grid.flat)
    for ax in axes[len(bars) + len(lines):]:
        ax.set_visible(False)
    for ax, (curve, figure) in zip(axes[len(bars):], lines, strict=False):
        curves.draw(ax, results, curve, figure, REFERENCE)
    servers = results.servers
    for ax, metric in zip(axes, bars, strict=False):
        medians, low, high = [], [], []
        for s in servers:
            values = results.values(s, metric.key)
            mid = statistics.median(values) if values else 0.0
            medians.append(mid)
            low.append(mid - min(values) if values else 0.0)
            high.append(max(values) - mid if values else 0.0)
        colors = ["tab:orange" if s == REFERENCE else "tab:blue" for s in servers]
        ax.bar(servers, medians, yerr=[low, high], color=colors, capsize=4)
        arrow = "higher is better" if metric.higher_is_better else "lower is better"
        ax.set_title(f"{metric.title}\n{arrow}", fontsize=10)
        limit = dict((m.key, v) for m, v in ABSOLUTE_TARGETS).get(metric.key)
        if limit is not None:
            ax.axhline(limit, color="tab:red", linestyle="--", linewidth=1, label="target")
            ax.legend(fontsize=8)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"splitdns vs peers — median of {results.env.get('rounds_done', results.rounds)} "
                 "round(s), whiskers min–max", fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / (3.75 * rows)))  # 0.4 inch for the title on top
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write(results: Results, out_dir: Path) -> tuple[Path, Path | None]:
    """bench/results.md and bench/results.png; returns their paths (no PNG without matplotlib)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    png = chart(results, out_dir / "results.png")
    md = out_dir / "results.md"
    md.write_text(markdown(results, png.name if png else None))
    return md, png
