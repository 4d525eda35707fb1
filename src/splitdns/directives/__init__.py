"""The directives a Corefile may use, in one registry: a record per directive says its name,
its parser, whether it may repeat in a block, what it does to a query in the core, whether
the cache's content depends on it, and whether CoreDNS has a plugin of that name. Its place
in `REGISTRY` is its place in the per-query order, as a plugin's line in CoreDNS's plugin.cfg
is. Every list the rest of the code needs (what is supported, what CoreDNS has, the order,
the steps of a block, what `check` knows) is read from here; adding a directive is one
module with its parser and one row below.

Parsers turn a statement into a frozen spec and never open a socket; `splitdns.config` builds
a block from them, `splitdns.core` acts on the specs.
Tests: tests/test_directives_registry.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from splitdns import corefile
from splitdns.directives import (
    autopath,
    bind,
    cache,
    filter_aaaa,
    forward,
    hosts,
    k8s_schema,
    limits,
    loadbalance,
    logging,
    minimal,
    openconnect,
    openvpn,
    operations,
    private,
    rewrite,
    strongswan,
    template,
    wireguard,
)
from splitdns.directives._reshape import Reshape

S = TypeVar("S", covariant=True)

# What a directive does to a query in the core (core/zone.py turns each into a step of `begin`):
CACHE_STEP = "cache"      # answers from the cache
LOCAL_STEP = "local"      # answers made by the block itself or the name rewritten (core/local.py)
SEARCH_STEP = "search"    # the client's search walk, ended here in one trip (core/search.py)
GUARD_STEP = "guard"      # names answered here from what the pod knows (core/names.py)
LOOP_STEP = "loop"        # a forwarding loop answered at once
TUNNEL_STEP = "tunnel"    # a tunnel zone answers at once while its tunnel is down
FORWARD_STEP = "forward"  # asks the upstreams
REPLY_STEP = "reply"      # shapes every answer the block gives (what is stored, or each send)


class TunnelSpec(Protocol):
    """What every tunnel directive's spec says, whatever the kind."""

    @property
    def domains(self) -> bool:
        """The zone also owns the domains the tunnel names (pushed, or its DNS line's)."""

    @property
    def dns_origin(self) -> str:
        """Where the tunnel's DNS servers come from, in a sentence ("pushed by the VPN server")."""

    @property
    def bind_to_tunnel(self) -> bool:
        """The zone's upstream sockets are bound to the tunnel's interface (the default)."""

    @property
    def interface(self) -> str | None:
        """The tunnel's interface as the Corefile names it; None: as its watcher learns it."""


@dataclass(frozen=True)
class Tunnel:
    """What makes a directive a tunnel kind, for every layer above: `forward FROM WORD` (and
    `render --zone ZONE=WORD`) names it, `display` is its name in what users read, `metric_kind`
    the `kind` label of its `splitdns_tunnel_*` series, `learned` where its zone's upstreams
    come from (`explain`). The shell's watcher and kube's pod parts are their layers' rows."""

    word: str
    display: str
    metric_kind: str
    learned: str
    # What its VPN container runs, as a pod spec shows it (image, command, args): how `check`
    # tells the pod's VPN containers from the others.
    programs: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class Directive(Generic[S]):
    """One directive. `step`: what it does to a query in the core, None for what acts on
    the process or the shell only (listeners, endpoints, logs). `stored`: what the cache
    holds depends on it, so a reload that changes it starts the block's cache afresh."""

    name: str
    parse: Callable[[corefile.Statement], S]
    step: str | None = None
    stored: bool = False
    reshape: Reshape | None = None  # how it rewrites each reply the block keeps
    coredns: bool = True  # CoreDNS has a plugin of this name (check --resolver coredns accepts it)
    tunnel: Tunnel | None = None  # a tunnel kind: its zone's upstreams are the tunnel's DNS


class Once(Directive[S]):
    """At most once per server block: `block[D]` is its spec, or None without it."""


class Repeated(Directive[S]):
    """Any number of times per server block: `block.every(D)` is their specs in file order."""


RELOAD = Once("reload", operations.parse_reload)
BIND = Once("bind", bind.parse)
LIMITS = Once("limits", limits.parse, coredns=False)
READY = Once("ready", operations.parse_ready)
HEALTH = Once("health", operations.parse_health)
PROMETHEUS = Once("prometheus", operations.parse_prometheus)
ERRORS = Once("errors", logging.parse_errors)
LOG = Once("log", logging.parse_log)
LOADBALANCE = Once("loadbalance", loadbalance.parse, step=REPLY_STEP, reshape=loadbalance.RESHAPE)
CACHE = Once("cache", cache.parse, step=CACHE_STEP, stored=True)
REWRITE = Repeated("rewrite", rewrite.parse, step=LOCAL_STEP, stored=True)
# `autopath`'s parser also takes whether to read its resolv.conf (config.build).
AUTOPATH = Once("autopath", autopath.parse, step=SEARCH_STEP, stored=True)
MINIMAL = Once("minimal", minimal.parse, step=REPLY_STEP, stored=True, reshape=minimal.RESHAPE)
TEMPLATE = Repeated("template", template.parse, step=LOCAL_STEP)
HOSTS = Once("hosts", hosts.parse, step=LOCAL_STEP)
K8S_SCHEMA = Once("k8s_schema", k8s_schema.parse, step=GUARD_STEP, stored=True, coredns=False)
FILTER_AAAA = Once("filter_aaaa", filter_aaaa.parse, step=GUARD_STEP, stored=True,
                   reshape=filter_aaaa.RESHAPE, coredns=False)
LOOP = Once("loop", operations.parse_loop, step=LOOP_STEP)
PRIVATE_ADDRESSES = Once("private_addresses", private.parse, step=REPLY_STEP, stored=True, coredns=False)
OPENVPN = Once("openvpn", openvpn.parse, step=TUNNEL_STEP, stored=True, coredns=False,
               tunnel=Tunnel("openvpn", "OpenVPN", "openvpn", "the DNS servers the VPN server pushes",
                             programs=("openvpn",)))
WIREGUARD = Once("wireguard", wireguard.parse, step=TUNNEL_STEP, stored=True, coredns=False,
                 tunnel=Tunnel("wireguard", "WireGuard", "wireguard",
                               "the DNS servers of the wg-quick config's DNS = line",
                               programs=("wg-quick", "wireguard")))
OPENCONNECT = Once("openconnect", openconnect.parse, step=TUNNEL_STEP, stored=True, coredns=False,
                   tunnel=Tunnel("openconnect", "OpenConnect", "openconnect",
                                 "the DNS servers the OpenConnect gateway pushes (our vpnc-script's "
                                 "state file)"))
STRONGSWAN = Once("strongswan", strongswan.parse, step=TUNNEL_STEP, stored=True, coredns=False,
                  tunnel=Tunnel("strongswan", "strongSwan", "strongswan",
                                "the DNS servers an IKE SA received (charon's resolve plugin file)"))
# `forward`'s parser also takes whether to read resolv.conf files (config.build), and the
# tunnels' words, from the rows above.
FORWARD = Repeated("forward", lambda st: forward.parse(st, tunnel_words=tunnel_words()),
                   step=FORWARD_STEP, stored=True)

# The per-query order: CoreDNS's plugin.cfg among the directives we share, ours where they act
# (the guards after the tunnel's state: a tunnel zone that is down answers every type alike).
REGISTRY: tuple[Directive[object], ...] = (
    RELOAD, BIND, LIMITS, READY, HEALTH, PROMETHEUS, ERRORS, LOG, LOADBALANCE, CACHE, REWRITE,
    AUTOPATH, MINIMAL, TEMPLATE, HOSTS, LOOP, PRIVATE_ADDRESSES, OPENVPN, WIREGUARD, OPENCONNECT,
    STRONGSWAN, K8S_SCHEMA, FILTER_AAAA, FORWARD,
)
BY_NAME: dict[str, Directive[object]] = {d.name: d for d in REGISTRY}
SUPPORTED = tuple(sorted(BY_NAME))
ORDER = tuple(d.name for d in REGISTRY)

# CoreDNS's plugins that splitdns does not implement (plugin.cfg of CoreDNS 1.14.7, and a few
# of earlier releases still found in Corefiles), so that an error can tell "a CoreDNS plugin we
# lack" from a typo, and `check --resolver coredns` knows what CoreDNS accepts.
COREDNS_ONLY = (
    "acl", "any", "auto", "azure", "bufsize", "cancel", "chaos", "clouddns", "debug",
    "dns64", "dnssec", "dnstap", "erratic", "etcd", "file", "geoip", "grpc", "header",
    "k8s_external", "kubernetes", "local", "metadata", "multisocket", "nomad", "nsid", "on",
    "pprof", "quic", "root", "route53", "secondary", "sign", "timeouts", "tls", "trace",
    "transfer", "tsig", "view", "whoami",
)
COREDNS_PLUGINS = frozenset((*COREDNS_ONLY, *(d.name for d in REGISTRY if d.coredns)))


def steps(step: str) -> tuple[Directive[object], ...]:
    """The directives that take this step in the core, in the per-query order."""
    return tuple(d for d in REGISTRY if d.step == step)


def tunnels() -> tuple[Directive[TunnelSpec], ...]:
    """The tunnel kinds, in the per-query order (read at each call: the registry is the one list)."""
    return tuple(d for d in REGISTRY if d.tunnel is not None)  # type: ignore[misc]


def tunnel_words() -> frozenset[str]:
    """What `forward FROM TO` takes as TO for a tunnel's DNS servers."""
    return frozenset(d.tunnel.word for d in tunnels() if d.tunnel is not None)
