"""`k8s_schema`: names the Kubernetes DNS schema rules out are answered NXDOMAIN here.

Syntax:

    k8s_schema [ZONE...]

ZONE is the cluster domain (the block's zones by default). A name under it that no record of
the Kubernetes DNS-Based Service Discovery schema (1.0.1) can have, nor a pod record
(`<ip>.<ns>.pod.<zone>`, which CoreDNS's `pods` option serves), is answered NXDOMAIN with the
zone's SOA (5 s, as CoreDNS's kubernetes plugin) and never sent to the cluster DNS. That is
most of a search walk's tries: `x.svc.acme.internal.default.svc.cluster.local` has four
labels under a namespace, where the schema has at most three (`_port._proto.service`).

RFC 8020 says NXDOMAIN denies the whole subtree, so a name that could exist is always asked:
`api.stripe.com.svc.cluster.local` could be host `api` of service `stripe` in namespace
`com`, and `default.svc.cluster.local` is an empty non-terminal. The guard switches itself off
where the block's `rewrite`, `template` or `hosts` may make names the schema does not have,
and where the pod's search list (`autopath`) says the cluster domain is another one.
"""

from __future__ import annotations

from dataclasses import dataclass

from splitdns.corefile import Statement
from splitdns.directives import _args

USAGE = "k8s_schema [ZONE...]"


@dataclass(frozen=True)
class K8sSchemaSpec:
    zones: tuple[str, ...] = ()  # the cluster domains; empty: the block's zones


def parse(st: Statement) -> K8sSchemaSpec:
    _args.no_body(st, USAGE)
    return K8sSchemaSpec(tuple(_args.zone(st, text, "k8s_schema") for text in st.args))
