"""The servers of the benchmark: their configuration, and starting and stopping them.

Every server listens on its own 127.0.0.x address and forwards to the same NSD. Each is
configured so that the comparison is about forwarding and caching only: no DNSSEC
validation, no logging, one thread where the server allows it (each setting's reason is
given beside it).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench import measure

ZONE = "bench.test"
PORT = 15300
UPSTREAM_ADDR = "127.0.0.2"
STOP_TIMEOUT = 5.0
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
SUCCESS_CAPACITY = 200_000  # room for the 100k fill plus the miss runs, in every cache

# A second zone that only a reloaded configuration routes (bench/growth.py's reload curve).
RELOAD_ZONE = "reload.test"
# Under this name the wildcard does not reach: a.cluster makes it an empty non-terminal, so
# anything below it is NXDOMAIN, as a pod's search-list expansions are (bench/mix.py).
NXDOMAIN_SUFFIX = f"cluster.{ZONE}"


def zone_file(origin: str) -> str:
    """Fixed names the answer checks and the start-up probe ask; everything else hits the wildcard."""
    return f"""$ORIGIN {origin}.
$TTL 3600
@    IN SOA ns.{origin}. hostmaster.{origin}. 1 3600 600 86400 3600
@    IN NS  ns.{origin}.
ns   IN A   {UPSTREAM_ADDR}
www  IN A   192.0.2.2
a.cluster IN A 192.0.2.3
*    IN A   192.0.2.1
"""


ZONE_FILE = zone_file(ZONE)


class StartError(RuntimeError):
    """A server could not be started: missing binary, port taken, no answer in time."""


@dataclass(frozen=True)
class Spec:
    """How to run one server: argv and the files it needs, relative to its own directory."""

    name: str
    addr: str
    port: int
    argv: tuple[str, ...]
    files: dict[str, str] = field(default_factory=dict)
    note: str = ""

    @property
    def binary(self) -> str:
        return self.argv[0]


# --- configurations ----------------------------------------------------------------------------


def nsd(workdir: Path, port: int = PORT, addr: str = UPSTREAM_ADDR) -> Spec:
    """The authoritative upstream: a wildcard zone, one server process, no rate limiting."""
    d = workdir / "nsd"
    conf = f"""server:
  ip-address: {addr}@{port}
  server-count: 1
  do-ip6: no
  username: ""
  chroot: ""
  zonesdir: "{d}"
  database: ""
  zonelistfile: "{d}/zone.list"
  xfrdfile: "{d}/xfrd.state"
  pidfile: "{d}/nsd.pid"
  logfile: "{d}/nsd.log"
  verbosity: 0
  # Debian's NSD limits responses to 200 qps per /24 by default: a benchmark would time out.
  rrl-ratelimit: 0
  rrl-whitelist-ratelimit: 0
  minimal-responses: yes
remote-control:
  control-enable: no
zone:
  name: {ZONE}
  zonefile: {ZONE}.zone
zone:
  name: {RELOAD_ZONE}
  zonefile: {RELOAD_ZONE}.zone
"""
    return Spec("nsd", addr, port, ("nsd", "-d", "-c", str(d / "nsd.conf")),
                {"nsd.conf": conf, f"{ZONE}.zone": ZONE_FILE, f"{RELOAD_ZONE}.zone": zone_file(RELOAD_ZONE)})


def splitdns(workdir: Path, addr: str, port: int, upstream: str, cache: int = SUCCESS_CAPACITY,
             zones: tuple[str, ...] = (".",), extra: str = "") -> Spec:
    """One server block per zone (the curves ask for many), `extra` added to the first."""
    # The default success capacity (9984) would not hold the 100k names of the memory test.
    corefile = "".join(f"""{zone}:{port} {{
    bind {addr}
    cache 3600 {{
        success {cache}
    }}
    forward . {upstream}{extra if i == 0 else ""}
}}
""" for i, zone in enumerate(zones))
    d = workdir / "splitdns"
    return Spec("splitdns", addr, port,
                (sys.executable, "-m", "splitdns", "serve", "-conf", str(d / "Corefile"),
                 "-dns.port", str(port)),
                {"Corefile": corefile})


def splitdns_asyncio(workdir: Path, addr: str, port: int, upstream: str) -> Spec:
    """splitdns from the virtualenv with uvloop kept out, as the resolver image runs: the A/B of
    the two loops on one interpreter (serve falls back to asyncio when uvloop does not import)."""
    spec = splitdns(workdir, addr, port, upstream)
    d = workdir / "splitdns-asyncio"
    code = ("import sys; sys.modules['uvloop'] = None; sys.argv[0] = 'splitdns'; "
            "from splitdns.cli import main; sys.exit(main())")
    return Spec("splitdns-asyncio", addr, port,
                (sys.executable, "-c", code, *spec.argv[3:5], str(d / "Corefile"), *spec.argv[6:]),
                spec.files, note="splitdns from the virtualenv on the stock asyncio loop (uvloop kept "
                                 "out, as in the resolver image)")


def splitdns_image(workdir: Path, addr: str, port: int, upstream: str) -> Spec:
    """splitdns's Corefile, served from the resolver image's own files (bench/image.py): its root
    filesystem by chroot, as uid 65532, the Corefile bind-mounted where the image reads it."""
    from bench import image

    spec = splitdns(workdir, addr, port, upstream)
    d = workdir / "splitdns-image"
    root = image.root() or "/nonexistent-image-root"
    # The directory is made readable for the image's user; the bind mount lives in a mount
    # namespace of its own, gone with the process.
    script = (f"chmod 755 {d} && chmod 644 {d}/Corefile && mount --bind {d} {root}/etc/coredns && "
              f"exec chroot --userspec=65532:65532 {root} /usr/bin/splitdns serve "
              f"-conf /etc/coredns/Corefile -dns.port {port}")
    return Spec("splitdns-image", addr, port, ("unshare", "--mount", "sh", "-c", script), spec.files,
                note="the resolver image (the Dockerfile's resolver target) run from its root filesystem "
                     "by chroot, as uid 65532 (bench/image.py): Debian's python3.11, the stock asyncio "
                     "loop; start-up includes unshare and chroot")


def coredns(workdir: Path, addr: str, port: int, upstream: str) -> Spec:
    d = workdir / "coredns"
    corefile = f""".:{port} {{
    bind {addr}
    cache 3600 {{
        success {SUCCESS_CAPACITY}
    }}
    forward . {upstream}
}}
"""
    return Spec("coredns", addr, port, ("coredns", "-conf", str(d / "Corefile"), "-dns.port", str(port)),
                {"Corefile": corefile}, note="GOMAXPROCS follows the CPU affinity: 1")


def unbound(workdir: Path, addr: str, port: int, upstream: str, zones: tuple[str, ...] = (ZONE,),
            refused: tuple[str, ...] = ()) -> Spec:
    """Forward zones to the upstream; `refused` zones answered REFUSED (never asked of the root)."""
    host, up_port = upstream.split(":")
    forwards = "".join(f"""forward-zone:
  name: "{zone}"
  forward-addr: {host}@{up_port}
""" for zone in zones)
    refusals = "".join(f'  local-zone: "{zone}." always_refuse\n' for zone in refused)
    d = workdir / "unbound-1t"
    conf = f"""server:
  num-threads: 1
  interface: {addr}@{port}
  port: {port}
  do-ip6: no
  access-control: 127.0.0.0/8 allow
  # Unbound refuses loopback upstreams by default.
  do-not-query-localhost: no
  # No validation, like every other server here.
  module-config: "iterator"
  # RFC 6761 default zones would answer NXDOMAIN for *.test without forwarding.
  local-zone: "test." nodefault
{refusals}  qname-minimisation: no
  # Room for 200k answers; Unbound allocates as it fills.
  msg-cache-size: 128m
  rrset-cache-size: 256m
  chroot: ""
  username: ""
  directory: "{d}"
  pidfile: ""
  use-syslog: no
  logfile: ""
  verbosity: 0
remote-control:
  control-enable: no
{forwards}"""
    return Spec("unbound-1t", addr, port, ("unbound", "-d", "-c", str(d / "unbound.conf")),
                {"unbound.conf": conf})


def dnsmasq(workdir: Path, addr: str, port: int, upstream: str) -> Spec:
    host, up_port = upstream.split(":")
    # cache-size stays at its default (150): with 100000 dnsmasq answers ~27k misses/s while
    # its cache fills and then collapses to ~76 qps at 100 % CPU (measured here).
    argv = ("dnsmasq", "--conf-file=/dev/null", "--keep-in-foreground", "--no-resolv", "--no-hosts",
            "--bind-interfaces", f"--listen-address={addr}", f"--port={port}",
            f"--server={host}#{up_port}", "--user=root", "--pid-file=",
            "--dns-forward-max=10000")  # default 150 queries in flight
    return Spec("dnsmasq", addr, port, argv,
                note="default cache-size (150): it cannot hold 100k names; raising it collapses misses")


def dnsdist(workdir: Path, addr: str, port: int, upstream: str) -> Spec:
    d = workdir / "dnsdist"
    conf = f"""setLocal("{addr}:{port}")
setACL({{"127.0.0.0/8"}})
newServer({{address="{upstream}"}})
pc = newPacketCache({SUCCESS_CAPACITY}, {{maxTTL=86400, minTTL=0}})
getPool(""):setCache(pc)
-- it would otherwise ask a public name for security notices
setSecurityPollSuffix("")
"""
    return Spec("dnsdist", addr, port,
                ("dnsdist", "--supervised", "--disable-syslog", "-C", str(d / "dnsdist.conf")),
                {"dnsdist.conf": conf},
                note="packet cache of 200k entries allocated at start; listener + responder threads")


def python_floor(workdir: Path, addr: str, port: int, upstream: str) -> Spec:
    return Spec("python-floor", addr, port,
                (sys.executable, str(Path(__file__).with_name("floor.py")), addr, str(port), upstream),
                note="not a resolver: bench/floor.py, a bare Python loop on uvloop (a dict of "
                     "replies, a fresh socket per miss, no checks); the floor of CPython here")


def python_floor_uring(workdir: Path, addr: str, port: int, upstream: str) -> Spec:
    spec = python_floor(workdir, addr, port, upstream)
    return Spec("python-floor-uring", addr, port, (*spec.argv, "--io-uring"),
                note="python-floor with its misses through io_uring (bench/floor.py --io-uring): "
                     "what the floor's system calls cost; splitdns does not use io_uring")


Factory = Callable[[Path, str, int, str], Spec]

# name, address, factory: the order of the round. splitdns first, so every peer's ratio has
# its reference from the same round even when a round is cut short.
PEERS: tuple[tuple[str, str, Factory], ...] = (
    ("splitdns", "127.0.0.10", splitdns),
    ("splitdns-image", "127.0.0.17", splitdns_image),
    ("unbound-1t", "127.0.0.11", unbound),
    ("python-floor", "127.0.0.15", python_floor),
    ("dnsmasq", "127.0.0.12", dnsmasq),
    ("dnsdist", "127.0.0.13", dnsdist),
    ("coredns", "127.0.0.14", coredns),
    ("python-floor-uring", "127.0.0.16", python_floor_uring),
    ("splitdns-asyncio", "127.0.0.18", splitdns_asyncio),
)
# Only with --servers: questions, not peers.
ON_REQUEST = frozenset({"python-floor-uring", "splitdns-asyncio"})


# --- processes ---------------------------------------------------------------------------------


@dataclass
class Process:
    """A server we started. Stopping it touches only PIDs we saw in its tree."""

    spec: Spec
    popen: subprocess.Popen[bytes]
    t0: float                                                 # monotonic, just before exec
    seen: dict[int, int] = field(default_factory=dict)        # pid -> start ticks

    def alive(self) -> bool:
        return self.popen.poll() is None

    def pids(self) -> list[int]:
        """The live process tree, remembered so stop() can find forked workers."""
        found = measure.tree(self.popen.pid) if self.alive() else []
        for pid in found:
            ticks = measure.start_ticks(pid)
            if ticks is not None:
                self.seen.setdefault(pid, ticks)
        return found

    def stop(self) -> None:
        self.pids()
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(STOP_TIMEOUT)
        if self.alive():
            self.popen.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(STOP_TIMEOUT)
        # Workers that outlived their parent: only if still the same process (PIDs recycle).
        for pid, ticks in self.seen.items():
            if pid != self.popen.pid and measure.start_ticks(pid) == ticks:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def assert_loopback(addr: str) -> None:
    if ipaddress.ip_address(addr) not in LOOPBACK:
        raise StartError(f"{addr} is not a loopback address: the benchmark stays on 127.0.0.0/8")


def port_holders(port: int) -> list[str]:
    """`ss` lines of sockets bound to `port`, to say who holds it."""
    try:
        out = subprocess.run(["ss", "-Hlunpt"], capture_output=True, text=True, timeout=10,
                             check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line for line in out.splitlines() if f":{port} " in line]


def check_free(addr: str, port: int) -> None:
    """Fail unless UDP and TCP addr:port can be bound (a wildcard bind elsewhere also fails)."""
    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
        with socket.socket(socket.AF_INET, kind) as probe:
            try:
                probe.bind((addr, port))
            except OSError as err:
                holders = "; ".join(port_holders(port)) or "unknown"
                raise StartError(f"{addr}:{port} is taken ({err.strerror}): {holders}") from None


def start(spec: Spec, workdir: Path, cpu: int | None) -> Process:
    """Write the server's files and exec it pinned to `cpu`; returns at once (not yet serving)."""
    assert_loopback(spec.addr)
    if shutil.which(spec.binary) is None:
        raise StartError(f"{spec.binary} is not installed")
    check_free(spec.addr, spec.port)
    d = workdir / spec.name
    d.mkdir(parents=True, exist_ok=True)
    for name, text in spec.files.items():
        (d / name).write_text(text)
    argv = (["taskset", "-c", str(cpu)] if cpu is not None else []) + list(spec.argv)
    log = (d / "output.log").open("wb")
    t0 = time.monotonic()
    # Own session: Ctrl-C reaches only the orchestrator, which then stops servers in order.
    popen = subprocess.Popen(argv, cwd=d, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    return Process(spec, popen, t0)


def wait_serving(proc: Process, workdir: Path, timeout: float = 10.0) -> float:
    """Wait for the first answer; seconds since exec. Stops the server on failure."""
    try:
        return measure.first_answer(proc.spec.addr, proc.spec.port, f"www.{ZONE}", proc.t0,
                                    proc.alive, timeout)
    except TimeoutError:
        proc.stop()
        log = workdir / proc.spec.name / "output.log"
        tail = log.read_text(errors="replace")[-600:] if log.exists() else ""
        state = "exited" if not proc.alive() else "running"
        raise StartError(f"{proc.spec.name} ({state}) did not answer within {timeout} s: {tail}") \
            from None


def version(binary: str) -> str:
    """The first line a server prints about its version, for the results' environment."""
    flags = {"nsd": ["-v"], "unbound": ["-V"], "dnsmasq": ["--version"], "dnsdist": ["--version"],
             "dnsperf": ["-h"], "coredns": ["-version"]}
    if shutil.which(binary) is None:
        return "not installed"
    try:
        done = subprocess.run([binary, *flags.get(binary, ["--version"])], capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    for line in (done.stdout + done.stderr).splitlines():
        if any(ch.isdigit() for ch in line) and ("ersion" in line or binary in line.lower()):
            return line.strip()
    return "unknown"
