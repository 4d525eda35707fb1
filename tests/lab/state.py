"""Which labs exist on this machine, and how to remove one even after its owner crashed.

Each lab writes `<base>/<prefix>/state.json` *before* it creates anything, and updates it as
it goes: namespaces, /etc/netns dirs, processes (PID + kernel start time). A lab whose owner
process is gone is stale and is removed by the next lab that starts. Only names with our
prefix pattern are ever touched: other tools (and other lab runs) share this machine.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .netns import LabError, alive, kill_ns_processes, list_netns, proc_start_time, run

# Fixed on purpose: a run with another base would see our namespaces as orphans.
STATE_BASE = Path("/run/splitdns-lab")
ETC_NETNS = Path("/etc/netns")
LOCK_TIMEOUT = 30.0
PREFIX_STEM = "sdl"
# "sdl" + 5 hex digits + "-" + role: the only namespace names a cleanup may delete.
NS_PATTERN = re.compile(r"^sdl[0-9a-f]{5}-[a-z]{2,6}$")


@dataclass
class ProcRecord:
    name: str
    ns: str
    pid: int
    start_time: int | None
    argv: list[str] = field(default_factory=list)


@dataclass
class LabRecord:
    """What one lab created (state.json). `manual`: started by `python -m tests.lab up`."""

    prefix: str
    owner_pid: int
    owner_start: int | None
    manual: bool = False
    created: float = field(default_factory=time.time)
    namespaces: list[str] = field(default_factory=list)
    etc_netns: list[str] = field(default_factory=list)
    processes: list[ProcRecord] = field(default_factory=list)

    @property
    def directory(self) -> Path:
        return STATE_BASE / self.prefix

    def save(self) -> None:
        """Write state.json atomically so a crash never leaves half a record."""
        tmp = self.directory / "state.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=1))
        tmp.replace(self.directory / "state.json")

    def owner_alive(self) -> bool:
        return alive(self.owner_pid, self.owner_start)

    @classmethod
    def load(cls, directory: Path) -> LabRecord | None:
        try:
            data = json.loads((directory / "state.json").read_text())
            data["processes"] = [ProcRecord(**p) for p in data.get("processes", [])]
            return cls(**data)
        except (OSError, ValueError, TypeError):
            return None


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """Serialise lab creation and cleanup between concurrent runs on this machine."""
    STATE_BASE.mkdir(parents=True, exist_ok=True)
    with open(STATE_BASE / ".lock", "w") as lock:
        deadline = time.monotonic() + LOCK_TIMEOUT
        while True:  # bounded: a hung run must not hang every later run
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LabError(
                        f"{STATE_BASE / '.lock'} held for {LOCK_TIMEOUT:.0f}s by another lab run"
                    ) from None
                time.sleep(0.02)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def new_record(manual: bool) -> LabRecord:
    """Reserve a fresh prefix (no namespace, state dir or /etc/netns dir uses it yet)."""
    existing = set(list_netns())
    for _ in range(100):
        prefix = PREFIX_STEM + secrets.token_hex(3)[:5]
        taken = any(name.startswith(prefix + "-") for name in existing)
        if not taken and not (STATE_BASE / prefix).exists():
            (STATE_BASE / prefix).mkdir(parents=True)
            pid = os.getpid()
            record = LabRecord(prefix, pid, proc_start_time(pid), manual)
            record.save()
            return record
    raise RuntimeError("could not find a free lab prefix in 100 tries")


def all_records() -> list[LabRecord]:
    if not STATE_BASE.is_dir():
        return []
    records = (LabRecord.load(d) for d in sorted(STATE_BASE.iterdir()) if d.is_dir())
    return [r for r in records if r is not None]


def destroy(record: LabRecord) -> None:
    """Remove everything a record lists. Idempotent; safe on a half-built lab."""
    for proc in record.processes:
        if alive(proc.pid, proc.start_time):
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 2.0  # SIGKILL is asynchronous: see them gone (bounded)
    while time.monotonic() < deadline and any(alive(p.pid, p.start_time) for p in record.processes):
        time.sleep(0.01)
    present = set(list_netns())
    for ns in record.namespaces:
        if ns in present and NS_PATTERN.match(ns):
            kill_ns_processes(ns)
            run(["ip", "netns", "del", ns], check=False)
    for ns in record.etc_netns:
        if NS_PATTERN.match(ns):
            shutil.rmtree(ETC_NETNS / ns, ignore_errors=True)
    shutil.rmtree(record.directory, ignore_errors=True)


def cleanup_stale() -> list[str]:
    """Remove labs whose owner died (crash, SIGKILL) and orphans with our name pattern.

    Returns what was removed. Labs with a live owner (another pytest run, the keeper process
    of `python -m tests.lab up`) are left alone.
    """
    removed: list[str] = []
    # Every state dir counts as "known", even one whose state.json is not written yet.
    known = {d.name for d in STATE_BASE.iterdir() if d.is_dir()} if STATE_BASE.is_dir() else set()
    for record in all_records():
        if not record.owner_alive():
            destroy(record)
            removed.append(record.prefix)
    for directory in STATE_BASE.glob(PREFIX_STEM + "*"):
        # A dir without state.json after a minute: its creator died between mkdir and save.
        unreadable = LabRecord.load(directory) is None
        if directory.is_dir() and unreadable and time.time() - directory.stat().st_mtime > 60:
            shutil.rmtree(directory, ignore_errors=True)
            known.discard(directory.name)
            removed.append(str(directory))
    # Orphans: namespaces or /etc/netns dirs with our pattern whose state dir is gone (e.g. the
    # state base was wiped). A live lab always has its state dir, written before any namespace.
    for ns in list_netns():
        if NS_PATTERN.match(ns) and ns.split("-")[0] not in known:
            kill_ns_processes(ns)
            run(["ip", "netns", "del", ns], check=False)
            removed.append(ns)
    if ETC_NETNS.is_dir():
        for entry in ETC_NETNS.iterdir():
            if NS_PATTERN.match(entry.name) and entry.name.split("-")[0] not in known:
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(str(entry))
    return removed
