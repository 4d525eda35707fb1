"""Every alert `render --form monitoring` writes, fired and resolved on synthetic series by
`promtool test rules` (Debian's `prometheus` package): the rule file is the rendered
PrometheusRule's groups, and each expected alert spells out its labels and the annotations
as they must read (the pod and zone named), so a broken join, label or template fails here.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from splitdns.kube.deploy import monitoring
from tests.support.prerequisites import need_tools

RUNBOOK = "https://github.com/splitdns/splitdns/blob/main/docs/monitoring.md#"
POD = {"namespace": "shop", "pod": "app-7d9f"}
HOOK = {"job": "splitdns-webhook", "namespace": "splitdns-system", "pod": "splitdns-webhook-1"}
RESOLVER = {"job": "splitdns", **POD}
TUNNEL = {**POD, "zone": "svc.acme.internal.", "kind": "openvpn"}
SERVER = {**POD, "server": "dns://:53", "view": ""}
TZONE = {**POD, "zone": "svc.acme.internal."}
BUCKET = "splitdns_webhook_review_duration_seconds_bucket"
FAST_THEN_SLOW = "0+60x5 300x19 360+60x14"  # le=0.1 and le=1: none between minutes 6 and 25


def s(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def fired(name: str, labels: dict[str, str], description: str) -> dict[str, Any]:
    rule = next(a for a in monitoring.ALERTS if a.name == name)
    # An empty label is no label (CoreDNS's `view=""`).
    return {"exp_labels": {"severity": rule.severity, **{k: v for k, v in labels.items() if v}},
            "exp_annotations": {"summary": rule.summary, "description": description,
                                "runbook_url": RUNBOOK + name.lower()}}


# alert -> (input series, [(minute, expected alerts)]): each fires, and resolves (an empty list).
CASES: dict[str, tuple[list[dict[str, str]], list[tuple[int, list[dict[str, Any]]]]]] = {
    "SplitdnsTunnelDown": ([
        s("splitdns_tunnel_up", TUNNEL, "1x4 0x9 1x9"),
        s("splitdns_tunnel_info", {**TUNNEL, "state": "up", "reason": "connected"}, "1x4 stale _x8 1x9"),
        s("splitdns_tunnel_info", {**TUNNEL, "state": "down", "reason": "reconnecting"}, "_x4 1x9 stale"),
    ], [(7, []), (12, [fired("SplitdnsTunnelDown", {**TUNNEL, "reason": "reconnecting"},
                             "The tunnel of zone svc.acme.internal. in pod shop/app-7d9f has been down for "
                             "5 minutes (reconnecting); that zone answers SERVFAIL at once, or stale "
                             "answers.")]),
        (20, [])]),
    "SplitdnsTunnelCanaryFailing": ([
        s("splitdns_tunnel_up", TUNNEL, "1x19 0x9"),
        s("splitdns_tunnel_canary_passed", TUNNEL, "1x4 0x9 1x5 0x9"),  # passes again, then down
    ], [(7, []), (12, [fired("SplitdnsTunnelCanaryFailing", TUNNEL,
                             "The tunnel of zone svc.acme.internal. in pod shop/app-7d9f reads up, but no "
                             "answer to its canary (a random name under the zone) has come back through "
                             "the tunnel's interface for 5 minutes: the path to the tunnel's DNS is "
                             "broken; /ready?zone= says how it failed.")]),
        (17, []), (27, [])]),
    "SplitdnsZoneNotReady": ([s("splitdns_zone_ready", TZONE, "1x4 0x14 1x5")], [
        (10, []), (16, [fired("SplitdnsZoneNotReady", TZONE,
                              "Zone svc.acme.internal. in pod shop/app-7d9f has not been ready for 10 "
                              "minutes (/ready?zone= answers 503: not answered yet, every upstream down, the "
                              "tunnel down, or a loop); `kubectl exec` into the pod and read /ready?zone= "
                              "for the reason.")]),
        (21, [])]),
    "SplitdnsAllUpstreamsDown": ([
        s("splitdns_upstream_healthy", {**POD, "zone": ".", "to": "10.96.0.10:53"}, "1x4 0x6 1x5"),
        s("splitdns_upstream_healthy", {**POD, "zone": ".", "to": "10.96.0.11:53"}, "1x2 0x8 1x5"),
    ], [(4, []), (8, [fired("SplitdnsAllUpstreamsDown", {**POD, "zone": "."},
                            "Every upstream of zone . in pod shop/app-7d9f has been marked down for 2 "
                            "minutes: its queries get SERVFAIL at once until a health probe is answered.")]),
        (12, [])]),
    "SplitdnsServfailRatioHigh": ([
        s("coredns_dns_responses_total", {**SERVER, "zone": ".", "rcode": "NOERROR", "plugin": "forward"},
          "0+60x40"),
        s("coredns_dns_responses_total", {**SERVER, "zone": ".", "rcode": "SERVFAIL", "plugin": "forward"},
          "0x5 30+30x19 600x15"),
    ], [(12, []), (20, [fired("SplitdnsServfailRatioHigh", {**SERVER, "zone": "."},
                              "33.33% of the answers of zone . in pod shop/app-7d9f have been SERVFAIL "
                              "for 10 minutes (at 0.1 answers a second or more).")]),
        (40, [])]),
    "SplitdnsResolverDown": ([s("up", RESOLVER, "1x4 0x9 1x5")], [
        (8, []), (12, [fired("SplitdnsResolverDown", RESOLVER,
                             "The resolver of pod shop/app-7d9f has not answered its scrape for 5 minutes: "
                             "its container is down or restarting (`kubectl describe pod` says why), or its "
                             "metrics port does not answer; while the resolver is down, nothing in the pod "
                             "resolves a name.")]),
        (16, [])]),
    # Scraped, then no target at all for 20 minutes (the PodMonitor lost its pods), then back.
    "SplitdnsResolversAbsent": ([s("up", RESOLVER, "1x4 stale _x19 1x5")], [
        (12, []), (22, [fired("SplitdnsResolversAbsent", {"job": "splitdns"},
                              "Prometheus has scraped no in-pod resolver for 15 minutes: the PodMonitor "
                              "selects no pod (none carries splitdns.dev/inject: \"true\", or none runs), or "
                              "Prometheus does not pick the PodMonitor up (its podMonitorSelector). "
                              "Silence it where no pod asks for the resolver.")]),
        (28, [])]),
    "SplitdnsLoopDetected": ([s("splitdns_loop_detected_total", {**POD, "zone": "."}, "0x5 1x20")],
                             [(8, [fired("SplitdnsLoopDetected", {**POD, "zone": "."},
                                         "Zone . in pod shop/app-7d9f forwards back to itself: it answers "
                                         "SERVFAIL at once until the loop is gone (the resolver's log names "
                                         "the upstream).")]),
                              (20, [])]),
    "SplitdnsReloadFailing": ([s("coredns_reload_failed_total", POD, "0x5 1x25")],
                              [(4, []), (8, [fired("SplitdnsReloadFailing", POD,
                                                   "Pod shop/app-7d9f could not load its changed Corefile "
                                                   "and still serves the previous one; the resolver's log "
                                                   "has the file, line and error.")]),
                               (25, [])]),
    "SplitdnsCacheEvictingHard": ([
        s("coredns_cache_misses_total", {**SERVER, "zones": "."}, "0+120x55"),
        s("coredns_cache_evictions_total", {**SERVER, "zones": ".", "type": "success"},
          "0x5 0+90x30 2700x20"),
    ], [(35, [fired("SplitdnsCacheEvictingHard", {**SERVER, "zones": "."},
                    "The cache of zones . in pod shop/app-7d9f has evicted 75% of its misses' worth of "
                    "entries for 15 minutes: it is too small for the names the pod asks, so hits turn "
                    "into misses.")]),
        (50, [])]),
    "SplitdnsWebhookDown": ([s("up", HOOK, "1x4 0x9 1x5")], [
        (8, []), (12, [fired("SplitdnsWebhookDown", HOOK,
                             "Webhook replica splitdns-system/splitdns-webhook-1 has not answered its "
                             "scrape for 5 minutes; with failurePolicy Ignore, pods created while no replica "
                             "answers start without the resolver.")]),
        (16, [])]),
    "SplitdnsWebhookFailing": ([
        s("splitdns_webhook_reviews_total", {**HOOK, "outcome": "injected"}, "0+100x30"),
        s("splitdns_webhook_reviews_total", {**HOOK, "outcome": "error"}, "0x5 20+20x14 300x15"),
    ], [(15, [fired("SplitdnsWebhookFailing", HOOK,
                    "Webhook replica splitdns-system/splitdns-webhook-1 failed 16.67% of its reviews for "
                    "5 minutes (errors, timeouts, bodies too large or malformed); those pods start without "
                    "the resolver.")]),
        (30, [])]),
    "SplitdnsWebhookSlow": ([
        s(BUCKET, {**HOOK, "le": "0.1"}, FAST_THEN_SLOW),
        s(BUCKET, {**HOOK, "le": "1.0"}, FAST_THEN_SLOW),
        s(BUCKET, {**HOOK, "le": "5.0"}, "0+60x40"),
        s(BUCKET, {**HOOK, "le": "+Inf"}, "0+60x40"),
    ], [(15, []), (23, [fired("SplitdnsWebhookSlow", {"job": HOOK["job"], "namespace": HOOK["namespace"]},
                              "The webhook in splitdns-system took 4.96s at the 99th percentile for 10 "
                              "minutes; at its timeoutSeconds the API server admits the pod without the "
                              "resolver.")]),
        (40, [])]),
    "SplitdnsInjectionMissed": ([
        s("splitdns_webhook_reviews_total", {**HOOK, "outcome": "injected"}, "0+10x40"),
        s("splitdns_webhook_reviews_total", {**HOOK, "outcome": "refused"}, "0x14 1x25"),
    ], [(10, []), (20, [fired("SplitdnsInjectionMissed", HOOK,
                              "In the last 15 minutes, 1 pod(s) that asked for injection (label "
                              "splitdns.dev/inject: \"true\") were admitted without the resolver by webhook "
                              "replica splitdns-system/splitdns-webhook-1 (refused or failed); its log lines "
                              "with outcome refused or error name each pod, and `splitdns doctor` lists "
                              "them.")]),
        (40, [])]),
}


def promtool() -> str:
    need_tools("promtool", hint="Debian's prometheus package; make deps-debian installs it")
    found = shutil.which("promtool")
    assert found is not None
    return found


def test_every_alert_has_a_case_and_a_runbook() -> None:
    names = [a.name for a in monitoring.ALERTS]
    assert sorted(names) == sorted(CASES)
    runbook = (Path(__file__).resolve().parents[1] / "docs" / "monitoring.md").read_text()
    assert all(f"### {name}" in runbook for name in names)


def test_promtool_checks_the_rules(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(monitoring.prometheus_rule("monitoring")["spec"]))
    out = subprocess.run([promtool(), "check", "rules", str(rules)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(monitoring.ALERTS)} rules found" in out.stdout


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_alert_fires_and_resolves(tmp_path: Path, name: str) -> None:
    series, evals = CASES[name]
    assert any(expected for _, expected in evals) and any(not expected for _, expected in evals)
    promtool_test(tmp_path, name, series, evals)


def test_a_quiet_zone_does_not_page_for_its_servfail_ratio(tmp_path: Path) -> None:
    """One SERVFAIL of two answers a minute is 50 %, but 2 answers a minute is below the 0.1 a
    second the ratio needs; the same ratio at 6 answers a second fires."""
    labels = {**SERVER, "zone": "svc.acme.internal."}
    quiet = [s("coredns_dns_responses_total", {**labels, "rcode": "NOERROR", "plugin": "forward"}, "0+1x30"),
             s("coredns_dns_responses_total", {**labels, "rcode": "SERVFAIL", "plugin": "forward"}, "0+1x30")]
    promtool_test(tmp_path, "SplitdnsServfailRatioHigh", quiet, [(20, []), (30, [])])
    busy = [s("coredns_dns_responses_total", {**labels, "rcode": "NOERROR", "plugin": "forward"},
              "0+180x30"),
            s("coredns_dns_responses_total", {**labels, "rcode": "SERVFAIL", "plugin": "forward"},
              "0+180x30")]
    promtool_test(tmp_path, "SplitdnsServfailRatioHigh", busy, [(20, [fired(
        "SplitdnsServfailRatioHigh", {**SERVER, "zone": "svc.acme.internal."},
        "50% of the answers of zone svc.acme.internal. in pod shop/app-7d9f have been SERVFAIL for 10 "
        "minutes (at 0.1 answers a second or more).")])])


def promtool_test(tmp_path: Path, name: str, series: list[dict[str, str]],
                  evals: list[tuple[int, list[dict[str, Any]]]]) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(monitoring.prometheus_rule("monitoring")["spec"]))
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
             "tests": [{"interval": "1m", "input_series": series,
                        "alert_rule_test": [{"eval_time": f"{minute}m", "alertname": name,
                                             "exp_alerts": expected} for minute, expected in evals]}]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    out = subprocess.run([promtool(), "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
