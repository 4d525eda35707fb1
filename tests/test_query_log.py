"""Who answered: `log` says which upstream answered a query and how long its exchange took (a
template placeholder, CoreDNS's `{/forward/upstream}` metadata, fields of `format json`), and
`errors` lines name the zone. A real server in process (tests/support/inprocess.py), asked
over UDP and TCP."""

from __future__ import annotations

import json
import re
import time

import dns.message

from tests.helpers import query, reply
from tests.support.inprocess import FakeUpstream, run, serving


def answers(q: dns.message.Message) -> dns.message.Message | None:
    name = q.question[0].name.to_text()
    return None if name.startswith("dead") else reply(q, f"{name} 300 IN A 192.0.2.7")


def test_the_log_names_the_upstream_that_answered_and_how_long_it_took() -> None:
    async def scenario() -> tuple[str, str]:
        async with FakeUpstream(answers) as up, serving(f""". {{
                cache 30
                log . "{{name}} {{proto}} {{upstream}} {{upstream_duration}} {{/forward/upstream}} {{/other}}"
                forward . {up.target}
            }}""", clock=time.monotonic) as s:
            await s.ask(query("a.example.org"))             # a miss over UDP
            await s.ask(query("a.example.org"))             # a hit: no upstream
            await s.ask(query("b.example.org"), tcp=True)   # a miss over TCP
            return s.log(), up.target

    log, target = run(scenario)
    lines = [ln for ln in log.splitlines() if ln.startswith("[INFO] ") and ".example.org." in ln]
    assert len(lines) == 3, log
    miss = re.fullmatch(rf"\[INFO\] a\.example\.org\. udp {re.escape(target)} (\d+\.\d{{9}})s "
                        rf"{re.escape(target)} -", lines[0])
    assert miss is not None, lines[0]
    assert 0 < float(miss.group(1)) < 3
    assert lines[1] == "[INFO] a.example.org. udp - - - -"
    assert re.fullmatch(rf"\[INFO\] b\.example\.org\. tcp {re.escape(target)} \d+\.\d{{9}}s "
                        rf"{re.escape(target)} -", lines[2]), lines[2]


def test_json_log_lines_carry_the_upstream_and_errors_lines_the_zone() -> None:
    async def scenario() -> tuple[str, str]:
        async with FakeUpstream(answers) as up, serving(f"""example.org {{
                errors
                log {{
                    format json
                }}
                forward . {up.target} {{
                    read_timeout 200ms
                }}
            }}""", clock=time.monotonic) as s:
            await s.ask(query("a.example.org"))
            await s.ask(query("dead.example.org"), timeout=3)
            return s.log(), up.target

    log, target = run(scenario)
    records = [json.loads(ln) for ln in log.splitlines() if ln.startswith("{")]
    by_name = {r["name"]: r for r in records if r["level"] == "info"}
    assert by_name["a.example.org."]["upstream"] == target
    assert 0 < by_name["a.example.org."]["upstream_duration"] < 3
    assert by_name["dead.example.org."]["rcode"] == "SERVFAIL"
    assert by_name["dead.example.org."]["upstream"] is None  # no upstream answered
    errors = [ln for ln in log.splitlines() if ln.startswith("[ERROR] plugin/errors: 2 dead.example.org. A:")]
    assert errors and all(ln.endswith(" (zone example.org.)") for ln in errors), log
