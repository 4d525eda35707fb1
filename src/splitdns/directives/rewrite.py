"""`rewrite name`: ask for another name than the client did, and answer under the one it asked.

Syntax (CoreDNS's `name` field):

    rewrite [continue|stop] name [exact|prefix|suffix|substring|regex] FROM TO
            [answer auto | answer name FROM TO | answer value FROM TO]...
    rewrite [continue|stop] { name regex FROM TO; answer name FROM TO }

As in CoreDNS: FROM and TO are lower-cased and fully qualified (a trailing dot is added,
so `prefix foo bar` matches `foo.`), except a regex's FROM; a regex's TO takes `{N}`
groups. Rules apply in order to the name as the previous rules left it; a rule that
matches ends the list unless it says `continue`. The reply always carries the client's
question. Answer names are mapped back: always for `exact`, with `answer auto` for the
other kinds (for `suffix`, the suffix is swapped back), and by regex with `answer name`
(owners) or `answer value` (CNAME, DNAME, NS, PTR, MX, SRV targets, SOA server, NAPTR
replacement); the rules that applied are undone last first.
Other fields (`type`, `class`, `edns0`, `ttl`, `cname`, `rcode`) are not implemented.
Tests: tests/test_plugins.py, tests/test_plugins_serve.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from splitdns.corefile import Statement
from splitdns.directives import _args
from splitdns.errors import ConfigError

USAGE = ("rewrite [continue|stop] name [exact|prefix|suffix|substring|regex] FROM TO "
         "[answer auto|answer name FROM TO|answer value FROM TO]")
KINDS = ("exact", "prefix", "suffix", "substring", "regex")
FIELDS = ("type", "class", "edns0", "ttl", "cname", "rcode")


@dataclass(frozen=True)
class AnswerRule:
    """`answer name|value FROM TO`: a regex over owner names (name) or record targets (value)."""

    field: str
    pattern: re.Pattern[str]
    replacement: str


@dataclass(frozen=True)
class RewriteRule:
    kind: str
    source: str                      # the text matched (a pattern's text for regex)
    target: str
    stop: bool = True
    auto: bool = False
    answers: tuple[AnswerRule, ...] = ()
    pattern: re.Pattern[str] | None = None

    def apply(self, name: str) -> str | None:
        """The rewritten name (lower-case, fully qualified), or None if the rule does not match."""
        if self.kind == "exact":
            return self.target if name == self.source else None
        if self.kind == "prefix":
            return self.target + name[len(self.source):] if name.startswith(self.source) else None
        if self.kind == "suffix":
            return name[:-len(self.source)] + self.target if name.endswith(self.source) else None
        if self.kind == "substring":
            return name.replace(self.source, self.target) if self.source in name else None
        assert self.pattern is not None
        match = self.pattern.search(name)
        if match is None:
            return None
        return expand(self.target, match)


def expand(replacement: str, match: re.Match[str]) -> str:
    out = replacement
    for i, value in enumerate((match.group(0), *match.groups(default=""))):
        out = out.replace("{" + str(i) + "}", value)
    return out


def parse(st: Statement) -> RewriteRule:
    args = list(st.args)
    if len(args) < 2 and st.body is not None:  # the block form: its tokens follow the mode
        args.extend(_flatten(st.body))
    stop = True
    if args and args[0] in ("continue", "stop"):
        stop = args.pop(0) == "stop"
    if not args:
        raise ConfigError(st.where, f"rewrite: a rule is missing; usage: {USAGE}")
    field = args.pop(0)
    if field != "name":
        if field in FIELDS:
            raise ConfigError(st.where, f"rewrite {field} is not implemented by splitdns; "
                                        f"it implements rewrite name ({USAGE})")
        raise ConfigError(st.where, f"rewrite: {field!r} is not a rewrite field; usage: {USAGE}")
    if len(args) < 2:
        raise ConfigError(st.where, f"rewrite name: too few arguments; usage: {USAGE}")
    if len(args) == 2:
        kind, source, target = "exact", args[0], args[1]
    else:
        kind, source, target = args[0].lower(), args[1], args[2]
    if kind not in KINDS:
        raise ConfigError(st.where, f"rewrite name: {kind!r} is not a match type ({', '.join(KINDS)})")
    pattern = None
    if kind == "regex":
        pattern = _args.regex(st, source, "rewrite name")
        if _groups_used(target) > pattern.groups:  # CoreDNS counts {0} too
            raise ConfigError(st.where, f"rewrite name: {target!r} uses more groups than {source!r} has")
        target = _fqdn(target)
    else:
        source, target = _fqdn(source), _fqdn(target)
    auto, answers = _answer_rules(st, args[3:])
    return RewriteRule(kind, source, target, stop, auto or kind == "exact", answers, pattern)


def _flatten(body: tuple[Statement, ...]) -> list[str]:
    out: list[str] = []
    for line in body:
        out.extend(t.text for t in line.tokens)
        if line.body:
            out.extend(_flatten(line.body))
    return out


def _answer_rules(st: Statement, args: list[str]) -> tuple[bool, tuple[AnswerRule, ...]]:
    auto, pos = False, 0
    rules: list[AnswerRule] = []
    if args and len(args) < 2:
        raise ConfigError(st.where, f"rewrite name: an answer rule is incomplete; usage: {USAGE}")
    while pos < len(args):
        if args[pos] == "answer":
            pos += 1
        elif not rules and not auto:
            raise ConfigError(st.where, f"rewrite name: unexpected {args[pos]!r} after TO; usage: {USAGE}")
        what = args[pos] if pos < len(args) else ""
        pos += 1
        if what == "auto":
            auto = True
        elif what in ("name", "value"):
            if len(args) - pos < 2:
                raise ConfigError(st.where, f"rewrite name: answer {what} needs FROM and TO")
            pattern = _args.regex(st, args[pos], "rewrite name")
            if _groups_used(args[pos + 1]) > pattern.groups:  # as for the question's regex
                raise ConfigError(st.where, f"rewrite name: answer {what} {args[pos + 1]!r} uses more "
                                            f"groups than {args[pos]!r} has")
            rules.append(AnswerRule(what, pattern, _fqdn(args[pos + 1])))
            pos += 2
        else:
            raise ConfigError(st.where, f"rewrite name: {what!r} is not an answer rule (auto, name, value)")
    if auto and any(r.field == "name" for r in rules):
        raise ConfigError(st.where, "rewrite name: answer auto cannot be combined with answer name")
    return auto, tuple(rules)


def _groups_used(text: str) -> int:
    return sum(1 for i in range(101) if "{" + str(i) + "}" in text)


def _fqdn(text: str) -> str:
    return text.lower() if text.endswith(".") else text.lower() + "."
