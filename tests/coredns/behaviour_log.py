"""CoreDNS's log_test.go tables (TestLogged, TestLoggedClassNameErrorWithoutSOA), served by
the in-process server: the Go test's rules as `log` lines in front of a fake upstream that
answers as its next plugin does (SERVFAIL as test.ErrorHandler, or NXDOMAIN without SOA), and
the lines the server logs compared as the Go test compares them.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import dns.message
import dns.rcode

from tests.support.inprocess import FakeUpstream, serving

Run = Callable[[], Awaitable[tuple[bool, str]]]

# The formats the Go rules name by constant, as Corefile text (no format: the default one).
_FORMATS = {"DefaultLogFormat": "", "CombinedLogFormat": "{combined}"}
_CLASSES = {"response.All": "all", "response.Denial": "denial", "response.Error": "error"}
# The Go tests' ResponseWriter says the client is 10.240.0.1:40212; ours is the test's client
_GO_CLIENT = "10.240.0.1:40212"


def _answer(rcode: int) -> Callable[[dns.message.Message], dns.message.Message]:
    def handle(q: dns.message.Message) -> dns.message.Message:
        r = dns.message.make_response(q)
        r.set_rcode(rcode)
        return r
    return handle


def _log_line(names: str, fmt: str, cls: str) -> str:
    quoted = f' "{fmt}"' if fmt and " " in fmt else (f" {fmt}" if fmt else "")
    return f"log {names}{quoted} {{\n        class {cls}\n    }}"


def _rules(go: str) -> list[str]:
    out = []
    for rule in re.findall(r"\{\s*NameScope:.*?\}\s*\{[^}]*\}\s*,?\s*\}", go, re.DOTALL):
        names = re.search(r'NameScope:\s*"([^"]*)"', rule)
        fmt = re.search(r'Format:\s*("(?:[^"\\]|\\.)*"|\w+)', rule)
        cls = re.search(r"\{(response\.\w+):", rule)
        assert names and fmt and cls, rule
        text = fmt.group(1)
        out.append(_log_line(names.group(1), text[1:-1] if text.startswith('"') else _FORMATS[text],
                             _CLASSES[cls.group(1)]))
    return out


async def _logged(rules: list[str], qname: str, qtype: str, rcode: int) -> str:
    corefile = ". {\n    " + "\n    ".join(rules) + "\n    forward . "
    async with FakeUpstream(_answer(rcode)) as up, serving(corefile + up.target + "\n}\n") as s:
        await s.ask(dns.message.make_query(qname, qtype))
        return s.log()


def logged_case(row: dict[str, Any]) -> Run:
    rules = _rules(row["Rules"]["go"])
    should = re.escape(row["ShouldString"]).replace(re.escape(_GO_CLIENT), r"127\.0\.0\.1:\d+")

    async def run() -> tuple[bool, str]:
        logged = await _logged(rules, row["Domain"], "A", dns.rcode.SERVFAIL)
        if not row["ShouldLog"]:
            return logged == "", f"logged {logged!r}"
        ok = re.search(should, logged) is not None
        if row.get("ShouldNOTString"):
            ok = ok and row["ShouldNOTString"] not in logged
        return ok, f"{rules}: logged {logged!r}"
    return run


def class_case(row: dict[str, Any]) -> Run:
    rule = _log_line(".", "", _CLASSES[row["class"]["go"]])

    async def run() -> tuple[bool, str]:
        logged = await _logged([rule], "1.1.168.192.in-addr.arpa.", "PTR", dns.rcode.NXDOMAIN)
        ok = "NXDOMAIN" in logged if row["shouldLog"] else logged == ""
        return ok, f"{rule}: logged {logged!r}"
    return run


TABLES: dict[str, Callable[[dict[str, Any]], Run]] = {
    "TestLogged": logged_case,
    "TestLoggedClassNameErrorWithoutSOA": class_case,
}


def _single(cls: str, want: str | None) -> Run:
    """A single-scenario test: the default format for class `cls`, the upstream's SERVFAIL;
    `want` is in the line, or (None) nothing is logged."""
    rule = _log_line(".", "", cls)

    async def run() -> tuple[bool, str]:
        logged = await _logged([rule], "example.org.", "A", dns.rcode.SERVFAIL)
        return (want in logged if want is not None else logged == ""), f"{rule}: logged {logged!r}"
    return run


def scenarios() -> list[tuple[str, Run]]:
    """TestLoggedStatus, TestLoggedClassDenial, TestLoggedClassError: (id, run)."""
    return [
        ("plugin/log/log_test.go:TestLoggedStatus#0", _single("all", "A IN example.org. udp 29 false 512")),
        ("plugin/log/log_test.go:TestLoggedClassDenial#0", _single("denial", None)),
        ("plugin/log/log_test.go:TestLoggedClassError#0", _single("error", "SERVFAIL")),
    ]
