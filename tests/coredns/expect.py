"""Our verdict on each ported CoreDNS case: it passes (the default), or we differ on purpose.

- `refused: TEXT`: the README refuses the feature; TEXT is quoted from README.md (the test
  finds it there, so the reason cannot go stale without this failing).
- `deliberate: TEXT`: the README lists the difference, with its reason (TEXT quoted from it).
- `gap: WHY`: a difference nobody chose, still open; docs/coredns-parity.md counts them.

A case with a verdict other than `pass` must still differ from CoreDNS: the test fails when a
refused case starts passing, so this file is corrected when the product changes.
"""

from __future__ import annotations

_TLS_KEY = "refused: `tls://`, `https://`, `grpc://` and `quic://` server keys are refused"
_TEMPLATE_ACTION = "refused: any other Go template action (and `ederror`) is refused at load with its line"
_WEIGHTED = "refused: `weighted` is refused"
_PREFER = "refused: and so is `prefer CIDR...` (addresses of preferred networks first)"
_INTERFACE = "refused: `bind` to an interface name (give its address)"
_REWRITE_FIELD = "refused: Other fields (`type`, `class`, `edns0`, `ttl`, ...) are refused"
# TestNewRule's rows of `rewrite type|class|edns0 ...`, which CoreDNS loads
_NEW_RULE_FIELDS = (*range(23, 24), *range(29, 30), *range(39, 47), *range(52, 59), *range(63, 71),
    *range(72, 80), *range(81, 89), *range(93, 96), *range(97, 101), *range(107, 109), *range(110, 112),
    *range(113, 115), *range(116, 118), *range(119, 133), *range(134, 142),)
_HTTPS_UPSTREAM = "refused: `https://` upstreams (DNS over HTTPS) are refused"

_NOT_CACHE = ("refused: Not implemented: `keepttl` (it would put a branch on every cache hit) and "
              "`serve_stale_policy`")

_OTHER_CLASS = "deliberate: a class other than IN REFUSED"

EXPECT: dict[str, str] = {
    "plugin/cache/setup_test.go:TestServeStalePolicy#0": _NOT_CACHE,
    "plugin/cache/setup_test.go:TestServeStalePolicy#1": _NOT_CACHE,
    "plugin/cache/setup_test.go:TestKeepttl#0": _NOT_CACHE,
    "plugin/template/setup_test.go:TestSetupParse#14":
        "refused: A zone argument must be a domain name or a network",
    "core/dnsserver/register_test.go:TestGroupingServers#7":
        "deliberate: So the blocks of one port must all use `bind` or none",
    "plugin/cache/qclass_test.go:TestCacheSeparatesQuestionClasses#0": _OTHER_CLASS,
    "plugin/template/template_test.go:TestMultiSection#2": _OTHER_CLASS,
    "plugin/forward/setup_test.go:TestFailfastAllUnhealthyUpstreams#0":
        "deliberate: CoreDNS does this only with `failfast_all_unhealthy_upstreams`",
    # forward
    "plugin/forward/setup_test.go:TestSetup#15": _HTTPS_UPSTREAM,
    "plugin/forward/setup_test.go:TestSplitZone#2": _HTTPS_UPSTREAM,
    "plugin/forward/setup_test.go:TestSplitZone#3": _HTTPS_UPSTREAM,
    "plugin/forward/setup_test.go:TestSplitZone#5": _HTTPS_UPSTREAM,
    "plugin/forward/setup_test.go:TestSplitZone#9": _HTTPS_UPSTREAM,
    "plugin/forward/setup_test.go:TestSplitZone#7":
        "refused: `forward` to a hostname (resolving it would need this resolver)",
    # template
    "plugin/template/setup_test.go:TestSetupParse#13": _TEMPLATE_ACTION,
    "plugin/template/setup_test.go:TestSetupParse#16": _TEMPLATE_ACTION,
    "plugin/template/setup_test.go:TestSetupParse#20": _TEMPLATE_ACTION,
    "plugin/template/setup_test.go:TestSetupParse#22": _TEMPLATE_ACTION,
    **{f"plugin/template/template_test.go:TestHandler#{n}": _TEMPLATE_ACTION for n in (6, 8, 9, 14, 15, 16)},
    "plugin/template/cname_test.go:TestTruncatedCNAME#0":
        "deliberate: One difference: CoreDNS looks up the target of a template's CNAME answer to an A or "
        "AAAA question through itself and adds its records",
    # loadbalance
    "plugin/loadbalance/setup_test.go:TestSetup#2": _WEIGHTED,
    "plugin/loadbalance/setup_test.go:TestSetup#3": _WEIGHTED,
    "plugin/loadbalance/setup_test.go:TestSetup#4": _WEIGHTED,
    "plugin/loadbalance/prefer_test.go:TestSortPreferred#0": _PREFER,
    # bind
    "plugin/bind/setup_test.go:TestSetup#6": _INTERFACE,
    "plugin/bind/setup_test.go:TestSetup#7": _INTERFACE,
    # server keys
    "plugin/pkg/parse/transport_test.go:TestTransport#2": _TLS_KEY,
    "plugin/pkg/parse/transport_test.go:TestTransport#3": _TLS_KEY,
    "plugin/pkg/parse/transport_test.go:TestTransport#4": _TLS_KEY,
    "core/dnsserver/register_test.go:TestInspectServerBlocks#3": _TLS_KEY,
    "core/dnsserver/register_test.go:TestInspectServerBlocks#4": _TLS_KEY,
    "core/dnsserver/register_test.go:TestInspectServerBlocks#5": _TLS_KEY,
    "core/dnsserver/register_test.go:TestInspectServerBlocks#6": _TLS_KEY,
}
EXPECT.update({f"plugin/rewrite/rewrite_test.go:TestNewRule#{n}": _REWRITE_FIELD for n in _NEW_RULE_FIELDS})
EXPECT.update({f"plugin/rewrite/rewrite_test.go:TestRewrite#{n}": _REWRITE_FIELD for n in (2, 3, 11, 12)})

# Open differences: each entry goes when its fix lands (the test then says so).
_GAP_GROUPS: dict[str, tuple[str, ...]] = {
}
GAPS = {ident: f"gap: {why}" for why, idents in _GAP_GROUPS.items() for ident in idents}
EXPECT.update(GAPS)


def verdict(case_id: str) -> str:
    return EXPECT.get(case_id, "pass")


def kind(case_id: str) -> str:
    return verdict(case_id).split(":", 1)[0]
