"""Extract the table-driven cases of CoreDNS's Go tests as data.

Run against a checkout of a CoreDNS release (not part of this repository):

    python tools/coredns_tables.py /tmp/coredns v1.14.7 > tests/coredns/data/tables.json

Every `[]struct{...}{...}` table inside a `func Test...` of the files named in FILES becomes a
list of rows; each row keeps the Go file, the test function, the row index (as `i` counts it in
the Go loop) and its fields, decoded where they are Go string, bool or nil literals and kept as
Go source text otherwise. Expectations (which rows pass, which are refused, and why) are not
made here: tests/coredns/expect.py holds them, so re-running this against another release
shows what changed in CoreDNS without touching our verdicts.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

FILES = (
    "plugin/forward/setup_test.go", "plugin/forward/setup_policy_test.go",
    "plugin/cache/setup_test.go",
    "plugin/hosts/setup_test.go",
    "plugin/template/setup_test.go",
    "plugin/rewrite/setup_test.go", "plugin/rewrite/rewrite_test.go:TestNewRule",
    "plugin/rewrite/name_test.go:TestNewNameRule",
    "plugin/loadbalance/setup_test.go",
    "plugin/errors/setup_test.go",
    "plugin/log/setup_test.go",
    "plugin/bind/setup_test.go",
    "plugin/pkg/parse/host_test.go", "plugin/pkg/parse/parse_test.go",
    "plugin/pkg/parse/transport_test.go",
    "core/dnsserver/address_test.go", "core/dnsserver/register_test.go",
    "plugin/normalize_test.go",
)
# Behaviour tables (a reply in, what the client gets out): a package-level `var NAME = []struct`
# table is named by its variable. `FILE:TEST` takes one test's tables; a table taken for
# parsing is not taken again as behaviour.
BEHAVIOUR = (
    "plugin/cache/cache_test.go", "plugin/loadbalance/loadbalance_test.go",
    "plugin/rewrite/reverter_test.go", "plugin/hosts/hosts_test.go", "plugin/rewrite/rewrite_test.go",
    "plugin/hosts/hostsfile_test.go", "plugin/hosts/wildcard_test.go", "plugin/cache/dnssec_test.go",
    "plugin/rewrite/name_test.go", "plugin/log/log_test.go",
)
# Tables of a named Go type rather than an inline struct (`[]TYPE{...}`), with its field names;
# test.Case rows name their fields, so they need none. Taken only in the files listed here.
TYPED = {
    "plugin/hosts/hosts_test.go": {"test.Case": ()},
    "plugin/hosts/wildcard_test.go": {"staticHostEntry": ("in", "v4", "v6")},
    "plugin/cache/dnssec_test.go": {"test.Case": ()},
}
# Constants the behaviour tables read (a hosts file's text)
CONSTANTS = (("plugin/hosts/hosts_test.go", "hostsExample"), ("plugin/hosts/wildcard_test.go", "hosts"),
             *(("plugin/hosts/hostsfile_test.go", name) for name in
               ("hosts", "singlelinehosts", "ipv4hosts", "ipv6hosts", "casehosts")),
             ("plugin/template/template_test.go", "multisectionConfig"))

_TOKEN = re.compile(r"""
    (?P<space>\s+|//[^\n]*|/\*.*?\*/)
  | (?P<raw>`[^`]*`)
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<char>'(?:[^'\\]|\\.)*')
  | (?P<word>[A-Za-z_][A-Za-z0-9_.]*|[0-9][0-9A-Za-z_.]*)
  | (?P<punct>:=|[{}()\[\],:+\-*&!=<>|/%^.;])
""", re.VERBOSE | re.DOTALL)


def tokens(text: str) -> list[tuple[str, str, int]]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"cannot read Go at {text[pos:pos + 40]!r}")
        kind = m.lastgroup or ""
        if kind != "space":
            out.append((kind, m.group(), m.start()))
        pos = m.end()
    return out


def _go_string(tok: tuple[str, str, int]) -> str:
    kind, text, _ = tok
    if kind == "raw":
        return text[1:-1]
    return str(json.loads(re.sub(r"\\x([0-9a-fA-F]{2})", r"\\u00\1", text)))


def _matching(toks: list[tuple[str, str, int]], at: int) -> int:
    """Index of the token closing the bracket opened at `at`."""
    pairs = {"{": "}", "(": ")", "[": "]"}
    depth = 0
    for i in range(at, len(toks)):
        t = toks[i][1]
        if toks[i][0] != "punct":
            continue
        if t in pairs:
            depth += 1
        elif t in pairs.values():
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced brackets")


def _split(toks: list[tuple[str, str, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """Top-level comma-separated spans of toks[lo:hi]."""
    spans, depth, start = [], 0, lo
    for i in range(lo, hi):
        t = toks[i]
        if t[0] == "punct" and t[1] in "{([":
            depth += 1
        elif t[0] == "punct" and t[1] in "})]":
            depth -= 1
        elif t[0] == "punct" and t[1] == "," and depth == 0:
            spans.append((start, i))
            start = i + 1
    if start < hi:
        spans.append((start, hi))
    return spans


def _value(text: str, toks: list[tuple[str, str, int]], lo: int, hi: int) -> Any:
    part = toks[lo:hi]
    if all(t[0] in ("raw", "str") or t[1] == "+" for t in part) and part:
        return "".join(_go_string(t) for t in part if t[0] in ("raw", "str"))
    if len(part) == 1 and part[0][1] in ("true", "false"):
        return part[0][1] == "true"
    if len(part) == 1 and part[0][1] == "nil":
        return None
    return {"go": text[part[0][2]:toks[hi - 1][2] + len(toks[hi - 1][1])]} if part else None


def _key(field: str) -> str:
    """A Go field's key in a row; one named like the row's own keys (`file`) gets a `_`."""
    return field + "_" if field in ("file", "test", "row", "line") else field


def tables(path: Path, rel: str) -> list[dict[str, Any]]:
    text = path.read_text()
    toks = tokens(text)
    rows: list[dict[str, Any]] = []
    function = ""
    depth = 0  # of braces: a `var` at 0 is package-level
    i = 0
    while i < len(toks):
        word = toks[i][1]
        if toks[i][0] == "punct" and word in "{}":
            depth += 1 if word == "{" else -1
        if word == "func" and i + 1 < len(toks):
            function = toks[i + 1][1]
        table = function
        if depth == 0 and i >= 3 and toks[i - 1][1] == "=" and toks[i - 3][1] == "var":
            table = toks[i - 2][1]  # a package-level table, named by its variable
        typed = (TYPED.get(rel, {}).get(toks[i + 2][1])
                 if word == "[" and i + 3 < len(toks) and toks[i + 1][1] == "]" else None)
        if typed is not None and toks[i + 3][1] == "{" and (table.startswith("Test") or table != function):
            fields, start = list(typed), i + 3
        elif (word == "[" and toks[i + 1][1] == "]" and toks[i + 2][1] == "struct"
                and toks[i + 3][1] == "{" and (table.startswith("Test") or table != function)):
            close = _matching(toks, i + 3)
            fields = []
            # struct fields are one per line: `name type`, names possibly grouped `a, b type`
            body = text[toks[i + 3][2] + 1:toks[close][2]]
            for line in body.splitlines():
                line = line.split("//")[0].strip()
                if line:
                    names = line.split()[0:-1] if "," in line else line.split()[:1]
                    fields.extend(n.strip(",") for n in names)
            start = close + 1
        else:
            i += 1
            continue
        if toks[start][1] != "{":
            i = close
            continue
        end = _matching(toks, start)
        for index, (lo, _) in enumerate(_split(toks, start + 1, end)):
            if toks[lo][1] != "{":
                continue
            inner_end = _matching(toks, lo)
            row: dict[str, Any] = {"file": rel, "test": table, "row": index,
                                   "line": text.count("\n", 0, toks[lo][2]) + 1}
            for n, (a, b) in enumerate(_split(toks, lo + 1, inner_end)):
                if b - a >= 2 and toks[a][0] == "word" and toks[a + 1][1] == ":":
                    row[_key(toks[a][1])] = _value(text, toks, a + 2, b)
                elif n < len(fields):
                    row[_key(fields[n])] = _value(text, toks, a, b)
            rows.append(row)
        i = end
        i += 1
    return rows


def _rows(root: Path, names: tuple[str, ...]) -> list[dict[str, Any]]:
    out = []
    for name in names:
        rel, _, test = name.partition(":")
        out.extend(row for row in tables(root / rel, rel) if not test or row["test"] == test)
    return out


def _constant(path: Path, name: str) -> str:
    # a top-level or local `const NAME = `...``, NAME in a `var (...)` block, or `NAME := `...``
    found = re.search(rf"^\s*(?:const |var )?{name}\s*:?= `([^`]*)`", path.read_text(), re.MULTILINE)
    if found is None:
        raise ValueError(f"no constant {name} in {path}")
    return found.group(1)


def main(argv: list[str]) -> int:
    root, release = Path(argv[1]), argv[2]
    parse = _rows(root, FILES)
    taken = {(row["file"], row["test"]) for row in parse}
    out = {"release": release, "source": "https://github.com/coredns/coredns",
           "rows": parse,
           "behaviour": [row for row in _rows(root, BEHAVIOUR) if (row["file"], row["test"]) not in taken],
           "constants": {f"{rel}:{name}": _constant(root / rel, name) for rel, name in CONSTANTS}}
    json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
