"""Counters kept as plain integers on the hot path; `exposition` turns them into Prometheus metrics.

A labelled prometheus_client counter costs a hundred times what a dict increment costs
(bench/README.md, "Figures behind the code"); and prometheus_client is imported only when a
`prometheus` directive asks.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

# CoreDNS: prometheus.ExponentialBuckets(0.00025, 2, 16)
BUCKETS = tuple(0.00025 * 2 ** i for i in range(16))
MONITORED_TYPES = {1: "A", 28: "AAAA", 5: "CNAME", 2: "NS", 12: "PTR", 6: "SOA", 15: "MX",
                   16: "TXT", 33: "SRV", 65: "HTTPS", 64: "SVCB", 255: "ANY", 13: "HINFO"}
RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}


def type_label(qtype: int) -> str:
    return MONITORED_TYPES.get(qtype, "other")


class Histogram:
    __slots__ = ("counts", "sum", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.sum = 0.0
        self.total = 0

    def observe(self, seconds: float, times: int = 1) -> None:
        self.counts[bisect.bisect_left(BUCKETS, seconds)] += times
        self.sum += seconds * times
        self.total += times

    def buckets(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip(BUCKETS, self.counts, strict=False):
            running += count
            out.append((repr(bound), running))
        out.append(("+Inf", self.total))
        return out


@dataclass
class ZoneStats:
    """Everything counted for one server block; the shell increments, the collector reads."""

    requests: defaultdict[tuple[str, str, str], int] = field(default_factory=lambda: defaultdict(int))
    responses: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    durations: defaultdict[str, Histogram] = field(default_factory=lambda: defaultdict(Histogram))
    cache_hits: int = 0
    cache_misses: int = 0
    served_stale: int = 0
    prefetches: int = 0  # cache `prefetch` refreshes started
    upstream: defaultdict[tuple[str, str], Histogram] = field(
        default_factory=lambda: defaultdict(Histogram))
    loops_detected: int = 0
    private_removed: int = 0  # addresses `private_addresses` took out of replies

    def answered(self, proto: str, family: str, qtype: int, reply: bytes, seconds: float) -> None:
        self.answered_alike(proto, family, qtype, reply[3] & 0xF if len(reply) > 3 else -1, seconds)

    def answered_alike(self, proto: str, family: str, qtype: int, rcode: int, seconds: float,
                       times: int = 1) -> None:
        """`times` replies of one kind, each after `seconds` (a batch of cache hits)."""
        label = type_label(qtype)
        self.requests[(proto, family, label)] += times
        self.responses[RCODES.get(rcode, "other")] += times
        self.durations[label].observe(seconds, times)


@dataclass
class ProcessStats:
    reloads_failed: int = 0
    reload_hash: str = ""
    internal_errors: Callable[[], int] = lambda: 0
    dropped_mismatched: Callable[[], int] = lambda: 0
    dropped_unparseable: Callable[[], int] = lambda: 0
