"""End to end: a pod spec goes through the admission webhook (a real process, real HTTPS), and what
came out runs in the namespace lab: the injected resolver container's command line and environment
start the pod's resolver, the pod's resolv.conf is what the kubelet writes for the injected
dnsConfig, and `splitdns verify` passes for both zones through the real OpenVPN tunnel.

No kubelet runs here: the test does the kubelet's two jobs for the resolver container (run the image's
entrypoint `splitdns serve` with the container's args and env; write resolv.conf from dnsConfig).
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import jsonpatch  # type: ignore[import-untyped,unused-ignore]
import pytest

from splitdns.kube.deploy import inject
from tests.lab import Lab, PodSpec, configs
from tests.lab.fixtures import require_lab
from tests.support import webhook
from tests.test_openvpn_lab import MANAGEMENT_CLIENT

pytestmark = pytest.mark.netns

APP_POD: dict[str, Any] = {
    "metadata": {"generateName": "shop-api-", "labels": {"app": "shop-api", inject.POD_LABEL: "true"}},
    "spec": {"containers": [
        {"name": "api", "image": "registry.example.com/shop/api:2.4.1"},
        {"name": "vpn", "image": "registry.example.com/openvpn-client:2.6",
         "args": ["--config", "/etc/openvpn/client/client.conf", "--management", "127.0.0.1", "7505",
                  "--management-up-down"]},
    ]},
}


# An HTTP GET as the kubelet's probe makes it: prints the status and the body.
PROBE = """\
import sys, urllib.error, urllib.request
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=5)
    print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
"""


def kubelet_resolv_conf(dns_config: dict[str, Any]) -> str:
    """What the kubelet writes for dnsPolicy None."""
    options = " ".join(o["name"] + (f":{o['value']}" if "value" in o else "") for o in dns_config["options"])
    return (f"search {' '.join(dns_config['searches'])}\n"
            + "".join(f"nameserver {n}\n" for n in dns_config["nameservers"]) + f"options {options}\n")


def test_a_pod_through_the_webhook_resolves_both_zones_through_the_tunnel(tmp_path: Path) -> None:
    require_lab()
    # The catch-all's readiness asks a name the lab's cluster DNS answers (by default it asks the
    # root's NS, which a real cluster DNS forwards and the lab's, answering only its own names, refuses).
    settings = ["--zone", f"{configs.PRIVATE_ZONE}=openvpn", "--cluster-dns", configs.CLUSTER_DNS_IP,
                "--probe", f".={configs.CATCHALL_NAME}"]
    with webhook.running(settings=settings) as hook:
        request = webhook.pod_request(APP_POD, "shop")
        response = hook.review(request)
    pod = jsonpatch.apply_patch(request["object"], json.loads(base64.b64decode(response["patch"])))
    spec = pod["spec"]
    (resolver,) = [c for c in spec["initContainers"] if c["name"] == inject.CONTAINER]
    # The image's entrypoint is `splitdns serve`; the container adds its args and env.
    env = [f"{e['name']}={e['value']}" for e in resolver["env"]]
    command = ("env", *env, sys.executable, "-m", "splitdns", "serve", *resolver["args"])
    resolv_conf = kubelet_resolv_conf(spec["dnsConfig"])
    assert resolv_conf.startswith("search shop.svc.cluster.local svc.cluster.local cluster.local\n")
    lab = Lab(PodSpec(resolver_command=command, resolv_conf=resolv_conf, corefile="# unused\n",
                      vpn_extra=MANAGEMENT_CLIENT))
    lab.up()
    try:
        out = tmp_path / "verify"
        done = lab.pod_exec([sys.executable, "-m", "splitdns", "verify", "--name", configs.KUBERNETES_NAME,
                             "--name", configs.DB_NAME, "--tcp", f"{configs.DB_NAME}:{configs.DB_PORT}",
                             "--out", str(out)], timeout=60)
        # The startup probe the kubelet would run, on the port and path the container declares.
        probe = resolver["startupProbe"]["httpGet"]
        port = next(p["containerPort"] for p in resolver["ports"] if p["name"] == probe["port"])
        ready = lab.pod_exec([sys.executable, "-c", PROBE, f"http://127.0.0.1:{port}{probe['path']}"],
                             timeout=30)
    finally:
        lab.down()
    assert done.returncode == 0, done.stdout + done.stderr
    markdown = out.with_suffix(".md").read_text()
    assert "**Verdict: All good**" in markdown
    assert f"{configs.DB_NAME}:{configs.DB_PORT} -> {configs.DB_IP}: connected" in markdown
    assert configs.KUBERNETES_IP in markdown and configs.DB_IP in markdown
    assert ready.stdout.startswith("200 "), ready.stdout + ready.stderr
