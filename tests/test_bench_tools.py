"""Benchmark pieces that need neither dnsperf nor NSD. No figure is judged here.

bench/wakeup.py times the real read callback over real loopback sockets: it must run both
shapes (a pod's pace, a queue) and get every reply back. bench/run.py's round order must
alternate, so that no server is always measured first."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from bench import peers, run, wakeup


def test_wakeup_times_hits_at_a_pace_and_in_a_queue_and_every_reply_comes_back() -> None:
    # _per_hit stops with SystemExit on the first round that lacks a reply.
    figures = asyncio.run(wakeup.measure(rounds=40, queue=5))
    assert sorted(figures) == ["pace", "queue of 5"]
    assert all(0 < micros < 1e6 for micros in figures.values())


def test_wakeup_refuses_a_queue_larger_than_a_batch() -> None:
    done = subprocess.run([sys.executable, "-m", "bench.wakeup", "--queue", "65"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "queue within 1..64" in done.stderr


def test_rounds_alternate_the_order_of_the_servers() -> None:
    names = [[name for name, _, _ in run.round_order(r)] for r in range(4)]
    forwards = [name for name, _, _ in peers.PEERS]
    assert names == [forwards, forwards[::-1], forwards, forwards[::-1]]
    assert names[0][0] == "splitdns" and names[1][-1] == "splitdns"
