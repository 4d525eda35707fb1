"""Corefile syntax: text to server blocks of directives, every token with its file and line.

This layer never interprets a directive's arguments; `config` does. It follows the
Caddyfile rules CoreDNS uses (coredns/caddy `caddyfile/lexer.go`, `parse.go`): whitespace
separates tokens, an unquoted `#` starts a comment even mid-token, `{` and `}` are
delimiters only as tokens of their own, `{$VAR}` and `{%VAR%}` are replaced at parse time,
`(name)` blocks define snippets and `import` inlines a snippet or files.
Tests: tests/test_corefile.py, tests/test_corefile_fuzz.py.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from splitdns.errors import ConfigError, Location

MAX_IMPORTS = 10_000

_BARE = re.compile(r"[^\s#]*")  # an unquoted token's rest: one regex step, not a loop per character
_ENV = re.compile(r"\{\$([^{}$%]+)\}|\{%([^{}$%]+)%\}")


@dataclass(frozen=True)
class Token:
    text: str
    where: Location
    newline_before: bool = False
    quoted: bool = False


@dataclass(frozen=True)
class Statement:
    """A directive (or a block's keys): tokens on one line, and an optional `{ ... }` body."""

    tokens: tuple[Token, ...]
    body: tuple[Statement, ...] | None = None

    @property
    def name(self) -> str:
        return self.tokens[0].text

    @property
    def args(self) -> tuple[str, ...]:
        return tuple(t.text for t in self.tokens[1:])

    @property
    def where(self) -> Location:
        return self.tokens[0].where


@dataclass(frozen=True)
class ServerBlock:
    keys: tuple[Token, ...]
    directives: tuple[Statement, ...]

    @property
    def where(self) -> Location:
        return self.keys[0].where


def lex(text: str, file: str, env: Mapping[str, str]) -> list[Token]:
    """Split Corefile text into tokens, dropping comments and substituting `{$VAR}`."""
    tokens: list[Token] = []
    i, line, n = 0, 1, len(text)
    newline = True
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            newline = True
            i += 1
        elif c.isspace():
            i += 1
        elif c == "#":
            while i < n and text[i] != "\n":
                i += 1
        elif c == '"':
            start_line = line
            i += 1
            chars: list[str] = []
            while True:
                if i >= n:
                    raise ConfigError(Location(file, start_line), "unterminated quoted token")
                c = text[i]
                if c == "\\" and i + 1 < n and text[i + 1] == '"':
                    chars.append('"')
                    i += 2
                    continue
                if c == '"':
                    i += 1
                    break
                if c == "\n":
                    line += 1
                chars.append(c)
                i += 1
            where = Location(file, start_line)
            value = _substitute("".join(chars), where, env)
            tokens.append(Token(value, where, newline, quoted=True))
            newline = False
        else:
            start = i
            i = _BARE.match(text, i).end()  # type: ignore[union-attr]  # matches, if only ""
            where = Location(file, line)
            if text[start:i] == "{}":  # `cache {}`: an empty block, written shut
                tokens += [Token("{", where, newline), Token("}", where, False)]
            else:
                tokens.append(Token(_substitute(text[start:i], where, env), where, newline))
            newline = False
    return tokens


class PodEnvironment(dict[str, str]):
    """The environment as `check` sees it: a variable unset here is not an error (the pod's
    environment gives it when `serve` starts there); it stays `{$NAME}` and is noted in `unset`."""

    def __init__(self, env: Mapping[str, str]) -> None:
        super().__init__(env)
        self.unset: dict[str, Location] = {}


def deferred(text: str) -> bool:
    """Whether a token still holds a `{$VAR}` left for the pod's environment."""
    return _ENV.search(text) is not None


def _substitute(text: str, where: Location, env: Mapping[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in env:
            if isinstance(env, PodEnvironment):
                env.unset.setdefault(name, where)
                return match.group(0)  # kept as written: the pod gives the value
            # CoreDNS silently substitutes "", which turns `forward . {$DNS}` into a
            # confusing argument error later; naming the variable is kinder.
            raise ConfigError(where, f"environment variable {name} is not set")
        return env[name]

    return _ENV.sub(replace, text)


def _statements(tokens: list[Token], pos: int, top: bool,
                opening: Token | None = None) -> tuple[list[Statement], int]:
    """Group tokens into statements until a closing `}` (or the end, at the top level)."""
    out: list[Statement] = []
    while pos < len(tokens):
        tok = tokens[pos]
        if tok.text == "}" and not tok.quoted:
            if top:
                raise ConfigError(tok.where, "unexpected '}' because no matching opening brace")
            return out, pos + 1
        if tok.text == "{" and not tok.quoted:
            if out and out[-1].body is None:
                # An opening brace may stand on the line after its keys or its directive
                # (Caddy's parser takes a `{` before it looks for the end of the line).
                late_body, pos = _body(tokens, pos)
                out[-1] = Statement(out[-1].tokens, late_body)
                continue
            raise ConfigError(tok.where, "unexpected '{': a block needs a name before it")
        line = [tok]
        pos += 1
        while pos < len(tokens) and not tokens[pos].newline_before:
            nxt = tokens[pos]
            if not nxt.quoted and nxt.text in "{}":
                break
            line.append(nxt)
            pos += 1
        # Keys may continue on the next line after a trailing comma: `a.example,` / `b.example`.
        while top and line[-1].text.endswith(",") and pos < len(tokens):
            line.append(tokens[pos])
            pos += 1
        body: tuple[Statement, ...] | None = None
        nxt_open = pos < len(tokens) and tokens[pos].text == "{" and not tokens[pos].quoted
        if nxt_open and not tokens[pos].newline_before:
            body, pos = _body(tokens, pos)
        out.append(Statement(tuple(line), body))
    if not top:
        # Reported where the block opened: the end of the file says nothing about which one.
        where = opening.where if opening is not None else tokens[-1].where
        raise ConfigError(where, "missing '}': the block opened on this line is not closed")
    return out, pos


def _body(tokens: list[Token], pos: int) -> tuple[tuple[Statement, ...], int]:
    opening = tokens[pos]
    if pos + 1 >= len(tokens):
        raise ConfigError(opening.where, "missing '}': the block opened on this line is not closed")
    body, pos = _statements(tokens, pos + 1, top=False, opening=opening)
    return tuple(body), pos


@dataclass
class _Expander:
    """Resolves `import` lines and snippets, keeping each token's own file and line."""

    env: Mapping[str, str]
    snippets: dict[str, tuple[Statement, ...]] = field(default_factory=dict)
    imports: int = 0
    stack: list[str] = field(default_factory=list)

    def file_statements(self, path: Path, where: Location | None) -> list[Statement]:
        key = str(path.resolve())
        if key in self.stack:
            raise ConfigError(where, f"import cycle: {path} imports itself")
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as err:
            raise ConfigError(where, f"cannot read {path}: {err.strerror or err}") from err
        except UnicodeDecodeError as err:
            raise ConfigError(where, f"{path} is not UTF-8 text: {err.reason}") from err
        self.stack.append(key)
        try:
            tokens = lex(text, str(path), self.env)
            statements, _ = _statements(tokens, 0, top=True)
            return self.top_level(statements, path)
        finally:
            self.stack.pop()

    def top_level(self, statements: list[Statement], path: Path) -> list[Statement]:
        """Define snippets and expand top-level imports; server blocks are kept as they are."""
        out: list[Statement] = []
        for st in statements:
            if len(st.tokens) == 1 and _is_snippet_name(st.name) and st.body is not None:
                name = st.name[1:-1]
                if name in self.snippets:
                    raise ConfigError(st.where, f"snippet ({name}) is defined twice")
                self.snippets[name] = st.body
            elif st.name == "import" and st.body is None:
                out.extend(self.top_level(list(self.imported(st, path)), path))
            else:
                out.append(st)
        return out

    def expand(self, statements: tuple[Statement, ...], path: Path) -> tuple[Statement, ...]:
        """Expand imports inside a block, recursively in nested bodies."""
        out: list[Statement] = []
        for st in statements:
            if st.name == "import" and st.body is None:
                out.extend(self.expand(tuple(self.imported(st, path)), path))
            elif st.body is not None:
                out.append(Statement(st.tokens, self.expand(st.body, path)))
            else:
                out.append(st)
        return tuple(out)

    def imported(self, st: Statement, path: Path) -> Iterator[Statement]:
        if len(st.args) != 1:
            raise ConfigError(st.where, "import takes exactly one snippet name or file pattern")
        self.imports += 1
        if self.imports > MAX_IMPORTS:
            raise ConfigError(st.where, f"more than {MAX_IMPORTS} imports: is an import recursive?")
        target = st.args[0]
        if target in self.snippets:
            if target in self.stack:
                raise ConfigError(st.where, f"snippet ({target}) imports itself")
            self.stack.append(target)
            try:
                yield from self.expand(self.snippets[target], path)
            finally:
                self.stack.pop()
            return
        yield from self._import_files(st, target, path)

    def _import_files(self, st: Statement, pattern: str, path: Path) -> Iterator[Statement]:
        if pattern.count("*") > 1 or "[" in pattern:
            raise ConfigError(st.where, f"import pattern {pattern!r}: at most one '*', no '[...]'")
        base = path.parent
        full = pattern if os.path.isabs(pattern) else str(base / pattern)
        if glob.has_magic(pattern):
            # An empty glob is allowed, as in CoreDNS: a conf.d directory may be empty.
            for match in sorted(glob.glob(full)):
                yield from self.file_statements(Path(match), st.where)
            return
        if not Path(full).exists():
            raise ConfigError(
                st.where, f"import {pattern!r}: no snippet of that name and no file {full}"
            )
        yield from self.file_statements(Path(full), st.where)


def _is_snippet_name(text: str) -> bool:
    return len(text) > 2 and text.startswith("(") and text.endswith(")")


def parse(text: str, file: str = "Corefile", env: Mapping[str, str] | None = None) -> list[ServerBlock]:
    """Parse Corefile text into server blocks, with imports and snippets expanded."""
    expander = _Expander(env=os.environ if env is None else env)
    path = Path(file)
    statements, _ = _statements(lex(text, file, expander.env), 0, top=True)
    statements = expander.top_level(statements, path)
    if not statements:
        raise ConfigError(Location(file, 1), "no server block: the Corefile is empty")
    if statements[0].body is None:
        # A file holding a single server block may omit the braces.
        first, rest = statements[0], statements[1:]
        if any(st.body is not None and _looks_like_keys(st) for st in rest):
            raise ConfigError(first.where, f"{first.name!r}: a server block needs '{{' after its keys")
        return [ServerBlock(first.tokens, expander.expand(tuple(rest), path))]
    blocks: list[ServerBlock] = []
    for st in statements:
        if st.body is None:
            raise ConfigError(
                st.where, f"{st.name!r} is outside any server block; did you forget '{{'?"
            )
        blocks.append(ServerBlock(st.tokens, expander.expand(st.body, path)))
    return blocks


def _looks_like_keys(st: Statement) -> bool:
    return "." in st.name or ":" in st.name


def load(path: str | Path, env: Mapping[str, str] | None = None) -> list[ServerBlock]:
    """Read and parse a Corefile; unreadable files are config errors too."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        what = str(p) if p.name == "Corefile" else f"the Corefile {p}"  # never "Corefile Corefile"
        raise ConfigError(None, f"cannot read {what}: {err.strerror or err}") from err
    except UnicodeDecodeError as err:
        raise ConfigError(Location(str(p), 1), f"not UTF-8 text: {err.reason}") from err
    return parse(text, str(p), env)
