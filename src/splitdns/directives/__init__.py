"""The directives a Corefile may use: each module parses one; this table says which exist,
which may repeat, who parses each, and the order in which they act on a query.

Parsers turn a statement into a frozen spec and never open a socket; `splitdns.config` builds
a block from them, `splitdns.core` acts on the specs.
"""

from __future__ import annotations

from collections.abc import Callable

from splitdns import corefile
from splitdns.directives import (
    bind,
    cache,
    hosts,
    limits,
    loadbalance,
    logging,
    openvpn,
    operations,
    private,
    rewrite,
    template,
    wireguard,
)

SUPPORTED = ("bind", "cache", "errors", "forward", "health", "hosts", "limits", "loadbalance", "log",
             "loop", "openvpn", "private_addresses", "prometheus", "ready", "reload", "rewrite",
             "template", "wireguard")
# Directives CoreDNS has that we deliberately do not: named in the error so the user
# knows the Corefile is fine for CoreDNS but not for us.
COREDNS_ONLY = (
    "acl", "any", "auto", "autopath", "azure", "cancel", "chaos", "clouddns", "debug",
    "dns64", "dnssec", "dnstap", "erratic", "etcd", "file", "geoip", "grpc", "header",
    "k8s_external", "kubernetes", "local", "metadata", "minimal",
    "multisocket", "nsid", "pprof", "root", "route53", "secondary", "sign",
    "timeouts", "tls", "trace", "transfer", "tsig", "view", "whoami",
)
# CoreDNS runs plugins in a compiled order (plugin.cfg), not in file order; so do we. This is
# that order among our directives, ours placed where they act: the per-query steps of a block
# (local.steps_of, zone.Zone.begin) are read from it.
ORDER = ("reload", "bind", "limits", "ready", "health", "prometheus", "errors", "log", "loadbalance",
         "cache", "rewrite", "template", "hosts", "loop", "private_addresses", "openvpn", "wireguard",
         "forward")
ONCE = ("bind", "cache", "errors", "log", "reload", "prometheus", "loop", "health", "ready", "openvpn",
        "limits", "private_addresses", "hosts", "loadbalance", "wireguard")
REPEATED = ("rewrite", "template")  # several in a block: all of them, in file order
PARSERS: dict[str, Callable[[corefile.Statement], object]] = {
    "bind": bind.parse, "cache": cache.parse, "errors": logging.parse_errors, "log": logging.parse_log,
    "health": operations.parse_health, "ready": operations.parse_ready,
    "prometheus": operations.parse_prometheus, "reload": operations.parse_reload,
    "loop": operations.parse_loop, "openvpn": openvpn.parse, "limits": limits.parse,
    "private_addresses": private.parse, "hosts": hosts.parse, "loadbalance": loadbalance.parse,
    "wireguard": wireguard.parse,
}
TUNNELS = ("openvpn", "wireguard")  # directives that give a block its upstreams at run time
REPEATED_PARSERS: dict[str, Callable[[corefile.Statement], object]] = {
    "rewrite": rewrite.parse, "template": template.parse,
}
