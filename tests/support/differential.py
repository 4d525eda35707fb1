"""The differential test's world: one authoritative NSD, three forwarders in front of it.

NSD serves two zones written here, `plain.test` (unsigned) and `signed.test` (signed at
setup with dnssec-keygen and dnssec-signzone): ordinary records, a CNAME chain, a DNAME,
a wildcard, a delegation with glue, an empty non-terminal, an escaped name, TTL 0, TTL 2,
a TTL above the cap, and an RRset too large for UDP. splitdns, Unbound (iterator only, no
validation) and dnsmasq forward `test` to it, each capping TTLs at CAP as `cache 30` does.
Everything listens on 127.0.0.1 on ports found free; every glue address is on loopback
too, so nothing could leave the host even if a forwarder chased a referral.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import assert_loopback, free_port, poll_until, stop

ADDR = "127.0.0.1"
CAP = 30  # `cache 30`, Unbound's cache-max-ttl, dnsmasq's max-ttl and max-cache-ttl
READY_TIMEOUT = 10.0
BINARIES = ("nsd", "unbound", "dnsmasq", "dnssec-keygen", "dnssec-signzone")

COMMON = """\
@ NS ns1
ns1 A 127.255.255.1
host A 127.1.0.1
host A 127.1.0.2
host AAAA ::1
www CNAME host
chain CNAME www
mail MX 10 host
txt TXT "hello" "world"
_sip._udp SRV 0 5 5060 host
*.wild A 127.1.0.3
*.wild TXT "wild"
zero 0 A 127.1.0.4
two 2 A 127.1.0.5
long 3600 A 127.1.0.6
a.ent A 127.1.0.8
esc\\.dot A 127.1.0.9
old DNAME new
a.new A 127.1.0.7
sub 3600 NS ns.sub
ns.sub 3600 A 127.255.255.2
"""


def zone_text(zone: str) -> str:
    large = "".join(f'large TXT "{i:02d}{"x" * 60}"\n' for i in range(30))  # about 2 kB
    return (f"$TTL 300\n$ORIGIN {zone}.\n"
            f"@ IN SOA ns1 hostmaster 1 3600 600 86400 60\n{COMMON}{large}")


ZONES = ("plain.test", "signed.test")


def write_zones(folder: Path) -> None:
    """Both zone files into `folder`; signed.test signed with fresh keys (NSEC)."""
    for zone in ZONES:
        (folder / f"{zone}.zone").write_text(zone_text(zone))
    keys = folder / "keys"
    keys.mkdir()
    for extra in (["-f", "KSK"], []):
        _run(["dnssec-keygen", "-q", "-K", str(keys), "-a", "ECDSAP256SHA256", *extra, "signed.test"])
    _run(["dnssec-signzone", "-q", "-S", "-K", str(keys), "-d", str(keys), "-o", "signed.test",
          "-f", str(folder / "signed.test.signed"), str(folder / "signed.test.zone")])


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if done.returncode:
        raise RuntimeError(f"{argv[0]} failed: {done.stderr.strip()}")


def nsd_conf(folder: Path, port: int) -> str:
    files = {"plain.test": "plain.test.zone", "signed.test": "signed.test.signed"}
    zones = "".join(f"zone:\n  name: {z}\n  zonefile: {folder}/{files[z]}\n" for z in ZONES)
    return f"""server:
  ip-address: {ADDR}@{port}
  server-count: 1
  do-ip6: no
  username: ""
  chroot: ""
  database: ""
  zonelistfile: "{folder}/zone.list"
  xfrdfile: "{folder}/xfrd.state"
  pidfile: "{folder}/nsd.pid"
  logfile: "{folder}/nsd.log"
  verbosity: 0
  rrl-ratelimit: 0
  rrl-whitelist-ratelimit: 0
remote-control:
  control-enable: no
{zones}"""


def unbound_conf(folder: Path, port: int, upstream: int) -> str:
    return f"""server:
  num-threads: 1
  interface: {ADDR}@{port}
  port: {port}
  do-ip6: no
  access-control: 127.0.0.0/8 allow
  do-not-query-localhost: no
  module-config: "iterator"
  local-zone: "test." nodefault
  qname-minimisation: no
  cache-max-ttl: {CAP}
  cache-max-negative-ttl: {CAP}
  chroot: ""
  username: ""
  directory: "{folder}"
  pidfile: ""
  use-syslog: no
  logfile: ""
  verbosity: 0
remote-control:
  control-enable: no
forward-zone:
  name: "test."
  forward-addr: {ADDR}@{upstream}
"""


def dnsmasq_argv(port: int, upstream: int) -> list[str]:
    return ["dnsmasq", "--keep-in-foreground", "--no-resolv", "--no-hosts", "--conf-file=/dev/null",
            f"--listen-address={ADDR}", f"--port={port}", "--bind-interfaces",
            f"--server=/test/{ADDR}#{upstream}", "--pid-file=", "--log-facility=-",
            f"--max-ttl={CAP}", f"--max-cache-ttl={CAP}"]


def corefile(upstream: int) -> str:
    return f"test {{\n  cache {CAP}\n  forward . {ADDR}:{upstream}\n}}\n"


@dataclass(frozen=True)
class World:
    nsd: int
    splitdns: int
    unbound: int
    dnsmasq: int

    @property
    def forwarders(self) -> dict[str, int]:
        return {"splitdns": self.splitdns, "unbound": self.unbound, "dnsmasq": self.dnsmasq}


def missing() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]


@contextmanager
def world(folder: Path, answers: Callable[[int], bool]) -> Iterator[World]:
    """NSD and the three forwarders, each answering (`answers(port)` says so) before the
    next starts; all stopped on the way out, also on failure."""
    assert_loopback(ADDR)
    write_zones(folder)
    with ExitStack() as stack:
        def launch(name: str, argv: list[str], port: int) -> None:
            log = (folder / f"{name}.log").open("wb")
            process = subprocess.Popen(argv, cwd=folder, stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT)
            log.close()
            stack.callback(stop, process)

            def ready() -> bool | None:
                if process.poll() is not None:
                    text = (folder / f"{name}.log").read_text(errors="replace")[-800:]
                    raise RuntimeError(f"{name} exited with {process.returncode}: {text}")
                return True if answers(port) else None

            poll_until(f"{name} to answer", READY_TIMEOUT, ready)

        nsd = free_port(ADDR)
        (folder / "nsd.conf").write_text(nsd_conf(folder, nsd))
        launch("nsd", [_sbin("nsd"), "-d", "-c", str(folder / "nsd.conf")], nsd)
        ports = {name: free_port(ADDR) for name in ("splitdns", "unbound", "dnsmasq")}
        (folder / "unbound.conf").write_text(unbound_conf(folder, ports["unbound"], nsd))
        launch("unbound", [_sbin("unbound"), "-d", "-c", str(folder / "unbound.conf")], ports["unbound"])
        launch("dnsmasq", [_sbin("dnsmasq"), *dnsmasq_argv(ports["dnsmasq"], nsd)[1:]], ports["dnsmasq"])
        (folder / "Corefile").write_text(corefile(nsd))
        launch("splitdns", [sys.executable, "-m", "splitdns", "serve", "-conf", str(folder / "Corefile"),
                            "-dns.port", str(ports["splitdns"])], ports["splitdns"])
        yield World(nsd, ports["splitdns"], ports["unbound"], ports["dnsmasq"])


def _sbin(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"
