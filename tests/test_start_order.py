"""Every pod `render` and `inject` write (and the webhook, through the same injection) can start.

Kubernetes starts the init containers of a pod in order; a native sidecar (restartPolicy: Always)
counts as started once its startupProbe passes, and only then does the next one start (the app
last). So a sidecar's startup probe must pass with only the containers before it, and itself,
running. This walks that order for every form and proves it, with a model of what each probe
needs: no Kubernetes runs here (no kubelet can), so the model is the kubelet's rule and the
resolver's own readiness rule (/ready waits for every zone, /ready?zone=Z for the zones named,
/health for the process only), and the network the pod sees before its VPN is up: only the
cluster DNS is reachable; a tunnel zone, or a private zone at a fixed address, is behind the VPN.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonpatch  # type: ignore[import-untyped,unused-ignore]
import pytest
import yaml

from splitdns import cli, corefile
from splitdns.commands import render
from splitdns.kube.check import checker
from splitdns.kube.deploy import admission, inject
from tests.test_render import at_the_root

Doc = dict[str, Any]
CLUSTER = "10.96.0.10"  # the cluster DNS: reachable from the pod before any of its containers runs
SCENARIO = str(Path(__file__).parent / "data" / "kube" / "scenario" / "Corefile")
ZONES = {
    "openvpn": ["--zone", "svc.acme.internal=openvpn"],
    "fixed-address": ["--zone", "svc.acme.internal=192.168.240.1"],
    "wireguard": ["--zone", "svc.acme.internal=wireguard"],
    "corefile": ["--corefile", SCENARIO],
}
# A pod of the user's with its own OpenVPN sidecar, as `inject` and the webhook receive it.
USER_POD: Doc = {
    "metadata": {"labels": {"app": "shop", inject.POD_LABEL: "true"}},
    "spec": {
        "initContainers": [{"name": "vpn", "image": "example/openvpn-client", "restartPolicy": "Always",
                            "args": ["--config", "/etc/openvpn/client.conf", "--management", "127.0.0.1",
                                     "7505", "--management-up-down", "--management-hold"],
                            "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}],
        "containers": [{"name": "app", "image": "example/shop"}],
    },
}


def request(command: str, *argv: str) -> render.Request:
    args = cli.build_parser().parse_args([command, *argv])
    return render.Request(**{k: v for k, v in vars(args).items() if k in render.Request.__dataclass_fields__})


def rendered_templates(*argv: str) -> list[tuple[Doc, dict[str, str]]]:
    """(pod spec, ConfigMaps by name) of each Deployment the render writes."""
    with at_the_root():
        files = render.files(request("render", *argv))
    docs = [d for text in files.values() for d in yaml.safe_load_all(text) if d]
    if docs and docs[0].get("kind") == "Component":  # the patch onto a Deployment that lists its vpn
        component = docs[0]
        patch = yaml.safe_load(component["patches"][0]["patch"])
        spec = patch["spec"]["template"]["spec"]
        spec["initContainers"] = [*spec.get("initContainers", []), *USER_POD["spec"]["initContainers"]]
        spec.setdefault("containers", []).append({"name": "app", "image": "example/shop"})
        literal = component["configMapGenerator"][0]["literals"][0]
        return [(spec, {component["configMapGenerator"][0]["name"]: literal.removeprefix("Corefile=")})]
    maps = {d["metadata"]["name"]: d["data"]["Corefile"] for d in docs if d["kind"] == "ConfigMap"}
    return [(d["spec"]["template"]["spec"], maps) for d in docs if d["kind"] == "Deployment"]


def injected(pod: Doc, *argv: str) -> Doc:
    settings = render.injection_settings(request("inject", *argv))
    outcome = inject.inject(pod, "shop", settings)
    assert outcome.injected, outcome.reason
    spec: Doc = outcome.pod["spec"]
    return spec


def webhook_patched(pod: Doc, *argv: str) -> Doc:
    settings = render.injection_settings(request("inject", *argv))
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "namespace": "shop", "operation": "CREATE",
                        "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "object": {"apiVersion": "v1", "kind": "Pod", **pod}}}
    decision = admission.review(json.dumps(body).encode(), settings)
    response = decision.body["response"] if isinstance(decision.body, dict) else {}
    ops = json.loads(base64.b64decode(response["patch"]))
    spec: Doc = jsonpatch.apply_patch(body["request"]["object"], ops)["spec"]
    return spec


def forms() -> Iterator[tuple[str, Doc, dict[str, str]]]:
    cluster = ["--cluster-dns", CLUSTER]
    for zones, argv in ZONES.items():
        for form in ("deployment", "component"):
            for spec, maps in rendered_templates(*argv, *cluster, "--form", form):
                yield f"render --form {form} ({zones})", spec, maps
    for spec, maps in rendered_templates(*ZONES["fixed-address"], *cluster, "--resolver", "coredns"):
        yield "render --resolver coredns (fixed-address)", spec, maps
    for zones, argv in ZONES.items():
        yield f"inject ({zones})", injected(USER_POD, *argv, *cluster), {}
        yield f"webhook ({zones})", webhook_patched(USER_POD, *argv, *cluster), {}
    # A rendered Deployment labelled for injection: the webhook rebuilds its resolver its own way.
    (spec, _), = rendered_templates(*ZONES["fixed-address"], *cluster)
    pod = {"metadata": {"labels": {inject.POD_LABEL: "true"}}, "spec": spec}
    yield "webhook over a rendered Deployment", webhook_patched(pod, *ZONES["fixed-address"], *cluster), {}


FORMS = list(forms())


def corefile_of(container: Doc, volumes: list[Doc], maps: dict[str, str]) -> str | None:
    for env in container.get("env") or []:
        if env.get("name") == inject.COREFILE_ENV:
            return str(env["value"])
    mounted = {m["name"] for m in container.get("volumeMounts") or []}
    for v in volumes:
        if v["name"] in mounted and "configMap" in v:
            return maps[v["configMap"]["name"]]
    return None


def behind_the_vpn(text: str) -> dict[str, bool]:
    """Zone -> whether only the VPN can bring it up: learned from a tunnel, or forwarded to an
    address other than the cluster DNS or the catch-all's (which is never the tunnel's: SD104)."""
    blocks = []
    for block in corefile.parse(text, "Corefile"):
        names = [st.name for st in block.directives]
        targets = {a for st in block.directives if st.name == "forward" for a in st.args[1:]}
        zones = [k.text.removeprefix("dns://").rsplit(":", 1)[0].rstrip(".") or "." for k in block.keys]
        blocks.append((zones, "openvpn" in names or "wireguard" in names, targets))
    outside = {CLUSTER} | {t for zones, _, targets in blocks if "." in zones for t in targets}
    return {z: tunnel or not targets <= outside for zones, tunnel, targets in blocks for z in zones}


def is_vpn(c: Doc) -> bool:
    words = " ".join(str(w) for w in [c.get("image", ""), *(c.get("command") or []), *(c.get("args") or [])])
    return "openvpn" in words or "wg-quick" in words


def why_it_cannot_pass(c: Doc, running: list[Doc], spec: Doc, maps: dict[str, str]) -> str | None:
    probe = c.get("startupProbe")
    if probe is None or "exec" in probe:  # none, or its own command (the WireGuard sidecar's DNS file)
        return None
    get = probe["httpGet"]
    port = get["port"]
    if isinstance(port, str):
        port = next(p["containerPort"] for p in c.get("ports") or [] if p["name"] == port)
    every = [*spec.get("initContainers", []), *spec["containers"]]
    server = next((s for s in every if any(p["containerPort"] == port for p in s.get("ports") or [])), None)
    if server is None:
        return f"nothing in the pod listens on port {port}"
    if server not in running:
        return f"port {port} is {server['name']}'s, which starts later"
    url = urlsplit(get["path"])
    if url.path == "/health":
        return None
    assert url.path == "/ready", get["path"]
    text = corefile_of(server, spec.get("volumes") or [], maps)
    assert text is not None, f"no Corefile for {server['name']}"
    zones = behind_the_vpn(text)
    wanted = parse_qs(url.query).get("zone") or list(zones)
    if server["image"].startswith("coredns/"):
        return None  # CoreDNS's /ready is its plugins' readiness, never an upstream's
    vpn_up = any(is_vpn(r) for r in running)
    waiting = [z for z in wanted if zones[z.rstrip(".") or "."] and not vpn_up]
    return f"waits for {', '.join(waiting)}, behind a VPN not started yet" if waiting else None


@pytest.mark.parametrize("label,spec,maps", FORMS, ids=[f[0] for f in FORMS])
def test_each_sidecar_starts_with_only_the_containers_before_it(label: str, spec: Doc,
                                                                maps: dict[str, str]) -> None:
    running: list[Doc] = []
    for c in spec.get("initContainers", []):
        running.append(c)
        if c.get("restartPolicy") == "Always":
            why = why_it_cannot_pass(c, running, spec, maps)
            assert why is None, f"{label}: {c['name']}'s startupProbe {c['startupProbe']} never passes: {why}"
    for c in spec["containers"]:  # classic sidecars: their probes only gate their own liveness
        why = why_it_cannot_pass(c, [*running, *spec["containers"]], spec, maps)
        assert why is None, f"{label}: {c['name']}: {why}"
    assert any(is_vpn(c) for c in [*spec.get("initContainers", []), *spec["containers"]]), label


def test_the_rendered_vpn_holds_the_app_until_every_zone_answers() -> None:
    """The resolver no longer waits for the tunnel zone; what holds the app until that zone answers
    is the VPN container's own startup probe, on the resolver's /ready (every zone)."""
    (spec, _), = rendered_templates(*ZONES["fixed-address"], "--cluster-dns", CLUSTER)
    dns, vpn = spec["initContainers"]
    assert dns["startupProbe"]["httpGet"]["path"] == "/ready?zone=cluster.local&zone=."
    assert vpn["startupProbe"]["httpGet"] == {"path": "/ready", "port": 8181}
    assert dns["readinessProbe"]["httpGet"]["path"] == "/ready"


def test_check_flags_a_resolver_that_waits_for_a_zone_behind_a_later_vpn(tmp_path: Path) -> None:
    (spec, maps), = rendered_templates(*ZONES["fixed-address"], "--cluster-dns", CLUSTER)
    spec["initContainers"][0]["startupProbe"]["httpGet"]["path"] = "/ready"
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"Corefile": text}}
        for name, text in maps.items()] + [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "shop"},
                                            "spec": spec}]))
    found = [f for f in checker.check([str(path)], checker.Options()) if f.code == "SD209"]
    assert [f.text(False) for f in found] and "svc.acme.internal" in found[0].message
    assert "vpn" in found[0].message, found[0].message


def test_check_reads_the_corefile_inject_puts_in_the_env_too(tmp_path: Path) -> None:
    spec = injected(USER_POD, *ZONES["fixed-address"], "--cluster-dns", CLUSTER)
    path = tmp_path / "pod.yaml"

    def codes() -> list[str]:
        path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "shop"},
                                        "spec": spec}))
        return [f.code for f in checker.check([str(path)], checker.Options())]

    assert "SD209" not in codes()
    spec["initContainers"][0]["startupProbe"]["httpGet"]["path"] = "/ready"
    assert "SD209" in codes()
