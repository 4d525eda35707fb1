"""Tools for the hostile-input and fault suite (tests/test_hostile_*.py, tests/hostile_soak.py).

Raw UDP/TCP clients that measure every reply, a dnsperf runner that keeps per-query
latencies, process figures read from /proc, a metrics scraper, and `figure()`, which prints
a test's figure and, when SPLITDNS_FIGURES names a file (`make test-hostile` sets it),
appends it there for the results file. Everything sent goes to 127.0.0.0/8.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import secrets
import selectors
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dns.message
import dns.rcode

from tests.helpers import query
from tests.support.processes import Rules, Upstream, assert_loopback, free_port, scripted_upstream
from tests.support.resolver import Resolver, http_get, splitdns_serve

RESOLVER = "127.0.0.1"
FIGURES_ENV = "SPLITDNS_FIGURES"
MAX_PACKETS = 1_000_000  # every loop here is bounded; no helper sends more than this per call


def figure(code: str, text: str) -> None:
    """Print a test's figure (`pytest -s` shows it) and keep it for the results file."""
    line = f"{code}: {text}"
    print(line)
    path = os.environ.get(FIGURES_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(line + "\n")


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


# --- raw clients -------------------------------------------------------------------------


def wire_of(msg: dns.message.Message | bytes) -> bytes:
    if isinstance(msg, bytes):
        return msg
    data = msg.to_wire()
    assert isinstance(data, bytes)
    return data


def ask_udp(port: int, msg: dns.message.Message | bytes, timeout: float = 3.0,
            addr: str = RESOLVER) -> tuple[bytes | None, float]:
    """One query on a fresh socket: the reply (None on timeout) and the seconds it took.

    The socket is connected to the resolver, so only its datagrams arrive: on a machine where
    other tests run, a late reply of another process to a port this socket reuses is dropped
    by the kernel instead of being taken for the resolver's."""
    data, seconds, _ = _ask_udp_telling_refused(port, msg, timeout, addr)
    return data, seconds


def udp_outcome(port: int, msg: dns.message.Message | bytes, timeout: float = 3.0,
                addr: str = RESOLVER) -> str:
    """One query as `ask_udp` asks it: the reply's rcode, "TIMEOUT" without one in `timeout`,
    or "PORT UNREACHABLE" when the kernel refused it at once (nothing bound to the port), which
    `ask_udp` cannot tell from a timeout."""
    data, _, refused = _ask_udp_telling_refused(port, msg, timeout, addr)
    return "PORT UNREACHABLE" if refused else rcode_of(data)


def _ask_udp_telling_refused(port: int, msg: dns.message.Message | bytes, timeout: float,
                             addr: str) -> tuple[bytes | None, float, bool]:
    """The reply (None without one), the seconds from the send, and whether the kernel
    refused the query at once (port unreachable) rather than letting it time out."""
    assert_loopback(addr)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.connect((addr, port))
        start = time.monotonic()
        sock.send(wire_of(msg))
        try:
            return sock.recv(65535), time.monotonic() - start, False
        except TimeoutError:
            return None, time.monotonic() - start, False
        except ConnectionRefusedError:
            return None, time.monotonic() - start, True


def ask_tcp(port: int, msg: dns.message.Message | bytes, timeout: float = 3.0,
            addr: str = RESOLVER) -> tuple[bytes | None, float]:
    assert_loopback(addr)
    start = time.monotonic()
    try:
        with socket.create_connection((addr, port), timeout=timeout) as sock:
            data = wire_of(msg)
            sock.sendall(struct.pack("!H", len(data)) + data)
            length = struct.unpack("!H", recv_exact(sock, 2))[0]
            return recv_exact(sock, length), time.monotonic() - start
    except (TimeoutError, ConnectionError, EOFError):
        return None, time.monotonic() - start


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def rcode_of(reply: bytes | None) -> str:
    if reply is None:
        return "TIMEOUT"
    if len(reply) < 12:
        return "SHORT"
    try:
        return dns.rcode.to_text(dns.message.from_wire(reply).rcode())
    except Exception:  # a reply we cannot parse is itself a finding; say so
        return f"RCODE{reply[3] & 0xF}-UNPARSEABLE"


@dataclass
class Outcome:
    sent: bytes
    reply: bytes | None = None
    latency: float | None = None  # seconds from send to reply

    @property
    def rcode(self) -> str:
        return rcode_of(self.reply)


def udp_burst(port: int, queries: Sequence[bytes], *, per_socket: bool = False,
              rate: float | None = None, timeout: float = 3.0, addr: str = RESOLVER,
              extra_replies: bool = False) -> list[Outcome]:
    """Send every query (paced at `rate` per second, else at once) and collect the replies.

    per_socket: each query from its own socket (its ID kept as given; ≤ 5,000 queries);
    otherwise one socket, and query i gets ID i mod 65536, replies matched by ID.
    Waits `timeout` seconds after the last send for stragglers. With extra_replies, a
    second reply to a query is an error (AssertionError): each client gets exactly one.
    Every socket is connected to the resolver (see ask_udp): what arrives is the resolver's.
    """
    assert_loopback(addr)
    assert len(queries) <= MAX_PACKETS
    outcomes = [Outcome(q) for q in queries]
    sel = selectors.DefaultSelector()
    socks: list[socket.socket] = []
    by_id: dict[int, int] = {}
    try:
        if per_socket:
            assert len(queries) <= 5000
            for i in range(len(queries)):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.setblocking(False)
                s.connect((addr, port))
                socks.append(s)
                sel.register(s, selectors.EVENT_READ, i)
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
            s.setblocking(False)
            s.connect((addr, port))
            socks.append(s)
            sel.register(s, selectors.EVENT_READ, -1)
        sent_at: list[float] = [0.0] * len(queries)
        start = time.monotonic()
        next_send = 0
        answered = 0
        deadline = math.inf
        while answered < len(queries):
            now = time.monotonic()
            while next_send < len(queries) and (rate is None or now >= start + next_send / rate):
                i = next_send
                data = queries[i]
                if per_socket:
                    sock = socks[i]
                else:
                    data = struct.pack("!H", i & 0xFFFF) + data[2:]
                    outcomes[i].sent = data
                    by_id[i & 0xFFFF] = i
                    sock = socks[0]
                sent_at[i] = time.monotonic()
                try:
                    sock.send(data)
                except BlockingIOError:
                    break  # our send buffer is full: try again after reading
                except ConnectionRefusedError:
                    pass  # an earlier datagram found the port closed: this one goes unanswered
                next_send += 1
                if rate is None and next_send % 256 == 0:
                    break  # read in between, so our own receive buffer does not overflow
            if next_send == len(queries) and deadline == math.inf:
                deadline = time.monotonic() + timeout
            if time.monotonic() > deadline:
                break
            wait = 0.0 if next_send < len(queries) and rate is None else 0.005
            for key, _ in sel.select(wait):
                sock = key.fileobj  # type: ignore[assignment]
                for _ in range(512):
                    try:
                        data = sock.recv(65535)
                    except (BlockingIOError, InterruptedError):
                        break
                    except ConnectionRefusedError:
                        continue
                    got = time.monotonic()
                    i = key.data if key.data >= 0 else by_id.get(struct.unpack_from("!H", data)[0], -1)
                    if i < 0:
                        continue
                    out = outcomes[i]
                    if out.reply is not None:
                        if extra_replies:
                            raise AssertionError(f"query {i} got a second reply")
                        continue
                    out.reply, out.latency = data, got - sent_at[i]
                    answered += 1
        return outcomes
    finally:
        sel.close()
        for s in socks:
            s.close()


# --- dnsperf -----------------------------------------------------------------------------


@dataclass
class PerfRun:
    sent: int
    completed: int
    rcodes: dict[str, int]
    latencies: list[float]
    qps: float
    stdout: str
    by_rcode: dict[str, list[float]]

    @property
    def lost(self) -> int:
        return self.sent - self.completed

    def p(self, pct: float) -> float:
        return percentile(self.latencies, pct)


VERBOSE_LINE = re.compile(r"^> (\S+) (\S+) (\S+)(?: (\d+\.\d+))?$", re.MULTILINE)


def dnsperf(port: int, names: Sequence[str], *, seconds: float, qps: float | None = None,
            outstanding: int = 100, tcp: bool = False, timeout: float = 3.0,
            clients: int = 1) -> PerfRun:
    """Real dnsperf against the resolver on loopback, with per-query latencies (-v)."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as data:
        data.write("\n".join(names) + "\n")
    try:
        cmd = ["dnsperf", "-s", RESOLVER, "-p", str(port), "-d", data.name, "-l", f"{seconds:g}",
               "-t", f"{timeout:g}", "-q", str(outstanding), "-c", str(clients), "-v"]
        if qps:
            cmd += ["-Q", str(int(qps))]
        if tcp:
            cmd += ["-m", "tcp"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + timeout + 30,
                              check=False)
    finally:
        os.unlink(data.name)
    out = done.stdout
    rcodes: dict[str, int] = {}
    latencies: list[float] = []
    by_rcode: dict[str, list[float]] = {}
    for m in VERBOSE_LINE.finditer(out):
        rcodes[m.group(1)] = rcodes.get(m.group(1), 0) + 1
        if m.group(4) is not None:
            latencies.append(float(m.group(4)))
            by_rcode.setdefault(m.group(1), []).append(float(m.group(4)))
    sent = int(_stat(out, r"Queries sent:\s+(\d+)"))
    completed = int(_stat(out, r"Queries completed:\s+(\d+)"))
    qps_done = _stat(out, r"Queries per second:\s+([\d.]+)")
    return PerfRun(sent, completed, rcodes, latencies, qps_done, out, by_rcode)


def _stat(text: str, pattern: str) -> float:
    m = re.search(pattern, text)
    if m is None:
        raise AssertionError(f"dnsperf output lacks {pattern!r}:\n{text[-2000:]}")
    return float(m.group(1))


# --- the resolver process from outside ---------------------------------------------------


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tcp_connections(pid: int) -> int:
    """TCP sockets `pid` holds other than its listeners (any state but LISTEN)."""
    return len(tcp_sockets(pid))


def held_tcp_connections(pid: int, gap: float = 0.1) -> int:
    """Connections `pid` holds now and still `gap` seconds later: held, not being closed."""
    first = tcp_sockets(pid)
    time.sleep(gap)
    return len(first & tcp_sockets(pid))


def tcp_sockets(pid: int) -> set[str]:
    """Inodes of the TCP sockets `pid` has open, listeners left out."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[9] in inodes and fields[3] != "0A":
                    found.add(fields[9])
    return found


def metrics(port: int) -> dict[str, float]:
    """The resolver's /metrics as {'name{labels}': value}."""
    status, text = http_get(port, "/metrics")
    assert status == 200, text
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def metric(values: dict[str, float], name: str, **labels: str) -> float:
    """Sum of the series of `name` whose labels include `labels`."""
    total = 0.0
    for key, value in values.items():
        base, _, rest = key.partition("{")
        if base != name:
            continue
        if all(f'{k}="{v}"' in rest for k, v in labels.items()):
            total += value
    return total


@contextmanager
def raised_fd_limit(n: int) -> Iterator[None]:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, n), hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# --- the catalogue's split fixture -------------------------------------------------------

ANY_ADDR, TUNNEL_ADDR, CLUSTER_ADDR = "127.0.0.30", "127.0.0.20", "127.0.0.10"
ANY_RULES: list[dict[str, Any]] = [{"suffix": ".", "records": ["{qname} 60 IN A 192.0.2.1"]}]
TUNNEL_RULES: list[dict[str, Any]] = [{"suffix": "corp.example", "records": ["{qname} 60 IN A 10.8.0.5"]}]
CLUSTER_RULES: list[dict[str, Any]] = [{"suffix": ".", "records": ["{qname} 30 IN A 10.96.0.1"]}]


@dataclass
class Split:
    """The catalogue's fixture: U-any 127.0.0.30 (zone .), U-tunnel .20 (corp.example),
    U-cluster .10 (cluster.local and 10.in-addr.arpa), and the resolver under test."""

    r: Resolver
    any: Upstream
    tunnel: Upstream
    cluster: Upstream
    mport: int
    hport: int = 0
    rport: int = 0

    def ask(self, name: str, rdtype: str = "A", tcp: bool = False, timeout: float = 3.0,
            **kw: Any) -> dns.message.Message:
        msg = query(name, rdtype, qid=secrets.randbits(16), **kw)
        data, _ = (ask_tcp if tcp else ask_udp)(self.r.port, msg, timeout)
        assert data is not None, f"no reply for {name} {rdtype}"
        return dns.message.from_wire(data)

    def timed(self, name: str, rdtype: str = "A", timeout: float = 8.0,
              **kw: Any) -> tuple[dns.message.Message | None, float]:
        data, elapsed = ask_udp(self.r.port, query(name, rdtype, qid=secrets.randbits(16), **kw), timeout)
        return (None if data is None else dns.message.from_wire(data)), elapsed

    def metrics(self) -> dict[str, float]:
        return metrics(self.mport)

    def mismatched(self) -> float:
        return metric(self.metrics(), "splitdns_upstream_replies_dropped_total", reason="mismatch")

    def unparseable(self) -> float:
        return metric(self.metrics(), "splitdns_upstream_replies_dropped_total", reason="unparseable")


def split_corefile(s: Split, *, cache: str, any_forward: str, tunnel_forward: str,
                   cluster_forward: str, top: str, tunnel_cache: str | None) -> str:
    ops = ""
    if s.hport:
        ops = f"health 127.0.0.1:{s.hport}\n    ready 127.0.0.1:{s.rport}"
    return f"""
. {{
    prometheus 127.0.0.1:{s.mport}
    {ops}
    {top}
    {cache}
    forward . {s.any.target} {{
        {any_forward}
    }}
}}
corp.example {{
    {cache if tunnel_cache is None else tunnel_cache}
    forward . {s.tunnel.target} {{
        {tunnel_forward}
    }}
}}
cluster.local 10.in-addr.arpa {{
    {cache}
    forward . {s.cluster.target} {{
        {cluster_forward}
    }}
}}
"""


START_ATTEMPTS = 3  # resolver start-ups tried when a port was taken under it


@contextmanager
def split_dns(tmp_path: Path, *, any_rules: Rules | None = None, tunnel_rules: Rules | None = None,
              cluster_rules: Rules | None = None, cache: str = "cache 300", any_forward: str = "",
              tunnel_forward: str = "", cluster_forward: str = "", top: str = "",
              tunnel_cache: str | None = None, ops: bool = False) -> Iterator[Split]:
    """Three scripted upstreams and the resolver under test, as the catalogue lays them out."""
    with scripted_upstream(tmp_path, any_rules or ANY_RULES, ANY_ADDR) as any_, \
            scripted_upstream(tmp_path, tunnel_rules or TUNNEL_RULES, TUNNEL_ADDR) as tunnel, \
            scripted_upstream(tmp_path, cluster_rules or CLUSTER_RULES, CLUSTER_ADDR) as cluster:
        for attempt in range(START_ATTEMPTS):
            mport = free_port(RESOLVER)
            hport, rport = (free_port(RESOLVER), free_port(RESOLVER)) if ops else (0, 0)
            s = Split(None, any_, tunnel, cluster, mport, hport, rport)  # type: ignore[arg-type]
            text = split_corefile(s, cache=cache, any_forward=any_forward, tunnel_forward=tunnel_forward,
                                  cluster_forward=cluster_forward, top=top, tunnel_cache=tunnel_cache)
            started = contextlib.ExitStack()
            try:
                s.r = started.enter_context(splitdns_serve(tmp_path, text))
            except RuntimeError as err:
                # free_port's ports were free a moment ago; any socket a test opens may take
                # one from the same ephemeral range before splitdns binds it: new ports.
                if "address already in use" not in str(err) or attempt == START_ATTEMPTS - 1:
                    raise
                continue
            with started:
                yield s
            return


def names_seen(up: Upstream, qtype: str | None = None) -> list[str]:
    """Lower-cased names an upstream was asked (health probes for "." included), in order."""
    return [q["qname"].lower() for q in up.queries()
            if "qname" in q and (qtype is None or q["qtype"] == qtype)]


def rdata(msg: dns.message.Message) -> list[str]:
    return [rd.to_text() for rrset in msg.answer for rd in rrset]
