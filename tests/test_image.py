"""The image, tested as far as this machine allows (no container engine, no base image here): the
Dockerfile's promises, the built wheel in a clean virtualenv, and `splitdns serve` run exactly as the
rendered securityContext asks: uid 65534, no capabilities, no_new_privs, read-only root filesystem,
port 53 bound thanks to the namespace's net.ipv4.ip_unprivileged_port_start=53 alone.

Network safety: the serve test runs in a network namespace it creates (unique name) and removes in
`finally`; its only interface is loopback, so nothing it sends can leave.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import parse_dig, stop, wait_ready, write_json_atomically

ROOT = Path(__file__).parents[1]
SYSTEM_PYTHON = "/usr/bin/python3"  # pyenv's python lives in /root, which uid 65534 cannot read
NOBODY = 65534
# Dependencies that only render/check/explain need; the image leaves them out.
KUBE_ONLY = {"pyyaml", "kubernetes-validate", "lightkube"}


def requirement_name(req: str) -> str:
    return re.split(r"[<>=!~ \[;]", req, maxsplit=1)[0].strip().lower().replace("_", "-")


def test_dockerfile_runs_serve_as_non_root_with_the_seeds_args() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["splitdns", "serve"]' in text  # so `args: ["-conf", FILE]` works unchanged
    assert 'CMD ["-conf", "/etc/coredns/Corefile"]' in text
    assert re.search(r"^USER 65532:65532$", text, re.M)
    assert "PYTHONDONTWRITEBYTECODE=1" in text  # nothing to write on a read-only root filesystem


def test_dockerfile_installs_exactly_the_serving_dependencies() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    serving = {requirement_name(r) for r in project["dependencies"]} - KUBE_ONLY
    serving |= {requirement_name(r) for r in project["optional-dependencies"]["fast"]}
    installed = re.findall(r'"([A-Za-z0-9_.-]+)[<>=][^"]*"', (ROOT / "Dockerfile").read_text())
    assert {requirement_name(r) for r in installed} == serving


@pytest.fixture(scope="module")
def clean_venv() -> Iterator[Path]:
    """The wheel built from this tree, installed with only the serving dependencies into a fresh
    virtualenv of the system Python, in a directory uid 65534 can read."""
    if not Path(SYSTEM_PYTHON).exists():
        pytest.skip(f"{SYSTEM_PYTHON} is missing: no Python a non-root user can run")
    base = Path(tempfile.mkdtemp(prefix="splitdns-image-"))
    try:
        base.chmod(0o755)
        pip = [str(ROOT / ".venv" / "bin" / "pip"), "--disable-pip-version-check", "-q"]
        subprocess.run([*pip, "wheel", "--no-deps", "-w", str(base / "wheel"), str(ROOT)], check=True,
                       capture_output=True, timeout=120)
        subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(base / "venv")], check=True,
                       timeout=60)
        target = ["--python", str(base / "venv" / "bin" / "python"), "install", "--no-compile"]
        wheel = next((base / "wheel").glob("splitdns-*.whl"))
        # As in the Dockerfile: the package without its render/check dependencies.
        subprocess.run([*pip, *target, "--no-deps", str(wheel)], check=True, capture_output=True, timeout=120)
        deps = [r for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
                if requirement_name(r) not in KUBE_ONLY]
        done = subprocess.run([*pip, *target, *deps], capture_output=True, text=True, timeout=180)
        if done.returncode != 0:
            pytest.skip(f"cannot install the serving dependencies ({', '.join(deps)}): {done.stderr.strip()}")
        yield base / "venv"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_wheel_installs_and_serves_without_the_kube_dependencies(clean_venv: Path) -> None:
    out = subprocess.run([str(clean_venv / "bin" / "splitdns"), "--version"], capture_output=True, text=True,
                         check=True, timeout=30)
    assert out.stdout.strip() == "splitdns 0.1.0"
    no_yaml = subprocess.run([str(clean_venv / "bin" / "python"), "-c", "import yaml"], capture_output=True)
    assert no_yaml.returncode != 0  # serve below works without PyYAML: the kube imports are lazy


def need(*tools: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to create a network namespace and switch to uid 65534")
    for tool in tools:
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")


def ns_argv(ns: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


def as_nobody_on_read_only_root(ns: str, argv: list[str]) -> list[str]:
    """The rendered securityContext, by hand: runAsUser 65534 (any non-root uid), capabilities drop
    ALL, allowPrivilegeEscalation false (no_new_privs), readOnlyRootFilesystem (a private mount
    namespace where / is remounted read-only)."""
    drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--no-new-privs"]
    script = 'mount --make-rprivate / && mount -o remount,ro,bind / && exec "$@"'
    return ns_argv(ns, "unshare", "--mount", "sh", "-c", script, "sh", *drop, *argv)


def test_serve_binds_53_as_non_root_only_with_the_sysctl(clean_venv: Path) -> None:
    need("ip", "dig", "setpriv", "unshare")
    ns = f"sdimg-{uuid.uuid4().hex[:8]}"
    work = Path(tempfile.mkdtemp(prefix="splitdns-serve-"))
    work.chmod(0o755)
    upstream = None
    server = None
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True, timeout=10)
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True, timeout=10)
        # A scripted upstream inside the namespace stands in for kube-dns.
        write_json_atomically(work / "script.json", [
            {"qtype": "NS", "records": [". 30 IN NS a.root-servers.net."]},
            {"suffix": "cluster.local",
             "records": ["kubernetes.default.svc.cluster.local. 30 IN A 10.96.0.1"]},
        ])
        with (work / "upstream.log").open("wb") as log:
            script = ROOT / "tests" / "support" / "scripted_upstream.py"
            upstream = subprocess.Popen(ns_argv(
                ns, str(ROOT / ".venv" / "bin" / "python"), str(script),
                "--addr", "127.0.0.2", "--script", str(work / "script.json"), "--log", str(work / "q.jsonl"),
                "--ready-file", str(work / "ready")), stdout=log, stderr=log)
        port = wait_ready(upstream, work / "ready", work / "upstream.log")
        corefile = work / "Corefile"
        corefile.write_text(f".:53 {{\n    errors\n    forward . 127.0.0.2:{port}\n    health :8080\n"
                            "    ready\n}\n")
        corefile.chmod(0o644)
        serve = as_nobody_on_read_only_root(ns, [str(clean_venv / "bin" / "splitdns"), "serve", "-conf",
                                                 str(corefile)])
        # Control: without the sysctl a non-root process cannot bind port 53, capabilities or not.
        refused = subprocess.run(serve, capture_output=True, text=True, timeout=30)
        assert refused.returncode == 1, refused.stderr
        assert "ermission denied" in refused.stderr
        # The rendered pod's sysctl, set the way the kubelet sets it: in the pod's namespace only.
        subprocess.run(ns_argv(ns, "sysctl", "-qw", "net.ipv4.ip_unprivileged_port_start=53"), check=True)
        with (work / "serve.log").open("wb") as log:
            server = subprocess.Popen(serve, stdout=log, stderr=log)
        answer = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            dig = subprocess.run(ns_argv(ns, "dig", "@127.0.0.1", "-p", "53", "+tries=1", "+time=1",
                                         "kubernetes.default.svc.cluster.local"),
                                 capture_output=True, text=True, timeout=10)
            answer = parse_dig(dig.stdout, dig.stderr, 0.0)
            if answer.status == "NOERROR" or server.poll() is not None:
                break
            time.sleep(0.1)
        assert server.poll() is None, (work / "serve.log").read_text()
        assert answer is not None and answer.rdata == ["10.96.0.1"]
        status = Path(f"/proc/{server.pid}/status").read_text()
        assert re.search(rf"^Uid:\s+{NOBODY}\s+{NOBODY}", status, re.M)
        assert re.search(r"^CapEff:\s+0+$", status, re.M)
        # The probes the rendered manifests wire: /health and /ready on every address of the pod.
        # /ready turns 200 once the zone has answered its probe query, which may lag the dig a little.
        fetch = ("import sys, time, urllib.request as u\n"
                 "for p in sys.argv[1:]:\n"
                 "    for _ in range(50):\n"
                 "        try:\n"
                 "            print(p, u.urlopen('http://127.0.0.1:' + p, timeout=2).status); break\n"
                 "        except OSError: time.sleep(0.1)\n")
        got = subprocess.run(ns_argv(ns, SYSTEM_PYTHON, "-c", fetch, "8080/health", "8181/ready"),
                             capture_output=True, text=True, timeout=20)
        assert got.stdout.split() == ["8080/health", "200", "8181/ready", "200"], got.stderr
        queries = [json.loads(line) for line in (work / "q.jsonl").read_text().splitlines()]
        assert "kubernetes.default.svc.cluster.local." in {q.get("qname") for q in queries}
    finally:
        for process in (server, upstream):
            if process is not None:
                stop(process)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
        shutil.rmtree(work, ignore_errors=True)
