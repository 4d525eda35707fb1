"""The lab with OpenConnect instead of OpenVPN: ocserv on the gateway, openconnect in the pod.

```
 pod   eth0 10.244.0.2, ocXXXXX 10.8.0.x    resolver 127.0.0.1:53; openconnect --script our
  |                                         vpnc-script hook (state file in run/)
 node  (as in topology.py)
  '-- vpn   10.99.0.2, vpnsN 10.8.0.1       ocserv tcp/443 (no DTLS), FORWARD + MASQUERADE
       br0 -- corp 192.168.240.1 (DNS), db 192.168.240.10:5432 (no route back)
```

ocserv pushes the corp DNS (`dns =`), the default and split-DNS domains and one split-include
route; it hands out OpenVPN's pool (10.8.0.0/24), so the corp DNS's route back and the
MASQUERADE rule of topology.py apply unchanged; only the FORWARD rules name ocserv's devices
(`vpns+`). The server certificate comes from the lab's throwaway PKI, pinned by the client;
the user logs in with a password from ocserv's plain password file (an `openssl passwd -6`
hash). ocserv runs in the foreground without its seccomp worker isolation (the sandbox's own
seccomp profile would get in the way) and with its sockets and pid file in the lab's dir.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import signal
from pathlib import Path

from splitdns.commands import openconnect_hook

from . import configs as c
from .netns import ns_run, run, signal_proc, stop_all, wait_for
from .pki import make_pki
from .ready import wait_log, wait_resolver
from .topology import Lab, PodSpec

PORT = 443
USER, PASSWORD = "lab", "lab-password"
PROGRAMS = ("ocserv", "openconnect")
VPNC_SCRIPT = Path("/usr/share/vpnc-scripts/vpnc-script")
# What the VPN container's securityContext grants (capabilities: drop ALL, add NET_ADMIN): the
# tun device, its address and routes. Root's other capabilities are out of the bounding set.
CONTAINER_CAPS = ("setpriv", "--bounding-set=-all,+net_admin", "--inh-caps=-all", "--")
FORWARD_RULES = (["FORWARD", "-i", "vpns+", "-o", "br0", "-s", c.VPN_POOL, "-j", "ACCEPT"],
                 ["FORWARD", "-i", "br0", "-o", "vpns+", "-m", "conntrack", "--ctstate",
                  "ESTABLISHED,RELATED", "-j", "ACCEPT"])  # fmt: skip


def missing_prerequisite() -> str | None:
    missing = [p for p in PROGRAMS if shutil.which(p) is None]
    if missing or not VPNC_SCRIPT.exists():
        return (f"the OpenConnect lab needs {', '.join(missing) or 'vpnc-scripts'} (ocserv, openconnect "
                "and vpnc-scripts, in the Makefile's VPN_PACKAGES)")
    return None


def ocserv_conf(directory: Path, dns: tuple[str, ...] = (c.CORP_DNS_IP,)) -> str:
    """The gateway's config: password login, the scenario's DNS, domains and route."""
    pki = directory / "pki"
    dns_lines = "".join(f"dns = {d}\n" for d in dns)
    return f"""\
auth = "plain[passwd={directory}/ocpasswd]"
listen-host = {c.VPN_SERVER_IP}
tcp-port = {PORT}
run-as-user = nobody
run-as-group = nogroup
socket-file = {directory}/ocserv.sock
pid-file = {directory}/ocserv.pid
server-cert = {pki}/server.crt
server-key = {pki}/server.key
isolate-workers = false
use-occtl = false
max-clients = 4
max-same-clients = 0
keepalive = 30
dpd = 2
mobile-dpd = 2
try-mtu-discovery = false
cookie-timeout = 30
deny-roaming = false
predictable-ips = true
log-level = 2
device = vpns
ipv4-network = 10.8.0.0
ipv4-netmask = 255.255.255.0
{dns_lines}default-domain = {c.PRIVATE_ZONE}
split-dns = {c.PRIVATE_ZONE}
route = 192.168.240.0/255.255.255.0
"""


def corefile(state_file: Path) -> str:
    """The scenario's split, the private zone following the pod's OpenConnect tunnel."""
    return f"""\
.:53 {{
    errors
    cache 30
    forward . {c.CLUSTER_DNS_IP}
}}
{c.PRIVATE_ZONE}:53 {{
    errors
    cache 30
    openconnect {{
        state {state_file}
        domains
    }}
}}
"""


def spki_pin(cert: Path) -> str:
    """openconnect's `pin-sha256:` of a certificate: the SHA-256 of its public key (DER)."""
    pem = run(["openssl", "x509", "-in", str(cert), "-pubkey", "-noout"])
    der = base64.b64decode("".join(line for line in pem.splitlines() if not line.startswith("-----")))
    return "pin-sha256:" + base64.b64encode(hashlib.sha256(der).digest()).decode()


class OpenConnectLab(Lab):
    """`Lab` with the tunnel made by ocserv and openconnect, our vpnc-script hook in the pod."""

    def __init__(self, pod: PodSpec | None = None, dns: tuple[str, ...] = (c.CORP_DNS_IP,)) -> None:
        super().__init__(pod)
        self.dns = dns

    # ---- names ------------------------------------------------------------------------------
    @property
    def iface(self) -> str:
        """The pod's tun device (openconnect --interface)."""
        return "oc" + self.prefix[-5:]

    @property
    def run_dir(self) -> Path:
        """The volume the VPN container and the resolver share."""
        return self.dir / "run"

    @property
    def state_file(self) -> Path:
        return self.run_dir / "openconnect"

    @property
    def hook(self) -> Path:
        return self.dir / "bin" / openconnect_hook.HOOK_NAME

    # ---- building -----------------------------------------------------------------------------
    def _build(self) -> None:
        from .network import ROLES, build_core

        self._record(namespaces=[self.ns(r) for r in ROLES])
        build_core(self.ns)
        make_pki(self.dir / "pki")
        digest = run(["openssl", "passwd", "-6", "-stdin"], stdin=PASSWORD).strip()
        (self.dir / "ocpasswd").write_text(f"{USER}:*:{digest}\n")
        openconnect_hook.install(str(self.hook.parent))
        self._start_services()
        self._create_pod()

    def start_vpn_server(self, pushes: tuple[str, ...] = ()) -> None:
        """ocserv in the foreground (a process the lab tracks), pushing `self.dns`. (`pushes`
        are OpenVPN's words, which ocserv does not speak.)"""
        vpn = self.ns("vpn")
        conf = self.dir / "ocserv.conf"
        conf.write_text(ocserv_conf(self.dir, self.dns))
        self._start("vpn-server", "vpn", ["ocserv", "--foreground", "--config", str(conf)])
        wait_for(lambda: True if self._listening(vpn) else None,
                 what=f"ocserv on {c.VPN_SERVER_IP}:{PORT}", timeout=10,
                 detail=lambda: self.log_tails())
        for rule in FORWARD_RULES:  # once, also when the server is started again
            ns_run(vpn, ["iptables", "-D", *rule], check=False)
            ns_run(vpn, ["iptables", "-A", *rule])

    def _listening(self, vpn: str) -> bool:
        self.procs["vpn-server"].check_alive()
        return f"{c.VPN_SERVER_IP}:{PORT}" in ns_run(vpn, ["ss", "-Htln"])

    def stop_vpn_server(self) -> None:
        """Kill the VPN server outright (SIGKILL, a node crash: no goodbye to the client; its
        workers go with it)."""
        proc = self.procs.pop("vpn-server")
        signal_proc(proc, signal.SIGKILL)
        stop_all([proc], grace=1.0)
        self._record()

    def _create_pod(self) -> None:
        """The pod: resolver first (containers start together), then openconnect with our hook."""
        from .network import build_pod

        spec, pod = self.pod_spec, self.pod
        build_pod(pod, self.ns("node"))
        (Path("/etc/netns") / pod).mkdir(parents=True, exist_ok=True)
        self._record(etc_netns=[pod])
        (Path("/etc/netns") / pod / "resolv.conf").write_text(spec.resolv_conf)
        self.corefile.write_text(spec.corefile if spec.corefile != c.SCENARIO_COREFILE
                                 else corefile(self.state_file))
        self._start_resolver()
        self.start_vpn_client()
        wait_resolver(self.procs["resolver"], pod, tunnel_zone=spec.tunnel_zone_works)

    def vpn_env(self) -> list[str]:
        """What the VPN container's environment holds: where the hook writes."""
        return ["env", f"SPLITDNS_OPENCONNECT_STATE={self.state_file}"]

    def start_vpn_client(self) -> None:
        """openconnect as the VPN container runs it; returns once the hook recorded the DNS."""
        pin = spki_pin(self.dir / "pki" / "server.crt")
        (self.dir / "password").write_text(PASSWORD + "\n")
        # `exec` with a redirection: the pid the lab signals is openconnect's own.
        argv = [*self.vpn_env(), *CONTAINER_CAPS, "sh", "-c",
                f"exec openconnect --protocol=anyconnect --user={USER} --passwd-on-stdin "
                f"--non-inter --no-dtls --servercert {pin} --interface {self.iface} "
                f"--script {self.hook} --reconnect-timeout 30 {c.VPN_SERVER_IP}:{PORT} "
                f"< {self.dir / 'password'}"]  # fmt: skip
        proc = self._start("vpn-client", "pod", argv)
        wait_for(lambda: True if self.state_file.exists() or proc.check_alive() else None,
                 what="openconnect's hook to record the pushed DNS", timeout=15,
                 detail=lambda: self.log_tails())

    def stop_vpn_client(self) -> None:
        """openconnect ends as on SIGTERM from the kubelet: it runs the hook's `disconnect`."""
        proc = self.procs.pop("vpn-client")
        stop_all([proc], grace=5.0)
        self._record()

    def kill_vpn_client(self) -> None:
        """The VPN container dies: no `disconnect` runs; the tun device goes with the process."""
        proc = self.procs.pop("vpn-client")
        signal_proc(proc, signal.SIGKILL)
        stop_all([proc], grace=1.0)
        self._record()
        wait_for(lambda: ns_run(self.pod, ["ip", "link", "show", self.iface], check=False) == "" or None,
                 what="the pod's tun device to go", timeout=10)

    def wait_client_log(self, text: str, timeout: float = 15.0) -> None:
        wait_log(self.procs["vpn-client"], text, timeout=timeout)
