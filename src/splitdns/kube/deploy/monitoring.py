"""`splitdns render --form monitoring`: alerts, scrape targets and a dashboard, as plain dicts.

A PrometheusRule (prometheus-operator) with the alerts that matter for an in-pod resolver, a
PodMonitor for the pods that asked for injection, a ServiceMonitor for the webhook, and the
Grafana dashboard in a ConfigMap Grafana's sidecar picks up (`dashboard.py`). Each alert is
kept as its signal and its condition, so the tests can evaluate the signal alone against a
real Prometheus (does the series exist, with the labels the description names?) as well as
the whole rule. Runbooks: docs/monitoring.md, one section per alert.
Tests: tests/test_monitoring_render.py, tests/test_monitoring_rules.py, tests/test_monitoring_e2e.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from splitdns.kube.deploy import inject, manifests, webhook_manifests

Doc = dict[str, Any]

RUNBOOK = "https://github.com/splitdns/splitdns/blob/main/docs/monitoring.md"
METRICS_PORT_NAME = manifests.METRICS_PORT_NAME  # the container port the PodMonitor scrapes
WEBHOOK_JOB = webhook_manifests.NAME  # the ServiceMonitor's job: the webhook Service's name
RESOLVER_JOB = "splitdns"  # the PodMonitor's job (set by its relabeling: else NAMESPACE/NAME)
# SERVFAIL ratios are not judged below this many answers a second (30 in the 5-minute window):
# one failed lookup of two in a quiet pod is not an outage.
MIN_ANSWERS_PER_SECOND = 0.1
# Who an alert is about, in its description: the pod (namespace/pod, from the PodMonitor's
# target labels) and the zone.
WHERE = "{{ $labels.namespace }}/{{ $labels.pod }}"
# Reviews of a pod (the objectSelector sends only pods that asked) that end without the resolver.
FAILED_REVIEWS = "refused|error|timeout"


@dataclass(frozen=True)
class Alert:
    name: str
    signal: str      # a PromQL expression whose value the condition compares
    condition: str   # e.g. "== 0", "> 0.05"
    duration: str    # the rule's `for`
    severity: str
    summary: str
    description: str

    @property
    def expr(self) -> str:
        return f"{self.signal} {self.condition}"

    def rule(self) -> Doc:
        anchor = self.name.lower()
        return {"alert": self.name, "expr": self.expr, "for": self.duration,
                "labels": {"severity": self.severity},
                "annotations": {"summary": self.summary, "description": self.description,
                                "runbook_url": f"{RUNBOOK}#{anchor}"}}


ALERTS = (
    Alert("SplitdnsTunnelDown",
          # The reason joined on from the info series, so the description can say it.
          "(splitdns_tunnel_up * ignoring(state, reason) group_left(reason) "
          "splitdns_tunnel_info{state=\"down\"})", "== 0", "5m", "warning",
          "A pod's VPN tunnel has been down for 5 minutes.",
          f"The tunnel of zone {{{{ $labels.zone }}}} in pod {WHERE} has been down for 5 minutes "
          "({{ $labels.reason }}); that zone answers SERVFAIL at once, or stale answers."),
    Alert("SplitdnsTunnelCanaryFailing",
          # Only while the tunnel reads up: down, SplitdnsTunnelDown says it.
          "(splitdns_tunnel_canary_passed and (splitdns_tunnel_up == 1))", "== 0", "5m", "warning",
          "A pod's VPN tunnel is up but its DNS has not answered the canary through it for 5 minutes.",
          f"The tunnel of zone {{{{ $labels.zone }}}} in pod {WHERE} reads up, but no answer to its "
          "canary (a random name under the zone) has come back through the tunnel's interface for "
          "5 minutes: the path to the tunnel's DNS is broken; /ready?zone= says how it failed."),
    Alert("SplitdnsZoneNotReady", "splitdns_zone_ready", "== 0", "10m", "warning",
          "A zone of a pod's resolver has not been ready for 10 minutes.",
          f"Zone {{{{ $labels.zone }}}} in pod {WHERE} has not been ready for 10 minutes "
          "(/ready?zone= answers 503: not answered yet, every upstream down, the tunnel down, or "
          "a loop); `kubectl exec` into the pod and read /ready?zone= for the reason."),
    Alert("SplitdnsAllUpstreamsDown", "max without (to) (splitdns_upstream_healthy)", "== 0", "2m",
          "critical", "Every upstream of a zone is marked down.",
          f"Every upstream of zone {{{{ $labels.zone }}}} in pod {WHERE} has been marked down for "
          "2 minutes: its queries get SERVFAIL at once until a health probe is answered."),
    Alert("SplitdnsServfailRatioHigh",
          # The denominator only where the zone answers enough for a ratio to mean something.
          "(sum without (rcode, plugin) (rate(coredns_dns_responses_total{rcode=\"SERVFAIL\","
          "zone!=\"dropped\"}[5m])) / (sum without (rcode, plugin) "
          f"(rate(coredns_dns_responses_total{{zone!=\"dropped\"}}[5m])) >= {MIN_ANSWERS_PER_SECOND}))",
          "> 0.05", "10m", "warning",
          "More than 5 % of a zone's answers are SERVFAIL.",
          f"{{{{ $value | humanizePercentage }}}} of the answers of zone {{{{ $labels.zone }}}} in pod "
          f"{WHERE} have been SERVFAIL for 10 minutes (at {MIN_ANSWERS_PER_SECOND} answers a second "
          "or more)."),
    Alert("SplitdnsResolverDown", f"up{{job=\"{RESOLVER_JOB}\"}}", "== 0", "5m", "critical",
          "A pod's resolver has not answered its metrics scrape for 5 minutes.",
          f"The resolver of pod {WHERE} has not answered its scrape for 5 minutes: its container "
          "is down or restarting (`kubectl describe pod` says why), or its metrics port does not "
          "answer; while the resolver is down, nothing in the pod resolves a name."),
    Alert("SplitdnsResolversAbsent", f"absent(up{{job=\"{RESOLVER_JOB}\"}})", "== 1", "15m", "warning",
          "No pod's resolver has been scraped for 15 minutes.",
          "Prometheus has scraped no in-pod resolver for 15 minutes: the PodMonitor selects no pod "
          f"(none carries {inject.POD_LABEL}: \"true\", or none runs), or Prometheus does not pick "
          "the PodMonitor up (its podMonitorSelector). Silence it where no pod asks for the resolver."),
    Alert("SplitdnsLoopDetected", "increase(splitdns_loop_detected_total[10m])", "> 0", "0m", "critical",
          "A pod's resolver found a forwarding loop.",
          f"Zone {{{{ $labels.zone }}}} in pod {WHERE} forwards back to itself: it answers SERVFAIL "
          "at once until the loop is gone (the resolver's log names the upstream)."),
    Alert("SplitdnsReloadFailing", "increase(coredns_reload_failed_total[15m])", "> 0", "0m", "warning",
          "A pod's resolver could not load its changed Corefile.",
          f"Pod {WHERE} could not load its changed Corefile and still serves the previous one; "
          "the resolver's log has the file, line and error."),
    Alert("SplitdnsCacheEvictingHard",
          "(sum without (type) (rate(coredns_cache_evictions_total[10m])) / "
          "(rate(coredns_cache_misses_total[10m]) > 1))", "> 0.5", "15m", "warning",
          "A pod's cache evicts more than half as often as it misses.",
          f"The cache of zones {{{{ $labels.zones }}}} in pod {WHERE} has evicted "
          "{{ $value | humanizePercentage }} of its misses' worth of entries for 15 minutes: it is "
          "too small for the names the pod asks, so hits turn into misses."),
    Alert("SplitdnsWebhookDown", f"up{{job=\"{WEBHOOK_JOB}\"}}", "== 0", "5m", "critical",
          "A splitdns webhook replica is down.",
          "Webhook replica {{ $labels.namespace }}/{{ $labels.pod }} has not answered its scrape for "
          "5 minutes; with failurePolicy Ignore, pods created while no replica answers start "
          "without the resolver."),
    Alert("SplitdnsWebhookFailing",
          "(sum without (outcome) (rate(splitdns_webhook_reviews_total{outcome=~\"error|timeout|"
          "too_large|bad_request\"}[5m])) / (sum without (outcome) "
          "(rate(splitdns_webhook_reviews_total[5m])) > 0))", "> 0.05", "5m", "warning",
          "The splitdns webhook fails more than 5 % of its admission reviews.",
          "Webhook replica {{ $labels.namespace }}/{{ $labels.pod }} failed "
          "{{ $value | humanizePercentage }} of its reviews for 5 minutes (errors, timeouts, "
          "bodies too large or malformed); those pods start without the resolver."),
    Alert("SplitdnsWebhookSlow",
          "histogram_quantile(0.99, sum without (instance, pod) "
          "(rate(splitdns_webhook_review_duration_seconds_bucket[5m])))", "> 1", "10m", "warning",
          "The splitdns webhook's 99th percentile review time is over 1 s.",
          "The webhook in {{ $labels.namespace }} took {{ $value | humanizeDuration }} at the 99th "
          "percentile for 10 minutes; at its timeoutSeconds the API server admits the pod "
          "without the resolver."),
    Alert("SplitdnsInjectionMissed",
          f"sum without (outcome) (increase(splitdns_webhook_reviews_total{{outcome=~\"{FAILED_REVIEWS}\"}}"
          "[15m]))", "> 0", "0m", "warning",
          "Pods that asked for the resolver were admitted without it.",
          "In the last 15 minutes, {{ $value }} pod(s) that asked for injection (label "
          f"{inject.POD_LABEL}: \"true\") were admitted without the resolver by webhook replica "
          "{{ $labels.namespace }}/{{ $labels.pod }} (refused or failed); its log lines with "
          "outcome refused or error name each pod, and `splitdns doctor` lists them."),
)


def _meta(name: str, namespace: str, **extra: Any) -> Doc:
    return {"name": name, "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "splitdns", "app.kubernetes.io/part-of": "splitdns",
                       **extra}}


def prometheus_rule(namespace: str) -> Doc:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": _meta("splitdns", namespace),
            "spec": {"groups": [{"name": "splitdns", "rules": [a.rule() for a in ALERTS]}]}}


def pod_monitor(namespace: str) -> Doc:
    """Every pod that asked for injection, in any namespace, scraped on the resolver's metrics
    port; `zone` and `to` labels are the resolver's own, `namespace` and `pod` the target's."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
            "metadata": _meta("splitdns", namespace),
            "spec": {"namespaceSelector": {"any": True},
                     "selector": {"matchLabels": {inject.POD_LABEL: "true"}},
                     "podMetricsEndpoints": [{"port": METRICS_PORT_NAME, "path": "/metrics",
                                              "interval": "30s",
                                              # One job name the alerts and dashboard know, in any namespace.
                                              "relabelings": [{"action": "replace", "targetLabel": "job",
                                                               "replacement": RESOLVER_JOB}]}]}}


def service_monitor(webhook_namespace: str) -> Doc:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": _meta(webhook_manifests.NAME, webhook_namespace),
            "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": webhook_manifests.NAME}},
                     "endpoints": [{"port": "probes", "path": "/metrics", "interval": "30s"}]}}


def documents(namespace: str, webhook_namespace: str) -> list[Doc]:
    from splitdns.kube.deploy import dashboard

    return [prometheus_rule(namespace), pod_monitor(namespace), service_monitor(webhook_namespace),
            dashboard.configmap(namespace)]


def render(namespace: str, webhook_namespace: str) -> dict[str, str]:
    from splitdns import __version__
    from splitdns.kube.shared import yamlio

    header = "".join(f"# {line}\n" for line in [
        f"Rendered by `splitdns render --form monitoring` (splitdns {__version__}): alerts, scrape",
        "targets and a Grafana dashboard for the in-pod resolvers and the webhook. Needs",
        "prometheus-operator's CRDs; the dashboard's ConfigMap is for Grafana's sidecar.",
        "Runbooks: docs/monitoring.md."])
    return {"splitdns-monitoring.yaml": yamlio.dump_all(documents(namespace, webhook_namespace), header)}
