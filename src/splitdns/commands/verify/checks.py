"""The I/O of `splitdns verify`: ask names, connect TCP, and print what was seen the way dig does.

Tests: tests/test_verify.py.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import dns.edns
import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype

from splitdns import config
from splitdns.codec import wire
from splitdns.commands.verify.diagnosis import NO_ANSWER, REFUSED, NameCheck, TcpCheck
from splitdns.core.routing import Router
from splitdns.core.zone import Zone

TIMEOUT = 2.0
# Through the resolver, wait longer than its own deadline for a miss (CoreDNS's 5 s, which serve
# keeps): its SERVFAIL, with the reason in an EDE, says more than our own timeout would.
RESOLVER_TIMEOUT = 6.0


@dataclass(frozen=True)
class Asked:
    """One query and its dig-style transcript, for the ticket."""

    rcode: str | None
    answers: tuple[str, ...]
    ede: str
    transcript: str
    failure: str = NO_ANSWER  # without an rcode: NO_ANSWER (timed out), REFUSED, or the error

    @property
    def outcome(self) -> str:
        return self.rcode or self.failure


def ask(name: str, server: str, port: int, qtype: str = "A", timeout: float = TIMEOUT) -> Asked:
    query = dns.message.make_query(name, qtype, use_edns=0)
    started, when = time.perf_counter(), time.strftime("%a %b %d %H:%M:%S %Z %Y")
    header = f"; <<>> splitdns verify <<>> @{server} -p {port} {name} {qtype}\n"
    try:
        reply = _udp(query, server, port, timeout)
        proto = "UDP"
        if reply.flags & dns.flags.TC:
            reply = dns.query.tcp(query, server, port=port, timeout=timeout)
            proto = "TCP"
    except (dns.exception.Timeout, OSError) as err:
        timed_out = isinstance(err, dns.exception.Timeout | TimeoutError)
        why = "timed out" if timed_out else (getattr(err, "strerror", None) or str(err))
        text = f"{header};; communications error to {server}#{port}: {why}\n;; no servers could be reached\n"
        # A refusal (ICMP port unreachable) proves the way there and back works; a timeout does not.
        failure = REFUSED if isinstance(err, ConnectionRefusedError) else NO_ANSWER if timed_out else why
        return Asked(None, (), "", text, failure)
    except dns.exception.DNSException as err:
        return Asked(None, (), "", f"{header};; malformed reply from {server}#{port}: {err}\n")
    elapsed = time.perf_counter() - started
    answers = tuple(rr.to_text() for rrset in reply.answer for rr in rrset
                    if rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA))
    ede = "; ".join(o.text or "" for o in reply.options if isinstance(o, dns.edns.EDEOption))
    return Asked(dns.rcode.to_text(reply.rcode()), answers, ede,
                 header + dig_text(reply, server, port, proto, elapsed, when))


def _udp(query: dns.message.Message, server: str, port: int, timeout: float) -> dns.message.Message:
    """One exchange on a connected socket, so that a port nobody listens on is a refusal at once
    (ICMP port unreachable), not a timeout: a refusal proves the way there and back works."""
    family = socket.AF_INET6 if ":" in server else socket.AF_INET
    deadline = time.monotonic() + timeout
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.connect((server, port))
        sock.send(query.to_wire())
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            try:
                data = sock.recv(65535)
            except TimeoutError:
                break
            try:
                reply = dns.message.from_wire(data)
            except dns.exception.DNSException:
                continue  # not a reply we can read: keep waiting for the real one, as dig does
            if query.is_response(reply):
                return reply
    raise TimeoutError(f"no reply within {timeout} s")


def dig_text(reply: dns.message.Message, server: str, port: int, proto: str, elapsed: float,
             when: str) -> str:
    flags = " ".join(f.lower() for f in dns.flags.to_text(reply.flags).split())
    counts = (len(reply.question), sum(len(r) for r in reply.answer),
              sum(len(r) for r in reply.authority), sum(len(r) for r in reply.additional) + (reply.edns >= 0))
    lines = [";; Got answer:",
             f";; ->>HEADER<<- opcode: QUERY, status: {dns.rcode.to_text(reply.rcode())}, id: {reply.id}",
             f";; flags: {flags}; QUERY: {counts[0]}, ANSWER: {counts[1]}, AUTHORITY: {counts[2]}, "
             f"ADDITIONAL: {counts[3]}", ""]
    for option in reply.options:
        if isinstance(option, dns.edns.EDEOption):
            lines.append(f"; EDE: {int(option.code)}: ({option.text})")
    lines.append(";; QUESTION SECTION:")
    lines += [f";{q.name.to_text()}\t\tIN\t{dns.rdatatype.to_text(q.rdtype)}" for q in reply.question]
    for title, section in (("ANSWER", reply.answer), ("AUTHORITY", reply.authority)):
        if section:
            lines += ["", f";; {title} SECTION:"] + [r.to_text() for r in section]
    lines += ["", f";; Query time: {round(elapsed * 1000)} msec",
              f";; SERVER: {server}#{port}({server}) ({proto})", f";; WHEN: {when}", ""]
    return "\n".join(lines)


def _quiet(line: str) -> None:
    pass


def check_name(name: str, server: str, port: int, cfg: config.Config | None,
               progress: Callable[[str], None] = _quiet) -> tuple[NameCheck, list[str]]:
    """Ask through the resolver; when it fails, also ask the owning upstream directly, which tells
    an upstream that answers without the name (naming) from one that cannot be reached (routing)."""
    zone, upstreams = owner(name, cfg)
    progress(f"asking {name}" + (f" (zone {zone})" if zone else "") + f" through {server}:{port} ...")
    asked = ask(name, server, port, timeout=RESOLVER_TIMEOUT)
    transcripts = [asked.transcript]
    direct = None
    resolved = asked.rcode == "NOERROR" and asked.answers
    # Not when the resolver refused outright: it is not running, and that verdict comes first.
    if not resolved and upstreams and asked.failure != REFUSED and "tunnel is down" not in asked.ede:
        host, _, up_port = upstreams[0].rpartition(":")
        progress(f"  {asked.outcome}; asking its upstream {upstreams[0]} directly ...")
        direct_asked = ask(name, host.strip("[]"), int(up_port), timeout=TIMEOUT)
        direct = direct_asked.outcome
        transcripts.append(direct_asked.transcript)
        progress(f"  the upstream: {direct}")
    else:
        progress(f"  {asked.outcome}" + (f" {', '.join(asked.answers)}" if asked.answers else ""))
    check = NameCheck(name, asked.rcode, asked.answers, asked.ede, zone, tuple(upstreams), direct)
    return check, transcripts


def owner(name: str, cfg: config.Config | None) -> tuple[str | None, list[str]]:
    """The block and upstreams that own a name, per the Corefile (the resolver's view)."""
    if cfg is None:
        return None, []
    router = Router(Zone(b) for b in cfg.blocks)
    wire_name = wire.name_to_wire(name)
    zone = router.route(wire_name)
    if zone is None:
        return None, []
    fwd = zone.forward_for(wire_name)
    if fwd is None:
        return zone.name, []
    if fwd.spec.tunnel:
        return zone.name, []  # learned from the VPN at run time: the resolver's EDE tells more
    return zone.name, [str(u.upstream) for u in fwd.upstreams]


def check_tcp(target: str, names: dict[str, NameCheck], server: str, port: int,
              timeout: float = 3.0) -> TcpCheck:
    host, _, port_text = target.rpartition(":")
    host = host.strip("[]")
    known = names.get(host.rstrip(".") + ".")
    address = known.answers[0] if known is not None and known.answers else None
    with contextlib.suppress(ValueError):
        address = str(ipaddress.ip_address(host))  # an address needs no resolving
    if address is None:
        asked = ask(host, server, port)
        address = asked.answers[0] if asked.answers else None
    if address is None:
        return TcpCheck(target, None, "unresolved")
    try:
        with socket.create_connection((address, int(port_text)), timeout=timeout):
            return TcpCheck(target, address, "connected")
    except TimeoutError:
        return TcpCheck(target, address, "timeout")
    except ConnectionRefusedError:
        return TcpCheck(target, address, "refused")
    except OSError as err:
        return TcpCheck(target, address, err.strerror or str(err))
