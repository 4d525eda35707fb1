"""Addresses, answers and config files of the lab, as data and text.

The reference scenario's names and addresses (10.100.0.10, 192.168.240.1, svc.acme.internal, ...) exist
only inside the lab's namespaces. Each DNS server answers every flagship name, but with its
own address, so an answer alone proves which server it came from (cache or not):

| name                                 | cluster DNS (10.100.0.10) | corp DNS (192.168.240.1) |
|--------------------------------------|---------------------------|--------------------------|
| kubernetes.default.svc.cluster.local | 10.96.0.1                 | 192.168.240.66 (decoy)   |
| db.svc.acme.internal                 | 10.100.0.66 (decoy)       | 192.168.240.10           |
| <anything>.svc.acme.internal         | REFUSED                   | 192.168.240.11           |
| svc.acme.internal.example.net        | 198.51.100.7              | 192.168.240.67 (decoy)   |
| <anything else> in cluster.local or example.net | NXDOMAIN       | REFUSED                  |

Both servers are dnsmasq from Debian, configured on the command line only (no config file
to read: an AppArmor profile, such as Debian's for unbound, cannot get in the way), logging
every query with the client's address to stderr: MASQUERADE shows there.
"""

from __future__ import annotations

import sys
from pathlib import Path

# ---- addresses ---------------------------------------------------------------------------
POD_IP = "10.244.0.2"
NODE_POD_GW = "10.244.0.1"
NODE_SVC_IP = "10.100.0.1"
CLUSTER_DNS_IP = "10.100.0.10"
NODE_VPN_IP = "10.99.0.1"
VPN_SERVER_IP = "10.99.0.2"
VPN_PORT = 1194
VPN_POOL = "10.8.0.0/24"
VPN_SERVER_TUN_IP = "10.8.0.1"
CORP_GW_IP = "192.168.240.254"
CORP_DNS_IP = "192.168.240.1"
CORP_DNS2_IP = "192.168.240.2"   # a second private DNS, for "the tunnel comes back elsewhere"
DB_IP = "192.168.240.10"
DB_PORT = 5432
MANAGEMENT_PORT = 7505

# ---- names and the answers that identify each server ------------------------------------
KUBERNETES_NAME = "kubernetes.default.svc.cluster.local"
DB_NAME = "db.svc.acme.internal"
PRIVATE_ZONE = "svc.acme.internal"
CATCHALL_NAME = "svc.acme.internal.example.net"

KUBERNETES_IP = "10.96.0.1"
CATCHALL_IP = "198.51.100.7"
CLUSTER_DECOY_DB_IP = "10.100.0.66"
CORP_WILDCARD_IP = "192.168.240.11"
CORP_DECOY_KUBERNETES_IP = "192.168.240.66"
CORP_DECOY_CATCHALL_IP = "192.168.240.67"
DB_IP_VIA_DNS2 = "192.168.240.12"  # what the second private DNS says db is: proves who answered

# What the VPN server pushes by default: `dhcp-option DNS 192.168.240.1`.
DHCP_PUSHES = ("route 192.168.240.0 255.255.255.0", f"dhcp-option DNS {CORP_DNS_IP}",
               f"dhcp-option DOMAIN {PRIVATE_ZONE}")
# The same with OpenVPN 2.6's --dns options.
DNS_PUSHES = ("route 192.168.240.0 255.255.255.0", f"dns server 1 address {CORP_DNS_IP}",
              f"dns server 1 resolve-domains {PRIVATE_ZONE}", f"dns search-domains {PRIVATE_ZONE}")

# The reference scenario's Corefile: a catch-all to the cluster DNS, the private zone to the
# DNS behind the tunnel (tests/data/kube/scenario/Corefile says the same). Written to the lab's
# state dir and served only in the pod ns.
SCENARIO_COREFILE = """\
.:53 {
    errors
    cache 30
    forward . 10.100.0.10
}
svc.acme.internal:53 {
    errors
    cache 30
    forward . 192.168.240.1
}
"""

# The same split with the private zone's upstreams learned from the VPN client's management
# interface (the client runs with management-up-down and management-hold).
TUNNEL_COREFILE = """\
.:53 {
    errors
    cache 30
    forward . 10.100.0.10
}
svc.acme.internal:53 {
    errors
    cache 30
    openvpn {
        management 127.0.0.1:7505
    }
}
"""

# What the kubelet writes for the scenario's pod spec (dnsPolicy: None, nameservers: [127.0.0.1],
# options: [ndots: 5], no searches).
SCENARIO_RESOLV_CONF = "nameserver 127.0.0.1\noptions ndots:5\n"

# ---- the resolver under test -------------------------------------------------------------
# >>> RESOLVER SWITCH <<<  "splitdns" runs our resolver; "dnsmasq" is a stand-in with the same
# split (used while `splitdns serve` was being written; handy to tell a lab problem from a
# resolver problem). Override per run with SPLITDNS_LAB_RESOLVER=dnsmasq|splitdns.
DEFAULT_RESOLVER = "splitdns"
RESOLVERS = ("splitdns", "dnsmasq")


def resolver_argv(kind: str, corefile: Path) -> list[str]:
    """The command that runs the pod's resolver on 127.0.0.1:53 (inside the pod ns)."""
    if kind == "splitdns":
        return [sys.executable, "-m", "splitdns", "serve", "-conf", str(corefile)]
    if kind == "dnsmasq":
        # Same routing as SCENARIO_COREFILE: the private zone to the tunnel DNS, all else to
        # the cluster DNS. Not a Corefile reader: it ignores `corefile`.
        return [
            "dnsmasq", "--conf-file=/dev/null", "--keep-in-foreground", "--no-resolv",
            "--no-hosts", "--bind-interfaces", "--listen-address=127.0.0.1", "--port=53",
            "--user=root", "--pid-file=", "--log-facility=-", "--log-queries",
            f"--server=/{PRIVATE_ZONE}/{CORP_DNS_IP}", f"--server={CLUSTER_DNS_IP}",
        ]  # fmt: skip
    raise ValueError(f"unknown resolver {kind!r}; expected one of {', '.join(RESOLVERS)}")


# ---- the DNS servers ---------------------------------------------------------------------
def _dns_server_argv(listen: str, local_ttl: int = 30) -> list[str]:
    """A dnsmasq that only answers from its command line and never forwards anything."""
    return [
        "dnsmasq", "--conf-file=/dev/null", "--keep-in-foreground", "--no-resolv", "--no-hosts",
        "--bind-interfaces", f"--listen-address={listen}", "--user=root", "--pid-file=",
        "--log-facility=-", "--log-queries",
        # dnsmasq's default TTL for its own records is 0, which no cache keeps; CoreDNS gives 5
        # to cluster names, we give 30 so the resolver's `cache 30` really works (0: dnsmasq's own).
        f"--local-ttl={local_ttl}",
    ]  # fmt: skip


def cluster_dns_argv() -> list[str]:
    """The cluster DNS stand-in: authoritative-style cluster.local + the catch-all's names."""
    return [
        *_dns_server_argv(CLUSTER_DNS_IP),
        "--local=/cluster.local/", "--local=/example.net/",  # NXDOMAIN, never forwarded
        f"--host-record={KUBERNETES_NAME},{KUBERNETES_IP}",
        f"--host-record={CATCHALL_NAME},{CATCHALL_IP}",
        f"--host-record={DB_NAME},{CLUSTER_DECOY_DB_IP}",
    ]  # fmt: skip


def corp_dns2_argv() -> list[str]:
    """The second private DNS: same zone, another address for db."""
    return [*_dns_server_argv(CORP_DNS2_IP), f"--local=/{PRIVATE_ZONE}/",
            f"--host-record={DB_NAME},{DB_IP_VIA_DNS2}"]


def corp_dns_argv(local_ttl: int = 30, wildcard: bool = True) -> list[str]:
    """Private-zone DNS behind the VPN: svc.acme.internal plus decoys for the other names.
    wildcard False: another name in the zone is NXDOMAIN instead of CORP_WILDCARD_IP."""
    return [
        *_dns_server_argv(CORP_DNS_IP, local_ttl),
        f"--local=/{PRIVATE_ZONE}/",
        f"--host-record={DB_NAME},{DB_IP}",
        *([f"--address=/{PRIVATE_ZONE}/{CORP_WILDCARD_IP}"] if wildcard else []),  # any other name
        f"--host-record={KUBERNETES_NAME},{CORP_DECOY_KUBERNETES_IP}",
        f"--host-record={CATCHALL_NAME},{CORP_DECOY_CATCHALL_IP}",
    ]  # fmt: skip


def tcp_service_argv(log: Path) -> list[str]:
    """The "database": a TCP listener on 5432 that greets and logs each peer address."""
    script = Path(__file__).with_name("tcpsvc.py")
    return [sys.executable, "-I", str(script), DB_IP, str(DB_PORT), "acme-db", str(log)]


# ---- OpenVPN -----------------------------------------------------------------------------
def openvpn_server_conf(pki_dir: Path, pushes: tuple[str, ...] = DHCP_PUSHES) -> str:
    """The VPN server (runs like `hostNetwork: true`: in the namespace that routes to corp).

    No `explicit-exit-notify`: with it a UDP server needs ~3.5 s to exit on SIGTERM.
    """
    return f"""\
dev tun0
proto udp4
local {VPN_SERVER_IP}
port {VPN_PORT}
topology subnet
server 10.8.0.0 255.255.255.0
ca {pki_dir}/ca.crt
cert {pki_dir}/server.crt
key {pki_dir}/server.key
tls-crypt {pki_dir}/tc.key
dh none
keepalive 2 10
{"".join(f'push "{p}"{chr(10)}' for p in pushes)}verb 3
"""


def openvpn_client_conf(pki_dir: Path, management: bool, extra: str = "") -> str:
    """The pod's VPN sidecar. The management port is plain TCP on the pod's loopback."""
    mgmt = f"management 127.0.0.1 {MANAGEMENT_PORT}\n" if management else ""
    return f"""\
client
dev tun0
proto udp4
remote {VPN_SERVER_IP} {VPN_PORT}
nobind
remote-cert-tls server
ca {pki_dir}/ca.crt
cert {pki_dir}/client.crt
key {pki_dir}/client.key
tls-crypt {pki_dir}/tc.key
connect-retry 1 1
verb 3
{mgmt}{extra}"""
