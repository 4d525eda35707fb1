"""Every text a user reads, as the suite sees it, checked for Python object reprs.

The helpers that run `splitdns serve` (its stdout and stderr: log lines, errors), `dig` (EDE
texts), HTTP endpoints (/ready, /health bodies) and the commands (`cli.main`'s output) feed
`seen()`; tests/conftest.py checks what each test produced when it ends, so a repr anywhere in
what the suite drives fails the test that drove it.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import TextIO

# `ClassName(field=...`, `ClassName('...')`, `ClassName()`, `ClassName(2, ...`: what repr() of a
# dataclass, a namedtuple or an exception looks like. A CamelCase word glued to "(" is never
# prose (prose puts a space before a parenthesis). `<foo.Bar object at 0x...>`: the default repr.
# A tuple, list or dict of strings as Python prints it (`('random', 'round_robin')`, `['-conf', ...]`,
# `{'quiet': 3}`): a container dropped into an f-string. Prose and YAML quote with " or `.
REPR = re.compile(r"\b[A-Z][a-z0-9]*[A-Z]?[A-Za-z0-9_]*\((?:[a-z_][a-z0-9_]*=|['\"<)]|\d)"
                  r"|object at 0x[0-9a-fA-F]+"
                  r"|\('[^']*',(?: '|\))|\['[^']*'(?:, '|\])|\{'[^']*': ")


@dataclass(frozen=True)
class Finding:
    source: str  # where the text came from: "serve stderr", "dig", "check stdout", ...
    line: str


_seen: list[tuple[str, str]] = []


def seen(source: str, text: str) -> None:
    """Record a text a user would read."""
    if text:
        _seen.append((source, text))


def take() -> list[tuple[str, str]]:
    """What was recorded since the last take()."""
    texts = list(_seen)
    _seen.clear()
    return texts


def reprs(texts: list[tuple[str, str]]) -> list[Finding]:
    return [Finding(source, line.strip()) for source, text in texts for line in text.splitlines()
            if REPR.search(line)]


class Tee(io.TextIOBase):
    """Writes through to the stream the test sees (capsys, pytest's capture) and keeps a copy."""

    def __init__(self, through: TextIO) -> None:
        self.through, self.copy = through, io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.through.write(text)

    def flush(self) -> None:
        self.through.flush()
