"""`errors` lines, with CoreDNS's `consolidate`: errors whose text matches a pattern are counted
for its period and written as one line (`N errors like 'REGEX' occurred in last 1m0s`), the
first in full with `show_first`. A timer on the event loop ends each period, as CoreDNS's
time.AfterFunc does; `debug` lines are not written (CoreDNS writes them only under `debug`).
Tests: tests/test_error_log.py.
"""

from __future__ import annotations

import asyncio
import json

from splitdns.directives.logging import Consolidate, ErrorsSpec
from splitdns.shell import logs

# Errors counted in the current period of each pattern (by identity: one per `consolidate`
# line of a loaded Corefile), with the pattern, so its identity is not reused meanwhile.
_counted: dict[int, tuple[Consolidate, int]] = {}


def write(spec: ErrorsSpec, rcode: int, name: str, qtype: str, error: str, zone: str = "") -> None:
    """The `errors` line for a query that failed (naming its zone), or its count in a
    consolidation."""
    for pattern in spec.consolidate:
        if pattern.pattern.search(error):  # Go's MatchString: anywhere in the text
            _, count = _counted.get(id(pattern), (pattern, 0))
            _counted[id(pattern)] = (pattern, count + 1)
            if count == 0:
                asyncio.get_running_loop().call_later(pattern.period, _flush, pattern, spec.json)
                if pattern.show_first:
                    _line(pattern.level, f"{rcode} {name} {qtype}: {error}", spec.json,
                          logs.error_line(rcode, name, qtype, error, spec.json, zone))
            return
    logs.emit(logs.error_line(rcode, name, qtype, error, spec.json, zone))


def _flush(pattern: Consolidate, as_json: bool) -> None:
    _, count = _counted.pop(id(pattern), (pattern, 0))
    if count > 1 or (count == 1 and not pattern.show_first):
        text = (f"{count} errors like '{pattern.pattern.pattern}' occurred in last "
                f"{go_duration(pattern.period)}")
        _line(pattern.level, text, as_json)


def _line(level: str, text: str, as_json: bool, error_line: str | None = None) -> None:
    if level == "debug":
        return
    if level == "error" and error_line is not None:
        logs.emit(error_line)
    elif as_json:
        logs.emit(json.dumps({"level": level, "plugin": "errors", "message": text}))
    else:
        logs.emit(f"[{level.upper()}] plugin/errors: {text}")


def go_duration(seconds: float) -> str:
    """A duration as Go's time.Duration.String writes it (`1m0s`, `5s`, `1h30m0s`, `500ms`)."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        for unit, scale in (("ms", 1e3), ("µs", 1e6), ("ns", 1e9)):
            if seconds * scale >= 1:
                return f"{seconds * scale:g}{unit}"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    out = f"{secs:g}s"
    if hours or minutes:
        out = f"{int(minutes)}m" + out
    if hours:
        out = f"{int(hours)}h" + out
    return out
