"""The images, for real: the Dockerfile's two targets built with podman, the resolver image run as
`splitdns render`'s pod runs it, the tools image run as the webhook's Deployment runs it.

The base is a stand-in for `python:3.11-slim-bookworm` made from Debian packages (no registry
here; tests/support/podman.py), passed as the Dockerfile's BASE_IMAGE build argument. The image
then runs in the namespace lab as the pod's resolver, beside the real OpenVPN client, with the
rendered dns container's arguments, securityContext and Corefile volume (tests/support/image_pod.py).
Sizes and build times are printed (run with -s).

Everything podman keeps lives in a scratch directory removed at the end, also on failure; the lab
removes its namespaces. Network safety: the containers join namespaces the tests create (the lab's
pod, or a namespace with only loopback); nothing listens or sends in the host's namespace. The
build itself fetches Python packages through this machine's pip configuration, as `make venv` does.
"""

from __future__ import annotations

import gzip
import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from tools.image_requirements import image_requirements, name_of

from splitdns import __version__
from splitdns.commands import render
from splitdns.kube.deploy import manifests
from splitdns.kube.shared import image
from splitdns.kube.tunnels import wireguard_pod
from tests.lab import PodSpec, configs
from tests.lab.fixtures import require_lab, sigterm_interrupts
from tests.lab.netns import wait_for
from tests.support import image_pod, podman
from tests.support.prerequisites import skip_or_fail

ROOT = Path(__file__).parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = __version__  # pyproject.toml reads it from the package
TAG = "localhost/splitdns:test"
TOOLS_TAG = "localhost/splitdns-tools:test"
# The resolver image's budget: what every node pulls and stores for every pod's sidecar.
RESOLVER_MAX_BYTES = 60_000_000
RESOLVER_MAX_COMPRESSED_BYTES = 20_000_000
# An HTTP GET as the kubelet's probe makes it: prints the status and the body.
PROBE = """\
import sys, urllib.error, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=3) as r:
        print(r.status, r.read().decode(errors="replace").strip())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode(errors="replace").strip())
"""


@dataclass
class Built:
    engine: podman.Engine
    config: dict[str, object]
    size: int
    timing: podman.Timing
    idle: str = ""  # a container of the image that only sleeps, for the `podman exec` checks
    compressed: int = 0  # the image as `podman save` writes it, gzipped (what a registry stores)
    tools_config: dict[str, object] | None = None
    tools_idle: str = ""


def require_image_tools() -> None:
    reason = podman.missing_prerequisite()
    if reason is None:
        return
    skip_or_fail(reason)


def rendered(tmp: Path, corefile: str = configs.TUNNEL_COREFILE) -> list[image_pod.Doc]:
    source = tmp / "Corefile.in"
    source.write_text(corefile)
    return image_pod.render(source)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    require_image_tools()
    with sigterm_interrupts(), podman.engine() as engine:
        timing = podman.Timing()
        failure = ""
        try:
            engine.build(ROOT, TAG, timing, target="resolver")
            engine.build(ROOT, TOOLS_TAG, timing, target="tools")
        except podman.ImageError as err:
            failure = str(err)
        if failure:
            pytest.fail(f"the image did not build: {failure}", pytrace=False)
        # The name the rendered manifests give the image (render's default): tag and push it so.
        expected = image_pod.dns_container(rendered(tmp_path_factory.mktemp("render")))["image"]
        engine.podman("tag", TAG, expected)
        engine.podman("tag", TOOLS_TAG, image.tools_image(expected))
        data = engine.inspect(TAG)
        size = int(data["Size"])  # type: ignore[call-overload]
        made = Built(engine, data["Config"], size, timing)  # type: ignore[arg-type]
        made.compressed = compressed_size(engine, TAG)
        tools = engine.inspect(TOOLS_TAG)
        made.tools_config = tools["Config"]  # type: ignore[assignment]
        tools_size = int(tools["Size"])  # type: ignore[call-overload]
        print(f"\nimage {TAG} (also {expected}): {size / 1e6:.1f} MB, {made.compressed / 1e6:.1f} MB "
              f"gzipped; {TOOLS_TAG}: {tools_size / 1e6:.0f} MB; base "
              f"{'made by mmdebstrap' if timing.base_made else 'from the cache'} {timing.base_s:.1f} s, "
              f"import {timing.import_s:.1f} s, build {timing.build_s:.1f} s")
        made.idle = engine.podman("run", "--detach", "--pull=never", "--network=none", "--read-only",
                                  "--entrypoint=sleep", TAG, "600").strip()
        made.tools_idle = engine.podman("run", "--detach", "--pull=never", "--network=none", "--read-only",
                                        "--entrypoint=sleep", TOOLS_TAG, "600").strip()
        yield made


def compressed_size(engine: podman.Engine, tag: str) -> int:
    """Bytes of the image's archive (`podman save`) through gzip -6, as a registry's layers are."""
    with tempfile.TemporaryDirectory(dir=engine.scratch) as tmp:
        archive = Path(tmp) / "image.tar"
        engine.podman("image", "save", "--output", str(archive), tag, timeout=120)
        return len(gzip.compress(archive.read_bytes(), compresslevel=6))


def in_image(built: Built, *argv: str, entrypoint: str = "python3") -> subprocess.CompletedProcess[str]:
    return built.engine.popen("exec", built.idle, entrypoint, *argv)


def in_tools(built: Built, *argv: str, entrypoint: str = "python3") -> subprocess.CompletedProcess[str]:
    return built.engine.popen("exec", built.tools_idle, entrypoint, *argv)


def test_uvloop_comes_with_a_plain_install_but_not_in_the_resolver_image() -> None:
    """uvloop is a default dependency (not an extra) wherever it installs; the resolver image
    leaves it out (its loop and the ssl module it imports are about 6 MiB of every pod's RSS), the
    tools image takes it with the others."""
    requirements = importlib.metadata.requires("splitdns") or []
    uvloop = [r for r in requirements if name_of(r) == "uvloop"]
    assert uvloop and "extra ==" not in uvloop[0], requirements
    marker = uvloop[0].replace('"', "'")
    assert "sys_platform != 'win32'" in marker and "platform_python_implementation == 'CPython'" in marker
    assert "uvloop" in {name_of(r) for r in image_requirements(PYPROJECT)}
    resolver = {name_of(r) for r in image_requirements(PYPROJECT, resolver=True)}
    assert resolver == {"dnspython", "prometheus-client"}


def test_image_is_labelled_and_runs_as_the_rendered_user(built: Built, tmp_path: Path) -> None:
    labels = built.config["Labels"]
    assert isinstance(labels, dict)
    assert labels["org.opencontainers.image.version"] == VERSION
    assert labels["org.opencontainers.image.licenses"] == PYPROJECT["project"]["license"]
    assert labels["org.opencontainers.image.source"].startswith("https://")
    version = in_image(built, "--version", entrypoint="splitdns")
    assert version.stdout.strip() == f"splitdns {VERSION}", version.stderr
    # The user and the default arguments are the rendered pod's, so the pod runs even without them.
    dns = image_pod.dns_container(rendered(tmp_path))
    context = dns["securityContext"]
    assert built.config["User"] == f"{context['runAsUser']}:{context['runAsGroup']}"
    assert built.config["Entrypoint"] == ["splitdns", "serve"]
    assert built.config["Cmd"] == dns["args"]


def test_the_resolver_image_holds_only_what_serving_needs(built: Built) -> None:
    wanted = {name_of(r) for r in image_requirements(PYPROJECT, resolver=True)} | {"splitdns"}
    listing = in_image(built, "-c", "import importlib.metadata as m, json, os, shutil, sys; "
                       "print(json.dumps(["
                       "sys.prefix, sorted(d.metadata['Name'] for d in m.distributions()), "
                       "sorted(os.listdir('/')), sorted(os.listdir(os.path.dirname(os.__file__))), "
                       "[p for p in ('pip', 'cc', 'gcc', 'apt', 'dpkg') if shutil.which(p)]]))")
    assert listing.returncode == 0, listing.stderr
    prefix, installed, top, stdlib, programs = json.loads(listing.stdout)
    installed = {name_of(n) for n in installed}
    print(f"\nimage {built.size / 1e6:.1f} MB, {built.compressed / 1e6:.1f} MB gzipped; it holds "
          f"{', '.join(sorted(installed))}")
    assert prefix == "/usr"  # Debian's python3.11, not a virtualenv
    assert installed == wanted  # no pip, setuptools, uvloop, YAML, validators or their schemas
    assert not programs  # no package manager, no compiler
    assert not {"test", "idlelib", "tkinter", "lib2to3", "distutils", "ensurepip"} & set(stdlib)
    assert not {"src", "wheels", "opt", "root"} & set(top)
    crds = in_image(built, "-c", "import importlib.resources as r; "
                    "print(r.files('splitdns.kube').joinpath('crds').is_dir())")
    assert crds.stdout.strip() == "False", crds.stderr
    assert built.size <= RESOLVER_MAX_BYTES and built.compressed <= RESOLVER_MAX_COMPRESSED_BYTES
    # Every module comes compiled: nothing is written on the read-only root, no import compiles.
    uncompiled = in_image(built, "-c", "import sys, importlib.util as u, pathlib; print([str(p) "
                          "for d in sys.path if d.startswith('/usr/lib/python3') for p in "
                          "pathlib.Path(d).rglob('*.py') "
                          "if not pathlib.Path(u.cache_from_source(str(p))).exists()][:5])")
    assert uncompiled.stdout.strip() == "[]", uncompiled.stdout + uncompiled.stderr


def test_the_tools_image_holds_what_the_cluster_tools_need(built: Built) -> None:
    assert built.tools_config is not None
    assert built.tools_config["User"] == built.config["User"]
    assert built.tools_config["Entrypoint"] == ["splitdns"]
    listing = in_tools(built, "-c", "import importlib.metadata as m, json; "
                       "print(json.dumps(sorted(d.metadata['Name'] for d in m.distributions())))")
    assert listing.returncode == 0, listing.stderr
    installed = {name_of(n) for n in json.loads(listing.stdout)}
    assert {name_of(r) for r in image_requirements(PYPROJECT)} | {"splitdns"} <= installed
    assert not installed & {"pip", "setuptools", "wheel", "pytest", "hypothesis", "matplotlib"}


def test_each_image_serves_its_commands(built: Built) -> None:
    ours = subprocess.run([sys.executable, "-m", "splitdns", "--help"], capture_output=True, text=True,
                          check=True).stdout
    tools = [c for c in ("webhook", "check", "render", "inject", "doctor", "explain")
             if re.search(rf"\b{c}\b", ours)]
    resolver = ["serve", "verify", "openvpn-hook", "wireguard-shim", "openconnect-hook"]
    for run, commands in ((in_image, resolver), (in_tools, tools)):
        for command in commands:
            done = run(built, command, "--help", entrypoint="splitdns")
            assert done.returncode == 0, f"splitdns {command} in the image: {done.stderr}"
            # Its module loads with what the image holds (--help alone imports none of it).
            module = f"splitdns.commands.{command.replace('-', '_')}"
            loaded = run(built, "-c", f"import {module}")
            assert loaded.returncode == 0, f"{module} in the image: {loaded.stderr}"


def test_the_wireguard_shim_container_runs_as_rendered(built: Built, tmp_path: Path) -> None:
    """`render --vpn wireguard`'s init container, as the pod runs it (its user, a read-only root, the
    shared emptyDir), writes a resolvconf the image's own sh runs as wg-quick calls it."""
    docs = list(yaml.safe_load_all(render.files(render.Request(
        zones=["svc.acme.internal=wireguard"], cluster_dns="10.96.0.10"))["splitdns.yaml"]))
    spec = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    shim = next(c for c in spec["initContainers"] if c["name"] == wireguard_pod.SHIM_CONTAINER)
    context = shim["securityContext"]
    script = (f"{shlex.join(shim['command'])} && printf 'nameserver 192.0.2.53\\nsearch corp.example\\n' | "
              f"SPLITDNS_RESOLVCONF_DIR=/tmp/run {wireguard_pod.BIN_DIR}/resolvconf -a tun.wg0 -m 0 -x && "
              "cat /tmp/run/tun.wg0")
    done = built.engine.popen("run", "--rm", "--pull=never", "--network=none", "--read-only",
                              f"--user={context['runAsUser']}:{context['runAsGroup']}",
                              f"--tmpfs={wireguard_pod.BIN_DIR}", "--tmpfs=/tmp", "--entrypoint=sh",
                              TAG, "-c", script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("nameserver 192.0.2.53\nsearch corp.example\n"), done.stdout


def test_port_53_needs_the_pod_sysctl(built: Built, tmp_path: Path) -> None:
    """The reason the rendered pod sets net.ipv4.ip_unprivileged_port_start: without it the
    non-root, capability-less resolver cannot bind 53 and exits."""
    ns = f"sdimg-{uuid.uuid4().hex[:8]}"
    docs = rendered(tmp_path)
    configmap = image_pod.ConfigMapDir(tmp_path / "configmap")
    configmap.write({"Corefile": ".:53 {\n    forward . 127.0.0.2\n}\n"})
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True, timeout=10)
        args = image_pod.podman_run_args(docs, str(built.config["User"]), {manifests.COREFILE_VOLUME:
                                                                           configmap.path})
        done = built.engine.popen("run", "--rm", "--pull=never", f"--network=ns:/run/netns/{ns}", *args)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "ermission denied" in done.stderr
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


@pytest.fixture(scope="module")
def pod(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[image_pod.ImageLab]:
    require_lab()
    tmp = tmp_path_factory.mktemp("image-pod")
    docs = rendered(tmp)
    # The rendered Corefile with one change for the lab: a reload a test can wait for (render
    # carries the lab's Corefile as it is, which has none). The catch-all's readiness stays as
    # rendered: the lab's cluster DNS (dnsmasq without upstreams) refuses `. NS`, which still
    # proves it answers.
    corefile = image_pod.configmap_corefile(docs)
    assert not re.search(r"^\s*reload", corefile, re.M) and "\n.:53 {\n" in corefile, corefile
    corefile = corefile.replace("\n.:53 {\n", "\n.:53 {\n    reload 2s 1s\n", 1)
    # The lab's VPN client runs with the rendered vpn container's flags (management-up-down, ...).
    spec = PodSpec(corefile=corefile, vpn_extra=image_pod.vpn_client_lines(docs))
    lab = image_pod.ImageLab(spec, built.engine, docs,
                             str(built.config["User"]))
    try:
        lab.up()
        yield lab
    finally:
        lab.down()


@pytest.mark.netns
def test_both_zones_answer_over_udp_and_tcp(pod: image_pod.ImageLab) -> None:
    for transport in ("+notcp", "+tcp"):
        ask = ("+tries=1", "+time=3", transport)
        assert pod.dig_short(configs.KUBERNETES_NAME, *ask) == configs.KUBERNETES_IP
        # db's address from the corp DNS behind the tunnel (the cluster DNS would give a decoy).
        assert pod.dig_short(configs.DB_NAME, *ask) == configs.DB_IP
    assert pod.tcp_connect(configs.DB_NAME, configs.DB_PORT).ok


@pytest.mark.netns
def test_the_container_runs_as_the_manifest_says(pod: image_pod.ImageLab) -> None:
    status = Path(f"/proc/{pod.procs['resolver'].pid}/status").read_text()
    uid = image_pod.dns_container(pod.docs)["securityContext"]["runAsUser"]
    assert re.search(rf"^Uid:\s+{uid}\s+{uid}", status, re.M)
    assert re.search(r"^CapEff:\s+0+$", status, re.M) and re.search(r"^CapBnd:\s+0+$", status, re.M)
    assert re.search(r"^NoNewPrivs:\s+1$", status, re.M) and re.search(r"^Seccomp:\s+2$", status, re.M)
    wrote = pod.engine.popen("exec", pod.container, "sh", "-c", "echo x > /etc/x || echo x > /tmp/x")
    assert wrote.returncode != 0 and "Read-only file system" in wrote.stderr
    # The probes the manifest wires, by port name, polled as the kubelet does (within the budget
    # periodSeconds x failureThreshold gives them, capped at 20 s here).
    dns = image_pod.dns_container(pod.docs)
    ports = {p["name"]: p["containerPort"] for p in dns["ports"]}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = dns[probe]["httpGet"]
        url = f"http://127.0.0.1:{ports[get['port']]}{get['path']}"
        budget = min(20, dns[probe]["periodSeconds"] * dns[probe]["failureThreshold"])
        last: list[str] = []

        def fetch(url: str = url, last: list[str] = last) -> str | None:
            got = pod.pod_exec([sys.executable, "-c", PROBE, url]).stdout.strip()
            last[:] = [got]
            return got if got.startswith("200") else None

        def detail(last: list[str] = last) -> str:
            return f"  last answer: {last}\n{pod.log_tails()}"

        wait_for(fetch, what=f"{probe} {url}", timeout=budget, interval=0.5, detail=detail)


@pytest.mark.netns
def test_a_configmap_update_is_picked_up(pod: image_pod.ImageLab) -> None:
    """The kubelet swaps `..data`; the resolver's reload sees the new Corefile through the symlinks."""
    before = pod.dig_short(configs.CATCHALL_NAME, "+tries=1", "+time=3")
    assert before == configs.CATCHALL_IP  # the catch-all: the cluster DNS
    pod.configmap.write({"Corefile": pod.pod_spec.corefile + "example.net:53 {\n    forward . "
                                                               f"{configs.CORP_DNS_IP}\n}}\n"})
    wait_for(lambda: pod.dig_short(configs.CATCHALL_NAME, "+tries=1", "+time=2")
             == configs.CORP_DECOY_CATCHALL_IP or None, what="the new Corefile's example.net block",
             timeout=15, interval=0.5)
    assert "plugin/reload: Running configuration" in pod.procs["resolver"].log.read_text()


@pytest.mark.netns
def test_verify_in_the_container(pod: image_pod.ImageLab, tmp_path: Path) -> None:
    conf = next(a for a in image_pod.dns_container(pod.docs)["args"] if a.endswith("Corefile"))
    checks = ["--name", configs.KUBERNETES_NAME, "--name", configs.DB_NAME,
              "--tcp", f"{configs.DB_NAME}:{configs.DB_PORT}", "-conf", conf]
    local = pod.engine.popen("exec", pod.container, "splitdns", "verify", *checks)
    assert local.returncode == 0, local.stdout + local.stderr
    assert "verdict: All good" in local.stdout
    # Cluster mode, with `kubectl exec` played by `podman exec` (no API server here): the checks run
    # in the container, the artifact is written where verify runs.
    shim = tmp_path / "bin" / "kubectl"
    shim.parent.mkdir()
    shim.write_text("#!/bin/sh\n# kubectl exec [OPTIONS] TARGET -- CMD...  ->  podman exec CONTAINER CMD...\n"
                    '[ "$1" = exec ] || { echo "stand-in kubectl: only exec" >&2; exit 2; }\n'
                    'while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done; shift\n'
                    f'exec podman exec {pod.container} "$@"\n')
    shim.chmod(0o755)
    env = {**pod.engine.env, "PATH": f"{shim.parent}:{os.environ['PATH']}"}
    done = subprocess.run([sys.executable, "-m", "splitdns", "verify", "--kubectl", "deploy/app", "-c", "dns",
                           *checks, "--out", str(tmp_path / "ticket")], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    artifact = json.loads((tmp_path / "ticket.json").read_text())
    assert artifact["verdict"]["exit_code"] == 0
    markdown = (tmp_path / "ticket.md").read_text()
    assert "**Verdict: All good**" in markdown and "nameserver 127.0.0.1" in markdown
    assert f"{configs.DB_NAME}:{configs.DB_PORT} -> {configs.DB_IP}: connected" in markdown
