"""`cache`: parse the directive; the cache itself lives in `splitdns.core.cache`.

Syntax (CoreDNS's):

    cache [TTL] [ZONES...] {
        success CAPACITY [TTL] [MINTTL]
        denial CAPACITY [TTL] [MINTTL]
        servfail DURATION
        serve_stale [DURATION [immediate [TTL [RECHECK]] | verify [TIMEOUT [TTL [RECHECK]]]]]
        prefetch AMOUNT [DURATION [PERCENTAGE%]]
        disable success|denial [ZONES...]
    }

`cache 30` caps both positive and negative TTLs at 30 seconds, as in CoreDNS. Unlike
CoreDNS, no TTL is raised by default (MINTTL 0, where CoreDNS has 5): an authority's TTL 0
is relayed as 0 and never cached, a TTL 2 is served as 2 (RFC 1035 3.2.1, RFC 2181 8). An
explicit MINTTL still sets a floor for those who want one.

`prefetch`: an entry asked AMOUNT times with no gap of DURATION (default 1m) or more between
two asks is popular; when a hit finds less than PERCENTAGE (10% to 90%, default 10%) of its
TTL left, or at the latest 1 s before it expires, the upstream is asked again in the
background, so clients keep getting hits. `disable` with ZONES stops caching that kind only
for names under them.

`serve_stale`'s further arguments are CoreDNS's: TTL, the TTL of a stale answer (a whole
number of seconds; 0, the default, is RFC 8767's 30 s, capped by the cache's TTL), and
RECHECK, how long after a failed refresh the next one waits (up to 5m; 0: 30 s, RFC 8767).
`verify`'s TIMEOUT is accepted and has no effect: a stale answer is served once the
upstreams fail, within the forward's own deadline.
Tests: tests/test_cache.py, tests/test_coredns_parity.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from splitdns.corefile import Statement
from splitdns.directives import _args
from splitdns.errors import ConfigError

USAGE = "cache [TTL] [ZONES...] [{ options }]"
OPTIONS = ("success", "denial", "servfail", "serve_stale", "prefetch", "disable")
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
    serve_stale_ttl: int = 0          # the TTL of a stale answer; 0: RFC 8767's 30
    serve_stale_recheck: float = 0.0  # after a failed refresh, the next waits this; 0: 30 s
    disable_success: bool = False
    disable_denial: bool = False
    disable_success_zones: tuple[str, ...] = ()  # with disable_success: only these (empty: all)
    disable_denial_zones: tuple[str, ...] = ()
    prefetch_amount: int = 0         # 0: off
    prefetch_duration: float = 60.0  # the longest gap between two asks of a popular entry
    prefetch_percentage: int = 10    # refresh when this much of the TTL is left


def parse(st: Statement) -> CacheSpec:
    values: dict[str, object] = {}
    args = list(st.args)
    if args and args[0].lstrip("-").isdigit():
        ttl = _args.integer(st, args.pop(0), "cache TTL", minimum=1)
        values["success_ttl"] = values["denial_ttl"] = ttl
    if args:
        values["zones"] = tuple(z for a in args for z in _args.zones(st, a, "cache ZONE"))
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
        _serve_stale(opt, out)
    elif name == "disable":
        _args.arity(opt, 1, None, "disable success|denial [ZONES...]")
        if args[0] not in ("success", "denial"):
            raise ConfigError(opt.where, f"disable: {args[0]!r} is not success or denial")
        out[f"disable_{args[0]}"] = True
        out[f"disable_{args[0]}_zones"] = tuple(_args.zone(opt, z, "disable ZONE") for z in args[1:])
    elif name == "prefetch":
        _prefetch(opt, out)
    else:
        raise _args.unknown_option(opt, "cache", OPTIONS)


def _serve_stale(opt: Statement, out: dict[str, object]) -> None:
    usage = "serve_stale [DURATION [immediate [TTL [RECHECK]] | verify [TIMEOUT [TTL [RECHECK]]]]]"
    args = opt.args
    _args.arity(opt, 0, 5, usage)
    out["serve_stale"] = _args.duration(opt, args[0], "serve_stale") if args else 3600.0
    if len(args) < 2:
        return
    mode = args[1].lower()
    if mode not in ("immediate", "verify"):
        raise ConfigError(opt.where, f"serve_stale: {args[1]!r} is not immediate or verify")
    out["serve_stale_verify"] = mode == "verify"
    rest = list(args[2:])
    if mode == "verify" and rest:
        _args.duration(opt, rest.pop(0), "serve_stale verify TIMEOUT")
    if len(rest) > 2:
        raise ConfigError(opt.where, f"serve_stale: too many arguments; usage: {usage}")
    if rest:
        ttl = _args.duration(opt, rest[0], "serve_stale TTL")
        if ttl != int(ttl) or ttl > 2**32 - 1:
            raise ConfigError(opt.where, "serve_stale: the TTL must be a whole number of seconds")
        out["serve_stale_ttl"] = int(ttl)
    if len(rest) > 1:
        recheck = _args.duration(opt, rest[1], "serve_stale RECHECK")
        if recheck > 300:
            raise ConfigError(opt.where, "serve_stale: RECHECK is at most 5m")
        out["serve_stale_recheck"] = recheck


def _prefetch(opt: Statement, out: dict[str, object]) -> None:
    usage = "prefetch AMOUNT [DURATION [PERCENTAGE%]]"
    _args.arity(opt, 1, 3, usage)
    out["prefetch_amount"] = _args.integer(opt, opt.args[0], "prefetch AMOUNT")  # 0: off, as in CoreDNS
    if len(opt.args) > 1:
        out["prefetch_duration"] = _args.duration(opt, opt.args[1], "prefetch DURATION")
    if len(opt.args) > 2:
        text = opt.args[2]
        if not text.endswith("%"):
            raise ConfigError(opt.where, f"prefetch: {text!r} needs its percent sign, like 10%")
        out["prefetch_percentage"] = _args.integer(opt, text[:-1], "prefetch PERCENTAGE", 10, 90)
