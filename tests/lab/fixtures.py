"""The pytest side of the lab: prerequisites (skip or fail) and `lab_session`.

A test module makes its fixture with it (a fixture imported by name trips ruff's F811):

    @pytest.fixture(scope="module")
    def lab() -> Iterator[Lab]:
        with lab_session() as running:
            yield running
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from tests.support.prerequisites import skip_or_fail

from .netns import run
from .topology import Lab

# Programs the lab runs; the apt packages are in the Makefile's DEBIAN_PACKAGES.
PROGRAMS = ("ip", "openvpn", "dnsmasq", "dig", "getent", "iptables",
            "iptables-restore", "sysctl", "openssl")  # fmt: skip


def missing_prerequisite() -> str | None:
    """Why the lab cannot run here, or None."""
    if os.geteuid() != 0:
        return "the netns lab needs root (network namespaces, /dev/net/tun, port 53)"
    missing = [p for p in PROGRAMS if shutil.which(p) is None]
    if missing:
        return f"the netns lab needs {', '.join(missing)} (see DEBIAN_PACKAGES in the Makefile)"
    if not Path("/dev/net/tun").exists():
        return "the netns lab needs /dev/net/tun for OpenVPN"
    try:
        run(["ip", "netns", "list"], timeout=5)
    except Exception as exc:  # any failure: no ip netns here
        return f"`ip netns` does not work here: {exc}"
    return None


def require_lab() -> None:
    """Skip with the reason, or fail if SPLITDNS_LAB_REQUIRED=1 (CI: a skip would hide it)."""
    reason = missing_prerequisite()
    if reason is None:
        return
    skip_or_fail(reason)


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt so pytest runs fixture teardown (CI cancels)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def lab_session(lab: Lab | None = None) -> Iterator[Lab]:
    """Skip if impossible, then build `lab` (default: the reference scenario's pod) and always remove it."""
    require_lab()
    with sigterm_interrupts(), lab or Lab() as running:
        yield running
