"""`splitdns render`: a plan to the files a user applies, as text.

Forms: `deployment` (ConfigMap + a full example Deployment with app, vpn and dns), `component` (a
kustomize Component that adds the DNS part to an existing Deployment), `cluster-wide` (the server
block to add to the cluster's CoreDNS ConfigMap). Each form is a mapping file name -> text; on
stdout the files are concatenated.
Tests: tests/test_render.py.
"""

from __future__ import annotations

import hashlib
from typing import Any

from splitdns import __version__
from splitdns.kube import tunnels
from splitdns.kube.deploy import corefile_text, inject, manifests
from splitdns.kube.deploy.manifests import Options
from splitdns.kube.deploy.plan import Plan
from splitdns.kube.shared import yamlio
from splitdns.kube.shared.image import DEFAULT_IMAGE

Doc = dict[str, Any]


def _header(plan: Plan, opts: Options, what: str, before: list[str | list[str]]) -> str:
    """What the reader must do before `kubectl apply`, first; then what the files are."""
    steps = []
    if plan.resolver == "splitdns" and opts.image == DEFAULT_IMAGE:
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


def inject_settings(plan: Plan, opts: Options) -> inject.Settings:
    """The injection's settings for render's forms: the Corefile from the ConfigMap opts.configmap.
    No namespace is excluded: the user named it (the webhook's exclusions guard against mistakes)."""
    image = opts.coredns_image if plan.resolver == "coredns" else opts.image
    return inject.Settings(plan, image=image, sidecar=opts.sidecar, excluded_namespaces=(),
                           configmap=opts.configmap, expected_qps=opts.expected_qps,
                           vpn_image=opts.vpn_image)


def _injected(template: Doc, plan: Plan, opts: Options) -> Doc:
    outcome = inject.inject(template, plan.namespace, inject_settings(plan, opts))
    if not outcome.injected:  # render's own pods never conflict with the resolver
        raise AssertionError(f"render's pod template was not injected: {outcome.reason}")
    return outcome.pod


def deployment_doc(plan: Plan, opts: Options, corefile: str) -> Doc:
    """A full example: app + vpn, injected as `splitdns inject` would (dns first: its startup probe
    waits only for the zones the cluster DNS answers, so the vpn starts next; the vpn's holds the
    app until every zone answers)."""
    vpn, volumes = tunnels.of(plan.vpn).example(plan, opts)  # none when the injection adds its own
    app = {"name": "app", "image": opts.app_image}
    spec: Doc = {"initContainers": vpn, "containers": [app]} if vpn and opts.sidecar == "native" else \
        {"containers": [*vpn, app]}
    if volumes:
        spec["volumes"] = volumes
    labels = {"app": opts.name}
    template = _injected({"metadata": {"labels": labels, "annotations": _pod_annotations(plan, corefile)},
                          "spec": spec}, plan, opts)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": opts.name, "labels": labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": template},
    }


def _pod_annotations(plan: Plan, corefile: str) -> Doc:
    # The Corefile's hash in the pod template makes a changed Corefile roll the pods, instead of
    # waiting minutes for the kubelet to sync the ConfigMap volume.
    digest = hashlib.sha256(corefile.encode()).hexdigest()
    return {manifests.ANNOTATION_OWNERS: manifests.owners(plan), manifests.ANNOTATION_COREFILE: digest}


def patch_doc(plan: Plan, opts: Options) -> Doc:
    """A strategic-merge patch that adds the DNS part to an existing Deployment named opts.name: what
    the injection adds to an empty pod template. The sysctl is not in it: a strategic merge replaces
    a pod's `sysctls` list (it has no merge key), so the component appends it with a replacement
    instead (`sysctl_replacement`), whose source is the dns container's env."""
    owners = {manifests.ANNOTATION_OWNERS: manifests.owners(plan)}
    template = _injected({"metadata": {"annotations": owners}, "spec": {}}, plan, opts)
    spec: Doc = template["spec"]
    del spec["securityContext"]  # only the sysctl, which the replacement adds
    dns = next(c for c in spec[manifests.containers_key(opts)] if c["name"] == inject.MOUNTED_CONTAINER)
    dns["env"] = [dict(inject.PORT_SYSCTL)]  # the replacement's source: a {name, value} pair, quoted "53"
    sidecar = tunnels.of(plan.vpn).sidecar
    if sidecar is not None and plan.unsafe_sysctls:  # the same for its own sysctls (its `replacement`)
        sidecar.patched(spec.get(manifests.containers_key(opts), []))
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": opts.name},
        "spec": {"template": template},
    }


def deployment(plan: Plan, opts: Options) -> dict[str, str]:
    corefile = corefile_text.in_pod(plan)
    docs = [manifests.configmap(plan, opts, corefile), deployment_doc(plan, opts, corefile)]
    ns = plan.namespace
    before = tunnels.of(plan.vpn).apply_steps(plan)
    examples = [f"{flag} (now {value})" for flag, value, defaults in (
        ("--app-image", opts.app_image, (manifests.DEFAULT_APP_IMAGE,)),
        ("--vpn-image", opts.vpn_image, tuple(k.default_image for k in tunnels.KINDS.values())))
        if value in defaults]
    if examples:
        before.append(f"Replace the example's placeholder images with yours: {', '.join(examples)}.")
    header = _header(plan, opts, f"apply with `kubectl apply -n {ns} -f splitdns.yaml`", before)
    return {"splitdns.yaml": yamlio.dump_all(docs, header)}


def component(plan: Plan, opts: Options) -> dict[str, str]:
    corefile = corefile_text.in_pod(plan)
    patch_text = yamlio.dump(patch_doc(plan, opts))
    doc = manifests.component(plan, opts, corefile, patch_text)
    kind = tunnels.of(plan.vpn)
    if kind.sidecar is not None and kind.sidecar.replacement is not None and plan.unsafe_sysctls:
        doc["replacements"].append(kind.sidecar.replacement(opts.name, manifests.containers_key(opts)))
    before = kind.component_steps(plan, opts) if kind.component_steps else kind.apply_steps(plan)
    header = _header(plan, opts, f"a kustomize Component for the Deployment {opts.name}; save as "
                                 "kustomization.yaml in its own directory and list that directory under "
                                 "`components:` of your overlay", before)
    return {"kustomization.yaml": header + yamlio.dump(doc)}


def cluster_wide(plan: Plan) -> dict[str, str]:
    return {"Corefile.cluster-wide": corefile_text.cluster_wide(plan)}


def render(plan: Plan, opts: Options, form: str) -> dict[str, str]:
    if form == "component":
        return component(plan, opts)
    if form == "cluster-wide":
        return cluster_wide(plan)
    return deployment(plan, opts)
