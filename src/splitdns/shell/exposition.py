"""/metrics: the server's counters as Prometheus metrics, read at scrape time.

Metric names and labels are CoreDNS's where the meaning is the same, so existing
dashboards work; ours (`splitdns_*`) cover what CoreDNS lacks. Query names never become
labels (unbounded cardinality). Imported only when a `prometheus` directive is configured.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from splitdns import __version__
from splitdns.core.metrics import ProcessStats, ZoneStats

if TYPE_CHECKING:
    from splitdns.core.zone import Zone

# CoreDNS's zone label for replies no zone gave (no zone matches, a class other than IN,
# FORMERR, NOTIMP): every answer is counted somewhere.
DROPPED = "dropped"


class ServerCollector(Collector):
    """Reads the live server's state at scrape time; `zones` returns (server label, Zone),
    `unrouted` (server label, the counts of replies no zone gave), `readiness` whether a
    `ready` directive defines readiness (splitdns_zone_ready is left out without one: no
    probe runs then, and a 0 would read as "not ready" on a dashboard)."""

    def __init__(self, zones: Callable[[], Iterable[tuple[str, Zone]]], process: ProcessStats,
                 unrouted: Callable[[], Iterable[tuple[str, ZoneStats]]] = lambda: (),
                 readiness: Callable[[], bool] = lambda: True) -> None:
        self.zones = zones
        self.process = process
        self.unrouted = unrouted
        self.readiness = readiness

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        yield from self._process()
        requests = CounterMetricFamily("coredns_dns_requests", "Counter of DNS requests made per zone, "
                                       "protocol and family.",
                                       labels=["server", "zone", "view", "proto", "family", "type"])
        responses = CounterMetricFamily("coredns_dns_responses", "Counter of response status codes.",
                                        labels=["server", "zone", "view", "rcode", "plugin"])
        durations = HistogramMetricFamily("coredns_dns_request_duration_seconds",
                                          "Histogram of the time (in seconds) each request took.",
                                          labels=["server", "zone", "view", "type"])
        cache = _CacheFamilies()
        upstream = _UpstreamFamilies(self.readiness())
        counted = [(server, zone.block.zones[0], zone.stats) for server, zone in self.zones()]
        counted += [(server, DROPPED, stats) for server, stats in self.unrouted()]
        for server, name, stats in counted:
            for (proto, family, qtype), count in stats.requests.items():
                requests.add_metric([server, name, "", proto, family, qtype], count)
            for rcode, count in stats.responses.items():
                responses.add_metric([server, name, "", rcode, ""], count)
            for qtype, hist in stats.durations.items():
                durations.add_metric([server, name, "", qtype], hist.buckets(), hist.sum)
        for server, zone in self.zones():
            cache.add(server, zone)
            upstream.add(zone)
        yield requests
        yield responses
        yield durations
        yield from cache.families()
        yield from upstream.families()

    def _process(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        info = GaugeMetricFamily("coredns_build_info", "A metric with a constant '1' value labeled by "
                                 "version, revision, and goversion from which CoreDNS was built.",
                                 labels=["version", "revision", "goversion"])
        info.add_metric([f"splitdns-{__version__}", "", "python"], 1)
        yield info
        yield CounterMetricFamily("coredns_reload_failed", "Counter of the number of failed reload attempts.",
                                  value=self.process.reloads_failed)
        version = GaugeMetricFamily("coredns_reload_version_info", "A metric with a constant '1' value "
                                    "labeled by hash, and value which type of hash generated.",
                                    labels=["hash", "value"])
        version.add_metric(["sha512", self.process.reload_hash], 1)
        yield version
        yield CounterMetricFamily("coredns_panics", "A metrics that counts the number of panics.",
                                  value=self.process.internal_errors())
        dropped = CounterMetricFamily("splitdns_upstream_replies_dropped",
                                      "Upstream datagrams dropped: forged (no match) or unparseable.",
                                      labels=["reason"])
        dropped.add_metric(["mismatch"], self.process.dropped_mismatched())
        dropped.add_metric(["unparseable"], self.process.dropped_unparseable())
        yield dropped


class _CacheFamilies:
    def __init__(self) -> None:
        labels = ["server", "type", "zones", "view"]
        self.entries = GaugeMetricFamily("coredns_cache_entries", "The number of elements in the cache.",
                                         labels=labels)
        self.hits = CounterMetricFamily("coredns_cache_hits", "The count of cache hits.", labels=labels)
        self.misses = CounterMetricFamily("coredns_cache_misses", "The count of cache misses.",
                                          labels=["server", "zones", "view"])
        self.requests = CounterMetricFamily("coredns_cache_requests", "The count of cache requests.",
                                            labels=["server", "zones", "view"])
        self.evictions = CounterMetricFamily("coredns_cache_evictions", "The count of cache evictions.",
                                             labels=["server", "type", "zones", "view"])
        self.stale = CounterMetricFamily("coredns_cache_served_stale", "The number of requests served "
                                         "from stale cache entries.", labels=["server", "zones", "view"])
        self.prefetch = CounterMetricFamily(
            "coredns_cache_prefetch", "The number of times the cache has prefetched a cached item.",
            labels=["server", "zones", "view"])

    def add(self, server: str, zone: Zone) -> None:
        if zone.cache is None:
            return
        zones = " ".join(zone.block.zones)
        sizes = zone.cache.sizes()
        for kind in ("success", "denial"):
            self.entries.add_metric([server, kind, zones, ""], sizes[kind])
        self.hits.add_metric([server, "success", zones, ""], zone.stats.cache_hits)
        self.misses.add_metric([server, zones, ""], zone.stats.cache_misses)
        self.requests.add_metric([server, zones, ""], zone.stats.cache_hits + zone.stats.cache_misses)
        self.evictions.add_metric([server, "success", zones, ""], zone.cache.evictions)
        self.stale.add_metric([server, zones, ""], zone.stats.served_stale)
        self.prefetch.add_metric([server, zones, ""], zone.stats.prefetches)

    def families(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        yield from (self.entries, self.hits, self.misses, self.requests, self.evictions, self.stale,
                    self.prefetch)


class _UpstreamFamilies:
    def __init__(self, readiness: bool) -> None:
        self.readiness = readiness
        self.duration = HistogramMetricFamily("coredns_proxy_request_duration_seconds",
                                              "Histogram of the time each request took.",
                                              labels=["proxy_name", "to", "rcode"])
        self.broken = CounterMetricFamily("coredns_forward_healthcheck_broken",
                                          "Counter of the number of complete failures of the healthchecks.")
        self.rejects = CounterMetricFamily("coredns_forward_max_concurrent_rejects",
                                           "Counter of the number of queries rejected because the "
                                           "concurrent queries were at maximum.")
        self.healthy = GaugeMetricFamily("splitdns_upstream_healthy", "1 if the upstream is in service, "
                                         "0 if it is marked down.", labels=["zone", "to"])
        self.fails = GaugeMetricFamily("splitdns_upstream_consecutive_failures",
                                       "Failures in a row of this upstream.", labels=["zone", "to"])
        self.loops = CounterMetricFamily("splitdns_loop_detected", "Forwarding loops detected.",
                                         labels=["zone"])
        self.private = CounterMetricFamily("splitdns_private_addresses_removed", "Addresses "
                                           "private_addresses removed from upstream replies (DNS "
                                           "rebinding attempts, or a zone that needs `allow`).",
                                           labels=["zone"])
        self.ready = GaugeMetricFamily("splitdns_zone_ready", "1 once the zone answered through its "
                                       "upstreams; 0 before, or while a loop is detected.", labels=["zone"])
        self._broken = 0
        self._rejects = 0

    def add(self, zone: Zone) -> None:
        name = zone.block.zones[0]
        for (to, rcode), hist in zone.stats.upstream.items():
            self.duration.add_metric(["forward", to, rcode], hist.buckets(), hist.sum)
        for fwd in zone.forwards:
            self._broken += fwd.broken
            self._rejects += fwd.rejected
            for state in fwd.upstreams:
                down = state.down(fwd.spec.max_fails)
                self.healthy.add_metric([name, state.label], 0 if down else 1)
                self.fails.add_metric([name, state.label], state.fails)
        self.loops.add_metric([name], zone.stats.loops_detected)
        self.private.add_metric([name], zone.stats.private_removed)
        if self.readiness:
            self.ready.add_metric([name], 1 if zone.ready and not zone.loop_error else 0)

    def families(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        self.broken.add_metric([], self._broken)
        self.rejects.add_metric([], self._rejects)
        yield from (self.duration, self.broken, self.rejects, self.healthy, self.fails, self.loops,
                    self.private, self.ready)


def registry(collector: ServerCollector) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    return reg
