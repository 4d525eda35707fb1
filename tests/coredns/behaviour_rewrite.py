"""CoreDNS's rewrite name_test.go tables, served by the in-process server: the rule of a row
(`rewrite NEXT name ARGS...`) in front of a fake upstream that answers as the Go tests'
msgPrinter does (an A record for the name it was asked).

The Go tests read the rewritten question back where they set NoRevertPolicy or
NoRestorePolicy, switches no Corefile can set (CoreDNS always gives the client its own
question back); there the name the upstream was asked is that rewritten question. The answer's
name is what the client gets, as in the Go tests.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import dns.message
import dns.name
import dns.rcode
import dns.rrset

from tests.support.inprocess import FakeUpstream, serving

Run = Callable[[], Awaitable[tuple[bool, str]]]

NOT_PORTED: dict[tuple[str, str], str] = {}

# What each table compares: `question` (the rewritten question: the name the upstream is
# asked), `answer` (the client's answer name); `rewrite` and `expected` are the rows' fields.
CHECKS = {
    "TestRewriteNamePrefixSuffix": {"expected": "question"},
    "TestRewriteNameNoRewrite": {"expected": "answer"},
    "TestRewriteNamePrefixSuffixNoAutoAnswer": {"expected": "answer"},
    "TestRewriteNamePrefixSuffixAutoAnswer": {"rewrite": "question", "expected": "answer"},
    "TestRewriteNameExactAnswer": {"rewrite": "question", "expected": "answer"},
    "TestRewriteNameRegexAnswer": {"rewrite": "question", "expected": "answer"},
}


def _printer(q: dns.message.Message) -> dns.message.Message:  # msgPrinter
    r = dns.message.make_response(q)
    r.answer = [dns.rrset.from_text(q.question[0].name, 5, "IN", "A", "10.0.0.1")]
    return r


def args(row: dict[str, Any]) -> list[str]:
    return [json.loads(a) for a in re.findall(r'"(?:[^"\\]|\\.)*"', row["args"]["go"])]


def name_case(row: dict[str, Any]) -> Run:
    rule = " ".join(["rewrite", row["next"], "name", *args(row)])
    checks = CHECKS[row["test"]]

    async def run() -> tuple[bool, str]:
        corefile = ". {\n    " + rule + "\n    forward . "
        async with FakeUpstream(_printer) as up, serving(corefile + up.target + "\n}\n") as s:
            reply = await s.ask(dns.message.make_query(row["question"], "A"))
        got = {"question": str(up.asked[-1].message.question[0].name) if up.asked else None,
               "answer": str(reply.answer[0].name) if reply is not None and reply.answer else None}
        ok = all(got[what] == row[field] for field, what in checks.items())
        return ok, f"{rule}: asked {got['question']}, answer {got['answer']}"
    return run


async def _illegal_name() -> tuple[bool, str]:
    """TestRewriteIllegalName: a rule whose target is no name (`example..org.`). CoreDNS loads
    it; a question it rewrites gets SERVFAIL ("invalid name after rewrite") and the next plugin
    (the upstream here) is not asked."""
    rule = "rewrite stop name example.org. example..org."
    async with FakeUpstream(_printer) as up, serving(". {\n    " + rule + "\n    forward . "
                                                      + up.target + "\n}\n") as s:
        reply = await s.ask(dns.message.make_query("example.org.", "A"))
    rcode = reply.rcode() if reply is not None else None
    said = f"{rule}: rcode {rcode and dns.rcode.to_text(rcode)}, upstream asked {len(up.asked)}"
    return rcode == dns.rcode.SERVFAIL and not up.asked, said


def scenarios() -> list[tuple[str, Run]]:
    return [("plugin/rewrite/name_test.go:TestRewriteIllegalName#0", _illegal_name)]
