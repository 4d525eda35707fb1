"""bench/wakeup.py times the real read callback over real loopback sockets; here, that it
runs both shapes (a pod's pace, a queue) and gets every reply back. No figure is judged."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from bench import wakeup


def test_wakeup_times_hits_at_a_pace_and_in_a_queue_and_every_reply_comes_back() -> None:
    # _per_hit stops with SystemExit on the first round that lacks a reply.
    figures = asyncio.run(wakeup.measure(rounds=40, queue=5))
    assert sorted(figures) == ["pace", "queue of 5"]
    assert all(0 < micros < 1e6 for micros in figures.values())


def test_wakeup_refuses_a_queue_larger_than_a_batch() -> None:
    done = subprocess.run([sys.executable, "-m", "bench.wakeup", "--queue", "65"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "queue within 1..64" in done.stderr
