"""`render --zone Z=openconnect|strongswan`: the sidecar the injection adds for each kind, strictly
valid Kubernetes, granted what the namespace labs run the clients with, sharing the hand-over
volume with the resolver read-only; the shell it runs; each kind's trap in the user's setup."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from splitdns import cli
from splitdns.commands import openconnect_hook, render
from splitdns.kube.check import checker
from splitdns.kube.deploy import inject
from splitdns.kube.tunnels import openconnect_pod, strongswan_pod
from tests.lab import openconnect as oc_lab
from tests.lab import strongswan as ss_lab

VERSIONS = [f"1.{minor}" for minor in range(29, 38)]
PARTS = {"openconnect": openconnect_pod, "strongswan": strongswan_pod}


@functools.cache
def _rendered_text(kind: str, *args: str) -> str:
    argv = ["render", "--zone", f"svc.acme.internal={kind}", "--cluster-dns", "10.96.0.10",
            "--namespace", "shop", *args]
    parsed = cli.build_parser().parse_args(argv)
    fields = render.Request.__dataclass_fields__
    request = render.Request(**{k: v for k, v in vars(parsed).items() if k in fields})
    return render.files(request)["splitdns.yaml"]


def pod_spec(kind: str, *args: str) -> dict[str, Any]:
    docs = list(yaml.safe_load_all(_rendered_text(kind, *args)))
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kind", sorted(PARTS))
def test_the_rendered_deployment_is_strictly_valid(version: str, kind: str) -> None:
    for doc in yaml.safe_load_all(_rendered_text(kind)):
        assert kubernetes_validate.validate(doc, version, strict=True) == version


@pytest.mark.parametrize("kind", sorted(PARTS))
def test_the_sidecar_starts_after_the_resolver_and_shares_the_volume_read_only(kind: str) -> None:
    parts = PARTS[kind]
    spec = pod_spec(kind)
    names = [c["name"] for c in spec["initContainers"]]
    assert names[0] == inject.MOUNTED_CONTAINER and names[-1] == parts.CONTAINER
    resolver = spec["initContainers"][0]
    mount = {"name": parts.RUN_VOLUME, "mountPath": "/run/splitdns", "readOnly": True}
    assert mount in resolver["volumeMounts"]
    (vpn,) = [c for c in spec["initContainers"] if c["name"] == parts.CONTAINER]
    assert vpn["restartPolicy"] == "Always" and "startupProbe" in vpn
    assert {m["name"] for m in vpn["volumeMounts"]} >= {parts.RUN_VOLUME, parts.TUN_VOLUME}
    classic = pod_spec(kind, "--sidecar", "classic")
    assert parts.CONTAINER in [c["name"] for c in classic["containers"]]
    assert all(c.get("restartPolicy") is None for c in classic.get("initContainers", []))


def _added(kind: str) -> set[str]:
    (vpn,) = [c for c in pod_spec(kind)["initContainers"] if c["name"] == PARTS[kind].CONTAINER]
    caps = vpn["securityContext"]["capabilities"]
    assert caps["drop"] == ["ALL"]
    return set(caps["add"])


def _bounding(argv: tuple[str, ...]) -> set[str]:
    (flag,) = [a for a in argv if a.startswith("--bounding-set=")]
    return {w[1:].upper() for w in flag.split("=", 1)[1].split(",") if w.startswith("+")}


def test_each_vpn_container_is_granted_what_its_lab_runs_the_client_with() -> None:
    """The labs run openconnect and charon with these capabilities alone, and the tunnels come up;
    charon without NET_BIND_SERVICE cannot bind IKE's ports (tried)."""
    assert _added("openconnect") == _bounding(oc_lab.CONTAINER_CAPS) == {"NET_ADMIN"}
    assert _added("strongswan") == _bounding(ss_lab.CONTAINER_CAPS) == {"NET_ADMIN", "NET_BIND_SERVICE"}


def test_the_pieces_agree_with_the_resolver_and_the_hook() -> None:
    assert openconnect_pod.HOOK_NAME == openconnect_hook.HOOK_NAME
    assert openconnect_pod.STATE == openconnect_hook.DEFAULT_STATE
    assert all(stock in openconnect_hook.SCRIPT for stock in openconnect_pod.STOCK_SCRIPTS)
    init = pod_spec("openconnect")["initContainers"]
    (hook,) = [c for c in init if c["name"] == openconnect_pod.HOOK_CONTAINER]
    assert hook["command"] == ["splitdns", "openconnect-hook", "/splitdns/bin"]
    text = _rendered_text("openconnect")
    assert "openconnect {\n            state /run/splitdns/openconnect\n            domains\n" in text
    assert "strongswan {\n            resolve /run/splitdns/resolv.conf\n            interface ipsec0\n" \
        in _rendered_text("strongswan")


@pytest.mark.parametrize("script", [openconnect_pod.SCRIPT, strongswan_pod.SCRIPT])
def test_the_container_scripts_are_valid_posix_sh(script: str) -> None:
    done = subprocess.run(["/bin/sh", "-n", "-c", script], capture_output=True, text=True, timeout=10)
    assert done.returncode == 0, done.stderr


def spec_running(*command: str) -> dict[str, Any]:
    return {"containers": [{"name": "app", "image": "a"},
                           {"name": "vpn", "image": "example.org/vpn", "command": list(command)}]}


@pytest.mark.parametrize(("spec", "said"), [
    (spec_running("openconnect", "vpn.example.com"), "container vpn runs openconnect without --script"),
    (spec_running("openconnect", "--script", "/usr/share/vpnc-scripts/vpnc-script", "vpn.example.com"),
     "runs openconnect with --script /usr/share/vpnc-scripts/vpnc-script: the stock vpnc-script rewrites"),
    (spec_running("/bin/sh", "-c", "exec /usr/sbin/openconnect --script=/other vpn.example.com"),
     "with --script /other"),
    (spec_running("openconnect", "-s", "/splitdns/bin/vpnc-script", "vpn.example.com"), None),
    (spec_running("/bin/sh", "-c", openconnect_pod.SCRIPT), None),
    (spec_running("openvpn", "--config", "c.conf"), None),
])
def test_an_openconnect_container_without_our_hook_is_the_resolv_conf_trap(
        spec: dict[str, Any], said: str | None) -> None:
    advice = openconnect_pod.advice(spec, None)  # type: ignore[arg-type]
    if said is None:
        assert advice is None
    else:
        assert advice is not None and said in advice and "--script /splitdns/bin/vpnc-script" in advice


@pytest.mark.parametrize(("conf", "said"), [
    ("charon {\n  load_modular = yes\n}\n", "the resolve plugin's file is not set"),
    ("charon {\n  plugins {\n    resolve {\n      # file = /run/splitdns/resolv.conf\n    }\n  }\n}\n",
     "the resolve plugin's file is not set"),
    ("charon {\n  plugins {\n    resolve {\n      file = /etc/resolv.conf\n    }\n  }\n}\n",
     "charon.plugins.resolve.file = /etc/resolv.conf, but the `strongswan` block reads "
     "/run/splitdns/resolv.conf"),
    ("charon-systemd {\n  plugins {\n    resolve {\n      file = /run/resolv.conf\n    }\n  }\n}\n",
     "charon-systemd.plugins.resolve.file = /run/resolv.conf"),
    ("charon {\n  plugins {\n    resolve {\n      file = /run/splitdns/resolv.conf\n    }\n  }\n}\n", None),
    # What apply_steps tells the user to write, on one line as it says it.
    (strongswan_pod.RESOLVE_SETTINGS + "\n", None),
])
def test_a_resolve_plugin_left_writing_resolv_conf_is_the_trap(conf: str, said: str | None,
                                                                tmp_path: Path) -> None:
    (tmp_path / "strongswan.conf").write_text(conf)
    found = [f.message for f in checker.check([str(tmp_path / "strongswan.conf")], checker.Options())
             if f.code == "SD309"]
    assert found == [] if said is None else (len(found) == 1 and said in found[0])


def test_the_resolve_file_must_be_the_one_the_block_reads(tmp_path: Path) -> None:
    (tmp_path / "Corefile").write_text(".:53 {\n    forward . 10.96.0.10\n}\nsvc.acme.internal:53 {\n"
                                       "    strongswan {\n        resolve /run/vpn/resolv.conf\n    }\n}\n")
    (tmp_path / "strongswan.conf").write_text(strongswan_pod.RESOLVE_SETTINGS + "\n")
    found = checker.check([str(tmp_path / "Corefile"), str(tmp_path / "strongswan.conf")], checker.Options())
    assert [(f.code, f.line) for f in found] == [("SD309", 1)]
    assert "the `strongswan` block reads /run/vpn/resolv.conf" in found[0].message
