"""What the results were measured on: machine, versions, placement, and the loop splitdns ran on."""

from __future__ import annotations

import hashlib
import os
import platform
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from bench import peers

if TYPE_CHECKING:
    from bench.run import Options, Placement

REPO = Path(__file__).resolve().parent.parent
_LOOP = re.compile(r"^\[INFO\] event loop: (.+)$", re.MULTILINE)


def describe(opts: Options, network: str, placement: Placement) -> dict[str, str]:
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                                  timeout=10, check=False).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""

    cpu_model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text()
                      .splitlines() if line.startswith("model name")), "unknown")
    # The tree under test may hold uncommitted work: a digest of its diff tells two such runs apart.
    diff = git("diff", "HEAD", "--", "src")
    dirty = f" + uncommitted src changes (diff sha256 {hashlib.sha256(diff.encode()).hexdigest()[:12]})" \
        if diff else ""
    env = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} CPUs ({cpu_model}), kernel {platform.release()}",
        "network": network,
        "placement": (f"server on CPU {placement.server}; dnsperf and NSD on CPU {placement.load}"
                      if placement.server is not None else "not pinned (fewer than 2 CPUs)"),
        "runs": f"{opts.rounds} round(s), dnsperf -l {opts.seconds:g} -c 4 -q 100 -t 2; "
                f"latency runs at -Q {opts.rate}",
        "rate": str(opts.rate),
        "splitdns": f"git {git('rev-parse', '--short', 'HEAD') or '?'}{dirty}, "
                    f"Python {platform.python_version()}",
    }
    for binary in ("dnsperf", "nsd", "unbound", "dnsmasq", "dnsdist", "coredns"):
        env[binary] = peers.version(binary)
    return env


def logged_event_loop(output_log: Path) -> str | None:
    """The event loop a splitdns process says it runs on (its "[INFO] event loop: ..." line at start)."""
    try:
        match = _LOOP.search(output_log.read_text(errors="replace"))
    except OSError:
        return None
    return match.group(1).strip() if match else None
