"""What a user meets in the first commands they run: output piped into `head`, a module the command
needs and the install lacks, the flags one command suggests or shares with another, and errors that
name the API server they could not reach."""

from __future__ import annotations

import io
import os
import re
import socket
import subprocess
import sys
from collections.abc import Coroutine
from pathlib import Path

import pytest
import yaml

from splitdns import cli
from tests.support.processes import free_port

DATA = Path(__file__).parent / "data" / "kube"
ZONES = ["--zone", "svc.acme.internal=192.0.2.1", "--cluster-dns", "10.96.0.10"]


class ClosedPipe(io.TextIOBase):
    """stdout whose reader went away, as `| head -1` leaves it once head has its line."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def _corefile(tmp_path: Path) -> Path:
    path = tmp_path / "Corefile"
    path.write_text(".:53 {\n forward . 192.0.2.1\n}\nsvc.acme.internal:53 {\n forward . 192.0.2.2\n}\n")
    return path


@pytest.mark.parametrize("command", ["explain", "render", "check", "inject", "verify", "help"])
def test_output_into_a_closed_pipe_ends_quietly(
        command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corefile = _corefile(tmp_path)
    manifest = tmp_path / "deploy.yaml"
    assert cli.main(["render", *ZONES, "--output-dir", str(tmp_path / "out")]) == 0
    manifest.write_text((tmp_path / "out" / "splitdns.yaml").read_text())
    argv = {
        "explain": ["explain", "db.svc.acme.internal", "-conf", str(corefile)],
        "render": ["render", *ZONES],
        "check": ["check", str(corefile), str(DATA / "scenario" / "pod.yaml")],
        "inject": ["inject", str(manifest), *ZONES],
        "verify": ["verify", "--port", str(free_port("127.0.0.1")), "--resolv-conf", str(tmp_path / "none")],
        "help": ["render", "--help"],
    }[command]
    err = io.StringIO()
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    monkeypatch.setattr(sys, "stderr", err)
    try:
        code = cli.main(argv)
    except SystemExit as exit_:  # --help
        code = int(exit_.code or 0)
    assert code in (0, cli.EXIT_PIPE), code
    assert "error" not in err.getvalue().lower() and "BrokenPipe" not in err.getvalue(), err.getvalue()


def test_explain_into_head_says_nothing_on_stderr(tmp_path: Path) -> None:
    """The real thing: a pipe whose reader closed, and the interpreter's own exit flush."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "splitdns", "explain", "db.svc.acme.internal", "-conf",
                               str(_corefile(tmp_path))], stdout=write, stderr=subprocess.PIPE, text=True,
                              timeout=30)
    finally:
        os.close(write)
    assert done.stderr == "" and done.returncode == cli.EXIT_PIPE, done.stderr


def test_a_missing_optional_module_is_named_with_what_installs_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from splitdns.commands import webhook

    def a_bug(*args: object) -> int:
        import splitdns_module_that_does_not_exist  # type: ignore[import-not-found]  # noqa: F401

        return 0

    # What `import aiohttp` raises where the extra is not installed: ModuleNotFoundError, name aiohttp.
    def run(*args: object) -> int:
        raise ModuleNotFoundError("No module named 'aiohttp'", name="aiohttp")

    monkeypatch.setattr(webhook, "run", run)
    code = cli.main(["webhook", "--tls-cert", "c.pem", "--tls-key", "k.pem", *ZONES])
    err = capsys.readouterr().err
    assert code == cli.EXIT_MISSING
    assert err == ("splitdns webhook: the module aiohttp is not installed; it comes with the `webhook` "
                   "extra: pip install 'splitdns[webhook]'\n")
    # Any other missing module is still our bug, said as one.
    monkeypatch.setattr(webhook, "run", a_bug)
    assert cli.main(["webhook", "--tls-cert", "c.pem", "--tls-key", "k.pem", *ZONES]) == cli.EXIT_INTERNAL
    capsys.readouterr()
    # The extra is looked for first, before the certificate files (here missing) or the settings.
    monkeypatch.setitem(sys.modules, "jsonpatch", None)
    assert cli.main(["webhook", "--tls-cert", "missing.pem", "--tls-key", "missing.pem", *ZONES]) == \
        cli.EXIT_MISSING
    assert "the module jsonpatch is not installed" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["render", "inject", "webhook", "verify"])
def test_minus_n_is_namespace_wherever_namespace_is(command: str) -> None:
    parser = cli.build_parser()
    extra = {"webhook": ["--tls-cert", "c", "--tls-key", "k"]}.get(command, [])
    assert parser.parse_args([command, *extra, "-n", "shop"]).namespace == "shop"
    assert parser.parse_args([command, *extra, "--namespace", "shop"]).namespace == "shop"


def test_inject_has_the_flag_its_error_suggests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app"},
                                        "spec": {"containers": [{"name": "app", "image": "app"}]}}))
    assert cli.main(["inject", str(manifest), "--zone", "svc.acme.internal=192.0.2.1"]) == 2
    err = capsys.readouterr().err
    assert "--cluster-dns-from-cluster" in err
    parsed = cli.build_parser().parse_args(["inject", "--cluster-dns-from-cluster", "--kubeconfig", "k"])
    assert parsed.from_cluster and parsed.kubeconfig == "k"


def test_the_webhook_suggests_only_flags_it_has(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["webhook", "--tls-cert", "c", "--tls-key", "k",
                     "--zone", "svc.acme.internal=192.0.2.1"]) == 2
    err = capsys.readouterr().err
    assert "--cluster-dns IP" in err and "--cluster-dns-from-cluster" not in err


def _kubeconfig_to_nowhere(tmp_path: Path) -> tuple[Path, str]:
    server = f"https://127.0.0.1:{free_port('127.0.0.1')}"  # nothing listens: connection refused
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path, server


@pytest.mark.parametrize("command", [["doctor"], ["render", "--zone", "svc.acme.internal=192.0.2.1",
                                                  "--cluster-dns-from-cluster"]])
def test_an_unreachable_api_server_is_named(command: list[str], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig, server = _kubeconfig_to_nowhere(tmp_path)
    code = cli.main([*command, "--kubeconfig", str(kubeconfig)])
    err = capsys.readouterr().err
    assert code in (1, 2) and f"cannot reach the API server {server}" in err, err


@pytest.mark.parametrize("kind", [socket.SOCK_DGRAM, socket.SOCK_STREAM], ids=["udp", "tcp"])
def test_an_address_in_use_is_named_with_what_to_do(
        kind: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """UDP taken (the kernel's words) or TCP taken (asyncio's, with a Python tuple in them): the same
    sentence, naming the address and port and the way out."""
    holder = socket.socket(socket.AF_INET, kind)
    holder.bind(("127.0.0.1", 0))
    port = holder.getsockname()[1]
    if kind == socket.SOCK_STREAM:
        holder.listen()
    corefile = tmp_path / "Corefile"
    corefile.write_text(". {\n forward . 192.0.2.1\n}\n")
    try:
        code = cli.main(["serve", "-conf", str(corefile), "-dns.port", str(port)])
    finally:
        holder.close()
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(f"[ERROR] cannot listen on dns://127.0.0.1:{port}: Address already in use: "
                          "another process holds that address and port"), err
    assert "-dns.port N" in err
    assert "attempting" not in err and "('127.0.0.1'" not in err and "Errno" not in err


def test_serve_on_a_configmap_says_it_is_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configmap = tmp_path / "coredns.yaml"
    configmap.write_text("# the cluster's CoreDNS\napiVersion: v1\nkind: ConfigMap\nmetadata:\n"
                         "  name: coredns\ndata:\n  Corefile: |\n    . {\n"
                         "        forward . 192.0.2.1\n    }\n")
    assert cli.main(["serve", "-conf", str(configmap)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"[ERROR] {configmap} is a Kubernetes ConfigMap, not a Corefile"), err
    assert "a ':' with no port" not in err and "/etc/coredns/Corefile" in err


@pytest.mark.parametrize(("keys", "noted"), [((".:5392", "example.org:5393"), True),
                                             ((".:5392", "example.org"), False)])
def test_a_dns_port_that_changes_nothing_is_said_once(
        keys: tuple[str, ...], noted: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from splitdns.commands import serve

    def no_loop(main: Coroutine[object, object, int]) -> int:
        main.close()  # what would be served is not under test, only what start-up says
        return 0

    monkeypatch.setattr(serve, "run_loop", no_loop)
    corefile = tmp_path / "Corefile"
    corefile.write_text("".join(f"{key} {{\n forward . 192.0.2.1\n}}\n" for key in keys))
    assert cli.main(["serve", "-conf", str(corefile), "-dns.port", "5000"]) == 0
    err = capsys.readouterr().err
    note = (f"[WARNING] -dns.port 5000 changes nothing: every server key of {corefile} names its own port "
            "(5392, 5393), as in CoreDNS\n")
    assert err == (note if noted else ""), err
    assert cli.main(["serve", "-conf", str(corefile)]) == 0  # not given: nothing to say
    assert capsys.readouterr().err == ""


def _deployment(vpn_args: list[str]) -> dict[str, object]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "app", "namespace": "shop"},
            "spec": {"selector": {"matchLabels": {"app": "app"}}, "template": {
                "metadata": {"labels": {"app": "app"}},
                "spec": {"containers": [{"name": "app", "image": "registry.example.org/app:1"},
                                        {"name": "vpn", "image": "registry.example.org/openvpn-client:2.6",
                                         "args": vpn_args}]}}}}


def _inject(tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: object, *flags: str) -> tuple[int, str]:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump(doc))
    capsys.readouterr()
    code = cli.main(["inject", str(path), *flags])
    return code, capsys.readouterr().err


def test_inject_that_finds_no_pod_template_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    code, err = _inject(tmp_path, capsys, configmap, *ZONES)
    assert code == 1
    assert err == (f"splitdns inject: no pod template in {tmp_path / 'in.yaml'} (a Pod, Deployment, "
                   "StatefulSet, DaemonSet, ReplicaSet, Job, CronJob or a List of them): nothing was "
                   "injected\n")


@pytest.mark.parametrize(("flags", "warned"), [(["--cluster-dns", "10.96.0.10"], True), (ZONES, False)])
def test_inject_without_a_private_zone_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], warned: bool) -> None:
    code, err = _inject(tmp_path, capsys, _deployment(["--config", "/etc/openvpn/client.ovpn"]), *flags)
    assert code == 0
    assert ("warning: no private zone given" in err) is warned, err


MANAGED = ["--config", "/etc/openvpn/client.ovpn", "--management", "127.0.0.1", "7505",
           "--management-up-down", "--management-hold"]


@pytest.mark.parametrize(("vpn_args", "zone", "said"), [
    (["--config", "/etc/openvpn/client.ovpn"], "openvpn",
     "container vpn runs OpenVPN without --management, --management-up-down, --management-hold on its "
     "command line; zone svc.acme.internal learns its DNS servers from OpenVPN's management interface, so "
     "start it with --management 127.0.0.1 7505 --management-up-down --management-hold"),
    (MANAGED[:5], "openvpn", "without --management-up-down, --management-hold"),
    ([*MANAGED[:4], "7506", *MANAGED[5:]], "openvpn", "pass --openvpn-management 127.0.0.1:7506"),
    (MANAGED, "openvpn", None),
    (["--config", "/etc/openvpn/client.ovpn"], "192.0.2.1", None),  # no zone learns from OpenVPN
])
def test_inject_says_what_the_vpn_container_needs_for_a_tunnel_zone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], vpn_args: list[str], zone: str,
        said: str | None) -> None:
    code, err = _inject(tmp_path, capsys, _deployment(vpn_args), "--zone", f"svc.acme.internal={zone}",
                        "--cluster-dns", "10.96.0.10")
    assert code == 0
    if said is None:
        assert "OpenVPN" not in err, err
    else:
        assert said in err, err


MAKEFILE = Path(__file__).parents[1] / "Makefile"


@pytest.mark.tooling
def test_the_end_to_end_tier_names_each_module_as_it_starts(tmp_path: Path) -> None:
    """`make test`'s end-to-end tier runs for minutes: each module's name shows as it starts, before
    its dots, as pytest does at verbosity 0 (with -q it would print dots only)."""
    text = MAKEFILE.read_text()
    flags = re.search(r"^E2E_OUTPUT = (.*)$", text, re.M)
    assert flags is not None
    runs = [line for line in text.splitlines() if "$(E2E)" in line and "pytest" in line]
    assert runs and all("$(E2E_OUTPUT)" in line and " -q" not in line for line in runs), runs
    module = tmp_path / "test_slow_module.py"
    module.write_text("import sys\n\ndef test_one():\n    print('started', file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *flags.group(1).split(),
                           "-c", os.devnull, "-s", str(module)], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "test_slow_module.py " in done.stdout, done.stdout
    assert len(done.stdout.splitlines()) <= 6, done.stdout  # short: no header, no per-test lines


@pytest.mark.tooling
def test_the_readme_names_what_make_run_installs() -> None:
    """`make run` installs the package's own dependencies (`pip install -e .`); the README lists them."""
    text = MAKEFILE.read_text()
    recipe = text.split("$(VENV)/.run-installed: pyproject.toml", 1)[1].split("\n\n", 1)[0]
    assert "pip install --progress-bar on -e .\n" in recipe + "\n"
    import tomllib

    project = tomllib.loads((MAKEFILE.parent / "pyproject.toml").read_text())["project"]
    names = [re.split(r"[<>=;\[ ]", dep, maxsplit=1)[0] for dep in project["dependencies"]]
    readme = (MAKEFILE.parent / "README.md").read_text().split("`make run` installs", 1)[1].split("\n\n")[0]
    readme = " ".join(readme.split())
    assert all(name in readme for name in names), (names, readme)
    assert "only what running needs" not in readme
