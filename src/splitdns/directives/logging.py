"""`errors` and `log`: which lines the server writes to stderr, in CoreDNS's formats.

Syntax:

    errors [{ format coredns|json }]
    log [{ format coredns|json; class success|denial|error|all... }]
"""

from __future__ import annotations

from dataclasses import dataclass

from splitdns.corefile import Statement
from splitdns.directives import _args
from splitdns.errors import ConfigError

CLASSES = ("success", "denial", "error", "all")
FORMATS = ("coredns", "json")


@dataclass(frozen=True)
class ErrorsSpec:
    json: bool = False


@dataclass(frozen=True)
class LogSpec:
    classes: frozenset[str] = frozenset({"all"})
    json: bool = False


def parse_errors(st: Statement) -> ErrorsSpec:
    _args.arity(st, 0, 0, "errors [{ format coredns|json }]")
    json = False
    for opt in st.body or ():
        if opt.name != "format":
            raise _args.unknown_option(opt, "errors", ("format",))
        json = _format(opt)
    return ErrorsSpec(json=json)


def parse_log(st: Statement) -> LogSpec:
    if st.args:
        raise ConfigError(
            st.where, "log: names and custom formats are not supported; use `log` alone"
        )
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
    return LogSpec(classes=frozenset(classes or {"all"}), json=json)


def _format(opt: Statement) -> bool:
    _args.arity(opt, 1, 1, "format coredns|json")
    if opt.args[0] not in FORMATS:
        raise ConfigError(opt.where, f"format: {opt.args[0]!r} is not one of {', '.join(FORMATS)}")
    return opt.args[0] == "json"
