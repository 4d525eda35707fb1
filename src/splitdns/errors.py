"""The one error hierarchy: every error says whose fault it was and, for config, where.

Tests: tests/test_user_text.py, tests/test_config.py.
"""

from __future__ import annotations

from dataclasses import dataclass


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
        self.message = message
        super().__init__(f"{where}: {message}" if where else message)
