"""`splitdns render --form monitoring`: the PrometheusRule, PodMonitor and ServiceMonitor are valid
for prometheus-operator's own CRD schemas (vendored in src/splitdns/kube/check/crds), the dashboard
is a ConfigMap Grafana's sidecar picks up, and the monitors point at ports the resolver and the
webhook really declare. The rules fire and resolve in test_monitoring_rules.py; the dashboard's
queries and the alerts' expressions run against a real Prometheus in test_monitoring_e2e.py.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from splitdns import cli
from splitdns.commands import render
from splitdns.kube.deploy import dashboard, inject, monitoring, webhook_manifests
from tests.support import crds

VERSIONS = ["1.29", "1.37"]  # a ConfigMap's schema: the oldest and newest version we render for


def rendered(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    assert cli.main(["render", "--form", "monitoring", "--namespace", "monitoring"]) == 0
    return [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, kind
    return found[0]


def test_the_monitoring_resources_pass_prometheus_operators_schemas(
        capsys: pytest.CaptureFixture[str]) -> None:
    docs = rendered(capsys)
    assert [d["kind"] for d in docs] == ["PrometheusRule", "PodMonitor", "ServiceMonitor", "ConfigMap"]
    for doc in docs[:3]:
        assert (doc["apiVersion"], doc["kind"]) in crds.known()
        assert crds.errors(doc) == [], doc["kind"]
    assert one(docs, "PodMonitor")["metadata"]["namespace"] == "monitoring"
    assert one(docs, "ServiceMonitor")["metadata"]["namespace"] == "splitdns-system"


@pytest.mark.parametrize(("kind", "path", "value", "expected"), [
    ("PrometheusRule", ["spec", "groups", 0, "rules", 0, "expression"], "up", "'expression' was unexpected"),
    ("PodMonitor", ["spec", "podMetricsEndpoints", 0, "portNumber"], "x", "is not of type 'integer'"),
    ("ServiceMonitor", ["spec", "endpoints", 0, "scheme"], "tcp", "is not one of"),
], ids=["rule-field", "pod-monitor-type", "service-monitor-enum"])
def test_the_vendored_schemas_refuse_a_wrong_resource(capsys: pytest.CaptureFixture[str], kind: str,
                                                      path: list[Any], value: Any, expected: str) -> None:
    """The validation can fail: a field the CRD does not name, a wrong type, a value out of its enum."""
    doc = copy.deepcopy(one(rendered(capsys), kind))
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert any(expected in line for line in crds.errors(doc)), crds.errors(doc)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_dashboard_configmap_is_valid_and_labelled_for_grafanas_sidecar(
        capsys: pytest.CaptureFixture[str], version: str) -> None:
    cm = one(rendered(capsys), "ConfigMap")
    assert kubernetes_validate.validate(cm, version, strict=True) == version
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    board = json.loads(cm["data"]["splitdns.json"])
    variables = {v["name"] for v in board["templating"]["list"]} | {"__rate_interval"}
    timeseries = [p for p in board["panels"] if p["type"] == "timeseries"]
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows == ["Fleet", "One pod: $pod", "Webhook"]
    assert len(timeseries) == len(dashboard.PANELS)
    for panel in timeseries:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            used = set(re.findall(r"\$(\w+)", target["expr"]))
            assert used <= variables, (panel["title"], used - variables)


# What a query measures, read from the expression the way a reader would (the panel's unit must
# be the same kind): a histogram quantile or a time difference is seconds, a quotient a ratio,
# bytes and CPU seconds a second are their own, a rate of a counter is a count a second, and the
# rest (gauges: 0/1 states, entries, counts of pods) a plain number.
UNIT_KINDS = {"s": "seconds", "percentunit": "ratio", "bytes": "bytes", "reqps": "per second",
              "ops": "per second", "short": "number"}


def measured(expr: str) -> str:
    if "process_cpu_seconds_total" in expr:
        return "ratio"  # CPU seconds a second: the share of one core
    if expr.startswith("histogram_quantile(") or expr.startswith("time() -"):
        return "seconds"
    if re.search(r"\) / ", expr):
        return "ratio"
    if "_bytes" in expr:
        return "bytes"
    if "rate(" in expr:
        return "per second"
    return "number"


def test_every_panel_has_one_unit_and_a_description() -> None:
    """One unit per axis: a panel that drew bytes, CPU and file descriptors on one axis (or 0/1
    states beside seconds) read as nonsense on half its lines."""
    mixed, bare = [], []
    for panel in dashboard.PANELS:
        kinds = {measured(expr) for expr, _ in panel.queries}
        if kinds != {UNIT_KINDS[panel.unit]}:
            mixed.append((panel.title, panel.unit, sorted(kinds)))
        if len(panel.description) < 20:
            bare.append(panel.title)
    assert not mixed, f"panels whose queries are not all in the panel's unit: {mixed}"
    assert not bare, f"panels without a description: {bare}"
    board = dashboard.dashboard()
    assert all(p["description"] for p in board["panels"] if p["type"] == "timeseries")


def test_the_webhook_has_its_panels() -> None:
    """Reviews by outcome, their latency and the replicas up: what the webhook alerts are about."""
    hook = [p for p in dashboard.PANELS if p.row == "Webhook"]
    exprs = " ".join(expr for p in hook for expr, _ in p.queries)
    for series in ("splitdns_webhook_reviews_total", "splitdns_webhook_review_duration_seconds_bucket",
                   f'up{{job="{monitoring.WEBHOOK_JOB}"}}'):
        assert series in exprs, series


def test_the_pod_monitor_names_the_job_the_alerts_watch() -> None:
    (endpoint,) = monitoring.pod_monitor("monitoring")["spec"]["podMetricsEndpoints"]
    assert {"action": "replace", "targetLabel": "job", "replacement": monitoring.RESOLVER_JOB} \
        in endpoint["relabelings"]
    down = next(a for a in monitoring.ALERTS if a.name == "SplitdnsResolverDown")
    assert f'job="{monitoring.RESOLVER_JOB}"' in down.signal


def test_the_pod_monitor_scrapes_a_port_the_injected_resolver_declares_and_serves() -> None:
    args = cli.build_parser().parse_args(["inject", "--zone", "svc.acme.internal=openvpn",
                                          "--cluster-dns", "10.96.0.10"])
    fields = {k: v for k, v in vars(args).items() if k in render.Request.__dataclass_fields__}
    settings = render.injection_settings(render.Request(**fields))
    pod = {"metadata": {"labels": {inject.POD_LABEL: "true"}},
           "spec": {"containers": [{"name": "app", "image": "app"}]}}
    out = inject.inject(pod, "shop", settings)
    assert out.injected
    monitor = monitoring.pod_monitor("monitoring")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= out.pod["metadata"]["labels"].items()
    port_name = monitor["spec"]["podMetricsEndpoints"][0]["port"]
    ours = next(c for c in out.pod["spec"]["initContainers"] if c["name"] == inject.CONTAINER)
    port = next(p["containerPort"] for p in ours["ports"] if p["name"] == port_name)
    # The Corefile it runs serves /metrics on that port, on every address (the pod IP).
    assert f"prometheus :{port}\n" in settings.corefile


def test_the_service_monitor_scrapes_the_webhook_services_metrics_port() -> None:
    settings = render.injection_settings(render.Request(zones=["svc.acme.internal=openvpn"],
                                                       cluster_dns="10.96.0.10"))
    docs = webhook_manifests.all_documents(settings, "splitdns-system")
    service = next(d for d in docs if d["kind"] == "Service")
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    monitor = monitoring.service_monitor("splitdns-system")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    port = next(p for p in service["spec"]["ports"] if p["name"] == monitor["spec"]["endpoints"][0]["port"])
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert any(p["name"] == port["targetPort"] and p["containerPort"] == webhook_manifests.PROBE_PORT
               for p in container["ports"])


def test_check_reads_the_rendered_monitoring_file_clean(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`splitdns check --kube-version` validates these kinds now (their CRDs are vendored): clean."""
    out = str(tmp_path)
    assert cli.main(["render", "--form", "monitoring", "-n", "monitoring", "--output-dir", out]) == 0
    capsys.readouterr()
    assert cli.main(["check", "--kube-version", "1.33", str(tmp_path / "splitdns-monitoring.yaml")]) == 0
    assert "0 error(s), 0 warning(s)" in capsys.readouterr().err
