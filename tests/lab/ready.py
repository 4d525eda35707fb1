"""Bounded readiness waits and probes that talk to the lab from this process (dnspython).

Probes use sockets created inside the right namespace (see `netns.socket_in`), so waiting
costs no fork per attempt. A wait that sees its process die stops at once and shows the log.
"""

from __future__ import annotations

import itertools
import socket

import dns.exception
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype

from . import configs as c
from .netns import Proc, log_tail, socket_in, tcp_connect_in, wait_for

_probe_ids = itertools.count(1)
# Written to a process log before each start, so a wait only reads the latest run's lines.
START_MARK = "#### splitdns-lab start "


def query(
    ns: str, server: str, name: str, rdtype: str = "A", *, timeout: float = 1.0, tcp: bool = False
) -> dns.message.Message:
    """Ask `server` (port 53) about `name` from inside namespace `ns`."""
    q = dns.message.make_query(name, rdtype)
    # dnspython needs a *non-blocking* socket when given one, or its timeout is ignored.
    if tcp:
        with socket_in(ns, kind=socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect((server, 53))
            sock.setblocking(False)
            return dns.query.tcp(q, server, timeout=timeout, sock=sock)
    with socket_in(ns) as sock:
        sock.setblocking(False)
        return dns.query.udp(q, server, timeout=timeout, sock=sock)


def addresses(msg: dns.message.Message) -> list[str]:
    """The A/AAAA addresses of an answer, in order."""
    return [
        rr.to_text()
        for rrset in msg.answer
        if rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA)
        for rr in rrset
    ]


def _answered_by(proc: Proc, ns: str, server: str, name: str) -> dns.message.Message | None:
    proc.check_alive()
    try:
        return query(ns, server, name, timeout=0.3)
    except (OSError, dns.exception.DNSException):
        return None


def wait_dns(proc: Proc, ns: str, server: str, name: str, timeout: float = 10.0) -> None:
    """Wait until the DNS server of `proc` answers `name` (any rcode) at `server`."""
    wait_for(
        lambda: _answered_by(proc, ns, server, name),
        what=f"{proc.name} on {server}:53",
        timeout=timeout,
        detail=lambda: log_tail(proc.log),
    )


def wait_tcp(proc: Proc, ns: str, host: str, port: int, timeout: float = 10.0) -> None:
    def probe() -> bytes | None:
        proc.check_alive()
        try:
            return tcp_connect_in(ns, host, port, timeout=0.3)
        except OSError:
            return None

    wait_for(
        probe,
        what=f"{proc.name} on {host}:{port}",
        timeout=timeout,
        detail=lambda: log_tail(proc.log),
    )


def wait_log(proc: Proc, text: str, timeout: float = 15.0) -> None:
    """Wait for `text` in the process's log *after* its latest start marker."""

    def probe() -> bool | None:
        proc.check_alive()
        current = proc.log.read_text(errors="replace").rsplit(START_MARK, 1)[-1]
        return True if text in current else None

    wait_for(
        probe,
        what=f"{proc.name}: {text!r}",
        timeout=timeout,
        interval=0.02,
        detail=lambda: f"  log {proc.log}:\n{log_tail(proc.log)}",
    )


def wait_resolver(proc: Proc, pod: str, timeout: float = 15.0, tunnel_zone: bool = True) -> None:
    """Pod readiness: 127.0.0.1:53 answers a cluster name and a private-zone name.

    Any rcode but SERVFAIL counts: tests judge *which* answer came back; readiness only says
    the resolver listens and the tunnel zone is usable. Each private probe uses a fresh name
    (corp answers every name in the zone) so a cached SERVFAIL cannot hide the recovery.
    """

    def cluster() -> dns.message.Message | None:
        msg = _answered_by(proc, pod, "127.0.0.1", c.KUBERNETES_NAME)
        return msg if msg is not None and msg.rcode() != dns.rcode.SERVFAIL else None

    def private() -> dns.message.Message | None:
        name = f"lab-ready-{next(_probe_ids)}.{c.PRIVATE_ZONE}"
        msg = _answered_by(proc, pod, "127.0.0.1", name)
        return msg if msg is not None and msg.rcode() != dns.rcode.SERVFAIL else None

    detail = lambda: f"  resolver log {proc.log}:\n{log_tail(proc.log)}"  # noqa: E731
    wait_for(
        cluster,
        what="the pod resolver (cluster zone) on 127.0.0.1:53",
        timeout=timeout,
        interval=0.05,
        detail=detail,
    )
    if not tunnel_zone:
        return  # a test that breaks the tunnel zone on purpose judges it itself
    wait_for(
        private,
        what="the pod resolver (svc.acme.internal via the tunnel)",
        timeout=timeout,
        interval=0.1,
        detail=detail,
    )
