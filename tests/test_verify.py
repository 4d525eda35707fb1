"""`splitdns verify` outside the lab: what it tells a user when it cannot do what was asked, and the
kubectl command line it runs in cluster mode."""

from __future__ import annotations

import os
import re
import socket
import stat
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import dns.message
import dns.rcode
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


def test_cluster_mode_execs_in_the_resolvers_container_unless_told_otherwise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # inject and the webhook name the resolver's container `splitdns`; kubectl's default container
    # is the app, which has no splitdns: `kubectl splitdns verify deploy/app` must not land there.
    log = tmp_path / "kubectl.log"
    standin_kubectl(tmp_path / "bin", log)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert cli.main(["verify", "deploy/app", "-n", "shop"]) == 1
    assert cli.main(["verify", "deploy/app", "-c", "resolver"]) == 1
    calls = log.read_text().splitlines()
    assert calls[0].startswith("exec -n shop -c splitdns deploy/app -- splitdns verify"), calls
    assert calls[1].startswith("exec -c resolver deploy/app -- splitdns verify"), calls
    assert len(calls) == 2  # a cluster that cannot be reached is no missing container
    assert "localhost:8080 was refused" in capsys.readouterr().err


def test_cluster_mode_falls_back_to_the_container_render_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A rendered pod calls it `dns`: the STAND-IN kubectl answers as kubectl does for a container
    the pod lacks, then fails as without a cluster."""
    log, bin_dir = tmp_path / "kubectl.log", tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "kubectl"
    script.write_text(f"#!{sys.executable}\nimport sys\n"
                      f"open({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
                      "if 'splitdns' == sys.argv[sys.argv.index('-c') + 1]:\n"
                      "    print('error: unable to upgrade connection: container not found (\"splitdns\")', "
                      "file=sys.stderr)\n"
                      "else:\n"
                      "    print('The connection to the server localhost:8080 was refused',\n"
                      "          file=sys.stderr)\n"
                      "sys.exit(1)\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert cli.main(["verify", "deploy/app"]) == 1
    calls = log.read_text().splitlines()
    assert [c.split(" -- ")[0] for c in calls] == ["exec -c splitdns deploy/app", "exec -c dns deploy/app"]
    assert "localhost:8080 was refused" in capsys.readouterr().err


def test_without_kubectl_cluster_mode_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert cli.main(["verify", "deploy/app"]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == ("splitdns verify: kubectl not found: cluster mode "
                                                        "runs kubectl; put it on PATH")


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
    assert err.splitlines()[-1] == (f"splitdns verify: cannot write the artifact {blocker}/ticket: File "
                                    f"exists ({blocker})")


class FakeDns:
    """A FAKE DNS server on loopback, in a thread: `answer(query)` makes the reply, None drops it
    (a server behind a broken return path). Stands in for the resolver and for a zone's server, so
    verify's decision is tested without a lab; tests/test_verify_lab.py shows it with real parts."""

    def __init__(self, address: str, answer: Callable[[dns.message.Message], dns.message.Message | None]):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((address, 0))
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self.answer = answer
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                data, peer = self.sock.recvfrom(4096)
            except TimeoutError:
                continue
            reply = self.answer(dns.message.from_wire(data))
            if reply is not None:
                self.sock.sendto(reply.to_wire(), peer)

    def __enter__(self) -> FakeDns:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(2)
        self.sock.close()


def _rcode(rcode: int) -> Callable[[dns.message.Message], dns.message.Message]:
    def answer(query: dns.message.Message) -> dns.message.Message:
        reply = dns.message.make_response(query)
        reply.set_rcode(rcode)
        return reply
    return answer


@pytest.mark.parametrize(("upstream", "code", "said"), ids=["naming", "routing"], argvalues=[
    # The zone's server answers, but not with that name: naming.
    (_rcode(dns.rcode.NXDOMAIN), 3, "the DNS server answers, but not with that name"),
    # The zone's server never answers, the resolver has nothing cached: routing.
    (lambda query: None, 5, "does not answer and cannot be reached"),
])
def test_verify_tells_an_unreachable_zone_server_from_a_missing_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        upstream: Callable[[dns.message.Message], dns.message.Message | None], code: int, said: str) -> None:
    from splitdns.commands.verify import checks

    monkeypatch.setattr(checks, "TIMEOUT", 0.3)  # the direct query's wait; the fake answers at once or never
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\n")
    with FakeDns("127.0.0.1", _rcode(dns.rcode.SERVFAIL)) as resolver, \
            FakeDns("127.0.0.23", upstream) as zone:
        corefile = tmp_path / "Corefile"
        corefile.write_text(f"example.org:{resolver.port} {{\n forward . 127.0.0.23:{zone.port}\n}}\n")
        got = cli.main(["verify", "--port", str(resolver.port), "-conf", str(corefile),
                        "--resolv-conf", str(resolv), "--name", "db.example.org"])
    out, err = capsys.readouterr()
    assert got == code, out + err
    assert said in out, out
    # What verify waits on, as it waits: the name through the resolver, then the upstream directly.
    assert f"verify: asking db.example.org (zone example.org.) through 127.0.0.1:{resolver.port} ..." in err
    assert f"asking its upstream 127.0.0.23:{zone.port} directly ..." in err


def test_verify_names_the_port_it_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port("127.0.0.1")  # nothing listens: the resolver is down
    assert cli.main(["verify", "--port", str(port), "--resolv-conf", str(tmp_path / "none")]) == 2
    out = capsys.readouterr().out
    # Not port 53 (a random port may begin with 53: the whole port only).
    assert f"no reply from 127.0.0.1:{port}" in out and re.search(r"127\.0\.0\.1:53\b", out) is None, out
