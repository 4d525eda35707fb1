"""Turning per-round figures into the printed table, bench/results.md and the PNG chart.

Every figure is kept per round; a cell shows the median over rounds and [min–max]. Ratios
to splitdns are taken round by round (peer and splitdns measured minutes apart, on the
same machine state) and then summarised the same way.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

REFERENCE = "splitdns"
TARGET_PEER = "unbound-1t"
FLOOR = "python-floor"  # bench/floor.py: whether a target is reachable in CPython at all


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: str            # "qps", "q/CPU-s", "ms", "MiB", "%", "n"
    higher_is_better: bool = True

    @property
    def title(self) -> str:
        return self.label if self.unit in self.label else f"{self.label} ({self.unit})"


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


def _number(value: float, unit: str) -> str:
    if unit in ("qps", "q/CPU-s", "n"):
        return f"{value:.0f}"
    if unit == "ms":  # three significant digits, but never fewer than 3 decimals below 1 ms
        return f"{value:.3f}" if value < 1 else f"{value:.3g}" if value < 100 else f"{value:.0f}"
    if unit == "ratio":
        return f"{value:.2f}" if value >= 0.0995 else f"{value:.2g}"  # 0.0018, not 0.00
    return f"{value:.1f}"


def cell(values: Iterable[float], unit: str) -> str:
    """"median [min–max]"; just the value when there is one; "–" when none."""
    data = list(values)
    if not data:
        return "–"
    mid = _number(statistics.median(data), unit)
    if len(data) == 1:
        return mid
    return f"{mid} [{_number(min(data), unit)}–{_number(max(data), unit)}]"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


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
        for m in HEADLINE:
            row = results.figures.get(s, {}).get(m.key, [None] * results.rounds)
            if any(v is not None for v in row):
                rows.append([s, m.title] +
                            ["–" if v is None else _number(v, m.unit) for v in row])
    return _table(header, rows)


def console(results: Results) -> str:
    """What `make bench` prints: the figures, the ratios and the targets."""
    parts = [
        "Throughput, dnsperf at full speed — median [min–max] over rounds",
        figures_table(results, THROUGHPUT),
        f"Latency at a fixed rate ({results.env.get('rate', '?')} qps), ms",
        figures_table(results, LATENCY),
        "Memory and start-up",
        figures_table(results, FOOTPRINT),
        "Ratio to splitdns, per round (peer ÷ splitdns)",
        ratio_table(results),
        "Performance targets",
        targets_table(results),
        "Validity of the runs",
        checks_table(results),
    ]
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
    for title, table, note in sections:
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
    """Bars of the medians with min–max whiskers, one panel per headline figure."""
    try:
        import matplotlib
    except ImportError:
        return None  # the `bench` extra is not installed: tables only
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(16, 7.5))
    servers = results.servers
    for ax, metric in zip(axes.flat, CHART_METRICS, strict=True):
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
    fig.tight_layout()
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
