"""How `splitdns check` grows with the size of a Corefile: seconds for generated Corefiles of N
server blocks (each a zone with a forward and a cache) and of one block with N forward lines.

    .venv/bin/python -m bench.check_scale [--sizes 2500,5000,10000,20000]

Linear growth shows as a flat "ms per 1,000" column; a check that compares every pair of zones or
forward lines doubles it at each doubling of N. The figures are in bench/README.md ("check on big
Corefiles"); no test asserts a time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from splitdns.kube.check import checker


def blocks(n: int) -> str:
    """A catch-all and N zone blocks, each with a forward and a cache."""
    out = [".:53 {\n forward . 10.96.0.10\n}\n"]
    out += [f"zone{i}.example.org:53 {{\n forward . 192.0.2.{i % 250 + 1}\n cache 30\n}}\n" for i in range(n)]
    return "".join(out)


def forward_lines(n: int) -> str:
    """One `.` block with N forward lines for distinct zones, then the catch-all forward."""
    lines = [f" forward z{i}.example.org 192.0.2.{i % 250 + 1}\n" for i in range(n)]
    return ".:53 {\n" + "".join(lines) + " forward . 10.96.0.10\n}\n"


SHAPES: dict[str, Callable[[int], str]] = {"server blocks": blocks,
                                           "forward lines in one block": forward_lines}


def seconds(text: str, workdir: Path) -> float:
    path = workdir / "Corefile"
    path.write_text(text, encoding="utf-8")
    began = time.perf_counter()
    checker.check([str(path)], checker.Options())
    return time.perf_counter() - began


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.check_scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="2500,5000,10000,20000",
                   help="the values of N, comma-separated (default 2500,5000,10000,20000)")
    sizes = [int(s) for s in p.parse_args(argv).sizes.split(",")]
    print("splitdns check on big Corefiles (one run each, in process)")
    print(f"{'shape':<28}{'N':>8}{'seconds':>10}{'ms per 1,000':>14}")
    with tempfile.TemporaryDirectory(prefix="splitdns-check-scale-") as tmp:
        for shape, make in SHAPES.items():
            for n in sizes:
                took = seconds(make(n), Path(tmp))
                print(f"{shape:<28}{n:>8}{took:>10.2f}{took / n * 1e6:>14.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
