"""`cache`: parse the directive; the cache itself lives in `splitdns.cache`.

Syntax (CoreDNS's):

    cache [TTL] [ZONES...] {
        success CAPACITY [TTL] [MINTTL]
        denial CAPACITY [TTL] [MINTTL]
        servfail DURATION
        serve_stale [DURATION] [immediate|verify]
        disable success|denial
    }

`cache 30` caps both positive and negative TTLs at 30 seconds, as in CoreDNS. Unlike
CoreDNS, no TTL is raised by default (MINTTL 0, where CoreDNS has 5): an authority's TTL 0
is relayed as 0 and never cached, a TTL 2 is served as 2 (RFC 1035 3.2.1, RFC 2181 8). An
explicit MINTTL still sets a floor for those who want one.
"""

from __future__ import annotations

from dataclasses import dataclass

from splitdns.corefile import Statement
from splitdns.directives import _args
from splitdns.errors import ConfigError

USAGE = "cache [TTL] [ZONES...] [{ options }]"
OPTIONS = ("success", "denial", "servfail", "serve_stale", "disable")
DEFAULT_CAPACITY = 9984
MIN_CAPACITY = 1024


@dataclass(frozen=True)
class CacheSpec:
    zones: tuple[str, ...] = ()
    success_capacity: int = DEFAULT_CAPACITY
    success_ttl: int = 3600
    success_min_ttl: int = 0          # CoreDNS: 5; we never raise an authority's TTL unasked
    denial_capacity: int = DEFAULT_CAPACITY
    denial_ttl: int = 1800
    denial_min_ttl: int = 0
    servfail_ttl: float = 5.0
    serve_stale: float = 0.0          # 0: off; else how long past expiry an entry may be served
    serve_stale_verify: bool = False  # verify: ask upstream first, stale only on failure
    disable_success: bool = False
    disable_denial: bool = False


def parse(st: Statement) -> CacheSpec:
    values: dict[str, object] = {}
    args = list(st.args)
    if args and args[0].lstrip("-").isdigit():
        ttl = _args.integer(st, args.pop(0), "cache TTL", minimum=1)
        values["success_ttl"] = values["denial_ttl"] = ttl
    if args:
        values["zones"] = tuple(_args.zone(st, z, "cache ZONE") for z in args)
    for opt in st.body or ():
        _option(opt, values)
    return CacheSpec(**values)  # type: ignore[arg-type]


def _option(opt: Statement, out: dict[str, object]) -> None:
    name, args = opt.name, opt.args
    if name in ("success", "denial"):
        _args.arity(opt, 1, 3, f"{name} CAPACITY [TTL] [MINTTL]")
        capacity = _args.integer(opt, args[0], f"{name} CAPACITY", minimum=1)
        out[f"{name}_capacity"] = max(MIN_CAPACITY, capacity // 256 * 256)
        if len(args) > 1:
            out[f"{name}_ttl"] = _args.integer(opt, args[1], f"{name} TTL", minimum=1)
        if len(args) > 2:
            out[f"{name}_min_ttl"] = _args.integer(opt, args[2], f"{name} MINTTL")
    elif name == "servfail":
        _args.arity(opt, 1, 1, "servfail DURATION")
        value = _args.duration(opt, args[0], "servfail")
        if value > 300:
            raise ConfigError(opt.where, "servfail: at most 5m")
        out["servfail_ttl"] = value
    elif name == "serve_stale":
        _args.arity(opt, 0, 2, "serve_stale [DURATION] [immediate|verify]")
        out["serve_stale"] = _args.duration(opt, args[0], "serve_stale") if args else 3600.0
        if len(args) > 1:
            if args[1] not in ("immediate", "verify"):
                raise ConfigError(opt.where, f"serve_stale: {args[1]!r} is not immediate or verify")
            out["serve_stale_verify"] = args[1] == "verify"
    elif name == "disable":
        _args.arity(opt, 1, 1, "disable success|denial")
        if args[0] not in ("success", "denial"):
            raise ConfigError(opt.where, f"disable: {args[0]!r} is not success or denial")
        out[f"disable_{args[0]}"] = True
    else:
        raise _args.unknown_option(opt, "cache", OPTIONS)
