"""The Grafana dashboard of `render --form monitoring`: the fleet, one pod, then the webhook.

Every panel is a list of PromQL queries over the resolver's series (README, "Watching a fleet")
with Grafana's template variables: `$datasource`, `$job` (the PodMonitor's job), `$namespace`,
`$pod` (the one-pod rows), `$zone`, and `$__rate_interval`. `PANELS` is the data the tests
evaluate against a real Prometheus, each variable replaced by a match-all regex. Each panel has
one unit (its axis') and a description (the (i) Grafana shows by its title).
Tests: tests/test_monitoring_render.py, tests/test_monitoring_e2e.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from splitdns.kube.deploy import webhook_manifests

Doc = dict[str, Any]

UID = "splitdns-fleet"
FLEET = 'job=~"$job", namespace=~"$namespace", zone=~"$zone"'
POD = 'job=~"$job", namespace=~"$namespace", pod=~"$pod"'
ZONE_POD = f'{POD}, zone=~"$zone"'
RATE = "[$__rate_interval]"


@dataclass(frozen=True)
class Panel:
    row: str
    title: str
    unit: str
    queries: tuple[tuple[str, str], ...]  # (expr, legend)
    description: str = ""


def _quantiles(metric: str, by: str, labels: str) -> tuple[tuple[str, str], ...]:
    return tuple((f"histogram_quantile({q}, sum by ({by}, le) (rate({metric}_bucket{{{labels}}}{RATE})))",
                  f"p{int(q * 100)} {{{{{by}}}}}") for q in (0.5, 0.99))


# The webhook's series, from its ServiceMonitor (its job is the webhook Service's name).
HOOK = f'job="{webhook_manifests.NAME}"'

PANELS = (
    Panel("Fleet", "Answers per second by zone and rcode", "reqps", (
        (f"sum by (zone, rcode) (rate(coredns_dns_responses_total{{{FLEET}}}{RATE}))",
         "{{zone}} {{rcode}}"),),
        "Every answer the pods' resolvers sent, by zone and response code."),
    Panel("Fleet", "Latency by zone", "s", _quantiles("coredns_dns_request_duration_seconds", "zone", FLEET),
          "Time from query to answer, cache hits included, at the median and the 99th percentile."),
    Panel("Fleet", "Cache hit ratio", "percentunit", (
        (f'sum by (zones) (rate(coredns_cache_hits_total{{job=~"$job", namespace=~"$namespace"}}{RATE})) / '
         f'sum by (zones) (rate(coredns_cache_requests_total{{job=~"$job", namespace=~"$namespace"}}{RATE}))',
         "{{zones}}"),),
        "Share of the lookups each block's cache answered without asking upstream."),
    Panel("Fleet", "Upstreams marked down", "short", (
        (f"count by (zone, to) (splitdns_upstream_healthy{{{FLEET}}} == 0) or "
         f"0 * count by (zone, to) (splitdns_upstream_healthy{{{FLEET}}})", "{{zone}} {{to}}"),),
        "Pods in which each upstream is marked down (0: in service everywhere)."),
    Panel("Fleet", "Upstream latency", "s",
          _quantiles("coredns_proxy_request_duration_seconds", "to", FLEET),
          "Round trip to each upstream, at the median and the 99th percentile."),
    Panel("Fleet", "Tunnels down", "short", (
        (f"count by (zone, reason) (splitdns_tunnel_info{{{FLEET}, state=\"down\"}})", "{{zone}} {{reason}}"),
        (f"count by (zone) (splitdns_tunnel_up{{{FLEET}}} == 1)", "{{zone}} up")),
        "Pods whose tunnel is down, by reason, and up."),
    Panel("Fleet", "Zones not ready", "short", (
        (f"count by (zone) (splitdns_zone_ready{{{FLEET}}} == 0) or "
         f"0 * count by (zone) (splitdns_zone_ready{{{FLEET}}})", "{{zone}}"),),
        "Pods in which /ready?zone= answers 503."),
    Panel("Fleet", "Fail-fast and stale answers per second", "reqps", (
        (f"sum by (zone, reason) (rate(splitdns_fail_fast_answers_total{{{FLEET}}}{RATE}))",
         "fail fast {{zone}} {{reason}}"),
        (f'sum by (zones) (rate(coredns_cache_served_stale_total{{job=~"$job", namespace=~"$namespace"}}'
         f'{RATE}))', "stale {{zones}}")),
        "Answers given at once while a zone's upstreams or tunnel are down (SERVFAIL with a reason), "
        "and stale answers served from the cache meanwhile."),
    Panel("Fleet", "SERVFAIL ratio by zone", "percentunit", (
        (f'sum by (zone) (rate(coredns_dns_responses_total{{{FLEET}, rcode="SERVFAIL"}}{RATE})) / '
         f"sum by (zone) (rate(coredns_dns_responses_total{{{FLEET}}}{RATE}))", "{{zone}}"),),
        "Share of each zone's answers that were SERVFAIL (SplitdnsServfailRatioHigh fires over 5 %)."),
    Panel("Pod", "Answers per second", "reqps", (
        (f"sum by (zone, rcode, plugin) (rate(coredns_dns_responses_total{{{ZONE_POD}}}{RATE}))",
         "{{zone}} {{rcode}} {{plugin}}"),),
        "This pod's answers by zone, response code and the plugin that wrote them."),
    Panel("Pod", "Latency", "s", _quantiles("coredns_dns_request_duration_seconds", "zone", ZONE_POD),
          "This pod's time from query to answer, at the median and the 99th percentile."),
    Panel("Pod", "Which upstream answered", "reqps", (
        (f"sum by (zone, to, rcode) (rate(coredns_proxy_request_duration_seconds_count{{{ZONE_POD}}}{RATE}))",
         "{{zone}} {{to}} {{rcode}}"),),
        "Queries this pod sent to each upstream, by the response code it returned."),
    Panel("Pod", "Upstream health", "short", (
        (f"splitdns_upstream_healthy{{{ZONE_POD}}}", "{{zone}} {{to}}"),
        (f"splitdns_upstream_consecutive_failures{{{ZONE_POD}}}", "failures in a row {{to}}")),
        "1 while an upstream is in service, 0 while marked down; and its failures in a row."),
    Panel("Pod", "Tunnel and readiness", "short", (
        (f"splitdns_tunnel_up{{{ZONE_POD}}}", "tunnel {{zone}}"),
        (f"splitdns_zone_ready{{{ZONE_POD}}}", "ready {{zone}}")),
        "1 while the zone's tunnel is up, and while /ready?zone= answers 200."),
    Panel("Pod", "Time since the tunnel changed", "s", (
        (f"time() - splitdns_tunnel_last_change_timestamp_seconds{{{ZONE_POD}}}", "{{zone}}"),),
        "How long the tunnel has been in its present state (up or down)."),
    Panel("Pod", "Cache entries", "short", (
        (f'sum by (type) (coredns_cache_entries{{{POD}}})', "{{type}}"),),
        "Entries in this pod's caches, answers and denials."),
    Panel("Pod", "Cache hits and evictions per second", "ops", (
        (f"sum by (type) (rate(coredns_cache_hits_total{{{POD}}}{RATE}))", "hits {{type}}"),
        (f"sum(rate(coredns_cache_evictions_total{{{POD}}}{RATE}))", "evictions")),
        "Lookups answered from the cache, and entries pushed out to make room."),
    Panel("Pod", "Memory (RSS)", "bytes", ((f"process_resident_memory_bytes{{{POD}}}", "RSS"),),
          "The resolver's resident memory; its container's limit is 128 MiB."),
    Panel("Pod", "CPU", "percentunit", ((f"rate(process_cpu_seconds_total{{{POD}}}{RATE})", "CPU"),),
          "The share of one core the resolver uses (it answers on one)."),
    Panel("Pod", "Open file descriptors", "short", ((f"process_open_fds{{{POD}}}", "open fds"),),
          "Sockets and files the resolver holds open."),
    Panel("Webhook", "Admission reviews per second by outcome", "reqps", (
        (f"sum by (outcome) (rate(splitdns_webhook_reviews_total{{{HOOK}}}{RATE}))", "{{outcome}}"),),
        "Pod creations the webhook reviewed: injected, skipped, unchanged, or refused and failed "
        "(those pods start without the resolver)."),
    Panel("Webhook", "Review latency", "s",
          _quantiles("splitdns_webhook_review_duration_seconds", "job", HOOK),
          "Time to answer a review, at the median and the 99th percentile; the API server gives up "
          "at the webhook's timeoutSeconds and admits the pod without the resolver."),
    Panel("Webhook", "Replicas answering", "short", (
        (f"sum(up{{{HOOK}}})", "up"), (f"count(up{{{HOOK}}})", "scraped")),
        "Webhook replicas that answered their scrape, of those Prometheus knows."),
)

ROWS = {"Fleet": "Fleet", "Pod": "One pod: $pod", "Webhook": "Webhook"}

_VARIABLES = (
    ("job", 'label_values(coredns_build_info{version=~"splitdns-.*"}, job)', True),
    ("namespace", 'label_values(coredns_build_info{job=~"$job"}, namespace)', True),
    ("pod", 'label_values(coredns_build_info{job=~"$job", namespace=~"$namespace"}, pod)', False),
    ("zone", 'label_values(coredns_dns_requests_total{job=~"$job", namespace=~"$namespace"}, zone)', True),
)


def dashboard() -> Doc:
    datasource = {"type": "prometheus", "uid": "${datasource}"}
    panels: list[Doc] = []
    y = 0
    for row, row_title in ROWS.items():
        panels.append({"type": "row", "title": row_title,
                       "collapsed": False, "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                       "id": len(panels) + 1, "panels": []})
        y += 1
        for i, p in enumerate(x for x in PANELS if x.row == row):
            panels.append({
                "type": "timeseries", "title": p.title, "description": p.description,
                "id": len(panels) + 1, "datasource": datasource,
                "gridPos": {"h": 8, "w": 8, "x": 8 * (i % 3), "y": y + 8 * (i // 3)},
                "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []},
                "targets": [{"datasource": datasource, "expr": expr, "legendFormat": legend,
                             "refId": chr(ord("A") + n)} for n, (expr, legend) in enumerate(p.queries)],
            })
        y += 8 * ((sum(1 for x in PANELS if x.row == row) + 2) // 3)
    templating: list[Doc] = [{"name": "datasource", "type": "datasource", "query": "prometheus",
                              "label": "Data source"}]
    for name, query, multi in _VARIABLES:
        templating.append({"name": name, "type": "query", "datasource": datasource, "refresh": 2,
                           "query": {"query": query, "refId": name}, "definition": query,
                           "includeAll": multi, "multi": multi, "allValue": ".*", "sort": 1})
    return {"uid": UID, "title": "splitdns", "tags": ["splitdns", "dns"], "timezone": "browser",
            "schemaVersion": 39, "editable": True, "refresh": "30s",
            "time": {"from": "now-1h", "to": "now"}, "templating": {"list": templating},
            "panels": panels, "annotations": {"list": []}}


def configmap(namespace: str) -> Doc:
    """The dashboard where Grafana's sidecar finds it (its default label, `grafana_dashboard`)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "splitdns-dashboard", "namespace": namespace,
                         "labels": {"grafana_dashboard": "1", "app.kubernetes.io/name": "splitdns",
                                    "app.kubernetes.io/part-of": "splitdns"}},
            "data": {"splitdns.json": json.dumps(dashboard(), indent=1)}}


def queries() -> list[tuple[str, str]]:
    """(panel title, expr) of every query of the dashboard."""
    return [(p.title, expr) for p in PANELS for expr, _ in p.queries]
