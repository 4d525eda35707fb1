"""`splitdns demo`: the resolver with two small built-in upstreams, all on loopback.

The layout is a pod's with a VPN sidecar: a catch-all block forwarding to a stand-in for the cluster DNS,
and a `svc.acme.internal` block forwarding to a stand-in for the DNS server behind the
tunnel. Every answer says who gave it, so a newcomer can see the split with `dig`.
Tests: tests/test_demo.py.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

CLUSTER_ADDR = "127.0.100.10"   # plays kube-dns (10.100.0.10 in the README's example)
TUNNEL_ADDR = "127.0.240.1"     # plays the DNS pushed by the VPN (192.168.240.1 there)

CLUSTER_RECORDS = {
    "kubernetes.default.svc.cluster.local.": "10.96.0.1",
    "kube-dns.kube-system.svc.cluster.local.": "10.96.0.10",
    "svc.acme.internal.example.net.": "192.0.2.80",
}
TUNNEL_RECORDS = {
    "db.svc.acme.internal.": "192.168.240.10",
    "svc.acme.internal.": "192.168.240.1",
}

COREFILE = """\
# A pod's layout, on loopback: a catch-all (the cluster DNS) and the tunnel zone.
.:{port} {{
    errors
    cache 30
    forward . {cluster}
}}
svc.acme.internal:{port} {{
    errors
    cache 30
    forward . {tunnel}
}}
"""


@dataclass
class StaticUpstream:
    """A tiny authoritative server: A records from a table, TXT says who answered."""

    who: str
    records: dict[str, str]
    soa_zone: str
    sock: socket.socket | None = None
    port: int = 0

    def answer(self, data: bytes) -> bytes | None:
        try:
            query = dns.message.from_wire(data)
        except dns.exception.DNSException:
            return None
        if not query.question:
            return None
        reply = dns.message.make_response(query)
        reply.flags |= dns.flags.AA | dns.flags.RA
        question = query.question[0]
        name = question.name.to_text().lower()
        if question.rdtype == dns.rdatatype.TXT:
            reply.answer.append(dns.rrset.from_text(question.name, 30, "IN", "TXT",
                                                    f'"answered by {self.who}"'))
        elif name in self.records and question.rdtype == dns.rdatatype.A:
            reply.answer.append(dns.rrset.from_text(question.name, 30, "IN", "A",
                                                    self.records[name]))
        else:
            if name not in self.records:
                reply.set_rcode(dns.rcode.NXDOMAIN)
            reply.authority.append(dns.rrset.from_text(
                self.soa_zone, 30, "IN", "SOA", f"ns.{self.soa_zone} hostmaster.{self.soa_zone} "
                "1 3600 600 86400 30"))
        return reply.to_wire()

    def start(self, host: str) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, 0))
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]
        asyncio.get_running_loop().add_reader(self.sock.fileno(), self._readable)

    def _readable(self) -> None:
        assert self.sock is not None
        for _ in range(64):
            try:
                data, addr = self.sock.recvfrom(4096)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                continue
            reply = self.answer(data)
            if reply is not None:
                self.sock.sendto(reply, addr)


def corefile(port: int, cluster: StaticUpstream, tunnel: StaticUpstream) -> str:
    return COREFILE.format(port=port, cluster=f"{CLUSTER_ADDR}:{cluster.port}",
                           tunnel=f"{TUNNEL_ADDR}:{tunnel.port}")


def upstreams() -> tuple[StaticUpstream, StaticUpstream]:
    return (StaticUpstream("the cluster DNS stand-in (catch-all)", CLUSTER_RECORDS, "cluster.local."),
            StaticUpstream("the tunnel DNS stand-in (svc.acme.internal)", TUNNEL_RECORDS,
                           "svc.acme.internal."))


# What the demo asks itself once it is up, with what each one shows.
EXAMPLES = (
    ("kubernetes.default.svc.cluster.local", "catch-all block -> cluster DNS stand-in"),
    ("db.svc.acme.internal", "svc.acme.internal block -> tunnel DNS stand-in"),
    ("svc.acme.internal.example.net", "NOT in svc.acme.internal: zones end on whole labels"),
)


def ask_examples(port: int, timeout: float = 2.0) -> list[str]:
    """Ask the running demo resolver (127.0.0.1:port) the example names, as dig would: the address
    and which upstream answered (its TXT record says), one line per name. Blocking: run it in a
    thread. Three names, two queries each, each bounded by `timeout`."""
    lines = []
    for name, meaning in EXAMPLES:
        address = _ask(name, dns.rdatatype.A, port, timeout)
        who = _ask(name, dns.rdatatype.TXT, port, timeout)
        lines.append(f"  {name:<38} -> {address:<15} {who}")
        lines.append(f"  {'':<38}    ({meaning})")
    return lines


def _ask(name: str, rdtype: dns.rdatatype.RdataType, port: int, timeout: float) -> str:
    import dns.query

    try:
        reply = dns.query.udp(dns.message.make_query(name, rdtype), "127.0.0.1", timeout=timeout, port=port)
    except (dns.exception.DNSException, OSError) as err:
        return f"no answer ({'timed out' if isinstance(err, dns.exception.Timeout) else err})"
    if reply.rcode() != dns.rcode.NOERROR or not reply.answer:
        return dns.rcode.to_text(reply.rcode())
    rdata = reply.answer[0][0]
    if rdtype == dns.rdatatype.TXT:
        return b"".join(rdata.strings).decode()
    return str(rdata)


def instructions(port: int) -> str:
    p = "" if port == 53 else f" -p {port}"
    return f"""\
splitdns demo is answering on 127.0.0.1:{port}. Try it yourself from another terminal, with dig
(Debian and Ubuntu: apt-get install bind9-dnsutils):

  dig @127.0.0.1{p} kubernetes.default.svc.cluster.local     # catch-all block -> cluster DNS stand-in
  dig @127.0.0.1{p} db.svc.acme.internal                      # svc.acme.internal block -> tunnel stand-in
  dig @127.0.0.1{p} svc.acme.internal.example.net             # NOT in svc.acme.internal: zones end on labels
  dig @127.0.0.1{p} TXT db.svc.acme.internal +short           # says which upstream answered
  dig @127.0.0.1{p} db.svc.acme.internal +tcp                 # the same over TCP

Run it twice within 30 s and watch the TTL count down: the second answer came from the cache.
Press Ctrl-C to stop."""

