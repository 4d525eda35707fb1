"""The lab: a pod with our resolver and an OpenVPN sidecar, a cluster DNS, a VPN server, corp.

```
 pod   eth0 10.244.0.2, tun0 10.8.0.x     resolver 127.0.0.1:53, openvpn client (mgmt :7505)
  |    resolv.conf: nameserver 127.0.0.1 / options ndots:5
 node  10.244.0.1 | 10.100.0.1 | 10.99.0.1  (router, ip_forward)
  |-- kdns  10.100.0.10                     dnsmasq: cluster.local + catch-all names
  '-- vpn   10.99.0.2, tun0 10.8.0.1        openvpn server udp/1194, FORWARD + MASQUERADE
       br0 192.168.240.254
        |-- corp 192.168.240.1              dnsmasq for svc.acme.internal (route back to 10.8/24)
        '-- db   192.168.240.10             TCP 5432 (NO route back: only MASQUERADE helps)
```

The corp DNS has a route back to the client pool and the db has none, as when the DNS sits
next to the VPN server: without MASQUERADE names still resolve while TCP to the db times
out: "names resolve, connections fail". `set_corp_dns_return_route(False)` makes
DNS fail the same way. Every namespace is named `<prefix>-<role>`; interfaces are created
directly inside them, so the host namespace never sees one.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from . import configs as c
from .netns import LabError, Proc, kill_ns_processes, ns_run, start, stop_all
from .network import MASQUERADE_RULE, ROLES, build_core, build_pod, delete_pod
from .pki import make_pki
from .probes import Probes
from .ready import START_MARK, wait_dns, wait_log, wait_resolver, wait_tcp
from .state import (
    ETC_NETNS,
    STATE_BASE,
    LabRecord,
    ProcRecord,
    cleanup_stale,
    destroy,
    locked,
    new_record,
)


def default_resolver() -> str:
    return os.environ.get("SPLITDNS_LAB_RESOLVER", c.DEFAULT_RESOLVER)


@dataclass(frozen=True)
class PodSpec:
    """What `replace_pod` re-applies: the equivalent of the pod spec + ConfigMap."""

    resolver: str = field(default_factory=default_resolver)
    corefile: str = c.SCENARIO_COREFILE
    resolv_conf: str = c.SCENARIO_RESOLV_CONF
    vpn_management: bool = True
    vpn_extra: str = ""  # more client config lines: management-up-down, up/down scripts, ...
    tunnel_zone_works: bool = True  # False: do not wait for the private zone to answer at start
    # The resolver's command line as a pod spec gives it (an injected container's), instead of
    # `resolver` run on the lab's Corefile file.
    resolver_command: tuple[str, ...] = ()


class Lab(Probes):
    """Build with `up()` (or `with Lab() as lab:`), remove with `down()`; see module doc."""

    def __init__(self, pod: PodSpec | None = None, *, manual: bool = False,
                 pushes: tuple[str, ...] = c.DHCP_PUSHES) -> None:
        self.pod_spec = pod or PodSpec()
        self.pushes = pushes
        self.manual = manual
        self.record: LabRecord | None = None
        self.last_prefix = ""  # after down(): which prefix to check is gone
        self.procs: dict[str, Proc] = {}
        self.timings: dict[str, float] = {}

    @classmethod
    def attach(cls, record: LabRecord) -> Lab:
        """A view of a lab another process owns (for `status`); never call `down` on it."""
        lab = cls(manual=record.manual)
        lab.record = record
        lab.procs = {
            p.name: Proc(p.name, p.ns, p.argv, lab.log(p.name), p.pid, p.start_time)
            for p in record.processes
        }
        return lab

    # ---- names ----------------------------------------------------------------------------
    @property
    def prefix(self) -> str:
        if self.record is None:
            raise LabError("the lab is not up")
        return self.record.prefix

    def ns(self, role: str) -> str:
        return f"{self.prefix}-{role}"

    @property
    def pod(self) -> str:
        return self.ns("pod")

    @property
    def dir(self) -> Path:
        return STATE_BASE / self.prefix

    @property
    def corefile(self) -> Path:
        return self.dir / "Corefile"

    def log(self, name: str) -> Path:
        return self.dir / f"{name}.log"

    # ---- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> Lab:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> Lab:
        """Build everything and return once the pod's resolver answers both zones."""
        t0 = time.monotonic()
        with locked():
            cleanup_stale()
            self.record = new_record(self.manual)
        atexit.register(self.down)  # backstop if the caller forgets or dies on an exception
        try:
            self._build()
        except BaseException:
            self.down()
            raise
        self.timings["up"] = time.monotonic() - t0
        return self

    def _build(self) -> None:
        with ThreadPoolExecutor(max_workers=1) as pool:
            pki = pool.submit(make_pki, self.dir / "pki")  # openssl runs while `ip` works
            self._record(namespaces=[self.ns(r) for r in ROLES])
            build_core(self.ns)
            pki.result(timeout=30)
        self._start_services()
        self._create_pod()

    def down(self) -> None:
        """Remove every process, namespace and file of this lab. Safe to call twice."""
        if self.record is None:
            return
        t0 = time.monotonic()
        with _signals_deferred():
            stop_all(list(self.procs.values()), grace=1.0)
            self.procs.clear()
            with contextlib.suppress(OSError):  # what the pod's resolver told its user, before it goes
                from tests.support import user_text

                user_text.seen("lab resolver log", self.log("resolver").read_text(errors="replace"))
            destroy(self.record)
            self.last_prefix = self.record.prefix
            self.record = None
        with contextlib.suppress(Exception):
            atexit.unregister(self.down)
        self.timings["down"] = time.monotonic() - t0

    def replace_pod(self) -> None:
        """`kubectl delete pod` + wait Ready: a new pod ns from the same spec, fresh processes."""
        t0 = time.monotonic()
        self.delete_pod()
        self._create_pod()
        self.timings["replace_pod"] = time.monotonic() - t0

    def delete_pod(self) -> None:
        pod_procs = [p for p in self.procs.values() if p.ns == self.pod]
        stop_all(pod_procs, grace=1.0)  # SIGTERM, like the kubelet, then SIGKILL
        for proc in pod_procs:
            del self.procs[proc.name]
        self._record()
        kill_ns_processes(self.pod)
        delete_pod(self.pod, self.ns("node"))
        (ETC_NETNS / self.pod / "resolv.conf").unlink(missing_ok=True)

    # ---- building blocks --------------------------------------------------------------------
    def _start_services(self) -> None:
        self._start("cluster-dns", "kdns", c.cluster_dns_argv())
        self._start("corp-dns", "corp", c.corp_dns_argv())
        self._start("corp-dns2", "corp", c.corp_dns2_argv())
        self._start("db", "db", c.tcp_service_argv(self.log("db-connections")))
        self.start_vpn_server(self.pushes)
        wait_dns(self.procs["cluster-dns"], self.ns("node"), c.CLUSTER_DNS_IP, c.KUBERNETES_NAME)
        wait_dns(self.procs["corp-dns"], self.ns("vpn"), c.CORP_DNS_IP, c.DB_NAME)
        wait_dns(self.procs["corp-dns2"], self.ns("vpn"), c.CORP_DNS2_IP, c.DB_NAME)
        wait_tcp(self.procs["db"], self.ns("vpn"), c.DB_IP, c.DB_PORT)

    def start_vpn_server(self, pushes: tuple[str, ...]) -> None:
        """(Re)start the VPN server pushing `pushes`; returns once it is initialised."""
        self.pushes = pushes
        (self.dir / "server.ovpn").write_text(c.openvpn_server_conf(self.dir / "pki", pushes))
        self._start("vpn-server", "vpn", ["openvpn", "--config", str(self.dir / "server.ovpn")])
        wait_log(self.procs["vpn-server"], "Initialization Sequence Completed")

    def stop_vpn_server(self) -> None:
        """Kill the VPN server outright (no goodbye to the client, as in a node crash)."""
        proc = self.procs.pop("vpn-server")
        stop_all([proc], grace=0.0)
        self._record()

    def _create_pod(self) -> None:
        """Create the pod ns from `pod_spec`: network, resolv.conf, VPN client, resolver."""
        spec, pod, node = self.pod_spec, self.pod, self.ns("node")
        build_pod(pod, node)
        (ETC_NETNS / pod).mkdir(parents=True, exist_ok=True)
        self._record(etc_netns=[pod])
        (ETC_NETNS / pod / "resolv.conf").write_text(spec.resolv_conf)
        self.corefile.write_text(spec.corefile)
        client_conf = self.dir / "client.ovpn"
        client_conf.write_text(c.openvpn_client_conf(self.dir / "pki", spec.vpn_management,
                                                     spec.vpn_extra))
        # Containers of a pod start together; the resolver must cope with the tunnel coming up.
        self._start("vpn-client", "pod", ["openvpn", "--config", str(client_conf)])
        self._start_resolver()
        wait_log(self.procs["vpn-client"], "Initialization Sequence Completed")
        wait_resolver(self.procs["resolver"], pod, tunnel_zone=spec.tunnel_zone_works)

    def _start_resolver(self) -> None:
        """Start procs["resolver"] in the pod (a subclass may run it another way, as a container)."""
        argv = list(self.pod_spec.resolver_command) or c.resolver_argv(self.pod_spec.resolver, self.corefile)
        self._start("resolver", "pod", argv)

    def _start(self, name: str, role: str, argv: list[str]) -> Proc:
        log = self.log(name)
        with open(log, "a") as out:  # one log per process; a replaced pod appends
            out.write(f"{START_MARK}{time.strftime('%H:%M:%S')}: {' '.join(argv)}\n")
        proc = start(name, self.ns(role), argv, log, cwd=self.dir)
        self.procs[name] = proc
        self._record()
        return proc

    def _record(
        self, namespaces: list[str] | None = None, etc_netns: list[str] | None = None
    ) -> None:
        """Persist what exists *before* relying on it, so a crash leaves a cleanable record."""
        record = self.record
        if record is None:
            raise LabError("the lab is not up")
        for name in namespaces or []:
            if name not in record.namespaces:
                record.namespaces.append(name)
        for name in etc_netns or []:
            if name not in record.etc_netns:
                record.etc_netns.append(name)
        record.processes = [
            ProcRecord(p.name, p.ns, p.pid, p.start_time, p.argv) for p in self.procs.values()
        ]
        record.save()

    # ---- knobs tests turn -------------------------------------------------------------------
    def set_masquerade(self, enabled: bool) -> None:
        """Add or remove the VPN server's MASQUERADE of the client pool (idempotent)."""
        vpn = self.ns("vpn")
        present = self.masquerade_enabled()
        if enabled and not present:
            ns_run(vpn, ["iptables", "-t", "nat", "-A", *MASQUERADE_RULE])
        for _ in range(10):  # a rule added twice by hand would need two deletes
            if enabled or not self.masquerade_enabled():
                break
            ns_run(vpn, ["iptables", "-t", "nat", "-D", *MASQUERADE_RULE])

    def masquerade_enabled(self) -> bool:
        out = ns_run(self.ns("vpn"), ["iptables", "-t", "nat", "-S", "POSTROUTING"])
        return "-j MASQUERADE" in out

    def restart_corp_dns(self, local_ttl: int = 30, wildcard: bool = True) -> None:
        """Run the corp DNS again with these answers (c.corp_dns_argv); the defaults restore it."""
        stop_all([self.procs.pop("corp-dns")], grace=1.0)
        self._start("corp-dns", "corp", c.corp_dns_argv(local_ttl, wildcard))
        wait_dns(self.procs["corp-dns"], self.ns("vpn"), c.CORP_DNS_IP, c.DB_NAME)

    def set_corp_dns_return_route(self, enabled: bool) -> None:
        """Give or take the corp DNS's route back to 10.8.0.0/24 (then only NAT helps it)."""
        verb = "replace" if enabled else "del"
        ns_run(
            self.ns("corp"), ["ip", "route", verb, c.VPN_POOL, "via", c.CORP_GW_IP], check=enabled
        )


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C/SIGTERM until teardown is done, so an impatient second ^C can't leak."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    blocked = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
