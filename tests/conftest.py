"""Suite-wide: no Python object repr in anything a user reads (tests/support/user_text.py);
a run counts the product's tests and the tests of the tests' own tools apart; and every test
belongs to a tier.

Two tiers (`make test` runs the fast one first, then the end-to-end one): the fast tier is the
codec, the core's transcripts, the shell in process (tests/support/inprocess.py), parsers,
kube and the CLI; the end-to-end tier (marked `e2e` here, by module: E2E_MODULES) runs real
processes and servers: `splitdns serve` with `dig`, the namespace labs with OpenVPN, the
image, the differential run, DoT against Unbound, the quick hostile catalogue, the webhook
over HTTPS, the benchmark's smoke test. Plain `pytest` runs both.

Tests marked `tooling` check the scripted upstream and the benchmark, not splitdns: they
protect the product's tests but say nothing about the product. A line before pytest's own
summary says how many of each passed, failed or were skipped.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

import pytest

from splitdns import cli
from tests.support import user_text


def _recording(main: Callable[..., int]) -> Callable[..., int]:
    def recorded(argv: Sequence[str] | None = None, *args: object, **kwargs: object) -> int:
        out, err = user_text.Tee(sys.stdout), user_text.Tee(sys.stderr)
        name = (list(argv or sys.argv[1:]) or ["splitdns"])[0]
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):  # type: ignore[type-var]
                return main(argv, *args, **kwargs)
        finally:
            user_text.seen(f"splitdns {name} stdout", out.copy.getvalue())
            user_text.seen(f"splitdns {name} stderr", err.copy.getvalue())

    return recorded


@pytest.fixture(autouse=True)
def no_repr_reaches_a_user(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every command run through cli.main, every serve log, dig output and HTTP body of the test."""
    monkeypatch.setattr(cli, "main", _recording(cli.main))
    yield
    # Also what a fixture of a wider scope recorded when it ended (a lab's resolver log).
    found = user_text.reprs(user_text.take())
    assert not found, "Python object reprs reached a user:\n" + "\n".join(
        f"  {f.source}: {f.line}" for f in found)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """What session-scoped fixtures recorded as they ended, after the last test's check."""
    found = user_text.reprs(user_text.take())
    if found:
        print("\nPython object reprs reached a user:\n" + "\n".join(f"  {f.source}: {f.line}" for f in found))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED




# Modules whose tests run real processes or servers (tests/test_tiers.py checks that every
# module starting `splitdns serve`, a scripted upstream or a lab is listed, and that each exists).
E2E_MODULES = frozenset({
    # `splitdns serve` as a process, real dig
    "test_serve", "test_runtime", "test_operations", "test_tunnel_serve", "test_plugins_serve",
    "test_corefile_compat_serve", "test_demo", "test_start_order_serve",
    # the quick hostile catalogue
    "test_hostile_spoofing", "test_hostile_upstream", "test_hostile_clients", "test_hostile_cache_load",
    # namespace labs with OpenVPN, the image, real peers
    "test_lab", "test_openvpn_lab", "test_verify_lab", "test_wireguard_lab", "test_inject_lab", "test_image",
    "test_confinement_lab", "test_search_walk_lab", "test_openconnect_lab", "test_strongswan_lab",
    "test_differential", "test_dot", "test_bench_smoke",
    # the webhook as a process over HTTPS (test_bench_webhook: the load generator against one, 5 s)
    "test_webhook", "test_webhook_render", "test_bench_webhook",
    # a real Prometheus scraping splitdns and the webhook; `splitdns top` in tmux
    "test_monitoring_e2e", "test_top",
    # the callback miss path: scripted upstreams (forgeries, drops, truncation) as processes
    "test_misses",
    # the scripted upstream's own tests (tooling: processes)
    "test_scripted_upstream",
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.stem in E2E_MODULES:
            item.add_marker(pytest.mark.e2e)


def _tier(config: pytest.Config) -> str:
    """Which tier `-m` chose, for the summary line ("" for a run of both or another choice)."""
    chosen = str(config.getoption("markexpr", "") or "")
    if "not e2e" in chosen:
        return "fast tier: "
    return "end-to-end tier: " if "e2e" in chosen else ""


_TALLIES: Counter[tuple[str, str]] = Counter()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """As pytest counts: the call's outcome, and a setup or teardown that failed or skipped."""
    kind = "tooling" if "tooling" in report.keywords else "product"
    if report.when == "call":
        _TALLIES[kind, "skipped" if report.skipped else report.outcome] += 1
    elif report.skipped:
        _TALLIES[kind, "skipped"] += 1
    elif report.failed:
        _TALLIES[kind, "error"] += 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _TALLIES:
        return
    parts = []
    for kind in ("product", "tooling"):
        counts = [f"{n} {outcome}" for (k, outcome), n in sorted(_TALLIES.items()) if k == kind and n]
        parts.append(f"{kind} tests: {', '.join(counts) or 'none'}")
    terminalreporter.write_line(_tier(terminalreporter.config) + "; ".join(parts))
