"""The webhook benchmark's load generator works against a real `splitdns webhook` over HTTPS, and
schedules each review when it is due instead of making every review's task up front.

No timing assertion: the figures live in bench/README.md, not here.
"""

from __future__ import annotations

import ssl

import pytest
from bench import webhook as bench_webhook

from tests.support import webhook

pytestmark = pytest.mark.tooling

RATE, SECONDS = 100.0, 2.0


def test_the_generator_sends_every_review_and_makes_each_task_when_it_is_due() -> None:
    with webhook.running() as hook:
        context = ssl.create_default_context()
        hook.ca.configure_trust(context)
        row = bench_webhook.run_loop(bench_webhook.run_rate(
            hook.port, context, bench_webhook.review_body(), RATE, SECONDS))
        served = [e for e in hook.logs() if e.get("msg") == "review"]
    count = int(RATE * SECONDS)
    assert row["sent"] == count and row["errors"] == 0
    assert len(served) == count + bench_webhook.WARM_ROUNDS * bench_webhook.CONNECTIONS
    assert {e["outcome"] for e in served} == {"injected"}
    # Made up front, all of them would be in flight at once (and the collector would walk them all);
    # made when due, only those the webhook has not answered yet are: half would take a 1 s stall.
    assert 1 <= row["most_in_flight"] < count / 2
    assert 0 < row["p50_ms"] <= row["p99_ms"] <= row["max_ms"]
