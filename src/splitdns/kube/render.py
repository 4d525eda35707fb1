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


def _header(plan: Plan, what: str) -> str:
    lines = [f"Rendered by `splitdns render` (splitdns {__version__}): {what}.",
             f"In-pod resolver: {plan.resolver}; nameserver 127.0.0.1; search list for namespace "
             f"{plan.namespace}."]
    return "".join(f"# {line}\n" for line in lines)


def deployment(plan: Plan, opts: Options) -> dict[str, str]:
    corefile = corefiles.in_pod(plan)
    docs = [manifests.configmap(plan, opts, corefile), manifests.deployment(plan, opts, corefile)]
    header = _header(plan, "apply with `kubectl apply -n NAMESPACE -f FILE`")
    return {"splitdns.yaml": yamlio.dump_all(docs, header)}


def component(plan: Plan, opts: Options) -> dict[str, str]:
    corefile = corefiles.in_pod(plan)
    patch_text = yamlio.dump(manifests.patch(plan, opts))
    doc = manifests.component(plan, opts, corefile, patch_text)
    header = _header(plan, f"a kustomize Component for the Deployment {opts.name}; save as "
                           "kustomization.yaml in its own directory and list that directory under "
                           "`components:` of your overlay")
    return {"kustomization.yaml": header + yamlio.dump(doc)}


def cluster_wide(plan: Plan) -> dict[str, str]:
    return {"Corefile.cluster-wide": corefiles.cluster_wide(plan)}


def render(plan: Plan, opts: Options, form: str) -> dict[str, str]:
    if form == "component":
        return component(plan, opts)
    if form == "cluster-wide":
        return cluster_wide(plan)
    return deployment(plan, opts)
