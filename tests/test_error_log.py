"""`errors { consolidate ... }` as CoreDNS writes it (plugin/errors): matching errors counted for
the period and written as one line, the first in full with `show_first`, the rest unchanged."""

from __future__ import annotations

import asyncio

import pytest

from splitdns import config, directives
from splitdns.directives.logging import ErrorsSpec
from splitdns.shell import error_log
from tests.support.inprocess import run


def _spec(lines: str) -> ErrorsSpec:
    spec = config.loads(f". {{\n    errors {{\n{lines}\n    }}\n}}\n").blocks[0][directives.ERRORS]
    assert isinstance(spec, ErrorsSpec)
    return spec


def test_matching_errors_become_one_line_per_period(capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec("consolidate 50ms timeout\nconsolidate 50ms refused warning show_first")

    async def scenario() -> None:
        for _ in range(3):
            error_log.write(spec, 2, "a.example.org.", "A", "read udp: i/o timeout")
        for _ in range(2):
            error_log.write(spec, 2, "b.example.org.", "A", "connection refused")
        error_log.write(spec, 2, "c.example.org.", "A", "no next plugin found")
        await asyncio.sleep(0.2)
        error_log.write(spec, 2, "a.example.org.", "A", "read udp: i/o timeout")  # a new period
        await asyncio.sleep(0.2)

    run(scenario)
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "[WARNING] plugin/errors: 2 b.example.org. A: connection refused",  # show_first, at its level
        "[ERROR] plugin/errors: 2 c.example.org. A: no next plugin found",
        "[ERROR] plugin/errors: 3 errors like 'timeout' occurred in last 50ms",
        "[WARNING] plugin/errors: 2 errors like 'refused' occurred in last 50ms",
        "[ERROR] plugin/errors: 1 errors like 'timeout' occurred in last 50ms",
    ]


@pytest.mark.parametrize(("seconds", "text"), [
    (60, "1m0s"), (5, "5s"), (5400, "1h30m0s"), (0.5, "500ms"), (0, "0s"), (90.5, "1m30.5s"),
])
def test_durations_are_written_as_go_writes_them(seconds: float, text: str) -> None:
    assert error_log.go_duration(seconds) == text
