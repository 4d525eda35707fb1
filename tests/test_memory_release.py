"""A server's freed large tables go back to the system (`serve.pin_mmap_threshold`).

Under a flood of new names a full cache evicts and inserts without end, and its dict's table
is rebuilt now and then: a block of tens of MiB allocated, the old one freed. glibc's default
keeps such a block in the heap once one of its size was freed, so the process grew by the
table's size at each rebuild. The check runs in a fresh interpreter (glibc's state is per
process) and reads its RSS: what is asserted is where the freed memory went, not a speed.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import os, sys
from splitdns.commands import serve

def rss_mib():
    with open(f"/proc/{os.getpid()}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024

pinned = serve.pin_mmap_threshold() if sys.argv[1] == "pinned" else None
before = rss_mib()
for _ in range(3):  # a table of 20 MiB rebuilt three times, with small objects made meanwhile
    table = bytearray(20 * 1024 * 1024)
    del table
    kept = [bytes(100) for _ in range(1000)]
print(pinned, round(rss_mib() - before, 1))
"""


def _grown(mode: str) -> tuple[str, float]:
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True,
                          timeout=60, check=True)
    pinned, grown = done.stdout.split()
    return pinned, float(grown)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt, /proc")
def test_a_freed_large_table_leaves_the_process_rss_once_serve_pins_the_threshold() -> None:
    pinned, grown = _grown("pinned")
    if pinned == "False":
        pytest.skip("no glibc mallopt here (musl)")
    assert grown < 5, f"the freed 20 MiB stayed: the process grew by {grown} MiB"
    _, unpinned = _grown("default")  # the same run without the pin: what it prevents
    assert unpinned > 15, f"glibc's default kept only {unpinned} MiB: the check shows nothing here"
