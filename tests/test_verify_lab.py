"""`splitdns verify` in the namespace lab: each verdict reproduced with real parts.

Healthy; the return-path failure (the VPN server stops translating its client pool:
names resolve, TCP to 5432 times out) -> routing; tunnel down -> tunnel verdict; the
resolver gone -> resolver verdict; and cluster mode, where a stand-in `kubectl` (no API
server can run here; tests/support/kubectl_standin.py maps exec and delete onto the lab)
replaces the pod by one whose resolv.conf is the kubelet's default -> pod-spec verdict.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lab import Lab, PodSpec, configs
from tests.lab.fixtures import lab_session, require_lab
from tests.lab.netns import signal_proc
from tests.test_openvpn_lab import MANAGEMENT_CLIENT, drop_tunnel

pytestmark = pytest.mark.netns

CHECKS = ["--name", configs.KUBERNETES_NAME, "--name", configs.DB_NAME,
          "--tcp", f"{configs.DB_NAME}:{configs.DB_PORT}"]
KUBELET_RESOLV_CONF = ("search default.svc.cluster.local svc.cluster.local cluster.local\n"
                       f"nameserver {configs.CLUSTER_DNS_IP}\noptions ndots:5\n")


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with lab_session() as running:
        yield running


def verify_in_pod(lab: Lab, out: Path, *extra: str) -> tuple[int, str, dict[str, object]]:
    done = lab.pod_exec([sys.executable, "-m", "splitdns", "verify", *CHECKS, "-conf",
                         str(lab.corefile), "--out", str(out), *extra], timeout=60)
    data = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else {}
    return done.returncode, done.stdout + done.stderr, data


def test_healthy(lab: Lab, tmp_path: Path) -> None:
    code, text, data = verify_in_pod(lab, tmp_path / "healthy")
    assert code == 0, text
    markdown = (tmp_path / "healthy.md").read_text()
    assert "**Verdict: All good**" in markdown
    assert f"{configs.DB_NAME}: block svc.acme.internal. -> forward to 192.168.240.1:53" in markdown
    assert "nameserver 127.0.0.1" in markdown and ";; ANSWER SECTION:" in markdown
    assert f"{configs.DB_NAME}:{configs.DB_PORT} -> {configs.DB_IP}: connected" in markdown
    assert data["verdict"]["exit_code"] == 0  # type: ignore[index]


def test_return_path_failure_is_routing(lab: Lab, tmp_path: Path) -> None:
    lab.set_masquerade(False)
    try:
        code, text, data = verify_in_pod(lab, tmp_path / "routing")
    finally:
        lab.set_masquerade(True)
    print(text)
    assert code == 5, text
    assert "Names resolve, connections fail: this is routing" in text
    assert "MASQUERADE" in text and "hostNetwork" in text
    assert data["verdict"]["code"] == "routing"  # type: ignore[index]


def test_resolver_gone_is_its_own_verdict(lab: Lab, tmp_path: Path) -> None:
    resolver = lab.procs["resolver"]
    signal_proc(resolver, signal.SIGKILL)
    try:
        code, text, _ = verify_in_pod(lab, tmp_path / "gone")
    finally:
        lab.replace_pod()  # a fresh pod, resolver included, for the tests that follow
    assert code == 2, text
    assert "The resolver is not answering on 127.0.0.1" in text


def test_tunnel_down_is_the_tunnel_verdict(tmp_path: Path) -> None:
    require_lab()
    lab = Lab(PodSpec(corefile=configs.TUNNEL_COREFILE, vpn_extra=MANAGEMENT_CLIENT)).up()
    try:
        drop_tunnel(lab)
        code, text, _ = verify_in_pod(lab, tmp_path / "tunnel")
    finally:
        lab.down()
    assert code == 4, text
    assert "The tunnel is down" in text


def test_cluster_mode_replacement_with_the_kubelets_resolv_conf_blames_the_pod_spec(
        lab: Lab, tmp_path: Path) -> None:
    """Worked before the replacement, not after: the Corefile is right, the pod spec is not."""
    bin_dir, control = tmp_path / "bin", tmp_path / "control"
    bin_dir.mkdir()
    control.mkdir()
    standin = Path(__file__).parent / "support" / "kubectl_standin.py"
    (bin_dir / "kubectl").write_text(f"#!/bin/sh\nexec {sys.executable} {standin} \"$@\"\n")
    (bin_dir / "kubectl").chmod(0o755)
    original = lab.pod_spec

    def replace_on_request() -> None:
        for _ in range(600):
            if (control / "delete-request").exists():
                lab.pod_spec = dataclasses.replace(original, resolv_conf=KUBELET_RESOLV_CONF)
                lab.replace_pod()
                (control / "delete-done").write_text("ok")
                return
            threading.Event().wait(0.1)

    worker = threading.Thread(target=replace_on_request, daemon=True)
    worker.start()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LAB_POD_NS": lab.pod,
           "LAB_CONTROL": str(control)}
    try:
        done = subprocess.run([sys.executable, "-m", "splitdns", "verify", "--kubectl", "deploy/app",
                               "-n", "shop", "-c", "dns", "--replace", *CHECKS, "-conf", str(lab.corefile),
                               "--out", str(tmp_path / "cluster")],
                              env=env, capture_output=True, text=True, timeout=120)
        worker.join(5)
    finally:
        lab.pod_spec = original
        lab.replace_pod()
    from tests.support import user_text

    user_text.seen("splitdns verify --kubectl", done.stdout + done.stderr)
    assert done.returncode == 6, done.stdout + done.stderr
    assert "The Corefile is right but the pod spec is not" in done.stdout
    markdown = (tmp_path / "cluster.md").read_text()
    assert "## before replacement" in markdown and "## after replacement" in markdown
    assert f"nameserver {configs.CLUSTER_DNS_IP}" in markdown  # the kubelet's file, in the ticket


def test_an_unreachable_zone_server_is_routing_and_a_missing_name_is_naming(lab: Lab, tmp_path: Path) -> None:
    """Nothing cached: the corp DNS gives its host entries dnsmasq's own TTL 0. A name it does not
    have is naming (exit 3): it answers, but not with that name. With the VPN server's MASQUERADE
    gone and no route back from the corp DNS, it cannot be reached at all: routing (exit 5), not
    naming, although no name of the zone resolves."""
    lab.restart_corp_dns(local_ttl=0, wildcard=False)
    try:
        lab.replace_pod()  # a fresh resolver: nothing cached from the tests before
        missing = f"nosuch.{configs.PRIVATE_ZONE}"
        done = lab.pod_exec([sys.executable, "-m", "splitdns", "verify", "--name", configs.KUBERNETES_NAME,
                             "--name", missing, "-conf", str(lab.corefile)], timeout=60)
        naming = done.stdout + done.stderr
        assert done.returncode == 3, naming
        assert f"Naming problem in zone {configs.PRIVATE_ZONE}." in naming
        assert "the DNS server answers, but not with that name" in naming
        lab.set_masquerade(False)
        lab.set_corp_dns_return_route(False)
        done = lab.pod_exec([sys.executable, "-m", "splitdns", "verify", "--name", configs.KUBERNETES_NAME,
                             "--name", configs.DB_NAME, "-conf", str(lab.corefile)], timeout=60)
        routing = done.stdout + done.stderr
    finally:
        lab.set_masquerade(True)
        lab.set_corp_dns_return_route(True)
        lab.restart_corp_dns()
        lab.replace_pod()
    print(naming, routing, sep="\n")
    assert done.returncode == 5, routing
    assert (f"The DNS server of zone {configs.PRIVATE_ZONE}. does not answer and cannot be reached: "
            "this is routing") in routing
    assert f"asked directly, {configs.CORP_DNS_IP}:53 does not answer" in routing
    assert "Naming problem" not in routing
    # While it waits on the zone, it says so.
    assert f"verify: asking {configs.DB_NAME} (zone {configs.PRIVATE_ZONE}.) through 127.0.0.1:53" in routing
