"""The rendered resolver's startup probe passes with nothing after it running, against a real
`splitdns serve`: the Corefile `render --zone svc.acme.internal=ADDRESS` writes, served on
loopback with only its ports moved to free ones, a scripted cluster DNS answering, and the tunnel
zone's fixed address where nothing answers (its VPN, listed after the resolver, has not started).
The startup probe the Deployment declares answers 200; `/ready` (the readiness probe, every zone)
still answers 503, and the VPN container's startup probe is that `/ready`.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from splitdns.commands import render
from tests.support.processes import free_port, poll_until, scripted_upstream
from tests.support.resolver import http_get, splitdns_serve

ANSWER = [{"suffix": ".", "records": ["{qname} 30 IN A 192.0.2.10"]}]
BEHIND_THE_VPN = "127.0.0.98"  # nothing listens there: the tunnel is not up yet


def test_the_startup_probe_passes_before_the_vpn_starts(tmp_path: Path) -> None:
    with scripted_upstream(tmp_path, ANSWER, "127.0.0.21") as cluster:
        zone = f"svc.acme.internal={BEHIND_THE_VPN}:{free_port('127.0.0.1')}"
        files = render.files(render.Request(zones=[zone], cluster_dns=cluster.target))
        docs = list(yaml.safe_load_all(files["splitdns.yaml"]))
        corefile = docs[0]["data"]["Corefile"]
        spec = docs[1]["spec"]["template"]["spec"]
        dns, vpn = spec["initContainers"]
        ready_port, health_port, metrics_port, dns_port = (free_port("127.0.0.1") for _ in range(4))
        # Only the ports move (the kubelet reaches the pod IP; here loopback): the lines as rendered.
        served = re.sub(r"^(\S+):53 \{", rf"\1:{dns_port} {{", corefile, flags=re.M)
        served = re.sub(r"^(\s+)ready\b", rf"\1ready 127.0.0.1:{ready_port}", served, flags=re.M)
        served = re.sub(r"^(\s+)health$", rf"\1health 127.0.0.1:{health_port}", served, flags=re.M)
        served = re.sub(r"^(\s+)prometheus :9153$", rf"\1prometheus 127.0.0.1:{metrics_port}", served,
                        flags=re.M)
        with splitdns_serve(tmp_path, served, dns_port):
            startup = dns["startupProbe"]
            port = {"ready": ready_port, "health": health_port}[startup["httpGet"]["port"]]
            budget = startup["periodSeconds"] * startup["failureThreshold"]

            def passes() -> bool | None:
                return True if http_get(port, startup["httpGet"]["path"])[0] == 200 else None

            poll_until("the startup probe to pass", min(budget, 15), passes)
            status, body = http_get(ready_port, "/ready")
            assert status == 503 and "svc.acme.internal" in body, body
    assert vpn["startupProbe"]["httpGet"] == {"path": "/ready", "port": 8181}
