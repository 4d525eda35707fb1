"""The one error hierarchy: every error says whose fault it was and, for config, where.

Tests: tests/test_user_text.py, tests/test_config.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A message quotes what it found; a word longer than this (a 50 MB token, a pasted blob) is
# quoted by its start and its size instead, so that one error never floods a terminal or a log.
LONGEST_QUOTED = 200
_LONG_WORD = re.compile(r"[^\s'\"`]{" + str(LONGEST_QUOTED + 1) + ",}")  # quotes around it stay


def cut_long_words(text: str) -> str:
    """`text` with each run of more than LONGEST_QUOTED non-space characters cut to its first 60,
    followed by how long it was."""
    if len(text) <= LONGEST_QUOTED:
        return text
    return _LONG_WORD.sub(lambda m: f"{m.group(0)[:60]}... (cut: {len(m.group(0)):,} characters)", text)


class SplitdnsError(Exception):
    """Base of every error splitdns raises on purpose."""


@dataclass(frozen=True)
class Location:
    """Where a token came from: a file and a 1-based line."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


class ConfigError(SplitdnsError):
    """The Corefile is wrong; the message names the file and line."""

    def __init__(self, where: Location | None, message: str) -> None:
        self.where = where
        self.message = message = cut_long_words(message)
        super().__init__(f"{where}: {message}" if where else message)
