"""Counters kept as plain integers on the hot path; `exposition` turns them into Prometheus metrics.

A labelled prometheus_client counter costs a hundred times what a dict increment costs
(bench/README.md, "Figures behind the code"); and prometheus_client is imported only when a
`prometheus` directive asks.
Tests: tests/test_exposition.py, tests/test_datagrams.py.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from splitdns.core.confinement import Canary

# CoreDNS: prometheus.ExponentialBuckets(0.00025, 2, 16)
BUCKETS = tuple(0.00025 * 2 ** i for i in range(16))
MONITORED_TYPES = {1: "A", 28: "AAAA", 5: "CNAME", 2: "NS", 12: "PTR", 6: "SOA", 15: "MX",
                   16: "TXT", 33: "SRV", 65: "HTTPS", 64: "SVCB", 255: "ANY", 13: "HINFO"}
RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}
# CoreDNS's buckets for coredns_dns_request_size_bytes and coredns_dns_response_size_bytes.
SIZE_BUCKETS = (0, 100, 200, 300, 400, 511, 1023, 2047, 4095, 8291, 16e3, 32e3, 48e3, 64e3)
# The `plugin` label of coredns_dns_responses_total: who gave the answer.
CACHE, FORWARD = "cache", "forward"


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


def sized(counts: dict[int, int]) -> tuple[list[tuple[str, float]], float]:
    """Exact sizes counted on the query path (one dict increment each), as the buckets and
    sum of a histogram: the bucketing is done here, at scrape time."""
    per = [0] * (len(SIZE_BUCKETS) + 1)
    total = 0.0
    for size, times in counts.items():
        per[bisect.bisect_left(SIZE_BUCKETS, size)] += times
        total += size * times
    out: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip(SIZE_BUCKETS, per, strict=False):
        running += count
        out.append((repr(float(bound)), running))
    out.append(("+Inf", running + per[-1]))
    return out, total


def hit_sizes(qsize: int, rsize: int) -> int:
    """A cache hit's query and reply sizes, packed in one int: counted apart from the hit's
    kind, so that hits of names of many sizes stay few kinds to count per batch."""
    return qsize | rsize << 16


@dataclass
class ZoneStats:
    """Everything counted for one server block; the shell increments, the collector reads."""

    requests: defaultdict[tuple[str, str, str], int] = field(default_factory=lambda: defaultdict(int))
    responses: defaultdict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    durations: defaultdict[str, Histogram] = field(default_factory=lambda: defaultdict(Histogram))
    # Exact sizes by protocol, bucketed at scrape time (`sized`).
    request_sizes: defaultdict[str, defaultdict[int, int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    response_sizes: defaultdict[str, defaultdict[int, int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    udp_hit_sizes: defaultdict[int, int] = field(default_factory=lambda: defaultdict(int))  # hit_sizes
    cache_hits: int = 0
    denial_hits: int = 0  # of cache_hits, those of a denial (NXDOMAIN, NODATA) or SERVFAIL entry
    failed_fast_tunnel: int = 0  # SERVFAIL at once because the tunnel is down
    cache_misses: int = 0
    served_stale: int = 0
    prefetches: int = 0  # cache `prefetch` refreshes started
    upstream: defaultdict[tuple[str, str], Histogram] = field(
        default_factory=lambda: defaultdict(Histogram))
    loops_detected: int = 0
    private_removed: int = 0  # addresses `private_addresses` took out of replies
    # Names answered here from what the pod knows (core/names.py), by kind.
    guarded: dict[str, int] = field(default_factory=lambda: {"leak": 0, "impossible": 0, "no_ipv6": 0})
    tunnel: TunnelSince = field(default_factory=lambda: TunnelSince())
    canary: Canary = field(default_factory=Canary)  # the latest tunnel-up's canary (confinement)

    def answered(self, proto: str, family: str, qtype: int, reply: bytes, seconds: float,
                 qsize: int = 0, plugin: str = FORWARD) -> None:
        self.answered_alike(proto, family, qtype, reply[3] & 0xF if len(reply) > 3 else -1, seconds,
                            1, plugin)
        self.request_sizes[proto][qsize] += 1
        self.response_sizes[proto][len(reply)] += 1

    def answered_alike(self, proto: str, family: str, qtype: int, rcode: int, seconds: float,
                       times: int = 1, plugin: str = FORWARD) -> None:
        """`times` replies of one kind, each after `seconds` (a batch of cache hits)."""
        label = type_label(qtype)
        self.requests[(proto, family, label)] += times
        self.responses[(RCODES.get(rcode, "other"), plugin)] += times
        self.durations[label].observe(seconds, times)

    def hits(self, family: str, qtype: int, rcode: int, denial: int, seconds: float, times: int,
             proto: str = "udp") -> None:
        """`times` cache hits alike (of a denial entry when `denial`), each answered after
        `seconds`: the one place hits are counted. Their sizes are counted apart (`hit`,
        and the hot path in `udp_hit_sizes`)."""
        self.cache_hits += times
        if denial:
            self.denial_hits += times
        self.answered_alike(proto, family, qtype, rcode, seconds, times, CACHE)

    def hit(self, proto: str, family: str, qtype: int, reply: bytes, seconds: float, qsize: int,
            denial: int) -> None:
        """One cache hit sent off the hot path (over TCP, or a query the fast reader left)."""
        self.hits(family, qtype, reply[3] & 0xF, denial, seconds, 1, proto)
        if proto == "udp":
            self.udp_hit_sizes[hit_sizes(qsize, len(reply))] += 1
        else:
            self.request_sizes[proto][qsize] += 1
            self.response_sizes[proto][len(reply)] += 1

    def sizes(self) -> tuple[dict[str, dict[int, int]], dict[str, dict[int, int]]]:
        """Request and response sizes by protocol, the UDP hits' folded in (at scrape time)."""
        requests = {proto: dict(counts) for proto, counts in self.request_sizes.items()}
        responses = {proto: dict(counts) for proto, counts in self.response_sizes.items()}
        udp_requests, udp_responses = requests.setdefault("udp", {}), responses.setdefault("udp", {})
        for packed, times in self.udp_hit_sizes.items():
            qsize, rsize = packed & 0xFFFF, packed >> 16
            udp_requests[qsize] = udp_requests.get(qsize, 0) + times
            udp_responses[rsize] = udp_responses.get(rsize, 0) + times
        if not udp_requests:
            del requests["udp"], responses["udp"]
        return requests, responses


# The tunnel's state as a bounded label: what OpenVPN (or the hook's state file, or another
# tunnel kind) said, by the start of the reason it gave, in `tunnel_reason`.
_TUNNEL_REASONS = (
    ("RECONNECTING", "reconnecting"), ("EXITING", "exiting"), ("cannot reach", "unreachable"),
    ("OpenVPN's management interface closed", "unreachable"), ("no state file", "no_state"),
    ("cannot read", "no_state"), ("the state file", "no_state"),
    ("openconnect lost the gateway", "reconnecting"), ("no file at", "no_state"),
)
TUNNEL_REASONS = ("connected", "no_dns_pushed", "unknown", "reconnecting", "exiting", "connecting",
                  "unreachable", "no_state", "down")


def tunnel_reason(status: str, up: bool, reason: str) -> str:
    """One of TUNNEL_REASONS for a tunnel's (status, up, free-text reason)."""
    if up:
        return "connected"
    if status == "up":
        return "no_dns_pushed"
    if status == "unknown" and not reason.startswith("no state file"):
        return "unknown"
    for prefix, label in _TUNNEL_REASONS:
        if reason.startswith(prefix):
            return label
    word = reason.split(":", 1)[0]
    return "connecting" if word.isupper() and word.isalpha() else "down"


@dataclass
class TunnelSince:
    """When a zone's tunnel last went up or down (wall clock), for how long it has been so."""

    up: bool | None = None
    since: float = 0.0

    def seen(self, up: bool, wall: float) -> None:
        if up is not self.up:
            self.up, self.since = up, wall


@dataclass
class ProcessStats:
    reloads_failed: int = 0
    reload_hash: str = ""
    internal_errors: Callable[[], int] = lambda: 0
    dropped_mismatched: Callable[[], int] = lambda: 0
    dropped_unparseable: Callable[[], int] = lambda: 0
