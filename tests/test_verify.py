"""`splitdns verify` outside the lab: what it tells a user when it cannot do what was asked, and the
kubectl command line it runs in cluster mode."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from splitdns import cli
from tests.support.processes import free_port


def standin_kubectl(bin_dir: Path, log: Path) -> None:
    """A STAND-IN for kubectl (no API server can run here): it records its arguments and fails as
    kubectl does without a cluster. Only the command line splitdns builds is under test."""
    bin_dir.mkdir()
    script = bin_dir / "kubectl"
    script.write_text(f"#!{sys.executable}\nimport sys\n"
                      f"open({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
                      "print('The connection to the server localhost:8080 was refused', file=sys.stderr)\n"
                      "sys.exit(1)\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_cluster_mode_execs_in_the_dns_container_unless_told_otherwise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # The pod render writes runs splitdns in the container `dns`; kubectl's default container is the
    # app, which has no splitdns: `kubectl splitdns verify deploy/app` must not land there.
    log = tmp_path / "kubectl.log"
    standin_kubectl(tmp_path / "bin", log)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert cli.main(["verify", "deploy/app", "-n", "shop"]) == 1
    assert cli.main(["verify", "deploy/app", "-c", "resolver"]) == 1
    calls = log.read_text().splitlines()
    assert calls[0].startswith("exec -n shop -c dns deploy/app -- splitdns verify"), calls
    assert calls[1].startswith("exec -c resolver deploy/app -- splitdns verify"), calls
    assert "localhost:8080 was refused" in capsys.readouterr().err


def test_without_kubectl_cluster_mode_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert cli.main(["verify", "deploy/app"]) == 1
    assert capsys.readouterr().err == ("splitdns verify: kubectl not found: cluster mode runs kubectl; "
                                       "put it on PATH\n")


def test_an_artifact_that_cannot_be_written_is_an_error_not_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    # Nothing listens on this loopback port: the verdict is "not answering", then the write fails.
    port = str(free_port("127.0.0.1"))
    assert cli.main(["verify", "--port", port, "--resolv-conf", str(blocker), "--out",
                     str(blocker / "ticket")]) == 1
    out, err = capsys.readouterr()
    assert "verdict:" in out
    assert err == f"splitdns verify: cannot write the artifact {blocker}/ticket: File exists ({blocker})\n"
