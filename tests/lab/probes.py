"""What a test (or a person) does to a running lab: commands in the pod, server logs, evidence.

Mixed into `Lab`; every method runs a real program inside one of the lab's namespaces.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from . import configs as c
from .netns import LabError, Proc, log_tail, ns_run

# Resolves through the pod's resolv.conf (getaddrinfo), like the app and `nc -vz` would.
_TCP_PROBE = """\
import socket, sys
host, port, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
try:
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        print("OK " + s.recv(256).decode(errors="replace").strip())
except OSError as exc:
    print(f"FAIL {type(exc).__name__}: {exc}")
    sys.exit(1)
"""

_DNSMASQ_QUERY = re.compile(r"query\[(?P<qtype>\w+)\] (?P<name>\S+) from (?P<client>\S+)$")


@dataclass(frozen=True)
class Query:
    """One query as a DNS server logged it."""

    client: str
    name: str
    qtype: str


@dataclass(frozen=True)
class TcpResult:
    ok: bool
    detail: str  # the service's greeting ("acme-db you are 192.168.240.254") or the error


class Probes:
    """Needs from the host class: `pod`, `ns(role)`, `log(name)`, `procs`, `dir`."""

    procs: dict[str, Proc]

    @property
    def pod(self) -> str:
        raise NotImplementedError

    @property
    def dir(self) -> Path:
        raise NotImplementedError

    def ns(self, role: str) -> str:
        raise NotImplementedError

    def log(self, name: str) -> Path:
        raise NotImplementedError

    def pod_exec(
        self, argv: list[str], *, timeout: float = 20.0
    ) -> subprocess.CompletedProcess[str]:
        """Run a command inside the pod (its resolv.conf applies), bounded in time."""
        try:
            return subprocess.run(
                ["ip", "netns", "exec", self.pod, *argv],
                capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise LabError(
                f"timed out after {timeout:.0f}s in {self.pod}: {' '.join(argv)}"
            ) from exc

    def dig_short(self, name: str, *options: str, server: str = "127.0.0.1") -> str:
        """`dig @SERVER NAME +short` in the pod, as a user debugging the pod runs it; stdout stripped."""
        return self.pod_exec(["dig", f"@{server}", name, "+short", *options]).stdout.strip()

    def tcp_connect(self, host: str, port: int, timeout: float = 2.0) -> TcpResult:
        """Connect from the pod by name (resolved by the pod's resolver) with a bounded timeout."""
        out = self.pod_exec(
            [sys.executable, "-I", "-c", _TCP_PROBE, host, str(port), str(timeout)],
            timeout=timeout * 3 + 10,  # name lookup + connect + interpreter start
        )
        text = (out.stdout or out.stderr).strip()
        return TcpResult(out.returncode == 0 and text.startswith("OK "), text.removeprefix("OK "))

    def queries(self, server: str) -> list[Query]:
        """Queries logged by "cluster" (the cluster DNS) or "corp" (the DNS behind the VPN)."""
        log = self.log({"cluster": "cluster-dns", "corp": "corp-dns"}[server])
        found = []
        for line in log.read_text(errors="replace").splitlines():
            match = _DNSMASQ_QUERY.search(line)
            if match:
                found.append(Query(match["client"], match["name"].lower(), match["qtype"]))
        return found

    def tunnel_ip(self) -> str:
        """The pod's address on tun0 (assigned by the VPN server)."""
        out = ns_run(self.pod, ["ip", "-4", "-o", "addr", "show", "dev", "tun0"])
        match = re.search(r"inet ([\d.]+)/", out)
        if not match:
            raise LabError(f"no IPv4 address on tun0 in {self.pod}: {out!r}")
        return match[1]

    def pod_pids(self) -> dict[str, int]:
        """PIDs of the pod's processes (resolver, VPN client): new ones after a replacement."""
        return {name: p.pid for name, p in self.procs.items() if p.ns == self.pod}

    def log_tails(self, lines: int = 15) -> str:
        """Every process log's tail, for assertion messages."""
        parts = []
        for proc in sorted(self.procs.values(), key=lambda p: p.name):
            parts.append(f"  {proc.name} ({proc.ns}, pid {proc.pid}) {proc.log}:\n"
                         + log_tail(proc.log, lines))  # fmt: skip
        return "\n".join(parts)

    def describe(self) -> str:
        """How to poke at the lab by hand."""
        pod, vpn, corp = self.pod, self.ns("vpn"), self.ns("corp")
        exe = f"ip netns exec {pod}"
        masq = " ".join(["-t", "nat", "{}", "POSTROUTING", "-s", c.VPN_POOL, "-o", "br0",
                         "-j", "MASQUERADE"])  # fmt: skip
        return f"""\
namespaces: {" ".join(self.ns(r) for r in ("pod", "node", "kdns", "vpn", "corp", "db"))}
state dir:  {self.dir}  (Corefile, *.log, configs, pki)
resolver:   {" ".join(self.procs["resolver"].argv)}

Ask the pod's resolver (answers prove the server: see tests/lab/configs.py):
  {exe} dig @127.0.0.1 {c.KUBERNETES_NAME} +short   # {c.KUBERNETES_IP}, cluster DNS
  {exe} dig @127.0.0.1 {c.DB_NAME} +short                 # {c.DB_IP}, corp DNS via the tunnel
  {exe} dig @127.0.0.1 {c.CATCHALL_NAME} +short        # {c.CATCHALL_IP}, catch-all -> cluster DNS
  {exe} getent ahostsv4 {c.DB_NAME}                       # libc, through resolv.conf
  {exe} timeout 3 bash -c 'exec 3<>/dev/tcp/{c.DB_NAME}/{c.DB_PORT}; head -1 <&3'
  {exe} cat /etc/resolv.conf
  {exe} bash                                   # a shell "in the pod"
Break and repair the return path (then retry the TCP line above):
  ip netns exec {vpn} iptables {masq.format("-D")}
  ip netns exec {vpn} iptables {masq.format("-A")}
  ip netns exec {corp} ip route del {c.VPN_POOL}     # corp DNS loses its route back too
Logs:
  tail -f {self.dir}/*.log
Tear down:
  python -m tests.lab down"""
