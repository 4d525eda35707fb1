"""The dashboard and the alerts, proven against a real Prometheus (Debian's package) scraping a real
`splitdns serve` and a real `splitdns webhook` on loopback, every second, while traffic, an upstream
outage, a tunnel outage (driven through the `openvpn` directive's state file), a forwarding loop
(the tunnel pushing this very server), a Corefile that does not load and a webhook that refuses,
fails and dies are played. Then every query of every dashboard panel, and every alert's
expression, is evaluated through Prometheus's HTTP API over the run: each must return data,
with no error. The rules are loaded into that Prometheus too, and must evaluate cleanly.

Two alerts cannot be played here: SplitdnsWebhookSlow (a p99 review time over 1 s for 10
minutes), whose signal (the p99 itself) must return data, and SplitdnsResolversAbsent (no
resolver scraped at all), whose watched series (the resolver's `up`) must; the whole expression
of each must evaluate without error. At the end the resolver itself stops, for
SplitdnsResolverDown.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import dns.message
import dns.query
import dns.rcode

from splitdns.core.tunnel import UP, Pushed, TunnelState
from splitdns.kube.deploy import dashboard, inject, monitoring
from splitdns.shell.openvpn import write_state
from tests.support import prometheus, webhook
from tests.support.prerequisites import need_tools
from tests.support.processes import free_port, poll_until, scripted_upstream
from tests.support.resolver import http_get, splitdns_serve

ANSWER = [{"suffix": ".", "records": ["{qname} 30 IN A 192.0.2.10"]}]
DROP = [{"suffix": ".", "action": "drop"}]
# The dashboard's template variables as an "All" selection makes them, and a rate window the
# 1-second scrapes fill.
VARIABLES = {"$__rate_interval": "10s", "$job": ".*", "$namespace": ".*", "$pod": ".*", "$zone": ".*"}
# alert -> what must return data instead (None: its signal).
UNPLAYABLE = {"SplitdnsWebhookSlow": None,
              "SplitdnsResolversAbsent": f'up{{job="{monitoring.RESOLVER_JOB}"}}'}

def corefile(cluster: str, state: Path, mport: int, rport: int) -> str:
    return f""". {{
    errors
    cache 30 {{
        success 1024
    }}
    prometheus 127.0.0.1:{mport}
    ready 127.0.0.1:{rport}
    reload 2s 1s
    forward . {cluster} {{
        max_fails 1
        health_check 0.2s
        read_timeout 300ms
    }}
}}
svc.acme.internal {{
    errors
    cache 30
    openvpn {{
        state {state}
    }}
}}
"""


def ask(port: int, name: str) -> str:
    reply = dns.query.udp(dns.message.make_query(name, "A"), "127.0.0.1", port=port, timeout=3)
    return dns.rcode.to_text(reply.rcode())


def tunnel(state: Path, status: str, reason: str, servers: tuple[tuple[str, int], ...]) -> None:
    write_state(str(state), TunnelState(status, reason, Pushed(servers), "lo"))  # servers on loopback


def expanded(expr: str) -> str:
    for name, value in sorted(VARIABLES.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, value)
    return expr


def test_every_panel_and_alert_returns_data_from_a_real_prometheus(tmp_path: Path) -> None:
    need_tools("prometheus", hint="Debian's prometheus package; make deps-debian installs it")
    state = tmp_path / "openvpn.json"
    mport, rport = free_port("127.0.0.1"), free_port("127.0.0.1")
    with scripted_upstream(tmp_path, ANSWER, "127.0.0.21") as cluster, \
            scripted_upstream(tmp_path, ANSWER, "127.0.0.22") as vpn, \
            splitdns_serve(tmp_path, corefile(cluster.target, state, mport, rport)) as r, \
            webhook.running() as hook, \
            prometheus.running({monitoring.RESOLVER_JOB: f"127.0.0.1:{mport}",
                                monitoring.WEBHOOK_JOB: f"127.0.0.1:{hook.probe_port}"},
                               monitoring.prometheus_rule("monitoring")["spec"]) as prom:
        start = time.time()
        poll_until("both targets scraped", 15, lambda: True if prom.targets_up() == 2 else None)
        # Traffic: the tunnel up, both zones asked, repeats (hits), many names (misses that
        # evict from a 1024-entry cache, the least `success` keeps, as CoreDNS's).
        tunnel(state, UP, "up script ran", ((vpn.addr, vpn.port),))
        poll_until("the tunnel zone", 10, lambda: True if ask(r.port, "db.svc.acme.internal.") == "NOERROR"
                   else None)
        for i in range(3500):
            ask(r.port, f"n{i}.example.org." if i % 10 else "www.example.org.")
        for i in range(50):
            ask(r.port, f"h{i % 5}.svc.acme.internal.")
        time.sleep(3)
        # An upstream outage: the catch-all's one upstream stops answering.
        cluster.set_rules(DROP)
        rcodes = []
        for i in range(300):  # over a few scrapes, as an outage comes
            rcodes.append(ask(r.port, f"out{i}.example.org."))
            time.sleep(0.005)
        assert set(rcodes) == {"SERVFAIL"}
        poll_until("the zone down", 10, lambda: True if http_get(rport, "/ready?zone=.")[0] == 503 else None)
        time.sleep(3)
        cluster.set_rules(ANSWER)
        # A tunnel outage.
        tunnel(state, "down", "down script ran (ping-restart)", ())
        names = (f"new{i}.svc.acme.internal." for i in range(10_000))  # a cached one would stay NOERROR
        poll_until("the tunnel down", 10, lambda: True if ask(r.port, next(names)) == "SERVFAIL" else None)
        for i in range(50):
            ask(r.port, f"t{i}.svc.acme.internal.")
        time.sleep(3)
        # A loop: the VPN server pushes this very server; then the tunnel comes back.
        tunnel(state, UP, "up script ran", (("127.0.0.1", r.port),))
        poll_until("the loop found", 10, lambda: True if "forwarding loop" in r.stderr() else None)
        time.sleep(2)
        tunnel(state, UP, "up script ran", ((vpn.addr, vpn.port),))
        # A Corefile that does not load.
        good = (r.workdir / "Corefile").read_text()
        (r.workdir / "Corefile").write_text(good + "\nbroken {\n")
        r.process.send_signal(signal.SIGUSR1)
        poll_until("the reload to fail", 10, lambda: True if "plugin/reload" in r.stderr() else None)
        # The webhook: a pod injected, one refused (it opts out by annotation), a malformed body.
        asking = {"metadata": {"labels": {inject.POD_LABEL: "true"}},
                  "spec": {"containers": [{"name": "app", "image": "app"}]}}
        assert "patch" in hook.review(webhook.pod_request(asking, "shop"))
        refused = json.loads(json.dumps(asking))
        refused["metadata"]["annotations"] = {inject.POD_LABEL: "false"}
        assert "patch" not in hook.review(webhook.pod_request(refused, "shop"))
        assert hook.post(b"{not json")[0] == 400
        time.sleep(3)
        # The webhook dies.
        hook.process.terminate()
        hook.process.wait(10)
        poll_until("the webhook's target down", 10, lambda: True if prom.targets_up() == 1 else None)
        time.sleep(2)
        series = prom.api("query", query='count({job="splitdns"})', time=f"{time.time():.3f}")["result"]
        # The resolver stops: its target stays, unanswered.
        r.process.terminate()
        r.process.wait(10)
        poll_until("the resolver's target down", 10, lambda: True if prom.targets_up() == 0 else None)
        time.sleep(2)
        end = time.time()

        print(f"series one splitdns serves here (2 zones, 2 upstreams, 1 tunnel): {series[0]['value'][1]}")
        empty = [(title, expr) for title, expr in dashboard.queries()
                 if not prom.query_range(expanded(expr), start, end)]
        assert not empty, f"panels with no data: {empty}"
        fired = {}
        for alert in monitoring.ALERTS:
            fired[alert.name] = prom.query_range(alert.expr, start, end)  # evaluates, or raises
            if alert.name in UNPLAYABLE:
                assert prom.query_range(UNPLAYABLE[alert.name] or alert.signal, start, end), alert.name
        silent = [name for name, result in fired.items() if not result and name not in UNPLAYABLE]
        assert not silent, f"alert expressions that never held during the run: {silent}"
        labels = _labels(fired)
        assert labels["SplitdnsTunnelDown"] >= {("zone", "svc.acme.internal."), ("reason", "down")}
        assert ("zone", ".") in labels["SplitdnsAllUpstreamsDown"]
        assert ("zone", ".") in labels["SplitdnsServfailRatioHigh"]
        assert ("zone", "svc.acme.internal.") in labels["SplitdnsLoopDetected"]
        assert ("job", monitoring.RESOLVER_JOB) in labels["SplitdnsResolverDown"]
        rules = [rule for group in prom.api("rules")["groups"] for rule in group["rules"]]
        assert sorted(rule["name"] for rule in rules) == sorted(a.name for a in monitoring.ALERTS)
        assert all(rule["health"] == "ok" for rule in rules), [(r["name"], r.get("lastError")) for r in rules]


def _labels(fired: dict[str, list[Any]]) -> dict[str, set[tuple[str, str]]]:
    return {name: {(k, v) for s in result for k, v in s["metric"].items()} for name, result in fired.items()}
