"""CoreDNS's behaviour tables (query in, reply out), ported as data for the in-process harness
(tests/support/inprocess.py): each case names its Go file, test and row."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BehaviourCase:
    id: str
    plugin: str


CASES: tuple[BehaviourCase, ...] = ()
