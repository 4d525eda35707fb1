"""The verification procedure as a decision: observations in, one verdict out. Pure.

The order of the rules is the order a tired engineer should look in: is the resolver there
at all; does the pod even use it; is the tunnel down (the resolver says so); does a zone fail
to resolve (and does its upstream answer when asked directly); did it work before the pod
was replaced and not after (then the Corefile is right and the pod spec is not); do names
resolve while connections time out (then stop debugging DNS: it is routing).
Tests: tests/test_diagnosis.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

OK, RESOLVER_DOWN, NAMING, TUNNEL_DOWN, ROUTING, POD_SPEC, SERVICE_DOWN = (
    "ok", "resolver-down", "naming", "tunnel-down", "routing", "pod-spec", "service-down")

EXIT_CODES = {OK: 0, RESOLVER_DOWN: 2, NAMING: 3, TUNNEL_DOWN: 4, ROUTING: 5, POD_SPEC: 6, SERVICE_DOWN: 7}

ROUTING_HINTS = (
    "Names resolve, so stop debugging DNS: a tunnel that carries the query but not the reply "
    "times out exactly like a resolver that never got it.",
    "Check the return path: remote hosts need a route back to the VPN client pool (e.g. "
    "10.8.0.0/24), or the VPN server must translate it (iptables -t nat -A POSTROUTING -s "
    "10.8.0.0/24 -o <lan> -j MASQUERADE) and forward it (FORWARD accept, net.ipv4.ip_forward=1).",
    "If the VPN server (OpenVPN or WireGuard) runs as a pod, run it with hostNetwork: true so those "
    "rules take effect in the node's namespace.",
    "Just fixed it and it still fails? conntrack entries made while NAT was missing live 30 s "
    "(UDP): conntrack -D -s 10.8.0.0/24, or wait.",
)


# What a direct query to a zone's upstream got when no rcode came back (checks.ask says which).
NO_ANSWER, REFUSED = "no answer", "refused"

UNREACHABLE_HINTS = (
    "The resolver's queries for this zone leave through the tunnel and no reply comes back; asked "
    "directly from here, its DNS server does not answer either. Names are not the problem: the way "
    "to that server and back is.",
    *ROUTING_HINTS[1:],
)


@dataclass(frozen=True)
class NameCheck:
    name: str
    rcode: str | None            # None: no answer at all
    answers: tuple[str, ...] = ()
    ede: str = ""                # Extended DNS Error text from the resolver
    zone: str | None = None      # the block that owns the name, per the Corefile
    upstreams: tuple[str, ...] = ()
    direct: str | None = None    # rcode the owning upstream gave when asked directly, "no answer"

    @property
    def resolved(self) -> bool:
        return self.rcode == "NOERROR" and bool(self.answers)


@dataclass(frozen=True)
class TcpCheck:
    target: str                  # host:port as given
    address: str | None          # what the host resolved to
    outcome: str                 # "connected", "refused", "timeout", "unresolved", or an error


@dataclass(frozen=True)
class Observation:
    phase: str                   # "local", "before replacement", "after replacement"
    resolv_conf: str
    resolver_answers: bool
    names: tuple[NameCheck, ...] = ()
    tcp: tuple[TcpCheck, ...] = ()
    server: str = "127.0.0.1"    # where the resolver was asked
    port: int = 53

    @property
    def nameservers(self) -> list[str]:
        return [line.split()[1] for line in self.resolv_conf.splitlines()
                if line.split()[:1] == ["nameserver"] and len(line.split()) > 1]


@dataclass(frozen=True)
class Verdict:
    code: str
    title: str
    reason: str
    hints: tuple[str, ...] = field(default=())

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.code]


def diagnose(observations: list[Observation]) -> Verdict:
    first, last = observations[0], observations[-1]
    if len(observations) > 1 and _healthy_names(first) and not _healthy_names(last):
        return Verdict(POD_SPEC, "The Corefile is right but the pod spec is not",
                       f"names resolved {first.phase} and not {last.phase}: what worked lived only "
                       "in the running container. " + _pod_spec_detail(last),
                       ("Set dnsPolicy: None with dnsConfig.nameservers [127.0.0.1] (and the search "
                        "list) in the pod template, not by editing /etc/resolv.conf.",))
    for obs in observations:
        verdict = _one(obs)
        if verdict.code != OK:
            return verdict
    return _one(last)


def _one(obs: Observation) -> Verdict:
    if not obs.resolver_answers:
        return Verdict(RESOLVER_DOWN, f"The resolver is not answering on {obs.server}:{obs.port}",
                       f"{obs.phase}: no reply from {obs.server}:{obs.port}. Is the DNS container "
                       f"running, and did it bind {obs.server} port {obs.port} (its log says why not)?",
                       ("kubectl logs <pod> -c dns", "Port 53 as non-root needs the "
                        "net.ipv4.ip_unprivileged_port_start=53 pod sysctl."))
    if obs.nameservers != ["127.0.0.1"]:
        return Verdict(POD_SPEC, "The pod does not use the resolver", f"{obs.phase}: "
                       + _pod_spec_detail(obs), ("Set dnsPolicy: None with dnsConfig.nameservers "
                                                 "[127.0.0.1] in the pod template.",))
    for check in obs.names:
        if "tunnel is down" in check.ede:
            return Verdict(TUNNEL_DOWN, f"The tunnel is down: zone {check.zone or '?'} cannot answer",
                           f"{check.name}: {check.rcode}, the resolver says: {check.ede}",
                           ("kubectl logs <pod> -c vpn", "The resolver answers this zone at once "
                            "while the tunnel is down; other zones are not affected."))
    for check in obs.names:
        if not check.resolved and check.direct == NO_ANSWER:
            return Verdict(ROUTING, f"The DNS server of zone {check.zone} does not answer and cannot be "
                                    "reached: this is routing", _unreachable_detail(check), UNREACHABLE_HINTS)
        if not check.resolved and check.direct == REFUSED:
            return Verdict(SERVICE_DOWN, f"The DNS server of zone {check.zone} is reachable, but nothing "
                                         "listens on its DNS port", _unreachable_detail(check), ())
    for check in obs.names:
        if not check.resolved:
            where = f"in zone {check.zone}" if check.zone else f"for {check.name}"
            return Verdict(NAMING, f"Naming problem {where}",
                           _naming_detail(check),
                           ("splitdns explain " + check.name + " -conf <Corefile>",))
    for tcp in obs.tcp:
        if tcp.outcome == "unresolved":
            return Verdict(NAMING, f"Naming problem for {tcp.target}",
                           f"{tcp.target}: the host does not resolve through 127.0.0.1", ())
        if tcp.outcome == "timeout":
            return Verdict(ROUTING, "Names resolve, connections fail: this is routing",
                           f"{tcp.target} ({tcp.address}) resolved but the TCP connection timed out",
                           ROUTING_HINTS)
        if tcp.outcome == "refused":
            return Verdict(SERVICE_DOWN, "Names resolve and the network answers, but nothing listens",
                           f"{tcp.target} ({tcp.address}) refused the connection: packets get there "
                           "and back, the service is not listening on that port", ())
        if tcp.outcome != "connected":
            return Verdict(ROUTING, "Names resolve, connections fail", f"{tcp.target}: {tcp.outcome}",
                           ROUTING_HINTS)
    names = ", ".join(c.name for c in obs.names) or "no name asked"
    return Verdict(OK, "All good", f"{obs.phase}: {names} resolved through 127.0.0.1"
                   + (f"; {len(obs.tcp)} TCP path(s) connect" if obs.tcp else ""))


def _healthy_names(obs: Observation) -> bool:
    return obs.resolver_answers and obs.nameservers == ["127.0.0.1"] and all(c.resolved for c in obs.names)


def _pod_spec_detail(obs: Observation) -> str:
    if not obs.resolver_answers:
        return "the resolver does not answer on 127.0.0.1 there."
    servers = obs.nameservers
    if servers == ["127.0.0.1"]:
        return "its resolv.conf names 127.0.0.1 but names do not resolve."
    if not servers:
        return "its resolv.conf names no nameserver."
    return (f"its resolv.conf names {', '.join(servers)} instead of only 127.0.0.1: the kubelet "
            "wrote it (dnsPolicy ClusterFirst), so queries bypass the split resolver.")


def _unreachable_detail(check: NameCheck) -> str:
    got = "no answer" if check.rcode is None else check.rcode
    parts = [f"{check.name}: {got} through the resolver"]
    if check.ede:
        parts.append(f"the resolver says: {check.ede}")
    ups = ", ".join(check.upstreams)
    if check.direct == REFUSED:
        parts.append(f"asked directly, {ups} refuses (port unreachable): the host is there, its DNS "
                     "server is not running or not listening on that address and port")
    else:
        parts.append(f"asked directly, {ups} does not answer: the zone's DNS server does not answer and "
                     "cannot be reached from here")
    return "; ".join(parts)


def _naming_detail(check: NameCheck) -> str:
    got = "no answer" if check.rcode is None else (
        f"{check.rcode} with no address" if check.rcode == "NOERROR" else check.rcode)
    parts = [f"{check.name}: {got} through 127.0.0.1"]
    if check.zone is not None:
        ups = ", ".join(check.upstreams) or "no upstream"
        parts.append(f"owned by block {check.zone}, forwarded to {ups}")
    if check.ede:
        parts.append(f"the resolver says: {check.ede}")
    if check.direct is not None:
        if check.direct == "NOERROR":
            parts.append("asked directly, the upstream answers: look at the resolver (its log)")
        else:
            parts.append(f"asked directly, the upstream gives {check.direct}: the DNS server answers, "
                         "but not with that name")
    return "; ".join(parts)
