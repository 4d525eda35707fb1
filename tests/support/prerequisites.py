"""One rule for a test that cannot run here: skip, or fail when a prerequisite is required.

On a developer's machine a missing tool (dig, nsd, kubectl), root, network namespaces, IPv6
`::1` or a package index is a reason to skip, said in the skip. CI sets
SPLITDNS_LAB_REQUIRED=1 (`.ci/run`): there every prerequisite is installed by `make test`, so a
missing one is a failure, never a skip that would hide a test that no longer runs.
"""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest

REQUIRED_ENV = "SPLITDNS_LAB_REQUIRED"


def required() -> bool:
    return os.environ.get(REQUIRED_ENV) == "1"


def skip_or_fail(reason: str) -> NoReturn:
    """Skip with the reason, or fail if SPLITDNS_LAB_REQUIRED=1 (CI: a skip would hide it)."""
    if required():
        pytest.fail(f"{REQUIRED_ENV}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def need_root(why: str) -> None:
    if os.geteuid() != 0:
        skip_or_fail(f"needs root {why}")


def need_tools(*tools: str, hint: str = "make deps-debian installs it") -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        skip_or_fail(f"needs {', '.join(missing)} ({hint})")
