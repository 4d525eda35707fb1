"""How cost grows with the work: the curves `make bench` draws, and their tables and panels.

Each curve is one x axis (names cached, server blocks, queries outstanding) and the figures
measured at each of its points, for splitdns and, side by side, Unbound doing the same work.
bench/growth.py measures them; a figure is stored per round under `key(curve, figure, x)`,
so a cell is the median [min–max] over rounds like every other figure.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.cells import Metric, cell, table

if TYPE_CHECKING:
    from bench.report import Results

SERVERS = ("splitdns", "unbound-1t")  # the servers that can do each curve's work alike


@dataclass(frozen=True)
class Curve:
    name: str                      # what --curves selects
    title: str
    x_label: str
    figures: tuple[Metric, ...]
    full: tuple[int, ...]          # the points of a full run
    quick: tuple[int, ...]         # the points of --quick: cheap, a check that it works
    note: str = ""                 # what the curve shows, under its table in results.md
    x_short: str = ""              # the x axis in a chart panel's title

    def points(self, quick: bool) -> tuple[int, ...]:
        return self.quick if quick else self.full


NAMES = Curve(
    "names", "Memory against names cached", "names asked once each",
    (Metric("rss", "RSS", "MiB", False),
     Metric("entries", "entries held", "n"),
     Metric("fill_qps", "fill rate on the way to this point", "qps"),
     Metric("fill_tail_qps", "fill rate, last second of the way", "qps")),
    (10_000, 100_000, 1_000_000), (2_000, 20_000),
    "Each server started fresh and filled with new names asked once each up to every point in turn. "
    "splitdns: `success` capacity of the largest point, `limits { cache_memory }` at its default "
    "(64 MB of reply bytes), so the entries it holds stop growing where that limit starts evicting; "
    "Unbound: msg/rrset caches of 128/256 MB. A cliff in eviction would show as a fill rate that "
    "collapses in the last second (dnsmasq's falls to about 76 q/s once its cache is full).",
    "names cached")
ZONES = Curve(
    "zones", "Cache hits against the number of zones", "server blocks (splitdns) / forward zones (Unbound)",
    (Metric("hit_qcpu", "hit q/CPU-s", "q/CPU-s"),
     Metric("hit_qps", "hit qps", "qps")),
    (2, 20, 200), (2, 200),
    "A fresh server per point with that many blocks (forward zones for Unbound), all to the same "
    "upstream; 200 hit names spread over every zone, at full speed. Flat means routing does not "
    "grow with the number of zones.", "zones")
OUTSTANDING = Curve(
    "outstanding", "Cache-miss latency against queries outstanding", "queries outstanding (dnsperf -q)",
    (Metric("p50", "miss p50", "ms", False),
     Metric("p99", "miss p99", "ms", False),
     Metric("qps", "miss qps", "qps"),
     Metric("noerror", "NOERROR %", "%")),
    (10, 100, 1000), (10, 1000),
    "New names at full speed with dnsperf keeping this many queries in flight. Once the server is "
    "saturated, latency is queue length over throughput (Little's law) and grows with the queue; "
    "splitdns's pending cap (1000 per zone) answers REFUSED beyond it, which NOERROR % shows.",
    "queries outstanding")
RELOAD = Curve(
    "reload", "Reload against Corefile size", "server blocks (splitdns) / forward zones (Unbound)",
    (Metric("reload_ms", "reload: signal to first answer of the new config", "ms", False),
     Metric("rss_start", "RSS after start", "MiB", False),
     Metric("rss_reload", "RSS after the reload", "MiB", False)),
    (2, 20, 200), (2, 200),
    "The same servers as the zones curve, then a configuration with one zone more, a signal "
    "(SIGUSR1 for splitdns with its `reload` directive, SIGHUP for Unbound), and the time until a "
    "name only the new configuration routes is answered.", "blocks in the config")
CURVES = (NAMES, ZONES, OUTSTANDING, RELOAD)
BY_NAME = {c.name: c for c in CURVES}


def key(curve: Curve, figure: Metric, x: int) -> str:
    return f"curve.{curve.name}.{figure.key}@{x}"


def select(text: str) -> tuple[Curve, ...]:
    """`--curves` names, comma-separated; "all" or "none". Raises ValueError naming the unknown."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return CURVES
    if names == ["none"]:
        return ()
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(f"unknown curve {', '.join(unknown)}: choose from {', '.join(BY_NAME)}, all, none")
    return tuple(c for c in CURVES if c.name in names)


def measured_points(results: Results, curve: Curve) -> list[int]:
    """Every x at which some server has some figure of this curve, in order."""
    found = set()
    for server in results.servers:
        for k in results.figures.get(server, {}):
            prefix = f"curve.{curve.name}."
            if k.startswith(prefix) and results.values(server, k):
                found.add(int(k.rsplit("@", 1)[1]))
    return sorted(found)


def curve_table(results: Results, curve: Curve) -> str:
    """One row per server and figure, one column per point."""
    xs = measured_points(results, curve)
    rows = []
    for server in results.servers:
        for figure in curve.figures:
            cells = [cell(results.values(server, key(curve, figure, x)), figure.unit) for x in xs]
            if any(c != "–" for c in cells):
                rows.append([server, figure.title, *cells])
    return table(["server", "figure", *(f"{x:,}" for x in xs)], rows)


def tables(results: Results) -> list[tuple[str, str, str]]:
    """(title, table, note) of each curve that has figures."""
    return [(f"{c.title} (x: {c.x_label})", curve_table(results, c), c.note) for c in CURVES
            if measured_points(results, c)]


def panels(results: Results) -> list[tuple[Curve, Metric]]:
    """The chart's line panels: each curve figure that some server measured at two points or more."""
    out = []
    for c in CURVES:
        xs = measured_points(results, c)
        for figure in c.figures:
            if figure.key in ("hit_qps", "fill_tail_qps", "noerror"):
                continue  # in the tables; the panels keep to what each curve is about
            if any(len(series(results, server, c, figure, xs)[0]) >= 2 for server in results.servers):
                out.append((c, figure))
    return out


def series(results: Results, server: str, c: Curve, figure: Metric,
           xs: Sequence[int]) -> tuple[list[int], list[float]]:
    """The points this server has, and the median at each."""
    have = [(x, results.values(server, key(c, figure, x))) for x in xs]
    return [x for x, v in have if v], [statistics.median(v) for _, v in have if v]


def draw(ax: Any, results: Results, c: Curve, figure: Metric, reference: str) -> None:
    """One line per server, splitdns in the bar charts' colour; log x (the points are decades)."""
    xs = measured_points(results, c)
    for server in results.servers:
        px, py = series(results, server, c, figure, xs)
        if px:
            ax.plot(px, py, marker="o", label=server,
                    color="tab:orange" if server == reference else None)
    ax.set_xscale("log")
    ax.set_xticks(xs, [f"{x:,}" for x in xs])
    ax.minorticks_off()
    arrow = "higher is better" if figure.higher_is_better else "lower is better"
    ax.set_title(f"{figure.title}\nagainst {c.x_short or c.x_label} ({arrow})", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)

