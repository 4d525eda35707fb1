"""A small file in a volume shared with a VPN container, read again only when it changed: what
the OpenConnect and strongSwan watchers poll. I/O only.
Tests: tests/test_openconnect.py, tests/test_strongswan.py.
"""

from __future__ import annotations

from pathlib import Path

MAX_FILE = 65536

Stamp = tuple[int, int, int]


class WatchedFile:
    """A small file read again only when its inode, mtime or size changed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stamp: Stamp | None = None
        self.text: str | None = None
        self.error = ""

    def read(self) -> bool:
        """Look at the file; True when it changed since the last look (appeared, went, rewritten)."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            changed = self.stamp is not None or self.error != ""
            self.stamp, self.text, self.error = None, None, ""
            return changed
        except OSError as err:
            return self._failed(f"cannot read {self.path}: {err.strerror or err}")
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp == self.stamp:
            return False
        try:
            with self.path.open("rb") as f:
                data = f.read(MAX_FILE + 1)
        except OSError as err:
            return self._failed(f"cannot read {self.path}: {err.strerror or err}")
        if len(data) > MAX_FILE:
            return self._failed(f"{self.path} is larger than {MAX_FILE} bytes: not the file expected")
        self.stamp, self.text, self.error = stamp, data.decode("utf-8", "replace"), ""
        return True

    def _failed(self, why: str) -> bool:
        changed = why != self.error
        self.stamp, self.text, self.error = None, None, why
        return changed
