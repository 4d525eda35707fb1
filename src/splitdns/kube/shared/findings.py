"""Check findings: the table of stable codes (each with its why and its fix) and how findings print.

A code never changes meaning once published; a new problem gets a new code.
Tests: tests/test_check_mistakes.py, tests/test_check.py, tests/test_tunnel_kinds.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from splitdns.errors import cut_long_words

ERROR, WARNING, INFO = "error", "warning", "info"


@dataclass(frozen=True)
class Code:
    code: str
    severity: str
    title: str
    why: str
    fix: str


_TABLE = (
    # Input.
    Code("SD001", ERROR, "file cannot be read or recognised",
         "check cannot vouch for a file it could not read.",
         "pass a Corefile, Kubernetes YAML, an OpenVPN client config (.ovpn/.conf), a wg-quick "
         "config, strongswan.conf, swanctl.conf or ocserv.conf."),
    Code("SD002", ERROR, "YAML does not parse",
         "kubectl would refuse the file before anything reaches the cluster.",
         "fix the YAML syntax at the line shown."),
    # Corefile.
    Code("SD100", ERROR, "the resolver would refuse this Corefile",
         "the DNS container exits at start (splitdns serve exits 2) and every container of the pod "
         "loses name resolution.",
         "correct the line named in the message."),
    Code("SD101", ERROR, "forward target is this resolver itself",
         "under dnsPolicy: None the pod's resolv.conf names only 127.0.0.1, so forwarding to it (or to "
         "127.0.0.1:53) sends each query back to the resolver until it times out.",
         "forward to a real upstream: the kube-dns Service IP "
         "(kubectl -n kube-system get svc kube-dns -o jsonpath='{.spec.clusterIP}') or the node's resolver."),
    Code("SD102", WARNING, "forward to a resolv.conf whose content depends on the pod",
         "the file is read once at start and holds whatever the pod's dnsPolicy put there; under "
         "dnsPolicy: None it is 127.0.0.1, the resolver itself.",
         "forward to an explicit address (the kube-dns Service IP); `splitdns render` reads it for you."),
    Code("SD103", WARNING, "no catch-all block",
         "a name no zone owns gets REFUSED; when this resolver is the pod's only nameserver, every "
         "public name and every zone you forgot fails. Fine for a stub-only server that another "
         "resolver asks only for its zones, or a piece imported into a Corefile that has the `.` block.",
         "add a `.:53 { forward . CLUSTER_DNS_IP }` block as the catch-all (or import this file into one)."),
    Code("SD104", ERROR, "catch-all forwarded into the tunnel",
         "every name the pod looks up, the VPN server's own name included, then depends on the tunnel: "
         "the VPN cannot reconnect after a drop (OpenVPN#281) and cluster names leak into it.",
         "forward `.` to the cluster DNS and give the tunnel only its private zone."),
    Code("SD105", ERROR, "root zone forwarded into a tunnel in a cluster-wide Corefile",
         "the cluster's CoreDNS then sends every pod's public lookups into one workload's tunnel; the "
         "day the tunnel drops the whole cluster stops resolving.",
         "restrict the cluster-wide block to the private zone (`splitdns render --cluster-wide`), "
         "never `.`."),
    Code("SD106", ERROR, "child forward after its parent in one block",
         "several `forward` lines in a block are tried in file order and the first whose FROM covers the "
         "name wins, so the child line never gets a query.",
         "move the child `forward` above its parent, or give the child zone its own server block."),
    Code("SD107", WARNING, "zone that looks like a suffix but is not on a label boundary",
         "zones match whole labels from the right: acme.internal covers db.acme.internal but not "
         "notacme.internal, and `*` is a literal label, not a wildcard.",
         "name each zone exactly; a zone already covers every name below it."),
    Code("SD108", WARNING, "forward FROM outside the block's zones",
         "a block only receives names of its own zones, so a forward for another zone never matches.",
         "put the zone in a server block of its own, or make FROM a name inside the block's zones."),
    Code("SD109", ERROR, "bind on some blocks of a port but not others",
         "blocks of one port without bind and with bind make listeners that contend for the same packets "
         "(CoreDNS) or are refused at start (splitdns).",
         "give every block of a port the same bind, or none."),
    Code("SD110", ERROR, "directive the chosen resolver does not support",
         "the resolver refuses to start on an unknown directive, so the pod loses DNS.",
         "remove the directive, or choose the resolver that has it (--resolver splitdns|coredns)."),
    Code("SD111", ERROR, "probe on an endpoint the Corefile does not serve",
         "the probe fails forever: the pod never becomes ready, or a native sidecar never starts the app.",
         "add `health` (GET /health on :8080) and `ready` (GET /ready on :8181) to the Corefile, or "
         "point the probe at what it serves."),
    Code("SD112", ERROR, "directive neither splitdns nor CoreDNS knows",
         "the resolver refuses to start on an unknown directive, so the pod loses DNS; no resolver "
         "knows this one, so it is most likely misspelt.",
         "correct the spelling (the message names the nearest known directive) or remove the line."),
    Code("SD113", WARNING, "environment variable not set where check runs",
         "`{$VAR}` is read from the environment of `splitdns serve` when it starts, in the pod; "
         "there an unset variable is an error and the DNS container exits.",
         "set the variable in the DNS container's env (or envFrom); check cannot see the pod's value."),
    Code("SD114", WARNING, "tunnel zone not bound to its tunnel",
         "with `bind_to_tunnel off` the zone's queries follow the routing table: when the tunnel's "
         "route goes and another route reaches its DNS (the pod's default route), private names leave "
         "by the pod's eth0, in clear.",
         "remove `bind_to_tunnel off` (binding needs no capability on Linux 5.7 and later); if the "
         "resolver cannot learn the tunnel's interface, name it with `interface NAME`."),
    Code("SD115", WARNING, "k8s_schema stays off",
         "the names the Kubernetes schema rules out then go to the cluster DNS, every try of every "
         "search walk; `rewrite`, `template` or `hosts` in the block may make names the schema does "
         "not have, and a guard for another cluster domain than the pod's would deny real names.",
         "move `rewrite`, `template` and `hosts` to a block of their own zone, or name the pod's "
         "cluster domain (k8s_schema cluster.local)."),
    Code("SD116", WARNING, "zone name one typing slip away from the cluster domain or another zone",
         "a zone matches names letter for letter: `cluster.lcoal` or `svc.acme.internl` owns no name "
         "anyone asks, and the names meant fall to another block (often the catch-all, which sends "
         "them where they do not resolve).",
         "spell the zone as meant (the message names the one it is a slip of), or keep it if it is "
         "really a zone of its own."),
    Code("SD117", ERROR, "catch-all block whose forwards cover only some zones",
         "the `.` block answers every name no other block owns; a name no `forward` FROM covers (and "
         "no local answer takes) gets SERVFAIL: every public name.",
         "add `forward . UPSTREAM` after the narrower lines."),
    # Pod spec.
    Code("SD201", ERROR, "dnsPolicy: None without the in-pod resolver as nameserver",
         "the app's resolv.conf then bypasses the in-pod resolver (or has no nameserver at all, which "
         "the API server rejects).",
         "set dnsConfig.nameservers to exactly [127.0.0.1]."),
    Code("SD202", WARNING, "several nameservers in dnsConfig",
         "resolv.conf cannot express zones: glibc tries the next server only after a timeout and musl "
         "asks all of them at once, so some names skip the split.",
         "keep the single nameserver 127.0.0.1 and let the resolver own the split."),
    Code("SD203", WARNING, "dnsPolicy: None without a search list",
         "under None the kubelet adds no search list, so short names (my-svc, my-svc.my-ns) stop "
         "resolving.",
         "add dnsConfig.searches: [NAMESPACE.svc.cluster.local, svc.cluster.local, cluster.local]."),
    Code("SD204", ERROR, "in-pod resolver but the kubelet still writes resolv.conf",
         "under dnsPolicy ClusterFirst (the default) the kubelet regenerates resolv.conf on every "
         "container start, so a hand-edited file or a resolver on 127.0.0.1 is silently bypassed.",
         "set dnsPolicy: None with dnsConfig.nameservers [127.0.0.1] instead of editing resolv.conf."),
    Code("SD205", ERROR, "DNS container without a readiness probe",
         "every container of the pod depends on it, yet the pod is reported ready while it does not "
         "answer.",
         "add readinessProbe: httpGet /ready on port 8181 (the `ready` directive)."),
    Code("SD206", WARNING, "DNS sidecar does not hold the app until it answers",
         "a native sidecar without a startupProbe counts as started as soon as its process runs, and a "
         "classic sidecar never holds the app, so the app's first lookups fail.",
         "make the DNS container a native sidecar (initContainers, restartPolicy: Always) with a "
         "startupProbe on /ready."),
    Code("SD207", ERROR, "port 53 without a way to bind it",
         "a non-root process cannot bind a port below net.ipv4.ip_unprivileged_port_start (1024), and "
         "capabilities.add NET_BIND_SERVICE gives a non-root container nothing (kubernetes#56374).",
         "add the safe pod sysctl net.ipv4.ip_unprivileged_port_start=53 in "
         "spec.securityContext.sysctls."),
    Code("SD208", ERROR, "probe sent to the node's loopback",
         "the kubelet runs httpGet probes from the node, so host 127.0.0.1 is the node itself, not "
         "the pod.",
         "drop httpGet.host (the pod IP is the default) and let health/ready listen on all addresses."),
    Code("SD209", ERROR, "DNS sidecar's startup probe waits for a zone only a later container brings up",
         "native sidecars start one after the other, each once the one before it passed its startupProbe; "
         "the resolver's probe waits for a zone behind the VPN, whose container is listed after it and so "
         "never starts: the probe fails until the kubelet restarts the resolver, forever.",
         "let the resolver's startupProbe wait only for the zones the cluster DNS answers "
         "(/ready?zone=cluster.local&zone=., what `splitdns render` writes), and hold the app until the "
         "tunnel zone answers with the VPN container's own startupProbe (httpGet /ready on port 8181)."),
    # OpenVPN.
    Code("SD301", ERROR, "VPN remote resolves only through the tunnel",
         "the VPN client must resolve its server before the tunnel exists (and again on reconnect), "
         "but the in-pod resolver sends that name into the tunnel.",
         "give `remote` as an IP address, or make sure its zone is forwarded to a non-tunnel upstream."),
    # WireGuard.
    Code("SD302", ERROR, "WireGuard AllowedIPs take the cluster's addresses",
         "wg-quick routes AllowedIPs into the tunnel: the cluster DNS, Services and pods behind it are "
         "then asked through the VPN, and cluster names and Services stop working.",
         "list only the networks behind the VPN in AllowedIPs (the message computes the list without "
         "the cluster's ranges it knows of)."),
    Code("SD303", ERROR, "WireGuard DNS = names the in-pod resolver",
         "the `wireguard` block forwards the tunnel zone to the servers of the DNS = line: 127.0.0.1 is "
         "that resolver itself, so every query of the zone loops until it times out.",
         "name the DNS server behind the tunnel in DNS = (the resolver is the pod's nameserver already)."),
    Code("SD304", ERROR, "WireGuard Endpoint resolves only through the tunnel",
         "wg-quick resolves Endpoint before the tunnel exists, and WireGuard needs it again to roam; "
         "the in-pod resolver sends that name into the tunnel.",
         "give Endpoint as IP:PORT, or make sure its zone is forwarded to a non-tunnel upstream."),
    Code("SD305", WARNING, "WireGuard peer without PersistentKeepalive",
         "WireGuard sends nothing while idle: behind NAT the mapping expires and the peer cannot reach "
         "the pod; the last handshake ages and the resolver reads the tunnel as down until traffic "
         "comes.",
         "add PersistentKeepalive = 25 to the [Peer]."),
    Code("SD306", ERROR, "WireGuard config without a DNS = address for a `wireguard` block",
         "the block forwards to the servers of the DNS = line; without one, wg-quick hands nothing to "
         "resolvconf and the tunnel zone never answers (a rendered pod never gets past the WireGuard "
         "sidecar's startup probe).",
         "add `DNS = ADDRESS` (the DNS server behind the tunnel, with the zone's names after it) to the "
         "[Interface]."),
    Code("SD307", INFO, "WireGuard tunnel without IPv6",
         "the [Interface] has no IPv6 address, so no IPv6 address behind the tunnel is reachable; "
         "the tunnel zone's AAAA answers only make clients try addresses that fail, and its AAAA "
         "queries are half the tunnel's DNS traffic.",
         "add `filter_aaaa` to the tunnel zone's block (`splitdns render --filter-aaaa`): AAAA "
         "answered NODATA there, every other zone untouched."),
    Code("SD308", ERROR, "wg-quick would refuse this config",
         "the WireGuard container exits at start (wg-quick up fails), so the tunnel never comes up and "
         "the tunnel zone never answers.",
         "correct the line named in the message (the config starts with [Interface]; keys are 44 "
         "characters of base64; prefixes fit the address; Endpoint is HOST:PORT)."),
    # strongSwan.
    Code("SD309", ERROR, "strongSwan resolve plugin writes elsewhere than the resolver reads",
         "charon's resolve plugin writes the DNS servers an IKE SA received to "
         "charon.plugins.resolve.file, /etc/resolv.conf unless set: in a pod that is the file every "
         "container shares (charon fails on it with \"deleting /etc/resolv.conf failed: Resource busy\" "
         "or takes the pod's name resolution from the resolver), and the `strongswan` block, which "
         "follows its own file, never learns the tunnel's DNS.",
         "set charon.plugins.resolve.file to the file the `strongswan` block reads "
         "(/run/splitdns/resolv.conf, in the volume shared with the resolver) and resolvconf's path "
         "to a program that does not exist (resolvconf { path = /nonexistent })."),
    Code("SD310", ERROR, "strongSwan remote traffic selectors take the cluster's addresses",
         "charon routes remote_ts into the tunnel: the cluster DNS, Services and pods behind it are "
         "then asked through the gateway, and cluster names and Services stop working.",
         "list only the networks behind the gateway in the children's remote_ts (without the "
         "cluster DNS and its Service range)."),
    Code("SD311", ERROR, "strongSwan brings no DNS for a `strongswan` block",
         "the block forwards to the DNS servers the resolve plugin writes; charon asks the gateway "
         "for DNS only with a virtual IP (a connection's `vips`), and writes nothing with the "
         "plugin off, so the tunnel zone never answers (a rendered pod never gets past the "
         "strongSwan sidecar's startup probe).",
         "add `vips = 0.0.0.0` (and `::` for IPv6) to the connection, have the gateway hand DNS "
         "with it (its pool's `dns`), and keep the resolve plugin loaded."),
    # OpenConnect.
    Code("SD312", ERROR, "openconnect runs the stock vpnc-script",
         "without our --script, openconnect's vpnc-script writes the pushed DNS to /etc/resolv.conf "
         "(or hands it to resolvconf or resolvectl): in a pod that file is every container's, so it "
         "takes name resolution from the in-pod resolver, and the `openconnect` block never learns "
         "the tunnel's DNS.",
         "run openconnect with --script /splitdns/bin/vpnc-script, written by an init container of "
         "the splitdns image (`splitdns openconnect-hook /splitdns/bin`, what `splitdns inject "
         "--vpn openconnect` adds)."),
    Code("SD313", ERROR, "OpenConnect routes take the cluster's addresses",
         "the gateway's `route =` lines are the split-include routes openconnect's vpnc-script "
         "installs (none, or `default`, is a full tunnel): the cluster DNS, Services and pods "
         "behind them are then asked through the VPN, and cluster names and Services stop working.",
         "list only the networks behind the gateway in `route =`, or add `no-route =` for the "
         "cluster DNS and its Service range."),
    Code("SD314", ERROR, "OpenConnect gateway pushes no DNS for an `openconnect` block",
         "the block forwards to the DNS servers the gateway pushes (ocserv's `dns =`); without one, "
         "the hook records none and the tunnel zone never answers (a rendered pod never gets past "
         "the OpenConnect sidecar's startup probe).",
         "add `dns = ADDRESS` (the DNS server behind the gateway) to ocserv.conf, with `split-dns =` "
         "for the zone's domains."),
    # Manifests.
    Code("SD401", ERROR, "manifest does not match the Kubernetes schema",
         "the API server of that version rejects it (strict: unknown fields such as typos fail too).",
         "fix the field named in the message, or pick the right --kube-version."),
    Code("SD402", ERROR, "native sidecar on a Kubernetes version without it",
         "initContainers[].restartPolicy: Always is on by default only from Kubernetes 1.29; before, "
         "the DNS container blocks the pod's start or is rejected.",
         "use --sidecar classic for clusters older than 1.29, or upgrade."),
    Code("SD403", INFO, "kind not validated: no schema for it here",
         "--kube-version validates the core API's kinds and the custom resources splitdns renders "
         "(cert-manager's Issuer and Certificate); another custom resource is checked by the API "
         "server against its CRD, which check does not have.",
         "nothing to fix here; `kubectl apply --dry-run=server` validates it against the cluster's CRD."),
    Code("SD404", WARNING, "unsafe sysctl a stock kubelet refuses",
         "only Kubernetes' safe sysctls are allowed by default; a pod that sets another is rejected by "
         "the kubelet (SysctlForbidden) and never starts, unless every node's kubelet allows it.",
         "drop the sysctl (for WireGuard: an AllowedIPs that leaves the cluster out needs no "
         "src_valid_mark), or run the kubelets with --allowed-unsafe-sysctls=NAME."),
)

CODES: dict[str, Code] = {c.code: c for c in _TABLE}


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    code: str
    message: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", cut_long_words(self.message))  # frozen: once, here

    @property
    def severity(self) -> str:
        return CODES[self.code].severity

    def text(self, details: bool = True) -> str:
        head = f"{self.file}:{self.line}: {self.code} {self.severity} {self.message}"
        if not details:
            return head
        info = CODES[self.code]
        return f"{head}\n    why: {info.why}\n    fix: {info.fix}"

    def as_dict(self) -> dict[str, object]:
        info = CODES[self.code]
        return {"file": self.file, "line": self.line, "code": self.code, "severity": self.severity,
                "message": self.message, "why": info.why, "fix": info.fix}


def ordered(findings: Iterable[Finding]) -> list[Finding]:
    """Sorted by file, line and code, duplicates dropped: the output must not depend on check order."""
    return sorted(set(findings), key=lambda f: (f.file, f.line, f.code, f.message))


def to_json(findings: Iterable[Finding]) -> str:
    return json.dumps([f.as_dict() for f in findings], indent=2) + "\n"
