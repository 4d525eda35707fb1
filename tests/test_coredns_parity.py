"""CoreDNS's own setup and parsing tests (tests/coredns/data/tables.json, from a CoreDNS release),
each row run through the Corefile loader and `splitdns check`: we load what CoreDNS loads and
refuse what it refuses, except where tests/coredns/expect.py says why not (quoting the README).
A case that starts agreeing with CoreDNS while marked otherwise fails too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from splitdns.kube.check import checker
from splitdns.kube.shared import findings
from tests.coredns import cases, expect, parity

CASES = cases.parse_cases()


def _tables() -> dict[str, list[cases.ParseCase]]:
    """The cases by Go test (one pytest item per table keeps the fast tier fast; the message
    names every row that parts from its verdict)."""
    out: dict[str, list[cases.ParseCase]] = {}
    for case in CASES:
        out.setdefault(case.id.split("#")[0], []).append(case)
    return out


TABLES = _tables()


@pytest.mark.parametrize("table", TABLES, ids=list(TABLES))
def test_each_coredns_setup_case_behaves_as_its_verdict_says(table: str, tmp_path: Path) -> None:
    wrong = []
    for n, case in enumerate(TABLES[table]):
        directory = tmp_path / str(n)
        directory.mkdir()
        agrees, said = parity.load(case, directory)
        verdict = expect.verdict(case.id)
        coredns = "loads" if case.loads else "refuses"
        if verdict == "pass" and not agrees:
            wrong.append(f"{case.id}: CoreDNS {coredns} this; splitdns: {said}\n{case.corefile}")
        elif verdict != "pass" and agrees:
            wrong.append(f"{case.id}: marked {verdict!r}, but splitdns now agrees with CoreDNS")
    assert not wrong, "\n".join(wrong)


# `check` cannot tell what a resolv.conf absent from this machine holds (it is the pod's), so a
# row refused for such a file is the loader's alone. One present here with no usable nameserver
# is an error of both (TestSetupResolvconf#1).
ABSENT_FILE = {"plugin/pkg/parse/host_test.go:TestHostPortOrFile#2"}  # /etc/resolv.conf:53


def test_check_reports_a_load_error_exactly_where_the_loader_refuses(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    differ = []
    for n, case in enumerate(CASES):
        directory = tmp_path / str(n)
        directory.mkdir()
        agrees, said = parity.load(case, directory)
        del agrees
        loads = said.startswith("loads")
        monkeypatch.chdir(directory)
        found = checker.check([str(directory / "Corefile")], checker.Options(resolver="auto"))
        # SD100 is the loader's error; a refusal may also come under a code of its own (SD1xx)
        wrong = (any(f.code == "SD100" for f in found) if loads
                 else not any(f.severity == findings.ERROR for f in found))
        if wrong and case.id not in ABSENT_FILE:
            differ.append((case.id, said, [f.message for f in found]))
    assert not differ


def test_every_refused_or_deliberate_verdict_quotes_the_readme() -> None:
    readme = parity.readme_text()
    for ident, verdict in expect.EXPECT.items():
        kind, _, reason = verdict.partition(": ")
        assert kind in ("refused", "deliberate", "gap"), ident
        if kind != "gap":
            assert " ".join(reason.split()) in readme, f"{ident}: README.md does not say {reason!r}"
            assert parity.reason_line(reason), ident
    known = {c.id for c in CASES} | {i for _, i in parity.behaviour_ids()}
    assert set(expect.EXPECT) <= known, set(expect.EXPECT) - known


def test_every_table_of_the_go_files_is_ported_or_listed_with_its_reason() -> None:
    rows = cases.tables()["rows"]
    ported = {c.id for c in CASES}
    for row in rows:
        ident = f"{row['file']}:{row['test']}#{row['row']}"
        assert (ident in ported or (row["file"], row["test"]) in cases.NOT_PORTED
                or ident in cases.NOT_PORTED_ROWS), ident


def test_the_docs_table_is_the_one_the_cases_give() -> None:
    text = (parity.ROOT / "docs" / "coredns-parity.md").read_text()
    assert parity.generated() in text, "run: python -m tests.coredns.parity --write"
