"""What to render: each zone, who answers it, its upstream, and where that address came from.

Built from `--zone` flags, an existing Corefile, and the cluster DNS address (given or read from
the kube-dns Service). Addresses are never guessed: a zone without a known upstream is an error.
Tests: tests/test_wireguard_kube.py.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field

import dns.exception
import dns.name

from splitdns.addresses import host_port
from splitdns.kube import tunnels
from splitdns.kube.shared import lenient_corefile

RESOLVERS = ("splitdns", "coredns")
DEFAULT_MANAGEMENT = "127.0.0.1:7505"


class PlanError(ValueError):
    """The inputs do not say enough (or say something wrong) to render; the message says what to add."""


@dataclass(frozen=True)
class Route:
    zone: str                       # normalised: lower case, trailing dot
    upstreams: tuple[str, ...]      # IP or IP:PORT; empty when learned from the tunnel
    source: str                     # where the address came from, for the ownership record
    probe: str | None = None        # a name in the zone the readiness probe asks
    vpn: str = field(default_factory=lambda: tunnels.default().word)  # whose DNS, when learned at run time

    @property
    def tunnel(self) -> bool:
        return not self.upstreams

    def upstream_text(self) -> str:
        if not self.tunnel:
            return " ".join(self.upstreams)
        return tunnels.of(self.vpn).upstream_text


@dataclass(frozen=True)
class CorefileSource:
    """A Corefile given to carry into the pod (kube.deploy.corefile_carry): `text` has the lines above it
    in its file (a ConfigMap's) as blank lines, so its line numbers are the file's."""

    text: str
    path: str


@dataclass(frozen=True)
class ClusterDNS:
    address: str
    source: str


@dataclass(frozen=True)
class Plan:
    routes: tuple[Route, ...]       # private zones first, then the cluster domain, the catch-all last
    resolver: str = "splitdns"
    namespace: str = "default"
    cluster_domain: str = "cluster.local"
    ndots: int = 5
    management: str = DEFAULT_MANAGEMENT
    vpn: str = field(default_factory=lambda: tunnels.default().word)  # the pod's VPN (kube/tunnels/)
    filter_aaaa: bool = False       # the tunnel carries no IPv6: its zones answer AAAA with NODATA
    autopath: bool = True           # the Corefile knows the pod's search list (`autopath`)
    corefile: CorefileSource | None = None  # carried into the pod, its zones' routes above
    # The pod may set the unsafe sysctls its VPN kind asks for (--wireguard-src-valid-mark): a
    # stock kubelet refuses such a pod (SysctlForbidden).
    unsafe_sysctls: bool = False

    @property
    def owner(self) -> str:
        return f"in-pod {self.resolver}"

    def answerable_at_start(self) -> tuple[Route, ...]:
        """The zones forwarded only where the cluster domain or the catch-all go (the cluster DNS,
        the node's resolver: never into the tunnel, which `check` refuses for `.`, SD104): the
        upstreams known to be reachable before any VPN container has started. Every other zone,
        learned from the tunnel or at a fixed private address, is taken to be behind the VPN."""
        domain = self.cluster_domain.rstrip(".") + "."
        outside = {u for r in self.routes if r.zone in (domain, ".") for u in r.upstreams}
        return tuple(r for r in self.routes if r.upstreams and set(r.upstreams) <= outside)

    def searches(self) -> list[str]:
        """The search list ClusterFirst would have given; under None the kubelet adds none."""
        d = self.cluster_domain
        return [f"{self.namespace}.svc.{d}", f"svc.{d}", d]


def zone_name(text: str) -> str:
    try:
        return dns.name.from_text(text.strip().lower()).to_text()
    except dns.exception.DNSException as err:
        raise PlanError(f"{text!r} is not a zone name ({err})") from None


def upstream(text: str, zone: str) -> str:
    """IP or IP:PORT ([v6]:PORT); hostnames are refused, as the resolver refuses them."""
    host, port = text, ""
    if text.startswith("["):
        host, _, port = text[1:].partition("]")
        port = port.removeprefix(":")
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise PlanError(f"zone {zone}: upstream {text!r} is not an IP address (IP, IP:PORT or "
                        f"[IPv6]:PORT) nor {tunnels.listed()}") from None
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise PlanError(f"zone {zone}: {port!r} is not a port")
    if not port or port == "53":
        return str(ip)
    return host_port(str(ip), port)


def parse_zone_flag(text: str) -> Route:
    """`ZONE=UPSTREAM[,UPSTREAM...]`, UPSTREAM an address, or a tunnel's word (`openvpn`, ...)."""
    zone_text, sep, targets = text.partition("=")
    if not sep or not targets:
        raise PlanError(f"--zone {text!r}: expected ZONE=UPSTREAM[,UPSTREAM...] "
                        f"(for example svc.acme.internal=192.168.240.1 or "
                        f"svc.acme.internal={tunnels.default().word})")
    zone = zone_name(zone_text)
    parts = [t.strip() for t in targets.split(",") if t.strip()]
    if len(parts) == 1 and parts[0] in tunnels.KINDS:
        kind = tunnels.of(parts[0])
        source = f"learned at run time from {kind.learned_from} (--zone {zone_text}={kind.word})"
        return Route(zone, (), source, vpn=kind.word)
    for vpn in tunnels.words():
        if vpn in parts:
            raise PlanError(f"--zone {text!r}: `{vpn}` cannot be mixed with addresses")
    return Route(zone, tuple(upstream(p, zone) for p in parts), f"given: --zone {text}")


def routes_from_corefile(model: lenient_corefile.Model) -> list[Route]:
    """Each block's zones with the block's catch-all forward (`forward . ...`) or its tunnel."""
    if model.error is not None:
        raise PlanError(str(model.error))
    out: list[Route] = []
    for block in model.blocks:
        if block.errors:
            raise PlanError(str(block.errors[0][1]))
        vpn = tunnels.default().word
        where, tunnel = block.tunnel_statement, block.tunnel_kind
        if where is not None and tunnel is not None:
            vpn = tunnel.word
            ups: tuple[str, ...] = ()
            source = f"learned at run time from {tunnels.of(vpn).learned_from} ({where.where})"
        else:
            fwd = next((f for f in block.forwards if f.spec.origin == "." or f.spec.origin in block.zones),
                       None)
            if fwd is None and not block.forwards and not block.is_root:
                continue  # answered in the pod (hosts, template...): carried as it is, no upstream
            if fwd is None or fwd.spec.files:
                raise PlanError(f"{block.where}: block {block.name} has no `forward` to an address "
                                "(a resolv.conf target is refused: under dnsPolicy None it is ourselves); "
                                "forward it to an address there (the cluster DNS's, for the catch-all)")
            ups = tuple(upstream(str(u), block.zones[0]) for u in fwd.spec.upstreams)
            source = f"from {fwd.statement.where}"
        out.extend(Route(zone, ups, source, vpn=vpn) for zone in block.zones)
    return out


def build(zone_flags: Sequence[str], corefile_routes: Sequence[Route], cluster: ClusterDNS | None,
          probes: Sequence[str] = (), *, resolver: str = "splitdns", namespace: str = "default",
          cluster_domain: str = "cluster.local", ndots: int = 5,
          management: str = DEFAULT_MANAGEMENT, cluster_wide: bool = False,
          reads_cluster: bool = True, vpn: str | None = None, filter_aaaa: bool = False,
          autopath: bool = True, corefile: CorefileSource | None = None,
          unsafe_sysctls: bool = False) -> Plan:
    """Merge the inputs: flags override a Corefile; the cluster DNS fills the cluster zone and `.`.
    `cluster_wide`: the private zones only, for the cluster's own CoreDNS (no cluster DNS needed).
    `reads_cluster`: whether the command has --cluster-dns-from-cluster, to suggest it."""
    domain = zone_name(cluster_domain)
    by_zone: dict[str, Route] = {r.zone: r for r in corefile_routes}
    if corefile is not None and not cluster_wide:
        _one_source_per_zone(by_zone, zone_flags, probes, corefile.path)
    for flag in zone_flags:
        route = parse_zone_flag(flag)
        if cluster_wide:
            _cluster_wide_zone(route, flag, domain)
        by_zone[route.zone] = route
    if cluster_wide:
        private = [r for r in by_zone.values() if r.zone not in (".", domain)]
        return _checked(Plan(routes=tuple(sorted(private, key=lambda r: r.zone)), resolver="coredns",
                             namespace=namespace, cluster_domain=domain.rstrip("."), ndots=ndots,
                             management=management, corefile=corefile))
    if cluster is not None:
        for zone in (domain, "."):
            by_zone.setdefault(zone, Route(zone, (cluster.address,), cluster.source))
    if "." not in by_zone:
        read = "--cluster-dns-from-cluster (reads kube-system/kube-dns), " if reads_cluster else ""
        raise PlanError(f"no upstream for the catch-all zone `.`: give --cluster-dns IP, {read}"
                        "or --zone .=IP")
    probe_for = dict(_probe_flag(p) for p in probes)
    default_probe = {domain: f"kubernetes.default.svc.{domain.rstrip('.')}"}
    ordered = sorted(by_zone.values(), key=lambda r: (r.zone == ".", r.zone == domain, r.zone))
    routes = tuple(Route(r.zone, r.upstreams, r.source,
                         probe_for.get(r.zone, default_probe.get(r.zone, _apex(r.zone))), r.vpn)
                   for r in ordered)
    vpn = _vpn(routes, vpn)
    if resolver not in RESOLVERS:
        raise PlanError(f"--resolver {resolver!r}: use one of {', '.join(RESOLVERS)}")
    if resolver == "coredns":
        for r in routes:
            if r.tunnel:
                raise PlanError(f"zone {r.zone}: CoreDNS cannot learn the tunnel's DNS at run time; "
                                "give its address (--zone ZONE=IP) or use --resolver splitdns")
    return _checked(Plan(routes=routes, resolver=resolver, namespace=namespace,
                         cluster_domain=domain.rstrip("."), ndots=ndots, management=management, vpn=vpn,
                         filter_aaaa=filter_aaaa, autopath=autopath, corefile=corefile,
                         unsafe_sysctls=unsafe_sysctls))


def _one_source_per_zone(carried: dict[str, Route], zone_flags: Sequence[str], probes: Sequence[str],
                         path: str) -> None:
    """A Corefile is carried into the pod as it is: a flag cannot change a zone it answers."""
    for flag in zone_flags:
        zone = parse_zone_flag(flag).zone
        if zone in carried:
            raise PlanError(f"--zone {flag}: zone {zone} is in {path} already ({carried[zone].source}), "
                            "which is carried into the pod as it is; change it there or leave the flag out")
    for text in probes:
        zone, name = _probe_flag(text)
        if zone in carried:
            raise PlanError(f"--probe {text}: zone {zone} is in {path}, which is carried into the pod as it "
                            f"is; add `ready {{ probe {name} }}` to its block there")


def _vpn(routes: tuple[Route, ...], given: str | None) -> str:
    """The pod's one VPN: the one its tunnel zones name, which --vpn must not contradict."""
    named = {r.vpn for r in routes if r.tunnel}
    if given is not None and given not in tunnels.KINDS:
        raise PlanError(f"--vpn {given!r}: use one of {', '.join(tunnels.words())}")
    if len(named) > 1:
        both = " and ".join(tunnels.of(w).display for w in tunnels.words() if w in named)
        raise PlanError(f"zones learned from both {both}: a pod has one tunnel")
    if given is not None and named and named != {given}:
        zone = next(r.zone for r in routes if r.tunnel)
        raise PlanError(f"--vpn {given}, but zone {zone} is learned from {named.pop()}; write "
                        f"--zone {zone.rstrip('.')}={given}")
    return given or (named.pop() if named else tunnels.default().word)


def _checked(plan: Plan) -> Plan:
    if not 1 <= plan.ndots <= 15:
        raise PlanError(f"--ndots {plan.ndots}: glibc caps ndots at 15; use 1 to 15")
    return plan


def _cluster_wide_zone(route: Route, flag: str, domain: str) -> None:
    """What --cluster-wide refuses, each with its own reason (docs/kubernetes.md, "Cluster-wide")."""
    if route.zone == ".":
        raise PlanError(f"--cluster-wide --zone {flag}: the catch-all `.` is refused: the cluster's CoreDNS "
                        "keeps its own catch-all, and sending every pod's lookups elsewhere is not this "
                        "block's job; give only private zones")
    if route.zone == domain:
        raise PlanError(f"--cluster-wide --zone {flag}: the cluster domain {domain.rstrip('.')} is refused: "
                        "the cluster's CoreDNS answers it itself (its kubernetes plugin); give only "
                        "private zones")
    if route.tunnel:
        raise PlanError(f"--cluster-wide --zone {flag}: the cluster's CoreDNS cannot reach a pod's tunnel, "
                        "so it cannot learn the VPN's DNS; give the zone's address (--zone ZONE=IP), or "
                        "render the in-pod resolver instead (without --cluster-wide)")


def _apex(zone: str) -> str | None:
    # A zone's own apex always exists if the zone does, so asking for it is a harmless probe.
    return None if zone == "." else zone.rstrip(".")


def _probe_flag(text: str) -> tuple[str, str]:
    zone, sep, name = text.partition("=")
    if not sep or not name:
        raise PlanError(f"--probe {text!r}: expected ZONE=NAME (a name in the zone to ask)")
    return zone_name(zone), zone_name(name).rstrip(".") or "."
