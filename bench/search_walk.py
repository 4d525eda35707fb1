"""`make bench`'s search-walk figure: what one getaddrinfo costs a pod, in queries and time.

    python -m bench.search_walk [--reps N] [--delay-ms D]

Real glibc (`getent ahosts`) and real musl (a getaddrinfo client built with musl-gcc) look
names up in a pod namespace whose resolv.conf and Corefile are what `splitdns render` writes
(tests/lab/search_walk.py), three ways: with autopath (the default: `autopath` and
`k8s_schema` in the cluster block), without (`render --no-autopath`), and with CoreDNS's
documented workaround instead, `ndots:1` in the pod's dnsConfig (without autopath). Per
lookup: the queries the client sent (splitdns's /metrics), the queries the stand-in upstreams
were asked (their own logs), whether the answer was right, and the median wall time of the
client process over --reps fresh names (every stand-in answers after --delay-ms, a same-node
kube-dns round trip; the ndots:1 column is counted, not timed, as the others are measured).
Needs root (network namespaces) and musl-gcc (musl-tools).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tests.lab.search_walk import WalkLab, walk_lab

CLIENTS = ("getent", "musl")
MODES = (("autopath", True, None), ("no autopath", False, None), ("ndots:1, CoreDNS's advice", False, 1))
# (label, name to look up, the address it must give); each lookup's first label is its own, so
# no lookup is answered from another's cache and its queries are told apart by that label.
LOOKUPS = (
    ("short cluster name", "web-{i}", "10.96.0.20"),
    ("cluster FQDN", "api-{i}.default.svc.cluster.local", "10.96.0.21"),
    ("public name", "www-{i}.example.net", "192.0.2.80"),
    ("private name", "db-{i}.svc.acme.internal", "10.8.0.5"),
    ("dotted name via search", "job-{i}.default", "10.96.0.22"),
)


def names(tag: str) -> dict[str, dict[str, str]]:
    return {"kube-dns": {f"web-{tag}.default.svc.cluster.local.": "10.96.0.20",
                         f"api-{tag}.default.svc.cluster.local.": "10.96.0.21",
                         f"job-{tag}.default.svc.cluster.local.": "10.96.0.22"},
            "catch-all": {f"www-{tag}.example.net.": "192.0.2.80"},
            "tunnel": {f"db-{tag}.svc.acme.internal.": "10.8.0.5"}}


def tags(reps: int) -> list[str]:
    return [f"{client[0]}{rep}" for client in CLIENTS for rep in range(reps)]


def measure(lab: WalkLab, client: str, name: str, want: str) -> tuple[int, int, bool, float]:
    """(client queries, upstream queries, right answer, seconds) of one lookup."""
    sent = lab.client_queries()
    before = lab.asked()
    start = time.perf_counter()
    code, out = lab.lookup(client, name)
    took = time.perf_counter() - start
    after = lab.asked()
    mark = name.split(".")[0] + "."
    upstream = sum(1 for role in after for q in after[role][len(before[role]):] if mark in q)
    return lab.client_queries() - sent, upstream, code == 0 and want in out, took


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.search_walk", description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=5, help="fresh names per lookup and client (5)")
    p.add_argument("--delay-ms", type=float, default=1.0, help="each stand-in's reply delay (1 ms)")
    a = p.parse_args(argv)
    merged: dict[str, dict[str, str]] = {}
    for tag in tags(a.reps):
        for role, found in names(tag).items():
            merged.setdefault(role, {}).update(found)
    rows: dict[tuple[str, str, str], list[tuple[int, int, bool, float]]] = {}
    for mode, autopath, ndots in MODES:
        with tempfile.TemporaryDirectory(prefix="bench-walk-") as tmp, \
                walk_lab(Path(tmp), merged, autopath=autopath, ndots=ndots, delay_ms=a.delay_ms) as lab:
            for client in CLIENTS:
                for rep in range(a.reps):
                    for label, name, want in LOOKUPS:
                        got = measure(lab, client, name.format(i=f"{client[0]}{rep}"), want)
                        rows.setdefault((label, client, mode), []).append(got)
    print(f"search walk: one getaddrinfo (A and AAAA), search list of 3, ndots:5 unless said; "
          f"stand-ins answer after {a.delay_ms:g} ms; median of {a.reps} fresh names")
    print("  cells: queries the client sent / queries upstream / lookup time (wrong: the answer was)")
    head = f"  {'lookup':24} {'client':7}" + "".join(f" {mode:>27}" for mode, _, _ in MODES)
    print(head)
    for label, _, _ in LOOKUPS:
        for client in CLIENTS:
            cells = []
            for mode, _, ndots in MODES:
                got = rows[(label, client, mode)]
                sent = statistics.median(g[0] for g in got)
                upstream = statistics.median(g[1] for g in got)
                right = all(g[2] for g in got)
                ms = statistics.median(g[3] for g in got) * 1000
                timing = f"{ms:.1f} ms" if ndots is None else "counted"
                cells.append(f"{sent:g} / {upstream:g} / {timing}" + ("" if right else " WRONG"))
            print(f"  {label:24} {client:7}" + "".join(f" {c:>27}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
