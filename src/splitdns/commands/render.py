"""`splitdns render`: the manifests for the in-pod resolver, or the cluster-wide block, on stdout or
into a directory.
Tests: tests/test_render.py.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from splitdns.kube.deploy import manifests, sizing, webhook_manifests
from splitdns.kube.shared.image import DEFAULT_IMAGE

if TYPE_CHECKING:
    from splitdns.kube.deploy.inject import Settings

    # flags of `splitdns webhook`, its namespace -> the settings it injects with
    WebhookSettings = Callable[[list[str], str], Settings]
    from splitdns.kube.deploy.plan import Plan

EXIT_OK, EXIT_CLUSTER, EXIT_INPUT = 0, 1, 2


@dataclass(frozen=True)
class Request:
    zones: list[str] = field(default_factory=list)
    corefile: str | None = None
    cluster_dns: str | None = None
    from_cluster: bool = False
    kubeconfig: str | None = None
    context: str | None = None
    probes: list[str] = field(default_factory=list)
    namespace: str = "default"
    cluster_domain: str = "cluster.local"
    ndots: int = 5
    resolver: str = "splitdns"
    sidecar: str = "native"
    form: str = "deployment"
    name: str = "app"
    image: str = DEFAULT_IMAGE
    coredns_image: str = manifests.DEFAULT_COREDNS_IMAGE
    app_image: str = manifests.DEFAULT_APP_IMAGE
    vpn_image: str = manifests.DEFAULT_VPN_IMAGE
    management: str = "127.0.0.1:7505"
    vpn: str | None = None            # a tunnel's word (kube/tunnels/); None: what the zones name
    filter_aaaa: bool = False         # the tunnel zones answer AAAA with NODATA
    no_autopath: bool = False         # leave out autopath and k8s_schema (--no-autopath)
    src_valid_mark: bool = False      # the WireGuard pod's unsafe sysctl, for AllowedIPs 0.0.0.0/0
    output_dir: str | None = None
    webhook_namespace: str = "splitdns-system"
    reads_cluster: bool = True  # False for `splitdns webhook`, which has no --cluster-dns-from-cluster
    expected_qps: int = sizing.TYPICAL_QPS
    webhook_review_rate: int = sizing.TYPICAL_REVIEW_RATE


def files(req: Request, webhook_settings: WebhookSettings | None = None,
          changes: list[str] | None = None) -> dict[str, str]:
    """The rendered files (name -> text); raises PlanError on missing or wrong inputs.
    `webhook_settings` reads the flags the rendered webhook runs with back into the settings it
    will inject (the command line's parser does that), so its ownership record is its own.
    `changes` receives what was changed in a Corefile carried into the pod (`--corefile`)."""
    from splitdns.kube.deploy import forms
    from splitdns.kube.deploy.manifests import Options

    if req.form == "monitoring":
        from splitdns.kube.deploy import monitoring

        return monitoring.render(req.namespace, req.webhook_namespace)
    if req.form == "webhook":
        given = injection_settings(req, excluded=(req.webhook_namespace,))
        _refuse_losses(given.plan, "--form webhook", "the webhook's flags hold")
        if webhook_settings is not None:
            given = webhook_settings(webhook_manifests.settings_args(given), req.webhook_namespace)
        webhook_manifests.cpu_request(req.webhook_review_rate)  # a PlanError before anything is built
        return webhook_manifests.render(given, req.webhook_namespace, req.webhook_review_rate)
    manifests.cpu_request(req.expected_qps)
    plan = build_plan(req)
    opts = Options(name=req.name, image=req.image, coredns_image=req.coredns_image, app_image=req.app_image,
                   vpn_image=vpn_image(req, plan), sidecar=req.sidecar, expected_qps=req.expected_qps)
    if req.form == "cluster-wide":
        _refuse_losses(plan, "--cluster-wide", "the cluster-wide block holds")
    elif plan.corefile is not None and changes is not None:
        from splitdns.kube.deploy import corefile_text

        changes.extend(corefile_text.in_pod_changes(plan)[1])
    return forms.render(plan, opts, req.form)


def _refuse_losses(plan: Plan, form: str, what: str) -> None:
    """Forms built from the zones and upstreams alone refuse a Corefile they would not carry whole."""
    from splitdns.kube.deploy import corefile_carry
    from splitdns.kube.deploy.plan import PlanError

    if plan.corefile is None:
        return
    lost = corefile_carry.lost_by_zones(plan.corefile, frozenset(r.zone for r in plan.routes))
    if lost:
        raise PlanError(f"{form} --corefile {plan.corefile.path}: {what} only the zones and their "
                        f"upstreams, so these lines would be lost: {', '.join(lost)}. Render the pod "
                        "(--form deployment or component) or `splitdns inject --corefile`, which carry "
                        "the Corefile, or give the zones with --zone")


def injection_settings(req: Request, excluded: tuple[str, ...] = ()) -> Settings:
    """The injection settings the flags describe (`splitdns inject`, the webhook and its
    manifests); raises PlanError on missing or wrong inputs."""
    from splitdns.kube.deploy.inject import ALWAYS_EXCLUDED, Settings
    from splitdns.kube.deploy.plan import PlanError

    if req.resolver != "splitdns":
        raise PlanError("injection runs our image only (--resolver splitdns): the Corefile travels in an "
                        "environment variable, which CoreDNS cannot read as its config")
    manifests.cpu_request(req.expected_qps)  # a PlanError here, not in every injection
    plan = build_plan(req)
    return Settings(plan, image=req.image, sidecar=req.sidecar,
                    excluded_namespaces=tuple(dict.fromkeys((*ALWAYS_EXCLUDED, *excluded))),
                    expected_qps=req.expected_qps, vpn_image=vpn_image(req, plan))


def vpn_image(req: Request, plan: Plan) -> str:
    """--vpn-image, or the placeholder that names the plan's VPN."""
    from splitdns.kube import tunnels

    if req.vpn_image == manifests.DEFAULT_VPN_IMAGE:
        return tunnels.of(plan.vpn).default_image
    return req.vpn_image


def build_plan(req: Request) -> Plan:
    """The plan the flags describe (also what `splitdns inject` and `splitdns webhook` inject)."""
    from splitdns.kube.deploy.plan import (
        ClusterDNS,
        CorefileSource,
        PlanError,
        build,
        routes_from_corefile,
        upstream,
    )
    from splitdns.kube.shared import lenient_corefile

    cluster: ClusterDNS | None = None
    if req.form == "cluster-wide":
        pass  # the cluster's own CoreDNS keeps its catch-all: no cluster DNS address is needed
    elif req.cluster_dns is not None:
        address = upstream(req.cluster_dns, "cluster DNS")
        cluster = ClusterDNS(address, f"given: --cluster-dns {req.cluster_dns}")
    elif req.from_cluster:
        from splitdns.kube.deploy.cluster import read_kube_dns

        cluster = read_kube_dns(req.kubeconfig, req.context)
    routes = []
    source: CorefileSource | None = None
    if req.corefile is not None:
        # Only here: reading a ConfigMap needs PyYAML, which the webhook's image does not hold.
        from splitdns.errors import ConfigError
        from splitdns.kube.shared import sources

        try:
            src = sources.corefile_at(req.corefile)
        except FileNotFoundError:
            raise PlanError(f"cannot read {req.corefile}: No such file or directory") from None
        except ConfigError as err:
            raise PlanError(str(err)) from None
        # The Corefile's lines as the file's (a ConfigMap's data.Corefile starts further down), so
        # the rendered "from FILE:LINE" points where the user looks.
        lines_above = "\n" * (src.offset if src.anchor is None else 0)
        routes = routes_from_corefile(lenient_corefile.read(lines_above + src.text, req.corefile))
        source = CorefileSource(lines_above + src.text, req.corefile)
    form = req.form
    return build(req.zones, routes, cluster, req.probes, resolver="coredns" if form == "cluster-wide"
                 else req.resolver, namespace=req.namespace, cluster_domain=req.cluster_domain,
                 ndots=req.ndots, management=req.management, cluster_wide=form == "cluster-wide",
                 reads_cluster=req.reads_cluster, vpn=req.vpn, filter_aaaa=req.filter_aaaa,
                 autopath=not req.no_autopath, corefile=source, unsafe_sysctls=req.src_valid_mark)


def run(req: Request, webhook_settings: WebhookSettings | None = None) -> int:
    from splitdns.kube.deploy.cluster import ClusterReadError
    from splitdns.kube.deploy.plan import PlanError

    changes: list[str] = []
    try:
        out = files(req, webhook_settings, changes)
    except ClusterReadError as err:
        print(f"splitdns render: {err}", file=sys.stderr)
        return EXIT_CLUSTER
    except PlanError as err:
        print(f"splitdns render: {err}", file=sys.stderr)
        return EXIT_INPUT
    for change in changes:
        print(f"splitdns render: changed for the pod: {change}", file=sys.stderr)
    if req.output_dir is None:
        sys.stdout.write("---\n".join(out.values()) if req.form != "cluster-wide" else "".join(out.values()))
        return EXIT_OK
    directory = Path(req.output_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in out.items():
            (directory / name).write_text(text, encoding="utf-8")
            print(directory / name, file=sys.stderr)
    except OSError as err:
        print(f"splitdns render: cannot write into {req.output_dir}: {err.strerror} "
              f"({err.filename or req.output_dir})", file=sys.stderr)
        return EXIT_INPUT
    return EXIT_OK
