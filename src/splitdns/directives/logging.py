"""`errors` and `log`: which lines the server writes to stderr, in CoreDNS's formats.

Syntax:

    errors [stdout] [{ format coredns|json; stacktrace; consolidate DURATION REGEX [LEVEL] [show_first] }]
    log [NAMES...] [FORMAT] [{ format coredns|json; class success|denial|error|all... }]

As in CoreDNS, one argument to `log` is a name; with more, the last one is the FORMAT when it
holds a `{` (`{common}`, `{combined}` or a template of placeholders such as `{name}`). A
block may have several `log` lines: the first whose NAMES cover the query's name writes it.
`consolidate` is CoreDNS's: errors whose text matches REGEX are counted for DURATION and
written as one line (`N errors like 'REGEX' occurred in last DURATION`) at LEVEL (error,
warning, info or debug), the first one in full with `show_first`. `stacktrace` (Go stack
traces on a plugin's panic) is accepted and has no effect: a bug of ours is logged with its
traceback anyway.
Tests: tests/test_query_log.py, tests/test_error_log.py.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

from splitdns.codec.wire import is_subdomain, name_to_wire
from splitdns.corefile import Statement
from splitdns.directives import _args
from splitdns.errors import ConfigError

CLASSES = ("success", "denial", "error", "all")
FORMATS = ("coredns", "json")


LEVELS = ("error", "warning", "info", "debug")


@dataclass(frozen=True)
class Consolidate:
    period: float
    pattern: re.Pattern[str]
    level: str = "error"
    show_first: bool = False


@dataclass(frozen=True)
class ErrorsSpec:
    json: bool = False
    consolidate: tuple[Consolidate, ...] = ()


@dataclass(frozen=True)
class LogSpec:
    classes: frozenset[str] = frozenset({"all"})
    json: bool = False
    names: tuple[str, ...] = (".",)  # log only queries for names under these
    template: str | None = None      # None: CoreDNS's Common Log Format

    @functools.cached_property
    def wire_names(self) -> tuple[bytes, ...]:
        return tuple(name_to_wire(n) for n in self.names)

    more: tuple[LogSpec, ...] = ()   # the block's further `log` lines, in file order

    def rule_for(self, name: bytes, rcode: int) -> LogSpec | None:
        """The `log` line that writes the reply to a query for `name` (wire form), or None. As
        in CoreDNS, the first line whose NAMES cover the name decides, by its classes
        (success, denial, error)."""
        for rule in (self, *self.more):
            if rule.names == (".",) or any(is_subdomain(name, n) for n in rule.wire_names):
                kind = "error" if rcode not in (0, 3) else ("denial" if rcode == 3 else "success")
                return rule if "all" in rule.classes or kind in rule.classes else None
        return None

    def wants(self, name: bytes, rcode: int) -> bool:
        """Whether the reply to a query for `name` (wire form) is logged."""
        return self.rule_for(name, rcode) is not None

    def and_then(self, later: LogSpec) -> LogSpec:
        """This spec with one more `log` line of the same block after it."""
        return replace(self, more=(*self.more, later))


def parse_errors(st: Statement) -> ErrorsSpec:
    _args.arity(st, 0, 1, "errors [stdout] [{ format coredns|json }]")
    if st.args and st.args[0] != "stdout":
        # CoreDNS takes `stdout` (its errors go to standard output); ours go to stderr, as
        # every line of a container's log does.
        raise ConfigError(st.where, f"errors: {st.args[0]!r} is not a log destination; only stdout")
    json = False
    patterns: list[Consolidate] = []
    for opt in st.body or ():
        if opt.name == "format":
            json = _format(opt)
        elif opt.name == "consolidate":
            patterns.append(_consolidate(opt))
        elif opt.name == "stacktrace":
            _args.arity(opt, 0, 0, "stacktrace")
        else:
            raise _args.unknown_option(opt, "errors", ("format", "consolidate", "stacktrace"))
    return ErrorsSpec(json=json, consolidate=tuple(patterns))


def _consolidate(opt: Statement) -> Consolidate:
    usage = "consolidate DURATION REGEX [error|warning|info|debug] [show_first]"
    _args.arity(opt, 2, 4, usage)
    period = _args.duration(opt, opt.args[0], "consolidate")
    pattern = _args.regex(opt, opt.args[1], "consolidate")
    level, show_first = "", False
    for arg in opt.args[2:]:  # as CoreDNS: a level at most once, and before show_first
        if arg in LEVELS and not level and not show_first:
            level = arg
        elif arg == "show_first" and not show_first:
            show_first = True
        else:
            raise ConfigError(opt.where, f"consolidate: {arg!r} is out of place; usage: {usage}")
    return Consolidate(period, pattern, level or "error", show_first)


def parse_log(st: Statement) -> LogSpec:
    args = list(st.args)
    template: str | None = None
    if len(args) > 1 and "{" in args[-1]:
        template = _template(args.pop())
    names = tuple(_args.zone(st, a, "log NAME") for a in args) or (".",)
    classes: set[str] = set()
    json = False
    for opt in st.body or ():
        if opt.name == "class":
            _args.arity(opt, 1, None, "class success|denial|error|all...")
            for c in opt.args:
                if c not in CLASSES:
                    raise ConfigError(opt.where, f"class: {c!r} is not one of {', '.join(CLASSES)}")
            classes.update(opt.args)
        elif opt.name == "format":
            json = _format(opt)
        else:
            raise _args.unknown_option(opt, "log", ("class", "format"))
    if template is not None and json:
        raise ConfigError(st.where, "log: a FORMAT and `format json` exclude each other")
    return LogSpec(classes=frozenset(classes or {"all"}), json=json, names=names, template=template)


def _template(text: str) -> str | None:
    """None for the Common Log Format (what `log` writes by default), else the template."""
    return None if text == "{common}" else text


def _format(opt: Statement) -> bool:
    _args.arity(opt, 1, 1, "format coredns|json")
    if opt.args[0] not in FORMATS:
        raise ConfigError(opt.where, f"format: {opt.args[0]!r} is not one of {', '.join(FORMATS)}")
    return opt.args[0] == "json"
