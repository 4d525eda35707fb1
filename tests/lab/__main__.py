"""`python -m tests.lab up|down|status`: the lab by hand (`make lab-up` / `make lab-down`).

`up` starts a small keeper process that owns the lab: it builds it, reports, then sleeps
until `down` sends it SIGTERM and removes everything itself. The lab therefore always has a
live owner (a pytest run's stale-lab cleanup leaves it alone) and its processes a parent
that reaps them. If the keeper dies, the lab is stale and the next start of any lab removes
it; `down` also does.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from . import configs as c
from .netns import LabError, alive, list_netns, log_tail
from .ready import addresses, query
from .state import STATE_BASE, LabRecord, all_records, cleanup_stale, destroy, locked
from .topology import Lab, PodSpec

REPO = Path(__file__).resolve().parents[2]
UP_TIMEOUT = 60.0
DOWN_TIMEOUT = 15.0
KEEPER_LOG = STATE_BASE / "keeper.log"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.lab", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="Build the lab and leave it running.")
    up.add_argument("--resolver", choices=c.RESOLVERS, default=None,
                    help="The pod's resolver (default: SPLITDNS_LAB_RESOLVER or "
                         f"{c.DEFAULT_RESOLVER}).")  # fmt: skip
    sub.add_parser("down", help="Remove the hand-started lab and any stale lab.")
    sub.add_parser("status", help="Show labs on this machine and check the hand-started one.")
    keep = sub.add_parser("_keep", help=argparse.SUPPRESS)
    keep.add_argument("--resolver", default=None)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("the lab needs root (network namespaces)", file=sys.stderr)
        return 2
    if args.command != "_keep":  # `status | head` should end quietly; the keeper must not
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    commands = {"up": cmd_up, "down": cmd_down, "status": cmd_status, "_keep": cmd_keep}
    return commands[args.command](args)


def manual_labs() -> list[LabRecord]:
    return [r for r in all_records() if r.manual and r.owner_alive()]


def cmd_up(args: argparse.Namespace) -> int:
    existing = manual_labs()
    if existing:
        print(f"a lab is already up ({existing[0].prefix}); `python -m tests.lab down` first")
        print(Lab.attach(existing[0]).describe())
        return 0
    argv = [sys.executable, "-m", "tests.lab", "_keep"]
    if args.resolver:
        argv += ["--resolver", args.resolver]
    t0 = time.monotonic()
    STATE_BASE.mkdir(parents=True, exist_ok=True)
    with open(KEEPER_LOG, "wb") as log:  # the keeper's stderr, kept for post-mortems
        keeper = subprocess.Popen(
            argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
            start_new_session=True,
        )  # fmt: skip
    report = read_until_eof(keeper, UP_TIMEOUT)
    if not report.startswith("READY "):
        if keeper.poll() is None:  # hung: ask it where (faulthandler), then stop it
            keeper.send_signal(signal.SIGUSR1)
            time.sleep(0.5)
            keeper.terminate()
        print(report or f"the lab keeper gave no report within {UP_TIMEOUT:.0f}s", file=sys.stderr)
        print(f"keeper log {KEEPER_LOG}:\n{log_tail(KEEPER_LOG, 40)}", file=sys.stderr)
        return 1
    print(f"lab up in {time.monotonic() - t0:.2f}s (keeper pid {keeper.pid})")
    print(report.split("\n", 1)[1])
    return 0


def read_until_eof(proc: subprocess.Popen[bytes], timeout: float) -> str:
    """The keeper's report: everything it writes before closing stdout, bounded in time."""
    assert proc.stdout is not None
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                break
            data = os.read(proc.stdout.fileno(), 65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode(errors="replace").strip()


def cmd_keep(args: argparse.Namespace) -> int:
    """The keeper: own the lab until SIGTERM/SIGINT/SIGHUP, then remove it."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    spec = PodSpec(resolver=args.resolver) if args.resolver else PodSpec()
    lab = Lab(spec, manual=True)
    try:
        try:
            lab.up()
        except LabError as exc:
            print(f"lab up failed: {exc}", flush=True)
            return 1
        print(f"READY {lab.prefix}\n{lab.describe()}", flush=True)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # our stdout's EOF tells `up` we are done
        while True:
            signal.pause()
    finally:
        lab.down()


def cmd_down(args: argparse.Namespace) -> int:
    removed = 0
    for record in manual_labs():
        removed += 1
        os.kill(record.owner_pid, signal.SIGTERM)
        deadline = time.monotonic() + DOWN_TIMEOUT
        while record.directory.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if record.directory.exists():  # the keeper hangs: remove it ourselves
            if alive(record.owner_pid, record.owner_start):
                os.kill(record.owner_pid, signal.SIGKILL)
            destroy(record)
        print(f"removed lab {record.prefix}")
    with locked():
        for name in cleanup_stale():
            removed += 1
            print(f"removed stale {name}")
    if not removed:
        print("no lab to remove")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    records = all_records()
    if not records:
        print("no lab is up")
        return 1
    present = set(list_netns())
    for record in records:
        kind = "manual (python -m tests.lab up)" if record.manual else "owned by a test run"
        owner = "alive" if record.owner_alive() else "DEAD (stale: removed at next start)"
        procs = sum(alive(p.pid, p.start_time) for p in record.processes)
        nss = sum(ns in present for ns in record.namespaces)
        print(f"{record.prefix}: {kind}, owner pid {record.owner_pid} {owner}, "
              f"{nss}/{len(record.namespaces)} namespaces, "
              f"{procs}/{len(record.processes)} processes running")  # fmt: skip
    for record in manual_labs():
        lab = Lab.attach(record)
        for name in (c.KUBERNETES_NAME, c.DB_NAME, c.CATCHALL_NAME):
            try:
                answer = ", ".join(addresses(query(lab.pod, "127.0.0.1", name))) or "(no address)"
            except Exception as exc:  # status reports, never raises
                answer = f"FAILED: {type(exc).__name__}: {exc}"
            print(f"  {name}: {answer}")
        print(lab.describe())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
