"""What `splitdns top` shows, computed from two readings of a resolver's /metrics: per zone the
query rate, the rcode mix, the cache hit ratio, the latency percentiles, the upstreams' health and
the tunnel's state. Pure: the text of /metrics in, rows out (the terminal is `top`'s).
Tests: tests/test_top.py.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

Labels = frozenset[tuple[str, str]]
RCODES = ("NOERROR", "NXDOMAIN", "SERVFAIL", "REFUSED")


@dataclass(frozen=True)
class Reading:
    """One scrape: every sample by (name, labels), and when it was taken."""

    at: float
    samples: dict[tuple[str, Labels], float]

    @classmethod
    def parse(cls, text: str, at: float) -> Reading:
        samples = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples[(s.name, frozenset(s.labels.items()))] = s.value
        return cls(at, samples)

    def by(self, name: str, key: str) -> dict[str, list[tuple[dict[str, str], float]]]:
        """The samples of `name`, grouped by the value of label `key`."""
        out: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
        for (n, labels), value in self.samples.items():
            if n == name:
                d = dict(labels)
                out[d.get(key, "")].append((d, value))
        return out


@dataclass
class ZoneRow:
    zone: str
    qps: float = 0.0
    rcodes: dict[str, float] = field(default_factory=dict)  # share of answers, by rcode
    hit_ratio: float | None = None
    p50: float | None = None
    p99: float | None = None
    upstreams: list[tuple[str, bool]] = field(default_factory=list)
    tunnel: str | None = None  # "up", "down (reason)"; None: not a tunnel zone
    ready: bool | None = None


def rows(now: Reading, before: Reading | None) -> list[ZoneRow]:
    """One row per zone; rates over the time between the readings (or since the process started,
    for the first one)."""
    if before is None:
        started = next((v for (n, _), v in now.samples.items() if n == "process_start_time_seconds"), now.at)
        before = Reading(min(started, now.at - 1e-3), {})
    seconds = max(now.at - before.at, 1e-3)
    zones = sorted({z for name in ("coredns_dns_requests_total", "splitdns_upstream_healthy",
                                   "splitdns_zone_ready", "splitdns_tunnel_info")
                    for z in now.by(name, "zone") if z not in ("", "dropped")})
    out = []
    for zone in zones:
        row = ZoneRow(zone)
        row.qps = _delta(now, before, "coredns_dns_requests_total", zone=zone) / seconds
        answers = {rcode: _delta(now, before, "coredns_dns_responses_total", zone=zone, rcode=rcode)
                   for rcode in _labels(now, "coredns_dns_responses_total", "rcode", zone=zone)}
        total = sum(answers.values())
        row.rcodes = {rcode: n / total for rcode, n in answers.items() if n} if total else {}
        cached_as = _zones_of(now, zone)
        requests = _delta(now, before, "coredns_cache_requests_total", zones=cached_as)
        if requests:
            row.hit_ratio = _delta(now, before, "coredns_cache_hits_total", zones=cached_as) / requests
        buckets = _buckets(now, before, zone)
        row.p50, row.p99 = _quantile(0.5, buckets), _quantile(0.99, buckets)
        health = now.by("splitdns_upstream_healthy", "zone")[zone]
        row.upstreams = sorted((d["to"], v == 1) for d, v in health)
        info = now.by("splitdns_tunnel_info", "zone").get(zone)
        if info:
            labels = info[0][0]
            state = labels.get("state", "?")
            row.tunnel = state if state == "up" else f"{state} ({labels.get('reason', '?')})"
        ready = now.by("splitdns_zone_ready", "zone").get(zone)
        row.ready = ready[0][1] == 1 if ready else None
        out.append(row)
    return out


def _labels(r: Reading, name: str, key: str, **match: str) -> set[str]:
    return {d[key] for (n, labels), _ in r.samples.items() if n == name
            for d in [dict(labels)] if key in d and all(d.get(k) == v for k, v in match.items())}


def _sum(r: Reading, name: str, **match: str) -> float:
    return sum(v for (n, labels), v in r.samples.items() if n == name
               and all(dict(labels).get(k) == want for k, want in match.items()))


def _delta(now: Reading, before: Reading, name: str, **match: str) -> float:
    return max(0.0, _sum(now, name, **match) - _sum(before, name, **match))  # a restart reads as 0


def _zones_of(r: Reading, zone: str) -> str:
    """The cache series' `zones` label (a block's zones) of the block whose first zone is `zone`."""
    for (n, labels), _ in r.samples.items():
        if n == "coredns_cache_requests_total":
            zones = dict(labels).get("zones", "")
            if zones.split(" ")[0] == zone:
                return zones
    return zone


def _buckets(now: Reading, before: Reading, zone: str) -> list[tuple[float, float]]:
    name = "coredns_dns_request_duration_seconds_bucket"
    bounds = _labels(now, name, "le", zone=zone)
    return sorted((float(le), _delta(now, before, name, zone=zone, le=le)) for le in bounds)


def _quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Prometheus's histogram_quantile over cumulative buckets (linear within a bucket)."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * ((rank - below) / (count - below) if count > below else 0)
        lower, below = bound, count
    return lower
