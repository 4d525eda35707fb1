"""`template`: answers made from the query, by regular expression and a record template.

Syntax (CoreDNS's):

    template CLASS TYPE [ZONE...] {
        match REGEX...                 against the lower-case query name; default: every name
        answer|additional|authority RR a record in zone-file form, with template actions
        rcode CODE                     NOERROR by default
        fallthrough [ZONE...]          no regex matched: go on (else SERVFAIL)
    }

The common use in a pod: `template IN AAAA { rcode NOERROR }`, an empty answer for every
AAAA question, so an IPv4-only tunnel does not keep clients waiting on AAAA lookups.

CoreDNS runs each record through Go's text/template. We implement the actions real
Corefiles use: `{{ .Name }}`, `{{ .Zone }}`, `{{ .Class }}`, `{{ .Type }}`,
`{{ index .Match N }}` and `{{ .Group.NAME }}`; any other action is refused at load with
its file and line, never answered wrongly at run time. `upstream` (a leftover of old Corefiles that
CoreDNS reads and ignores) loads and does nothing. Regexes are Python's, which read the
RE2 patterns templates use (`(?P<name>...)` groups included) the same way.
Tests: tests/test_plugins.py, tests/test_plugins_serve.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from splitdns.corefile import Statement
from splitdns.directives import _args
from splitdns.errors import ConfigError, Location

USAGE = ("template CLASS TYPE [ZONE...] { match REGEX...; answer|additional|authority RR; rcode CODE; "
         "fallthrough [ZONE...] }")
CLASSES = {"IN": 1, "CH": 3, "HS": 4, "ANY": 255}
ANY = 255
SECTIONS = ("answer", "additional", "authority")
OPTIONS = ("match", *SECTIONS, "rcode", "fallthrough")
RCODES = {"NOERROR": 0, "FORMERR": 1, "SERVFAIL": 2, "NXDOMAIN": 3, "NOTIMP": 4, "REFUSED": 5,
          "YXDOMAIN": 6, "YXRRSET": 7, "NXRRSET": 8, "NOTAUTH": 9, "NOTZONE": 10}

_ACTION = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}", re.S)
_FIELDS = ("Name", "Zone", "Class", "Type")
_INDEX = re.compile(r"index\s+\.Match\s+(\d+)")
_GROUP = re.compile(r"\.Group\.(\w+)")

# A part of a record template: literal text, or what to put there ("Name", ("Match", 1), ...).
Part = str | tuple[str, str | int]


@dataclass(frozen=True)
class RecordTemplate:
    text: str
    parts: tuple[Part, ...]
    where: Location

    def render(self, fields: dict[str, str], match: re.Match[str]) -> str:
        """The record for one query. Raises IndexError for `index .Match N` beyond the
        groups (Go's template fails the same way, and the answer is SERVFAIL)."""
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
            elif part[0] == "Match":
                groups = (match.group(0), *match.groups(default=""))
                out.append(groups[int(part[1])])
            elif part[0] == "Group":
                out.append(match.groupdict(default="").get(str(part[1]), ""))
            else:
                out.append(fields[str(part[1])])
        return "".join(out)


@dataclass(frozen=True)
class TemplateSpec:
    qclass: int
    qtype: int
    zones: tuple[str, ...]  # empty: the block's
    regexes: tuple[re.Pattern[str], ...]
    answer: tuple[RecordTemplate, ...] = ()
    additional: tuple[RecordTemplate, ...] = ()
    authority: tuple[RecordTemplate, ...] = ()
    rcode: int = 0
    fallthrough: tuple[str, ...] | None = None  # None: off; (): every zone
    where: Location | None = None


def parse(st: Statement) -> TemplateSpec:
    _args.arity(st, 2, None, USAGE)
    qclass = CLASSES.get(st.args[0].upper())
    if qclass is None:
        raise ConfigError(st.where, f"template: {st.args[0]!r} is not a class (IN, CH, HS or ANY)")
    qtype = _type(st, st.args[1])
    zones = tuple(z for a in st.args[2:] for z in _args.origins(st, a, "template"))
    regexes: list[re.Pattern[str]] = []
    sections: dict[str, list[RecordTemplate]] = {s: [] for s in SECTIONS}
    rcode = 0
    fallthrough: tuple[str, ...] | None = None
    for opt in st.body or ():
        if opt.name == "match":
            _args.arity(opt, 1, None, "match REGEX...")
            regexes.extend(_args.regex(opt, text, "template match") for text in opt.args)
        elif opt.name in SECTIONS:
            _args.arity(opt, 1, 1, f"{opt.name} RR (quote the record)")
            sections[opt.name].append(compile_record(opt, opt.args[0]))
        elif opt.name == "rcode":
            _args.arity(opt, 1, 1, "rcode CODE")
            code = RCODES.get(opt.args[0].upper())
            if code is None:
                raise ConfigError(opt.where, f"template: {opt.args[0]!r} is not a response code "
                                             f"({', '.join(RCODES)})")
            rcode = code
        elif opt.name == "fallthrough":
            fallthrough = tuple(_args.zone(opt, z, "fallthrough") for z in opt.args)
        elif opt.name == "upstream":  # CoreDNS still reads it, and ignores it: no effect here either
            continue
        elif opt.name == "ederror":
            raise ConfigError(opt.where, "template: ederror is not implemented by splitdns; "
                                         "remove it (the rcode is still answered)")
        else:
            raise _args.unknown_option(opt, "template", OPTIONS)
    return TemplateSpec(qclass, qtype, zones, tuple(regexes) or (re.compile(".*"),),
                        tuple(sections["answer"]), tuple(sections["additional"]),
                        tuple(sections["authority"]), rcode, fallthrough, st.where)


def _type(st: Statement, text: str) -> int:
    import dns.rdatatype

    if text.upper() == "ANY":
        return ANY
    try:
        return int(dns.rdatatype.from_text(text.upper()))
    except Exception:
        raise ConfigError(st.where, f"template: {text!r} is not a record type") from None


def compile_record(opt: Statement, text: str) -> RecordTemplate:
    """A record template split into text and the actions we implement; anything else is
    an error naming the action, with the file and line."""
    parts: list[Part] = []
    pos = 0
    for action in _ACTION.finditer(text):
        if action.start() > pos:
            parts.append(text[pos:action.start()])
        pos = action.end()
        expr = action.group(1)
        index = _INDEX.fullmatch(expr)
        group = _GROUP.fullmatch(expr)
        if expr.startswith(".") and expr[1:] in _FIELDS:
            parts.append(("Field", expr[1:]))
        elif index:
            parts.append(("Match", int(index.group(1))))
        elif group:
            parts.append(("Group", group.group(1)))
        else:
            raise ConfigError(opt.where, f"template: the action {{{{ {expr} }}}} is not supported; "
                                         "splitdns implements {{ .Name }}, {{ .Zone }}, {{ .Class }}, "
                                         "{{ .Type }}, {{ index .Match N }} and {{ .Group.NAME }}")
    if pos < len(text):
        parts.append(text[pos:])
    if any(isinstance(p, str) and ("{{" in p or "}}" in p) for p in parts):
        raise ConfigError(opt.where, f"template: unbalanced {{{{ }}}} in {text!r}")
    return RecordTemplate(text, tuple(parts), opt.where)
