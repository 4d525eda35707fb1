"""`splitdns render`: a plan to the files a user applies, as text.

Forms: `deployment` (ConfigMap + a full example Deployment with app, vpn and dns), `component` (a
kustomize Component that adds the DNS part to an existing Deployment), `cluster-wide` (the server
block to add to the cluster's CoreDNS ConfigMap). Each form is a mapping file name -> text; on
stdout the files are concatenated.
"""

from __future__ import annotations

from splitdns import __version__
from splitdns.kube import corefiles, manifests, yamlio
from splitdns.kube.manifests import Options
from splitdns.kube.plan import Plan

FORMS = ("deployment", "component", "cluster-wide")


def _header(plan: Plan, opts: Options, what: str, before: list[str | list[str]]) -> str:
    """What the reader must do before `kubectl apply`, first; then what the files are."""
    steps = []
    if plan.resolver == "splitdns" and opts.image == manifests.DEFAULT_IMAGE:
        steps.append([f"The image {opts.image} is a default name, not a published image: build it from "
                      "the repository's Dockerfile, push it to a registry your cluster pulls from, and "
                      "render again with --image:",
                      f"  docker build -t REGISTRY/splitdns:{__version__} .",
                      f"  docker push REGISTRY/splitdns:{__version__}",
                      f"  splitdns render ... --image REGISTRY/splitdns:{__version__}"])
    steps += [[line] if isinstance(line, str) else line for line in before]
    lines = []
    if steps:  # first thing: what fails at apply time if skipped (ImagePullBackOff, a missing Secret)
        lines.append("Before `kubectl apply`:")
        for n, step in enumerate(steps, 1):
            lines += [f"{n}. {step[0]}", *(f"   {more}" for more in step[1:])]
    lines.append(f"Rendered by `splitdns render` (splitdns {__version__}) for namespace {plan.namespace}: "
                 f"{what}.")
    lines.append(f"In-pod resolver: {plan.resolver}; nameserver 127.0.0.1; search list for namespace "
                 f"{plan.namespace}.")
    return "".join(f"# {line}\n" for line in lines)


def deployment(plan: Plan, opts: Options) -> dict[str, str]:
    corefile = corefiles.in_pod(plan)
    docs = [manifests.configmap(plan, opts, corefile), manifests.deployment(plan, opts, corefile)]
    ns = plan.namespace
    before: list[str | list[str]] = [[
        "The Secret openvpn-client, holding the VPN client config as client.conf (the vpn container "
        "reads /etc/openvpn/client/client.conf):",
        f"  kubectl -n {ns} create secret generic openvpn-client --from-file=client.conf=client.ovpn"]]
    examples = [f"{flag} (now {value})" for flag, value, default in (
        ("--app-image", opts.app_image, manifests.DEFAULT_APP_IMAGE),
        ("--vpn-image", opts.vpn_image, manifests.DEFAULT_VPN_IMAGE)) if value == default]
    if examples:
        before.append(f"Replace the example's placeholder images with yours: {', '.join(examples)}.")
    header = _header(plan, opts, f"apply with `kubectl apply -n {ns} -f splitdns.yaml`", before)
    return {"splitdns.yaml": yamlio.dump_all(docs, header)}


def component(plan: Plan, opts: Options) -> dict[str, str]:
    corefile = corefiles.in_pod(plan)
    patch_text = yamlio.dump(manifests.patch(plan, opts))
    doc = manifests.component(plan, opts, corefile, patch_text)
    before: list[str | list[str]] = []
    if any(r.tunnel for r in plan.routes):
        host, _, port = plan.management.rpartition(":")
        before.append(f"The VPN container of {opts.name} runs OpenVPN with --management {host} {port} "
                      "--management-up-down --management-hold (the resolver learns the pushed DNS there).")
    header = _header(plan, opts, f"a kustomize Component for the Deployment {opts.name}; save as "
                                 "kustomization.yaml in its own directory and list that directory under "
                                 "`components:` of your overlay", before)
    return {"kustomization.yaml": header + yamlio.dump(doc)}


def cluster_wide(plan: Plan) -> dict[str, str]:
    return {"Corefile.cluster-wide": corefiles.cluster_wide(plan)}


def render(plan: Plan, opts: Options, form: str) -> dict[str, str]:
    if form == "component":
        return component(plan, opts)
    if form == "cluster-wide":
        return cluster_wide(plan)
    return deployment(plan, opts)
