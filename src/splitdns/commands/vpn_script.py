"""Writing a script a VPN container runs (the WireGuard resolvconf shim, the OpenConnect hook)
into a volume it mounts: whole or not at all, executable by the container's user.
Tests: tests/test_wireguard.py, tests/test_openconnect.py.
"""

from __future__ import annotations

import os
from pathlib import Path


def install(directory: str, name: str, script: str) -> Path:
    """Write `script` as DIR/NAME, executable by everyone (the VPN container's user); atomically,
    so a container starting meanwhile never runs half a script."""
    target = Path(directory) / name
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{name}.{os.getpid()}")
    tmp.write_text(script, encoding="utf-8")
    tmp.chmod(0o755)
    os.replace(tmp, target)
    return target
