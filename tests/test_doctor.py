"""`splitdns doctor` against a STAND-IN for the Kubernetes API server, NOT a real one: no kube-apiserver
can run on this machine. The stand-in serves, over real HTTP to lightkube through a real kubeconfig,
the API's responses for the three reads doctor makes (tests/data/doctor/: a NamespaceList, a PodList
and the webhook's Deployment, in the API's JSON format; written for this test from objects that
`splitdns inject` and `render --form webhook` produce, not recorded from a live cluster).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from splitdns import cli
from tests.support import apiserver

DATA = Path(__file__).parent / "data" / "doctor"
DEPLOYMENT = "/apis/apps/v1/namespaces/splitdns-system/deployments/splitdns-webhook"


class StandInAPIServer(apiserver.StandInHandler):
    requests: ClassVar[list[str]] = []
    webhook_present: ClassVar[bool] = True

    def do_GET(self) -> None:
        StandInAPIServer.requests.append(self.path)
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        if url.path == "/api/v1/namespaces":
            self.reply(200, json.loads((DATA / "namespaces.json").read_text()))
        elif url.path == "/api/v1/pods" and query.get("labelSelector") == ["splitdns.dev/inject=true"]:
            self.reply(200, json.loads((DATA / "pods.json").read_text()))
        elif url.path == DEPLOYMENT and StandInAPIServer.webhook_present:
            self.reply(200, json.loads((DATA / "webhook-deployment.json").read_text()))
        else:
            self.not_found("not found")


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[Path]:
    StandInAPIServer.requests = []
    StandInAPIServer.webhook_present = True
    with apiserver.serving(StandInAPIServer, tmp_path) as path:
        yield path


def test_lists_pods_without_the_resolver_and_with_old_settings(kubeconfig: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["doctor", "--kubeconfig", str(kubeconfig)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("shop/shop-worker-6b7c8d9e0-fghij: not-injected: asked for the resolver and "
                               "runs without it")
    assert lines[0].endswith("(owned by ReplicaSet shop-worker-6b7c8d9e0)")
    assert lines[1].startswith("reports/report-0: namespace-not-enabled: asks for the resolver but namespace "
                               "reports lacks the label splitdns.dev/injection=enabled")
    assert lines[2].startswith("shop/shop-web-5c6d7f8b9-abcde: stale: injected by splitdns 0.1.0 with "
                               "settings a02a51f7c0134314; the webhook now injects 348d38161f8eb708")
    assert lines[3] == "3 finding(s) among 5 pod(s) that ask for the resolver."
    # The current pod and the finished Job's pod are not findings.
    assert not any("shop-api" in line or "nightly-export" in line for line in lines)


def test_no_webhook_is_said(kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    StandInAPIServer.webhook_present = False
    assert cli.main(["doctor", "--kubeconfig", str(kubeconfig)]) == 1
    assert capsys.readouterr().out.startswith("no-webhook: the webhook's Deployment was not found")


def test_unreachable_cluster_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["doctor", "--kubeconfig", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("splitdns doctor: cannot load Kubernetes credentials") and "Traceback" not in err


def test_all_current_is_no_finding() -> None:
    from splitdns.kube.check import doctor

    pods = json.loads((DATA / "pods.json").read_text())["items"]
    namespaces = json.loads((DATA / "namespaces.json").read_text())["items"]
    webhook = json.loads((DATA / "webhook-deployment.json").read_text())
    current = [p for p in pods if p["metadata"]["name"].startswith("shop-api")]
    assert doctor.diagnose(namespaces, current, webhook) == []
    assert doctor.report([], 1).startswith("1 pod(s) ask for the resolver; all are injected")


def test_a_report_into_a_closed_pipe_ends_quietly(kubeconfig: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`splitdns doctor | head -1`: the reader goes away; nothing is said about it."""
    from tests.test_first_commands import ClosedPipe

    monkeypatch.setattr("sys.stdout", ClosedPipe())
    assert cli.main(["doctor", "--kubeconfig", str(kubeconfig)]) == cli.EXIT_PIPE
    assert capsys.readouterr().err == ""
