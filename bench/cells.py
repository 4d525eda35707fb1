"""The cells of the benchmark's tables: what a figure is, and how one is printed.

A cell is "median [min–max]" over rounds; a table is Markdown, which reads as well in a
terminal as in bench/results.md.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: str            # "qps", "q/CPU-s", "ms", "MiB", "%", "n"
    higher_is_better: bool = True

    @property
    def title(self) -> str:
        return self.label if self.unit in self.label else f"{self.label} ({self.unit})"


def number(value: float, unit: str) -> str:
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
    mid = number(statistics.median(data), unit)
    if len(data) == 1:
        return mid
    return f"{mid} [{number(min(data), unit)}–{number(max(data), unit)}]"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
