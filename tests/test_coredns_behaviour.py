"""CoreDNS's own behaviour tables (tests/coredns/behaviour.py: the cache's insertion table, the
load balancer's order, the rewrite reverter's tables, the hosts lookups), each row served by the
in-process server with a fake upstream that answers what the Go test fed the plugin. A row passes
or carries the verdict tests/coredns/expect.py gives it, with the README's reason.
"""

from __future__ import annotations

import pytest

from splitdns.core.cache import Cache
from tests.coredns import behaviour, cases, expect
from tests.support.inprocess import run

CASES = behaviour.CASES


@pytest.fixture(autouse=True)
def _wall_clock_back() -> object:
    before = Cache.wall_offset
    yield None
    Cache.wall_offset = before


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_coredns_behaviour_case_behaves_as_its_verdict_says(case: behaviour.BehaviourCase) -> None:
    agrees, said = run(case.run)
    verdict = expect.verdict(case.id)
    if verdict == "pass":
        assert agrees, said
    else:
        assert not agrees, f"marked {verdict!r}, but splitdns now agrees with CoreDNS ({said})"


def test_every_behaviour_table_row_is_ported_or_listed_with_its_reason() -> None:
    ported = {c.id.split(" ")[0] for c in CASES}
    skipped = set(behaviour.not_ported_rows())
    for row in cases.tables()["behaviour"]:
        ident = f"{row['file']}:{row['test']}#{row['row']}"
        listed = (row["file"], row["test"]) in behaviour.NOT_PORTED
        assert ident in ported or ident in skipped or listed, ident
