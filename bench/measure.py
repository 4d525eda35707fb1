"""Measuring servers from the outside: dnsperf runs, CPU and memory from /proc, start-up time.

Nothing here knows which server it measures: everything takes addresses, PIDs and files.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import re
import resource
import select
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import dns.message
import dns.query
import dns.rcode
import dns.rdatatype

CLK_TCK = os.sysconf("SC_CLK_TCK")
MAX_TREE = 256              # a server with more processes than this is not what we think it is
STARTUP_PROBE_INTERVAL = 0.002
DNSPERF_GRACE = 30.0        # on top of -l: reading a big query file, then the 2 s wait for stragglers


# --- /proc: process trees, CPU, memory -------------------------------------------------------


def stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (which may hold spaces); None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def start_ticks(pid: int) -> int | None:
    """When the process started, in clock ticks since boot: with the PID, a unique identity."""
    fields = stat_fields(pid)
    return int(fields[19]) if fields else None  # field 22 of stat(5)


def _parents() -> dict[int, int]:
    out: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = stat_fields(int(entry.name))
            if fields:
                out[int(entry.name)] = int(fields[1])
    return out


def tree(pid: int) -> list[int]:
    """PID and all its live descendants (NSD forks workers; the others are one process)."""
    parents = _parents()
    if pid not in parents:
        return []
    found, frontier = [pid], [pid]
    while frontier and len(found) < MAX_TREE:
        frontier = [child for child, parent in parents.items() if parent in frontier]
        found.extend(frontier)
    return found


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU time of these processes (all their threads), in seconds."""
    ticks = 0
    for pid in pids:
        fields = stat_fields(pid)
        if fields:
            ticks += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15
    return ticks / CLK_TCK


def run_seconds(pids: Iterable[int]) -> float:
    """Time on a CPU of these processes' threads, from /proc/PID/task/*/schedstat: nanosecond
    accounting, so it holds at low rates where the 10 ms ticks of cpu_seconds are noise."""
    total = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return total / 1e9


def memory_mib(pids: Iterable[int]) -> tuple[float, float]:
    """(VmRSS, VmHWM) summed over the processes, in MiB. Shared pages count once per process."""
    rss = hwm = 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        rss += _kib(text, "VmRSS")
        hwm += _kib(text, "VmHWM")
    return rss / 1024, hwm / 1024


def _kib(status: str, key: str) -> int:
    match = re.search(rf"^{key}:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) if match else 0


@dataclass(frozen=True)
class MachineCpu:
    """The whole machine's CPU time from /proc/stat, in seconds summed over CPUs."""

    busy: float
    steal: float
    total: float

    def __sub__(self, other: MachineCpu) -> MachineCpu:
        return MachineCpu(self.busy - other.busy, self.steal - other.steal, self.total - other.total)


def machine_cpu() -> MachineCpu:
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (values + [0] * 8)[:8]
    busy = user + nice + system + irq + softirq
    return MachineCpu(busy / CLK_TCK, steal / CLK_TCK, (busy + idle + iowait + steal) / CLK_TCK)


# --- query files -------------------------------------------------------------------------------


def write_names(path: Path, prefix: str, count: int, zone: str = "bench.test") -> Path:
    """`count` distinct A queries under the wildcard zone, in a shuffled order.

    Shuffled so that neither the server's hash table nor the upstream sees names in a
    neat sequence; seeded so that every run of the benchmark sends the same names.
    """
    order = list(range(count))
    random.Random(count).shuffle(order)
    with path.open("w") as f:
        f.writelines(f"{prefix}{i}.{zone} A\n" for i in order)
    return path


# --- dnsperf -----------------------------------------------------------------------------------


@dataclass
class DnsperfResult:
    sent: int = 0
    completed: int = 0
    lost: int = 0
    rcodes: dict[str, int] = field(default_factory=dict)
    runtime: float = 0.0
    qps: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)  # per query, only with -v
    intervals: list[float] = field(default_factory=list)     # qps of each -S interval, in order

    @property
    def noerror_pct(self) -> float:
        return 100.0 * self.rcodes.get("NOERROR", 0) / self.completed if self.completed else 0.0

    def percentile(self, p: float) -> float | None:
        """Nearest-rank percentile of the per-query latencies, in ms; None without -v."""
        if not self.latencies_ms:
            return None
        ordered = sorted(self.latencies_ms)
        return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


_COUNTERS = {
    "sent": re.compile(r"Queries sent:\s+(\d+)"),
    "completed": re.compile(r"Queries completed:\s+(\d+)"),
    "lost": re.compile(r"Queries lost:\s+(\d+)"),
}
_RUNTIME = re.compile(r"Run time \(s\):\s+([\d.]+)")
_QPS = re.compile(r"Queries per second:\s+([\d.]+)")
_RCODES = re.compile(r"Response codes:\s+(.*)")
_RCODE_ITEM = re.compile(r"([A-Z]+) (\d+) \(")
_VERBOSE = re.compile(r"^> (\S+) \S+ \S+ ([\d.]+)$", re.MULTILINE)
_INTERVAL = re.compile(r"^\d+\.\d+: ([\d.]+)$", re.MULTILINE)  # -S: "<unix time>: <qps>"


class DnsperfError(RuntimeError):
    pass


def parse_dnsperf(text: str) -> DnsperfResult:
    """Read dnsperf's statistics block and, if it ran with -v, each query's latency."""
    if "Statistics:" not in text:
        raise DnsperfError(f"no statistics in dnsperf output: {text[-500:]!r}")
    out = DnsperfResult()
    for name, pattern in _COUNTERS.items():
        match = pattern.search(text)
        if match is None:
            raise DnsperfError(f"dnsperf output lacks {name!r}")
        setattr(out, name, int(match.group(1)))
    for pattern, name in ((_RUNTIME, "runtime"), (_QPS, "qps")):
        match = pattern.search(text)
        setattr(out, name, float(match.group(1)) if match else 0.0)
    rcodes = _RCODES.search(text)
    if rcodes:
        out.rcodes = {code: int(n) for code, n in _RCODE_ITEM.findall(rcodes.group(1))}
    out.latencies_ms = [float(seconds) * 1000 for _, seconds in _VERBOSE.findall(text)]
    out.intervals = [float(qps) for qps in _INTERVAL.findall(text)]
    return out


def dnsperf_argv(addr: str, port: int, names: Path, seconds: float, *, once: bool = False,
                 rate: int | None = None, verbose: bool = False, outstanding: int = 100,
                 interval: int | None = None) -> list[str]:
    """The load shape used throughout: 4 sockets, 100 in flight (unless told), 2 s timeout."""
    argv = ["dnsperf", "-s", addr, "-p", str(port), "-d", str(names), "-l", f"{seconds:g}",
            "-c", "4", "-q", str(outstanding), "-t", "2"]
    if once:
        argv += ["-n", "1"]  # each name sent once: every query a miss
    if rate:
        argv += ["-Q", str(rate)]
    if verbose:
        argv.append("-v")
    if interval:
        argv += ["-S", str(interval)]  # the rate of each interval: a cliff shows in these
    return argv


@dataclass
class Run:
    """One dnsperf run and the CPU everyone used meanwhile (seconds)."""

    result: DnsperfResult
    wall: float
    server_cpu: float
    upstream_cpu: float
    dnsperf_cpu: float
    machine: MachineCpu

    @property
    def q_per_cpu_s(self) -> float | None:
        # Below ~0.2 CPU-s the 10 ms tick makes the ratio meaningless.
        return self.result.completed / self.server_cpu if self.server_cpu >= 0.2 else None

    def share(self, cpu_seconds: float) -> float:
        """CPU seconds as % of one CPU over dnsperf's run time."""
        return 100.0 * cpu_seconds / self.result.runtime if self.result.runtime else 0.0

    @property
    def other_cpu(self) -> float:
        """Busy CPU time of processes other than server, upstream and dnsperf: noise."""
        return max(0.0, self.machine.busy - self.server_cpu - self.upstream_cpu - self.dnsperf_cpu)


def run_dnsperf(argv: list[str], cpu: int | None, server_pids: list[int], upstream_pids: list[int],
                log: Path) -> Run:
    """Run dnsperf (pinned to `cpu`) to completion and account for the CPU used meanwhile.

    The seconds of -l bound the run; the subprocess timeout bounds dnsperf itself.
    """
    seconds = float(argv[argv.index("-l") + 1])
    full = (["taskset", "-c", str(cpu)] if cpu is not None else []) + argv
    before_self = resource.getrusage(resource.RUSAGE_CHILDREN)
    server0, upstream0, machine0 = cpu_seconds(server_pids), cpu_seconds(upstream_pids), machine_cpu()
    began = time.monotonic()
    done = subprocess.run(full, capture_output=True, text=True, timeout=seconds + DNSPERF_GRACE,
                          check=False)
    wall = time.monotonic() - began
    server1, upstream1, machine1 = cpu_seconds(server_pids), cpu_seconds(upstream_pids), machine_cpu()
    after_self = resource.getrusage(resource.RUSAGE_CHILDREN)
    log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise DnsperfError(f"dnsperf exited {done.returncode}: {done.stderr.strip()[-300:]}")
    dnsperf_cpu = (after_self.ru_utime - before_self.ru_utime) + (after_self.ru_stime - before_self.ru_stime)
    return Run(parse_dnsperf(done.stdout), wall, server1 - server0, upstream1 - upstream0,
               dnsperf_cpu, machine1 - machine0)


# --- single queries: start-up timing and answer checks -----------------------------------------


def _query_wire(qid: int, name: str) -> bytes:
    labels = b"".join(bytes((len(p),)) + p.encode() for p in name.rstrip(".").split("."))
    return struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + labels + b"\x00" + struct.pack("!HH", 1, 1)


def _is_answer(reply: bytes, qid: int) -> bool:
    """NOERROR with at least one answer record, to our ID: what a client would accept."""
    if len(reply) < 12:
        return False
    rid, flags, _, ancount = struct.unpack_from("!HHHH", reply)
    return rid == qid and bool(flags & 0x8000) and flags & 0xF == 0 and ancount > 0


def first_answer(addr: str, port: int, name: str, t0: float, alive: Callable[[], bool],
                 timeout: float = 10.0) -> float:
    """Seconds from `t0` (taken just before exec) to the first answered query.

    Sends a query every 2 ms (a new ID each time) until one is answered NOERROR with an
    A record: ports bound but upstreams not yet usable does not count as started.
    """
    deadline = t0 + timeout
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        ids: set[int] = set()
        for attempt in range(math.ceil(timeout / STARTUP_PROBE_INTERVAL) + 1):
            if time.monotonic() > deadline or (attempt % 50 == 0 and not alive()):
                break
            qid = random.getrandbits(16)
            ids.add(qid)
            # ECONNREFUSED from an earlier ICMP only means the server is not there yet.
            with contextlib.suppress(OSError):
                sock.sendto(_query_wire(qid, name), (addr, port))
            readable, _, _ = select.select([sock], [], [], STARTUP_PROBE_INTERVAL)
            while readable:
                try:
                    reply = sock.recv(4096)
                except OSError:
                    break
                if any(_is_answer(reply, i) for i in ids):
                    return time.monotonic() - t0
                readable, _, _ = select.select([sock], [], [], 0)
    raise TimeoutError(f"no answer from {addr}:{port} within {timeout} s of exec")


def check_answers(addr: str, port: int, names: Iterable[str]) -> list[str]:
    """Problems with the server's answers (NOERROR with an A record expected); [] if none.

    Catches a classic benchmark trap: a server answering NXDOMAIN or REFUSED
    from its own policy at great speed, never asking the upstream.
    """
    problems = []
    for name in names:
        query = dns.message.make_query(name, dns.rdatatype.A)
        try:
            reply = dns.query.udp(query, addr, port=port, timeout=2.0)
        except Exception as err:
            problems.append(f"{name}: {err!r}")
            continue
        if reply.rcode() != dns.rcode.NOERROR or not reply.answer:
            problems.append(f"{name}: {dns.rcode.to_text(reply.rcode())}, {len(reply.answer)} answers")
    return problems
