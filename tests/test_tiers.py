"""The two tiers stay what `make test` says: a module that starts real processes or servers
(`splitdns serve`, a scripted upstream, a namespace lab, podman, dnsperf) is in the
end-to-end tier (tests/conftest.py's E2E_MODULES), and every module listed there exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import E2E_MODULES

TESTS = Path(__file__).parent
# What starts a real process or server in a test module (tests/support and tests/lab).
REAL_PARTS = re.compile(r"\b(splitdns_serve|run_to_exit|scripted_upstream|split_dns|dnsmasq_forwarder|"
                        r"dnsperf|need_root|subprocess\.Popen)\(|"
                        r"\bimport (podman|image_pod|netns|fixtures)\b")

pytestmark = pytest.mark.tooling


def test_every_module_of_the_end_to_end_tier_exists() -> None:
    missing = sorted(name for name in E2E_MODULES if not (TESTS / f"{name}.py").is_file())
    assert not missing, f"E2E_MODULES names modules that do not exist: {missing}"


def test_no_module_of_the_fast_tier_starts_real_processes() -> None:
    found = {}
    for path in sorted(TESTS.glob("test_*.py")):
        if path.stem in E2E_MODULES or path == Path(__file__):
            continue
        used = sorted({m.group(0) for m in REAL_PARTS.finditer(path.read_text(encoding="utf-8"))})
        if used:
            found[path.name] = used
    assert not found, ("these modules start real processes or servers; move what they test in "
                       f"process (tests/support/inprocess.py) or list them in E2E_MODULES: {found}")
