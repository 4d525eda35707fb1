"""/metrics: the server's counters as Prometheus metrics, read at scrape time.

Metric names and labels are CoreDNS's where the meaning is the same, so existing
dashboards work; ours (`splitdns_*`) cover what CoreDNS lacks. Query names never become
labels (unbounded cardinality). Imported only when a `prometheus` directive is configured.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from splitdns import __version__
from splitdns.core import liveness, names
from splitdns.core.metrics import ProcessStats, ZoneStats, sized, tunnel_reason

if TYPE_CHECKING:
    from splitdns.core.zone import Zone

# CoreDNS's zone label for replies no zone gave (no zone matches, a class other than IN,
# FORMERR, NOTIMP): every answer is counted somewhere.
DROPPED = "dropped"


class ServerCollector(Collector):
    """Reads the live server's state at scrape time; `zones` returns (server label, Zone),
    `unrouted` (server label, the counts of replies no zone gave), `readiness` whether a
    `ready` directive defines readiness (the readiness series are left out without one: no
    probe runs then, and a 0 would read as "not ready" on a dashboard), `zone_live` what
    `/ready?zone=Z` says of a zone now, `pod_ready` what `/ready` says."""

    def __init__(self, zones: Callable[[], Iterable[tuple[str, Zone]]], process: ProcessStats,
                 unrouted: Callable[[], Iterable[tuple[str, ZoneStats]]] = lambda: (),
                 readiness: Callable[[], bool] = lambda: True,
                 zone_live: Callable[[Zone], bool] | None = None,
                 pod_ready: Callable[[], bool] | None = None) -> None:
        self.zones = zones
        self.process = process
        self.unrouted = unrouted
        self.readiness = readiness
        self.zone_live = zone_live or (lambda zone: liveness.live(zone)[0])
        self.pod_ready = pod_ready

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
        request_sizes = HistogramMetricFamily("coredns_dns_request_size_bytes", "Size of the request "
                                              "in bytes per zone and protocol.",
                                              labels=["server", "zone", "view", "proto"])
        response_sizes = HistogramMetricFamily("coredns_dns_response_size_bytes", "Size of the "
                                               "returned response in bytes per zone and protocol.",
                                               labels=["server", "zone", "view", "proto"])
        cache = _CacheFamilies()
        upstream = _UpstreamFamilies(self.readiness(), self.zone_live)
        named = _NameFamilies()
        zones = list(self.zones())
        counted = [(server, zone.block.zones[0], zone.stats) for server, zone in zones]
        counted += [(server, DROPPED, stats) for server, stats in self.unrouted()]
        for server, name, stats in counted:
            for (proto, family, qtype), count in stats.requests.items():
                requests.add_metric([server, name, "", proto, family, qtype], count)
            answered = dict(stats.responses)
            if name != DROPPED:
                for always in _ALWAYS:  # 0 until seen, so rate() sees the first ones
                    answered.setdefault(always, 0)
            for (rcode, plugin), count in answered.items():
                responses.add_metric([server, name, "", rcode, plugin], count)
            for qtype, hist in stats.durations.items():
                durations.add_metric([server, name, "", qtype], hist.buckets(), hist.sum)
            request_table, response_table = stats.sizes()
            for sizes, table in ((request_sizes, request_table), (response_sizes, response_table)):
                for proto, counts in table.items():
                    buckets, total = sized(counts)
                    sizes.add_metric([server, name, "", proto], buckets, total)
        wall = time.time()
        for server, zone in zones:
            cache.add(server, zone)
            upstream.add(zone, wall)
            named.add(zone)
        yield requests
        yield responses
        yield durations
        yield request_sizes
        yield response_sizes
        yield from cache.families()
        yield from upstream.families()
        yield from named.families()
        if self.pod_ready is not None and self.readiness():
            yield GaugeMetricFamily("splitdns_ready", "1 while /ready answers 200 (the pod-level "
                                    "rule: every zone answered once, no loop, not stopping).",
                                    value=1 if self.pod_ready() else 0)

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
        denials = zone.stats.denial_hits
        self.hits.add_metric([server, "success", zones, ""], zone.stats.cache_hits - denials)
        self.hits.add_metric([server, "denial", zones, ""], denials)
        self.misses.add_metric([server, zones, ""], zone.stats.cache_misses)
        self.requests.add_metric([server, zones, ""], zone.stats.cache_hits + zone.stats.cache_misses)
        self.evictions.add_metric([server, "success", zones, ""], zone.cache.evictions)
        self.stale.add_metric([server, zones, ""], zone.stats.served_stale)
        self.prefetch.add_metric([server, zones, ""], zone.stats.prefetches)

    def families(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        yield from (self.entries, self.hits, self.misses, self.requests, self.evictions, self.stale,
                    self.prefetch)


class _UpstreamFamilies:
    def __init__(self, readiness: bool, zone_live: Callable[[Zone], bool]) -> None:
        self.readiness = readiness
        self.zone_live = zone_live
        # `zone` beside CoreDNS's labels: the same upstream may serve two zones.
        self.duration = HistogramMetricFamily("coredns_proxy_request_duration_seconds",
                                              "Histogram of the time each request took.",
                                              labels=["proxy_name", "to", "rcode", "zone"])
        self.probe_failures = CounterMetricFamily("coredns_forward_healthcheck_failures",
                                                  "Counter of the number of failed healthchecks.",
                                                  labels=["to", "zone"])
        self.failed_fast = CounterMetricFamily("splitdns_fail_fast_answers", "SERVFAIL answered at "
                                               "once, without asking upstream: every upstream of the "
                                               "forward marked down, or the zone's tunnel down.",
                                               labels=["zone", "reason"])
        self.tunnel_up = GaugeMetricFamily("splitdns_tunnel_up", "1 while the zone's tunnel is up "
                                           "with DNS servers pushed, else 0.", labels=["zone", "kind"])
        self.tunnel_info = GaugeMetricFamily("splitdns_tunnel_info", "The tunnel's state, and why, as "
                                             "bounded labels; always 1.",
                                             labels=["zone", "kind", "state", "reason"])
        self.tunnel_since = GaugeMetricFamily("splitdns_tunnel_last_change_timestamp_seconds",
                                              "When the tunnel last went up or down (Unix time).",
                                              labels=["zone", "kind"])
        # Which interface the zone's queries may leave by (core/confinement.py), and the canary
        # that proves the path at each tunnel-up.
        self.interface = GaugeMetricFamily("splitdns_upstream_interface_info", "The interface the "
                                           "upstream's sockets are bound to (a tunnel's); interface "
                                           "is empty when the routing table chooses. Always 1.",
                                           labels=["zone", "to", "interface"])
        self.canary_passed = GaugeMetricFamily("splitdns_tunnel_canary_passed", "1 once the canary of "
                                               "the tunnel's latest up (a random name under the zone) "
                                               "was answered through the tunnel, else 0.",
                                               labels=["zone", "kind"])
        self.canaries = CounterMetricFamily("splitdns_tunnel_canaries", "Tunnel canary outcomes: "
                                            "passed (the zone's DNS answered through the tunnel) or "
                                            "failed (no answer, or an error rcode).",
                                            labels=["zone", "kind", "result"])
        self.canary_at = GaugeMetricFamily("splitdns_tunnel_canary_last_answer_timestamp_seconds",
                                           "When the latest canary attempt came back (Unix time; 0: "
                                           "none yet).", labels=["zone", "kind"])
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
        self.ready = GaugeMetricFamily("splitdns_zone_ready", "1 while /ready?zone=Z answers 200: "
                                       "the zone answered through its upstreams, not every upstream "
                                       "is down, its tunnel is up, no loop.", labels=["zone"])
        self._broken = 0
        self._rejects = 0

    def add(self, zone: Zone, wall: float) -> None:
        name = zone.block.zones[0]
        for (to, rcode), hist in zone.stats.upstream.items():
            self.duration.add_metric(["forward", to, rcode, name], hist.buckets(), hist.sum)
        fast = 0
        for fwd in zone.forwards:
            self._broken += fwd.broken
            self._rejects += fwd.rejected
            fast += fwd.failed_fast
            for state in fwd.upstreams:
                down = state.down(fwd.spec.max_fails)
                self.healthy.add_metric([name, state.label], 0 if down else 1)
                self.fails.add_metric([name, state.label], state.fails)
                self.probe_failures.add_metric([state.label, name], state.probe_failures)
                self.interface.add_metric([name, state.label, state.upstream.device or ""], 1)
        self.failed_fast.add_metric([name, "upstreams_down"], fast)
        self.loops.add_metric([name], zone.stats.loops_detected)
        self.private.add_metric([name], zone.stats.private_removed)
        if zone.tunnel is not None:
            self._tunnel(zone, name, wall)
        if self.readiness:
            self.ready.add_metric([name], 1 if self.zone_live(zone) else 0)

    def _tunnel(self, zone: Zone, name: str, wall: float) -> None:
        state = zone.tunnel
        assert state is not None
        kind = zone.block.tunnel
        kind_label = kind.tunnel.metric_kind if kind is not None and kind.tunnel is not None else "tunnel"
        since = zone.stats.tunnel
        since.seen(state.up, wall)  # a change nobody recorded (lifecycle does, on each change)
        self.failed_fast.add_metric([name, "tunnel_down"], zone.stats.failed_fast_tunnel)
        self.tunnel_up.add_metric([name, kind_label], 1 if state.up else 0)
        reason = tunnel_reason(state.status, state.up, state.reason)
        self.tunnel_info.add_metric([name, kind_label, "up" if state.up else "down", reason], 1)
        self.tunnel_since.add_metric([name, kind_label], since.since)
        canary = zone.stats.canary
        self.canary_passed.add_metric([name, kind_label], 1 if canary.passed else 0)
        for result, count in canary.outcomes.items():
            self.canaries.add_metric([name, kind_label, result], count)
        self.canary_at.add_metric([name, kind_label], canary.answered_at)

    def families(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        self.broken.add_metric([], self._broken)
        self.rejects.add_metric([], self._rejects)
        yield from (self.duration, self.broken, self.rejects, self.probe_failures, self.healthy,
                    self.fails, self.failed_fast, self.loops, self.private, self.ready,
                    self.tunnel_up, self.tunnel_info, self.tunnel_since, self.interface,
                    self.canary_passed, self.canaries, self.canary_at)


class _NameFamilies:
    """What the pod's search list saved (core/names.py, core/search.py), per zone."""

    def __init__(self) -> None:
        def counter(name: str, text: str) -> CounterMetricFamily:
            return CounterMetricFamily(name, text, labels=["zone"])
        self.leaks = counter("splitdns_search_leaks_prevented", "Tries of a search walk that put a "
                             "search suffix after a name another zone owns (a tunnel zone, the "
                             "cluster zone), answered NXDOMAIN here instead of leaving.")
        self.impossible = counter("splitdns_k8s_schema_answers", "Names the Kubernetes DNS schema "
                                  "rules out, answered NXDOMAIN here (k8s_schema).")
        self.aaaa = counter("splitdns_filtered_aaaa", "AAAA queries answered NODATA here (filter_aaaa).")
        self.success = counter("splitdns_autopath_success", "Search walks autopath ended on an answer "
                               "(CoreDNS's coredns_autopath_success_total).")
        self.saved = counter("splitdns_autopath_queries_saved", "Queries the clients did not have to "
                             "send: the tries of their search walk autopath made for them.")

    def add(self, zone: Zone) -> None:
        name = zone.block.zones[0]
        if zone.guard is not None:
            counts = zone.stats.guarded
            self.leaks.add_metric([name], counts[names.LEAK])
            self.impossible.add_metric([name], counts[names.IMPOSSIBLE])
            self.aaaa.add_metric([name], counts[names.NO_IPV6])
        if zone.autopath is not None:
            self.success.add_metric([name], zone.autopath.successes)
            self.saved.add_metric([name], zone.autopath.saved)

    def families(self) -> Iterator[CounterMetricFamily]:
        yield from (self.leaks, self.impossible, self.aaaa, self.success, self.saved)


# Every zone's answers by these (rcode, plugin) exist from the start: rate() counts a counter's
# increase from its first sample, so a series born with a burst of SERVFAILs would hide that
# burst from the SERVFAIL-ratio alert.
_ALWAYS = (("NOERROR", "forward"), ("SERVFAIL", "forward"))

def registry(collector: ServerCollector) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    ProcessCollector(registry=reg)  # process_*: memory, CPU, open fds, start time (as CoreDNS's)
    return reg
