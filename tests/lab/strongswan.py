"""The lab with strongSwan IPsec instead of OpenVPN: a charon on each end, userspace ESP.

```
 pod   eth0 10.244.0.2, ipsec0 10.8.0.x     resolver 127.0.0.1:53; charon-systemd (the VPN
  |                                         container), `resolve` plugin writing run/resolv.conf
 node  (as in topology.py)
  '-- vpn   10.99.0.2, ipsec0               charon-systemd, udp/500+4500, a pool handing out a
       |                                    virtual IP and the corp DNS; FORWARD + MASQUERADE
       br0 -- corp 192.168.240.1 (DNS), db 192.168.240.10:5432 (no route back)
```

Kernel XFRM does not work on this machine, so both charons use `kernel-libipsec`: ESP in
userspace over a tun device (`ipsec0`, made when charon starts, whether or not an SA is up).
Each charon is `charon-systemd` (no pid file, so two run side by side) with its own
strongswan.conf (STRONGSWAN_CONF), its own vici socket and log in the lab's dir; `swanctl
--uri` loads each one's connections. The peers authenticate with a pre-shared key. The
gateway's pool hands out addresses from OpenVPN's pool (10.8.0.0/24), so the corp DNS's route
back and the MASQUERADE rule of topology.py apply unchanged; only the FORWARD rules name
`ipsec0`. The client asks for DNS (`vips = 0.0.0.0` and the pool's `dns`), and its `resolve`
plugin writes the name servers to a file in the volume it shares with the resolver, never to
/etc/resolv.conf.
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

from . import configs as c
from .netns import ns_run, signal_proc, stop_all, wait_for
from .ready import wait_log, wait_resolver
from .topology import Lab, PodSpec

CHARON = "/usr/sbin/charon-systemd"
PROGRAMS = (CHARON, "swanctl")
TUN = "ipsec0"
PSK = "splitdns-lab-psk"
POOL = "10.8.0.128/26"
PLUGINS = ("random nonce aes sha1 sha2 hmac kdf gmp pem pkcs1 x509 pubkey kernel-libipsec "
           "kernel-netlink socket-default vici attr resolve")
# What the VPN container's securityContext grants (capabilities: drop ALL, add NET_ADMIN and
# NET_BIND_SERVICE): the tun device, addresses and routes; IKE's UDP ports 500 and 4500.
CONTAINER_CAPS = ("setpriv", "--bounding-set=-all,+net_admin,+net_bind_service", "--inh-caps=-all", "--")
FORWARD_RULES = (["FORWARD", "-i", TUN, "-o", "br0", "-s", c.VPN_POOL, "-j", "ACCEPT"],
                 ["FORWARD", "-i", "br0", "-o", TUN, "-m", "conntrack", "--ctstate",
                  "ESTABLISHED,RELATED", "-j", "ACCEPT"])  # fmt: skip
# One proposal both ends have without the openssl plugin (not in Debian's libstrongswan).
IKE_PROPOSAL = "aes128-sha256-modp2048"
ESP_PROPOSAL = "aes128-sha256"


def missing_prerequisite() -> str | None:
    missing = [p for p in PROGRAMS if shutil.which(p) is None]
    libipsec = Path("/usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so")
    if missing or not libipsec.exists():
        return (f"the strongSwan lab needs {', '.join(missing) or 'the kernel-libipsec plugin'} "
                "(charon-systemd, strongswan-swanctl, libcharon-extra-plugins: VPN_PACKAGES in the "
                "Makefile)")
    return None


def strongswan_conf(directory: Path, side: str, resolve_file: Path | None) -> str:
    """One charon's settings: its plugins, vici socket and log in `directory`."""
    resolve = (f"        resolve {{\n            file = {resolve_file}\n"
               # No resolvconf(8), even where one is installed: the file is the interface.
               f"            resolvconf {{\n                path = /nonexistent\n            }}\n"
               f"        }}\n") if resolve_file is not None else ""
    # The `charon` section, as users write it: charon-systemd falls back to it.
    return f"""\
charon {{
    load_modular = no
    load = {PLUGINS}
    install_virtual_ip = yes
    install_routes = yes
    retransmit_tries = 2
    retransmit_timeout = 1.0
    filelog {{
        {side} {{
            path = {directory}/charon-{side}.log
            default = 1
            ike = 2
            cfg = 2
            flush_line = yes
            time_format = %H:%M:%S
        }}
    }}
    journal {{
        default = -1
    }}
    plugins {{
        vici {{
            socket = unix://{directory}/charon-{side}.vici
        }}
{resolve}    }}
}}
"""


def server_swanctl() -> str:
    return f"""\
connections {{
    gw {{
        version = 2
        local_addrs = {c.VPN_SERVER_IP}
        proposals = {IKE_PROPOSAL}
        pools = lab
        dpd_delay = 2s
        local {{
            auth = psk
            id = gateway.lab
        }}
        remote {{
            auth = psk
            id = pod.lab
        }}
        children {{
            corp {{
                local_ts = 192.168.240.0/24
                esp_proposals = {ESP_PROPOSAL}
                dpd_action = clear
            }}
        }}
    }}
}}
pools {{
    lab {{
        addrs = {POOL}
        dns = {c.CORP_DNS_IP}
        # RFC 8598 INTERNAL_DNS_DOMAIN (type 25): the split-DNS domain. The client's resolve
        # plugin ignores it (it writes name servers only).
        25 = {c.PRIVATE_ZONE}
    }}
}}
secrets {{
    ike-lab {{
        id-gw = gateway.lab
        id-pod = pod.lab
        secret = {PSK}
    }}
}}
"""


def client_swanctl() -> str:
    return f"""\
connections {{
    corp {{
        version = 2
        remote_addrs = {c.VPN_SERVER_IP}
        vips = 0.0.0.0
        mobike = no
        proposals = {IKE_PROPOSAL}
        dpd_delay = 2s
        local {{
            auth = psk
            id = pod.lab
        }}
        remote {{
            auth = psk
            id = gateway.lab
        }}
        children {{
            corp {{
                remote_ts = 192.168.240.0/24
                esp_proposals = {ESP_PROPOSAL}
                dpd_action = restart
            }}
        }}
    }}
}}
secrets {{
    ike-lab {{
        id-gw = gateway.lab
        id-pod = pod.lab
        secret = {PSK}
    }}
}}
"""


def corefile(resolve_file: Path) -> str:
    """The scenario's split, the private zone following the pod's IPsec tunnel."""
    return f"""\
.:53 {{
    errors
    cache 30
    forward . {c.CLUSTER_DNS_IP}
}}
{c.PRIVATE_ZONE}:53 {{
    errors
    cache 30
    strongswan {{
        resolve {resolve_file}
        interface {TUN}
    }}
}}
"""


class StrongSwanLab(Lab):
    """`Lab` with the tunnel made by two charons (kernel-libipsec), PSK authenticated."""

    def __init__(self, pod: PodSpec | None = None) -> None:
        super().__init__(pod)

    # ---- names ------------------------------------------------------------------------------
    @property
    def run_dir(self) -> Path:
        """The volume the VPN container and the resolver share."""
        return self.dir / "run"

    @property
    def resolve_file(self) -> Path:
        return self.run_dir / "strongswan.resolv.conf"

    def vici(self, side: str) -> str:
        return f"unix://{self.dir}/charon-{side}.vici"

    # ---- building -----------------------------------------------------------------------------
    def _build(self) -> None:
        from .network import ROLES, build_core

        self._record(namespaces=[self.ns(r) for r in ROLES])
        build_core(self.ns)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._start_services()
        self._create_pod()

    def _charon(self, side: str, role: str, swanctl: str) -> None:
        """Start one charon in `role`'s namespace and load its swanctl config."""
        conf = self.dir / f"strongswan-{side}.conf"
        conf.write_text(strongswan_conf(self.dir, side, self.resolve_file if side == "pod" else None))
        (self.dir / f"swanctl-{side}.conf").write_text(swanctl)
        (self.dir / f"charon-{side}.vici").unlink(missing_ok=True)
        name = "vpn-server" if side == "gw" else "vpn-client"
        caps = CONTAINER_CAPS if side == "pod" else ()
        proc = self._start(name, role, ["env", f"STRONGSWAN_CONF={conf}", *caps, CHARON])
        wait_for(lambda: True if (self.dir / f"charon-{side}.vici").exists() or proc.check_alive() else None,
                 what=f"charon ({side}) to open its vici socket", timeout=10,
                 detail=lambda: self.log_tails())
        self.swanctl(side, "--load-all", "--file", str(self.dir / f"swanctl-{side}.conf"))

    def swanctl(self, side: str, *args: str, timeout: float = 15.0) -> str:
        role = "vpn" if side == "gw" else "pod"
        return ns_run(self.ns(role), ["swanctl", *args, "--uri", self.vici(side)], timeout=timeout)

    def start_vpn_server(self, pushes: tuple[str, ...] = ()) -> None:
        """The gateway's charon. (`pushes` are OpenVPN's words: the pool says what is pushed.)"""
        self._charon("gw", "vpn", server_swanctl())
        vpn = self.ns("vpn")
        for rule in FORWARD_RULES:  # once, also when the server is started again
            ns_run(vpn, ["iptables", "-D", *rule], check=False)
            ns_run(vpn, ["iptables", "-A", *rule])

    def stop_vpn_server(self) -> None:
        """Kill the VPN server outright (a node crash: no goodbye to the client)."""
        stop_all([self.procs.pop("vpn-server")], grace=0.0)
        self._record()

    def _create_pod(self) -> None:
        """The pod: resolver first (containers start together), then the client's charon."""
        from .network import build_pod

        spec, pod = self.pod_spec, self.pod
        build_pod(pod, self.ns("node"))
        (Path("/etc/netns") / pod).mkdir(parents=True, exist_ok=True)
        self._record(etc_netns=[pod])
        (Path("/etc/netns") / pod / "resolv.conf").write_text(spec.resolv_conf)
        self.corefile.write_text(spec.corefile if spec.corefile != c.SCENARIO_COREFILE
                                 else corefile(self.resolve_file))
        self._start_resolver()
        self.start_vpn_client()
        wait_resolver(self.procs["resolver"], pod, tunnel_zone=spec.tunnel_zone_works)

    def start_vpn_client(self) -> None:
        """The client's charon, then `swanctl --initiate`; returns once the DNS is recorded."""
        self.start_charon()
        self.initiate()

    def start_charon(self) -> None:
        """The client's charon with its connection loaded, no SA initiated yet."""
        self._charon("pod", "pod", client_swanctl())

    def initiate(self) -> None:
        self.swanctl("pod", "--initiate", "--child", "corp", "--timeout", "10")
        wait_for(lambda: True if self.resolve_file.exists() and "nameserver" in self.resolve_file.read_text()
                 else None, what="the resolve plugin to write the DNS", timeout=5,
                 detail=lambda: self.log_tails())

    def terminate(self) -> None:
        """`swanctl --terminate --ike corp`: the IKE SA goes, with its DNS."""
        self.swanctl("pod", "--terminate", "--ike", "corp", "--timeout", "10")

    def stop_vpn_client(self) -> None:
        """charon stops as on SIGTERM from the kubelet: it deletes its SAs on the way out."""
        stop_all([self.procs.pop("vpn-client")], grace=5.0)
        self._record()

    def kill_vpn_client(self) -> None:
        """The VPN container dies (SIGKILL): no SA is deleted, the tun device goes with charon."""
        proc = self.procs.pop("vpn-client")
        signal_proc(proc, signal.SIGKILL)
        stop_all([proc], grace=1.0)
        self._record()
        wait_for(lambda: True if ns_run(self.pod, ["ip", "link", "show", TUN], check=False) == "" else None,
                 what="the pod's tun device to go", timeout=10)

    def wait_client_log(self, text: str, timeout: float = 15.0) -> None:
        wait_log(self.procs["vpn-client"], text, timeout=timeout)


