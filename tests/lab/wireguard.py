"""The lab with WireGuard instead of OpenVPN: wireguard-go on both ends, a stock wg-quick in the pod.

```
 pod   eth0 10.244.0.2, wgXXXXX 10.8.0.2    resolver 127.0.0.1:53; `wg-quick up` with DNS =,
  |                                         our resolvconf shim first on its PATH, and the
  |                                         shim's --watch (the VPN container's part)
 node  (as in topology.py)
  '-- vpn   10.99.0.2, wgsXXXXX 10.8.0.1    wireguard-go, udp/51820, FORWARD + MASQUERADE
       br0 -- corp 192.168.240.1 (DNS), db 192.168.240.10:5432 (no route back)
```

The client pool is OpenVPN's (10.8.0.0/24), so the corp DNS's route back and the VPN server's
MASQUERADE rule of topology.py apply unchanged; only the FORWARD rules name the interface.
There is no kernel module here: wg-quick falls back to WG_QUICK_USERSPACE_IMPLEMENTATION
(wireguard-go, on /dev/net/tun). wireguard-go's control sockets live in /var/run/wireguard,
which every namespace shares, so each lab names its interfaces after its own prefix and
removes those sockets when it goes.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

from splitdns.commands import wireguard_shim

from . import configs as c
from .netns import LabError, netns_pids, ns_run, run, stop_all, wait_for
from .ready import wait_log, wait_resolver
from .topology import Lab, PodSpec

PORT = 51820
CLIENT_IP = "10.8.0.2"
UAPI = Path("/var/run/wireguard")
PROGRAMS = ("wg", "wg-quick", "wireguard-go")


def missing_prerequisite() -> str | None:
    missing = [p for p in PROGRAMS if shutil.which(p) is None]
    if missing:
        return (f"the WireGuard lab needs {', '.join(missing)} (wireguard-tools and wireguard-go, "
                "in the Makefile's DEBIAN_PACKAGES)")
    return None


def corefile(run_dir: Path, iface: str) -> str:
    """The scenario's split, the private zone following the pod's WireGuard tunnel."""
    return f"""\
.:53 {{
    errors
    cache 30
    forward . {c.CLUSTER_DNS_IP}
}}
{c.PRIVATE_ZONE}:53 {{
    errors
    cache 30
    wireguard {{
        resolvconf {run_dir}
        interface {iface}
        domains
    }}
}}
"""


class WireGuardLab(Lab):
    """`Lab` with the tunnel made by WireGuard. `watch`: run the shim's handshake watcher."""

    def __init__(self, pod: PodSpec | None = None, *, watch: bool = True, keepalive: bool = True) -> None:
        super().__init__(pod)
        self.watch = watch
        self.keepalive = keepalive
        self.keys: dict[str, tuple[str, str]] = {}

    # ---- names ------------------------------------------------------------------------------
    @property
    def iface(self) -> str:
        """The pod's interface: wg-quick names it after its config file."""
        return "wg" + self.prefix[-5:]

    @property
    def server_iface(self) -> str:
        return "wgs" + self.prefix[-5:]

    @property
    def run_dir(self) -> Path:
        """The volume the VPN container and the resolver share."""
        return self.dir / "run"

    @property
    def shim_dir(self) -> Path:
        return self.dir / "bin"

    @property
    def client_conf(self) -> Path:
        return self.dir / f"{self.iface}.conf"

    # ---- building -----------------------------------------------------------------------------
    def _build(self) -> None:
        from .network import ROLES, build_core

        self._record(namespaces=[self.ns(r) for r in ROLES])
        build_core(self.ns)
        for side in ("server", "client"):
            private = run(["wg", "genkey"]).strip()  # local computations: nothing is sent
            self.keys[side] = (private, run(["wg", "pubkey"], stdin=private).strip())
        wireguard_shim.install(str(self.shim_dir))
        self._start_services()
        self._create_pod()

    def start_vpn_server(self, pushes: tuple[str, ...] = ()) -> None:
        """wireguard-go in the foreground (a process the lab tracks), configured by `wg`."""
        vpn, iface = self.ns("vpn"), self.server_iface
        conf = self.dir / "server.conf"
        conf.write_text(f"[Interface]\nPrivateKey = {self.keys['server'][0]}\nListenPort = {PORT}\n\n"
                        f"[Peer]\nPublicKey = {self.keys['client'][1]}\nAllowedIPs = {CLIENT_IP}/32\n")
        proc = self._start("vpn-server", "vpn", ["env", "WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD=1",
                                                 "wireguard-go", "-f", iface])
        wait_for(lambda: (UAPI / f"{iface}.sock").exists() or proc.check_alive(),
                 what=f"wireguard-go {iface}", timeout=10)
        ns_run(vpn, ["wg", "setconf", iface, str(conf)])
        ns_run(vpn, ["ip", "addr", "add", f"{c.VPN_SERVER_TUN_IP}/24", "dev", iface])
        ns_run(vpn, ["ip", "link", "set", iface, "up"])
        rules = [["-A", "FORWARD", "-i", iface, "-o", "br0", "-s", c.VPN_POOL, "-j", "ACCEPT"],
                 ["-A", "FORWARD", "-i", "br0", "-o", iface, "-m", "conntrack", "--ctstate",
                  "ESTABLISHED,RELATED", "-j", "ACCEPT"]]
        for rule in rules:  # once, also when the server is started again
            ns_run(vpn, ["iptables", "-D", *rule[1:]], check=False)
            ns_run(vpn, ["iptables", *rule])

    def stop_vpn_server(self) -> None:
        """Kill the VPN server outright (a node crash: no goodbye to the client)."""
        stop_all([self.procs.pop("vpn-server")], grace=0.0)
        (UAPI / f"{self.server_iface}.sock").unlink(missing_ok=True)
        self._record()

    def _create_pod(self) -> None:
        """The pod: resolver first (containers start together), then a stock `wg-quick up`."""
        from .network import build_pod

        spec, pod = self.pod_spec, self.pod
        build_pod(pod, self.ns("node"))
        (Path("/etc/netns") / pod).mkdir(parents=True, exist_ok=True)
        self._record(etc_netns=[pod])
        (Path("/etc/netns") / pod / "resolv.conf").write_text(spec.resolv_conf)
        self.corefile.write_text(spec.corefile if spec.corefile != c.SCENARIO_COREFILE
                                 else corefile(self.run_dir, self.iface))
        self.client_conf.write_text(self.client_config())
        self._start_resolver()
        self.wg_quick("up")
        if self.watch:
            self._start("wg-watch", "pod", [*self.vpn_env(), str(self.shim_dir / "resolvconf"), "--watch",
                                           self.iface, "1"])
        wait_resolver(self.procs["resolver"], pod, tunnel_zone=spec.tunnel_zone_works)

    def client_config(self, dns: str = f"{c.CORP_DNS_IP}, {c.PRIVATE_ZONE}") -> str:
        keepalive = "PersistentKeepalive = 25\n" if self.keepalive else ""
        return (f"[Interface]\nPrivateKey = {self.keys['client'][0]}\nAddress = {CLIENT_IP}/32\n"
                f"DNS = {dns}\n\n[Peer]\nPublicKey = {self.keys['server'][1]}\n"
                f"Endpoint = {c.VPN_SERVER_IP}:{PORT}\n"
                f"AllowedIPs = 192.168.240.0/24, {c.VPN_SERVER_TUN_IP}/32\n"
                f"{keepalive}")

    def vpn_env(self) -> list[str]:
        """What the VPN container's environment holds: the shim first on PATH, its directory."""
        return ["env", f"PATH={self.shim_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                f"SPLITDNS_RESOLVCONF_DIR={self.run_dir}", "WG_QUICK_USERSPACE_IMPLEMENTATION=wireguard-go",
                "WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD=1"]

    def wg_quick(self, verb: str) -> str:
        """`wg-quick up|down CONFIG` in the pod, as the VPN container runs it; its output."""
        out = self.pod_exec([*self.vpn_env(), "wg-quick", verb, str(self.client_conf)], timeout=30)
        if out.returncode != 0:
            raise LabError(f"wg-quick {verb} failed ({out.returncode}):\n{out.stdout}{out.stderr}")
        return out.stdout + out.stderr

    def kill_vpn_client(self) -> None:
        """The VPN container dies: wireguard-go goes, and with it the interface; no `down` runs."""
        for pid in netns_pids(self.pod):
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue
            if comm.startswith("wireguard-go"):
                os.kill(pid, signal.SIGKILL)
        wait_for(lambda: ns_run(self.pod, ["ip", "link", "show", self.iface], check=False) == "" or None,
                 what="the pod's WireGuard interface to go", timeout=10)
        (UAPI / f"{self.iface}.sock").unlink(missing_ok=True)

    def down(self) -> None:
        prefix = self.record.prefix if self.record is not None else ""
        try:
            super().down()
        finally:
            if prefix:
                for name in (f"wg{prefix[-5:]}.sock", f"wgs{prefix[-5:]}.sock"):
                    (UAPI / name).unlink(missing_ok=True)

    def wait_resolver_log(self, text: str, timeout: float = 10.0) -> None:
        wait_log(self.procs["resolver"], text, timeout=timeout)
