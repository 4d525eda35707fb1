"""Low-level helpers for the lab: commands, namespaced processes, sockets and bounded waits.

Everything here acts on a network namespace *by name*; nothing touches the host namespace's
interfaces, routes or firewall. Processes are started with `ip netns exec`, which also
bind-mounts /etc/netns/<ns>/resolv.conf over /etc/resolv.conf (how the lab gives the pod the
resolv.conf its spec produces).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

_CLONE_NEWNET = 0x40000000
_LIBC = ctypes.CDLL(None, use_errno=True)


class LabError(RuntimeError):
    """The lab could not be built, checked or torn down; the message says what and shows logs."""


def log_tail(path: Path, lines: int = 25) -> str:
    """Last lines of a log file, for error messages (a process that died says why there)."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(no log at {path}: {exc.strerror})"
    tail = text.splitlines()[-lines:]
    return "\n".join(f"    | {line}" for line in tail) or "    | (empty log)"


def run(
    argv: Sequence[str], *, timeout: float = 10.0, check: bool = True, stdin: str | None = None
) -> str:
    """Run a short command and return its stdout; a failure raises LabError with stderr."""
    try:
        proc = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"timed out after {timeout:.0f}s: {' '.join(argv)}") from exc
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        raise LabError(f"failed ({proc.returncode}): {' '.join(argv)}\n    {detail}")
    return proc.stdout


def ns_run(
    ns: str,
    argv: Sequence[str],
    *,
    timeout: float = 10.0,
    check: bool = True,
    stdin: str | None = None,
) -> str:
    """`run` inside namespace `ns` (and with its /etc/netns/<ns> files bind-mounted)."""
    return run(["ip", "netns", "exec", ns, *argv], timeout=timeout, check=check, stdin=stdin)


def ip_batch(commands: Sequence[str], *, ns: str | None = None, timeout: float = 10.0) -> None:
    """Run many `ip` commands in one process (`ip [-n NS] -batch`): one fork, not dozens."""
    script = "\n".join(commands) + "\n"
    argv = ["ip", *(["-n", ns] if ns else []), "-batch", "-"]
    try:
        proc = subprocess.run(argv, input=script, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"ip -batch timed out after {timeout:.0f}s") from exc
    if proc.returncode != 0:
        where = f" -n {ns}" if ns else ""
        raise LabError(f"ip{where} -batch failed:\n    {proc.stderr.strip()}\n  script:\n{script}")


def list_netns() -> list[str]:
    """Names of all network namespaces (`ip netns list` prints `name (id: N)`)."""
    return [line.split()[0] for line in run(["ip", "netns", "list"]).splitlines() if line.strip()]


def netns_pids(ns: str) -> list[int]:
    """PIDs of every process living in namespace `ns` (ours by construction)."""
    out = run(["ip", "netns", "pids", ns], check=False)
    return [int(p) for p in out.split() if p.isdigit()]


def proc_start_time(pid: int) -> int | None:
    """Kernel start time of `pid` (clock ticks), or None if gone.

    Recorded next to every PID so a later cleanup never signals a recycled PID.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22; the command name (field 2) may contain spaces, so split after its ')'.
    return int(stat.rsplit(")", 1)[1].split()[19])


def alive(pid: int, start_time: int | None) -> bool:
    """True if `pid` still runs and is the same process we recorded (not a zombie)."""
    now = proc_start_time(pid)
    if now is None or (start_time is not None and now != start_time):
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_for(
    probe: Callable[[], T | None],
    *,
    what: str,
    timeout: float,
    interval: float = 0.02,
    detail: Callable[[], str] = lambda: "",
) -> T:
    """Poll `probe` until it returns a value (not None), bounded in time and in count."""
    deadline = time.monotonic() + timeout
    max_tries = int(timeout / interval) + 50
    last_error = ""
    for _ in range(max_tries):
        try:
            value = probe()
        except LabError:
            raise  # a dead process: no point in waiting longer
        except Exception as exc:  # a failing probe means "not yet"
            value, last_error = None, f"{type(exc).__name__}: {exc}"
        if value is not None:
            return value
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    extra = detail()
    raise LabError(
        f"timed out after {timeout:.1f}s waiting for {what}"
        + (f" (last error: {last_error})" if last_error else "")
        + (f"\n{extra}" if extra else "")
    )


@dataclass
class Proc:
    """A process the lab started in a namespace, with its log file."""

    name: str
    ns: str
    argv: list[str]
    log: Path
    pid: int
    start_time: int | None
    popen: subprocess.Popen[bytes] | None = None

    def running(self) -> bool:
        if self.popen is not None and self.popen.poll() is not None:
            return False
        return alive(self.pid, self.start_time)

    def check_alive(self) -> None:
        """Raise LabError with the log tail if the process has exited."""
        if not self.running():
            code = self.popen.returncode if self.popen is not None else "?"
            raise LabError(
                f"{self.name} (pid {self.pid}, ns {self.ns}) exited with code {code}; "
                f"command: {' '.join(self.argv)}\n  log {self.log}:\n{log_tail(self.log)}"
            )


def start(name: str, ns: str, argv: Sequence[str], log: Path, cwd: Path) -> Proc:
    """Start `argv` in namespace `ns`, stdout+stderr to `log`.

    A new session keeps the terminal's Ctrl-C and hang-up away from it: the lab, not the
    terminal, decides when it stops (and `python -m tests.lab up` must outlive its shell).
    `ip netns exec` execs the command, so the PID we get is the server's own PID.
    """
    full = ["ip", "netns", "exec", ns, *argv]
    with open(log, "ab") as out:
        popen = subprocess.Popen(
            full,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
        )
    return Proc(name, ns, list(argv), log, popen.pid, proc_start_time(popen.pid), popen)


def stop_all(procs: Sequence[Proc], *, grace: float = 1.0) -> None:
    """SIGTERM every process, wait up to `grace` seconds in total, then SIGKILL the rest."""
    for proc in procs:
        signal_proc(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace
    pending = [p for p in procs if p.running()]
    while pending and time.monotonic() < deadline:
        time.sleep(0.01)
        pending = [p for p in pending if p.running()]
    for proc in pending:
        signal_proc(proc, signal.SIGKILL)
    for proc in procs:
        if proc.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=2)


def signal_proc(proc: Proc, sig: int) -> None:
    """Signal a recorded process only if it is still the process we started."""
    if alive(proc.pid, proc.start_time):
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)


def kill_ns_processes(ns: str) -> None:
    """SIGKILL whatever still runs in one of our namespaces (e.g. a stray dig or shell)."""
    victims = [(pid, proc_start_time(pid)) for pid in netns_pids(ns)]
    for pid, _ in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 2.0  # SIGKILL is asynchronous: see them gone (bounded)
    while time.monotonic() < deadline and any(alive(pid, st) for pid, st in victims):
        time.sleep(0.01)


def socket_in(
    ns: str, family: int = socket.AF_INET, kind: int = socket.SOCK_DGRAM
) -> socket.socket:
    """A socket that lives in namespace `ns`, usable from this process.

    A socket belongs to the namespace its creator was in, so a short-lived thread joins `ns`
    (setns only moves the calling thread), creates the socket and ends. Python 3.11 has no
    os.setns, hence ctypes.
    """
    result: dict[str, object] = {}

    def enter_and_create() -> None:
        try:
            fd = os.open(f"/run/netns/{ns}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _LIBC.setns(fd, _CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({ns}): {os.strerror(err)}")
            finally:
                os.close(fd)
            result["sock"] = socket.socket(family, kind)
        except BaseException as exc:  # re-raised in the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=enter_and_create, name=f"setns-{ns}", daemon=True)
    thread.start()
    thread.join(timeout=5)
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    sock = result.get("sock")
    if not isinstance(sock, socket.socket):
        raise LabError(f"could not create a socket in namespace {ns}")
    return sock


def tcp_connect_in(ns: str, host: str, port: int, timeout: float) -> bytes:
    """Connect from namespace `ns` to host:port (IP literal), return the first bytes read."""
    with socket_in(ns, socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect((host, port))
        return sock.recv(256)
