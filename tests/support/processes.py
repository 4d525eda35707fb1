"""Pytest-side helpers: run scripted upstream DNS servers and query them with real `dig`.

Project safety rule: nothing leaves loopback. Every address these helpers listen on or send
to is checked to be in 127.0.0.0/8 before any process starts.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

# The scripted upstream runs as `python -m tests.support.scripted_upstream` from the repository's root.
SCRIPT_MODULE = "tests.support.scripted_upstream"
ROOT = Path(__file__).parents[2]
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")

READY_TIMEOUT = 10.0
RELOAD_TIMEOUT = 3.0
STOP_TIMEOUT = 3.0
POLL_INTERVAL = 0.01
BIND_ATTEMPTS = 64

Rules = list[dict[str, Any]]
Record = tuple[str, int, str, str]
T = TypeVar("T")


def assert_loopback(addr: str) -> None:
    """Fail unless `addr` is a literal IPv4 address in 127.0.0.0/8."""
    # A hostname could resolve anywhere, so only literal addresses pass.
    try:
        ok = ipaddress.ip_address(addr) in LOOPBACK
    except ValueError:
        ok = False
    if not ok:
        raise AssertionError(f"{addr!r} is not in {LOOPBACK}: tests must not leave loopback")


def poll_until(what: str, timeout: float, done: Callable[[], T | None]) -> T:
    """Call `done()` every POLL_INTERVAL until it returns something other than None."""
    deadline = time.monotonic() + timeout
    for _ in range(math.ceil(timeout / POLL_INTERVAL) + 1):
        result = done()
        if result is not None:
            return result
        if time.monotonic() >= deadline:
            break
        time.sleep(POLL_INTERVAL)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


# --- scripted upstream -----------------------------------------------------------------


@dataclass
class Upstream:
    """A running scripted upstream process (python -m tests.support.scripted_upstream)."""

    addr: str
    port: int
    process: subprocess.Popen[bytes]
    workdir: Path

    @property
    def target(self) -> str:
        """The "addr:port" string a Corefile `forward` line wants."""
        return f"{self.addr}:{self.port}"

    @property
    def script_path(self) -> Path:
        return self.workdir / "script.json"

    @property
    def log_path(self) -> Path:
        return self.workdir / "queries.jsonl"

    @property
    def stderr_path(self) -> Path:
        return self.workdir / "stderr.log"

    def queries(self) -> list[dict[str, Any]]:
        """Every query (and malformed packet) received so far, oldest first."""
        return [entry for entry in self._log_entries() if "event" not in entry]

    def wait_for_queries(self, count: int, timeout: float = 2.0) -> list[dict[str, Any]]:
        """Wait until at least `count` queries are logged; for traffic a test does not await."""

        def enough() -> list[dict[str, Any]] | None:
            seen = self.queries()
            return seen if len(seen) >= count else None

        return poll_until(f"{count} queries to {self.target}", timeout, enough)

    def set_rules(self, rules: Rules) -> None:
        """Replace the script and wait until the server has reloaded it."""
        write_json_atomically(self.script_path, rules)
        before = len(self._events())
        self.process.send_signal(signal.SIGHUP)
        # Only set_rules sends SIGHUP, so the next event in the log answers this one.
        events = poll_until(
            f"{self.target} to reload its script",
            RELOAD_TIMEOUT,
            lambda: self._events()[before:] or None,
        )
        if events[0]["event"] != "reloaded":
            raise ValueError(f"scripted upstream rejected the rules: {events[0].get('error')}")

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def _events(self) -> list[dict[str, Any]]:
        return [entry for entry in self._log_entries() if "event" in entry]

    def _log_entries(self) -> list[dict[str, Any]]:
        try:
            text = self.log_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        # The server may be mid-write: a line without its newline is not there yet.
        complete = text[: text.rfind("\n") + 1]
        return [json.loads(line) for line in complete.splitlines() if line]


@contextmanager
def scripted_upstream(tmp_path: Path, rules: Rules, addr: str = "127.0.0.21") -> Iterator[Upstream]:
    """Run a scripted upstream DNS server on `addr` (UDP+TCP, a free port) for the block.

    The process is always stopped on exit, also when the block raises.
    """
    assert_loopback(addr)
    # Own directory per server: a test may run several upstreams on one tmp_path.
    workdir = Path(tempfile.mkdtemp(prefix=f"upstream-{addr}-", dir=tmp_path))
    write_json_atomically(workdir / "script.json", rules)
    ready_file = workdir / "ready"
    command = [
        sys.executable, "-m", SCRIPT_MODULE,
        "--addr", addr,
        "--port", "0",
        "--script", str(workdir / "script.json"),
        "--log", str(workdir / "queries.jsonl"),
        "--ready-file", str(ready_file),
    ]  # fmt: skip
    # stderr goes to a file: a pipe nobody reads could fill up and stall the server.
    with (workdir / "stderr.log").open("wb") as stderr:
        process = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=stderr,
                                   stderr=stderr)
    try:
        port = wait_ready(process, ready_file, workdir / "stderr.log")
        yield Upstream(addr=addr, port=port, process=process, workdir=workdir)
    finally:
        stop(process)


def wait_ready(process: subprocess.Popen[bytes], ready_file: Path, stderr_path: Path) -> int:
    def port_or_death() -> int | None:
        if ready_file.exists():  # written atomically, so complete once it exists
            return int(ready_file.read_text(encoding="utf-8"))
        if process.poll() is not None:
            raise RuntimeError(
                f"scripted upstream exited with {process.returncode} before it was ready:\n"
                + stderr_path.read_text(encoding="utf-8", errors="replace")
            )
        return None

    try:
        return poll_until("the scripted upstream to become ready", READY_TIMEOUT, port_or_death)
    except TimeoutError as e:
        stderr = stderr_path.read_text(encoding="utf-8", errors="replace")
        raise RuntimeError(f"{e}; its stderr:\n{stderr}") from None


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it has not gone after STOP_TIMEOUT."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(STOP_TIMEOUT)


def write_json_atomically(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(tmp, path)


def free_port(addr: str) -> int:
    """A port that was free for both UDP and TCP on `addr` a moment ago.

    Racy by nature (someone may take it before you bind); prefer port 0 where possible.
    """
    assert_loopback(addr)
    for _ in range(BIND_ATTEMPTS):
        with (
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp,
            socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp,
        ):
            udp.bind((addr, 0))
            port: int = udp.getsockname()[1]
            try:
                tcp.bind((addr, port))
            except OSError:
                continue
            return port
    raise OSError(f"no port free for both UDP and TCP on {addr} after {BIND_ATTEMPTS} tries")


# --- dig -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DigResult:
    status: str  # rcode ("NOERROR", "NXDOMAIN", ...), "TIMEOUT", or "ERROR" (no reply parsed)
    flags: frozenset[str]  # header flags of the final reply: {"qr", "rd", "ra", "tc", ...}
    question: list[tuple[str, str]]  # (name as echoed, type)
    answers: list[Record]  # (name, ttl, type, rdata)
    authority: list[Record]
    stdout: str
    stderr: str
    elapsed: float  # wall-clock seconds dig ran

    @property
    def rdata(self) -> list[str]:
        """The rdata of the answer records, e.g. ["192.0.2.1"]."""
        return [record[3] for record in self.answers]


# dig options that would make it talk to servers other than the one given (+trace walks
# from the root servers, +nssearch queries a zone's NS set, -f reads queries from a file).
FORBIDDEN_DIG_OPTIONS = ("trace", "nssearch")
HEADER_RE = re.compile(r"^;; ->>HEADER<<- opcode: \S+, status: (\S+), id: \d+$", re.MULTILINE)
FLAGS_RE = re.compile(r"^;; flags:([^;]*);", re.MULTILINE)
TIMEOUT_MARKERS = ("no servers could be reached", "timed out")
SECTIONS = {
    ";; QUESTION SECTION:": "question",
    ";; ANSWER SECTION:": "answer",
    ";; AUTHORITY SECTION:": "authority",
    ";; ADDITIONAL SECTION:": "additional",
}


def check_dig_args(args: tuple[str, ...]) -> None:
    for arg in args:
        if arg.startswith("@") or arg == "-f":
            raise AssertionError(f"dig argument {arg!r} not allowed: pass server= instead")
        if arg.startswith("+"):
            option = arg[1:].split("=", 1)[0].lower()
            # dig accepts unambiguous prefixes (+tra), so compare prefixes, not names.
            if len(option) >= 2 and any(name.startswith(option) for name in FORBIDDEN_DIG_OPTIONS):
                raise AssertionError(f"dig option {arg!r} would query servers off loopback")


def dig(*args: str, server: str, port: int, timeout: float = 3) -> DigResult:
    """Run real `dig @server -p port +tries=1 +time=N ARGS` and parse its output."""
    assert_loopback(server)
    check_dig_args(args)
    seconds = max(1, math.ceil(timeout))  # dig's +time takes whole seconds
    command = ["dig", f"@{server}", "-p", str(port), "+tries=1", f"+time={seconds}", *args]
    # HOME=/dev/null: dig then finds no ~/.digrc, whose options could change its behaviour.
    env = {**os.environ, "HOME": os.devnull}
    start = time.monotonic()
    try:
        completed = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=env,
            # A TC fallback can cost two timeouts (UDP, then TCP); allow that and a margin.
            timeout=3 * seconds + 5,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        return _timed_out(e, time.monotonic() - start)
    from tests.support import user_text  # the EDE texts a client shows

    user_text.seen("dig", completed.stdout)
    return parse_dig(completed.stdout, completed.stderr, time.monotonic() - start)


def _timed_out(e: subprocess.TimeoutExpired, elapsed: float) -> DigResult:
    def text(value: str | bytes | None) -> str:
        return value.decode(errors="replace") if isinstance(value, bytes) else value or ""

    return DigResult("TIMEOUT", frozenset(), [], [], [], text(e.stdout), text(e.stderr), elapsed)


def parse_dig(stdout: str, stderr: str, elapsed: float) -> DigResult:
    headers = list(HEADER_RE.finditer(stdout))
    if not headers:
        timed_out = any(marker in stdout + stderr for marker in TIMEOUT_MARKERS)
        status = "TIMEOUT" if timed_out else "ERROR"
        return DigResult(status, frozenset(), [], [], [], stdout, stderr, elapsed)
    # After a TC fallback or a retry dig may print more than one reply; the last one counts.
    last = headers[-1]
    reply = stdout[last.start() :]
    flags_match = FLAGS_RE.search(reply)
    flags = frozenset(flags_match.group(1).split()) if flags_match else frozenset()
    sections = parse_sections(reply)
    question = [(fields[0].lstrip(";"), fields[-1]) for fields in sections["question"]]
    return DigResult(
        status=last.group(1),
        flags=flags,
        question=question,
        answers=[to_record(fields) for fields in sections["answer"]],
        authority=[to_record(fields) for fields in sections["authority"]],
        stdout=stdout,
        stderr=stderr,
        elapsed=elapsed,
    )


def parse_sections(reply: str) -> dict[str, list[list[str]]]:
    sections: dict[str, list[list[str]]] = {name: [] for name in SECTIONS.values()}
    current: str | None = None
    for line in reply.splitlines():
        if line in SECTIONS:
            current = SECTIONS[line]
        elif not line.strip():
            current = None
        elif current == "question":
            sections[current].append(line.split())
        elif current is not None and not line.startswith(";"):
            # name ttl class type rdata; rdata may itself contain blanks (SOA, TXT).
            sections[current].append(line.split(None, 4))
    return sections


def to_record(fields: list[str]) -> Record:
    name, ttl, _rdclass, rdtype, *rest = fields
    return (name, int(ttl), rdtype, rest[0] if rest else "")
