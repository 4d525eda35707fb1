"""CoreDNS's setup and parsing test tables as Corefiles: each row of tables.json (extracted by
tools/coredns_tables.py from a CoreDNS release) becomes one `ParseCase`, the Corefile CoreDNS's
test hands its parser and whether CoreDNS loads it.

CoreDNS's setup tests feed one directive to a test controller whose server block is `.` unless
the test sets its keys; here that directive stands in a `.:1053` block (or in the keys the test
set): port 1053, so that the many `forward . 127.0.0.1` rows are not a forward to ourselves.
A row checks CoreDNS's verdict (loads or refused); the values a row also compares (a parsed
field of a Go struct) are CoreDNS's internals, and where we hold one the same it is in
`VALUES`. Tables that need Go internals are in `NOT_PORTED` with the reason.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data"

# plugin (the table's row in docs/coredns-parity.md) of each Go file
PLUGIN_OF = {
    "plugin/forward/": "forward", "plugin/cache/": "cache", "plugin/hosts/": "hosts",
    "plugin/template/": "template", "plugin/rewrite/": "rewrite", "plugin/loadbalance/": "loadbalance",
    "plugin/errors/": "errors", "plugin/log/": "log", "plugin/bind/": "bind",
    "plugin/pkg/parse/": "server keys", "core/dnsserver/": "server keys", "plugin/normalize": "server keys",
}

NOT_PORTED = {
    ("plugin/loadbalance/setup_test.go", "testWeighted"):
        "weight files of `loadbalance weighted`, which we refuse (its setup rows are ported)",
    ("core/dnsserver/address_test.go", "TestSplitProtocolHostPort"):
        "a Go helper for the addresses the server reports at start-up; no Corefile text reaches it",
    ("plugin/pkg/parse/parse_test.go", "TestTransferIn"):
        "the `from` option of the transfer, file and secondary plugins, which we refuse",
    ("plugin/normalize_test.go", "TestNameMatches"):
        "a Go helper (plugin.Name.Matches); our routing by whole-label suffix has its own tests",
    ("plugin/normalize_test.go", "TestOriginsFromArgsOrServerBlock"):
        "a Go helper that picks a plugin's zones from its arguments or the block's keys",
}


@dataclass(frozen=True)
class ParseCase:
    id: str                # "plugin/forward/setup_test.go:TestSetup#3"
    plugin: str
    corefile: str
    loads: bool            # CoreDNS loads it
    files: dict[str, str] = field(default_factory=dict)  # written beside the Corefile first
    zones: tuple[str, ...] | None = None  # the zones the keys stand for, where the row says
    servername: str | None = None  # the name a DoT upstream's certificate must carry, where it says
    values: tuple[tuple[str, object], ...] = ()  # (field of the spec `on` names, value)
    on: str = "forward"  # the first forward of the block, or its cache


def _plugin(path: str) -> str:
    return next(p for prefix, p in PLUGIN_OF.items() if path.startswith(prefix))


def _block(body: str, keys: str = ".:1053") -> str:
    return f"{keys} {{\n{body}\n}}\n"


def _strings(go: Any) -> list[str]:
    return re.findall(r'"((?:[^"\\]|\\.)*)"', go["go"]) if isinstance(go, dict) else []


_INPUT = ("input", "inputFileRules", "inputErrorsRules", "inputLogRules", "config")
_CACHE_BLOCK = ("TestServeStale", "TestServeStaleFailureRecheck", "TestServeStalePolicy",
                "TestServfail", "TestDisable", "TestKeepttl")
# the resolv.conf files TestSetupResolvconf and TestHostPortOrFile write in their working directory
_RESOLV = {"resolv.conf": "nameserver 10.10.255.252\nnameserver 10.10.255.253\n",
           "resolv-ipv6.conf": "nameserver 0388:d254:7aec:6892:9f7f:e93b:5806:1b0f%en0\n",
           "empty.conf": "# nameserver 1.1.1.1\n# nameserver 1.0.0.1\n", "null.conf": ""}


def _refused(row: dict[str, Any]) -> bool:
    for key in ("shouldErr", "failing", "wantErr"):
        if row.get(key):
            return True
    return any(bool(row.get(key)) for key in ("expectedErr", "wantError")
               if not any(k in row for k in ("shouldErr", "failing")))


def _case(row: dict[str, Any]) -> ParseCase | None:
    path, test = row["file"], row["test"]
    if (path, test) in NOT_PORTED:
        return None
    ident = f"{path}:{test}#{row['row']}"
    plugin = _plugin(path)
    refused = _refused(row)
    if test == "TestNewRule":
        args = [json.loads(re.sub(r"\\x([0-9a-fA-F]{2})", r"\\u00\1", a), strict=False)
                for a in re.findall(r'"(?:[^"\\]|\\.)*"', row["args"]["go"])]
        if any(ord(c) > 127 for a in args for c in a):
            return None  # listed in NOT_PORTED_ROWS
        return ParseCase(ident, plugin, _block(" ".join(["rewrite", *args])), not row["shouldError"])
    if test == "TestNewNameRule":  # newNameRule(next, args...): a `rewrite NEXT name ARGS` line
        args = [json.loads(a) for a in re.findall(r'"(?:[^"\\]|\\.)*"', row["args"]["go"])]
        return ParseCase(ident, plugin, _block(" ".join(["rewrite", row["next"], "name", *args])),
                         not row["expectedFail"])
    if test == "TestSplitZone":
        return ParseCase(ident, plugin, _block(f"forward . {row['input']}"), True)
    if test in ("TestHostPortOrFile", "TestParseHostPort"):
        if row["in"].startswith("unix://") or (test == "TestParseHostPort" and row["in"] == "resolv.conf"):
            return None  # listed in NOT_PORTED_ROWS
        files = {"resolv.conf": "nameserver 127.0.0.1\n"} if row["in"] == "resolv.conf" else {}
        return ParseCase(ident, plugin, _block(f"forward . {row['in']}"), not refused, files)
    if test == "TestTransport":
        if "/" in row["input"].split("://")[-1]:
            return None  # listed in NOT_PORTED_ROWS
        return ParseCase(ident, plugin, _block("forward . 192.0.2.1", row["input"].strip()), True)
    if test == "TestHostNormalizeExact":
        out = row["out"]
        zones = tuple(_strings(out)) if out else None
        return ParseCase(ident, plugin, _block("forward . 192.0.2.1", row["in"]), out is not None,
                         zones=zones)
    if test == "TestInspectServerBlocks":
        blocks = re.findall(r"\{Keys: \[\]string\{([^}]*)\}\}", row["serverBlocks"]["go"])
        text = "".join(_block("forward . 192.0.2.1", " ".join(re.findall(r'"([^"]*)"', b))) for b in blocks)
        return ParseCase(ident, plugin, text, not refused)
    if test == "TestGroupingServers":
        text = ""
        configs = r'Zone: "([^"]*)", Port: "([^"]*)", ListenHosts: \[\]string\{([^}]*)\}'
        for zone, port, hosts in re.findall(configs, row["configs"]["go"]):
            bound = [h for h in re.findall(r'"([^"]*)"', hosts) if h]
            body = "forward . 192.0.2.1" + (f"\nbind {' '.join(bound)}" if bound else "")
            text += _block(body, f"{zone}:{port}")
        return ParseCase(ident, plugin, text, not refused)
    source = next((row[k] for k in _INPUT if k in row), None)
    if isinstance(source, dict) and test == "TestSetupResolvconf":
        source = re.sub(r"`forward \. ` \+ (\w+)(?: \+ `(.*)`)?", lambda m: "forward . " + {
            "resolv": "resolv.conf", "resolvIPV6": "resolv-ipv6.conf", "emptyResolv": "empty.conf",
            "nullResolv": "null.conf"}[m.group(1)] + (m.group(2) or ""), source["go"])
        return ParseCase(ident, plugin, _block(source), not refused, dict(_RESOLV))
    if not isinstance(source, str):
        raise ValueError(f"{ident}: no Corefile text in the row")
    if path == "plugin/cache/setup_test.go" and test in _CACHE_BLOCK:
        source = f"cache {{\n{source}\n}}"
    values = _forward_values(row) if not refused else ()
    if values:
        return ParseCase(ident, plugin, _block(source), True, values=values)
    values = _cache_values(row) if not refused else ()
    if values:
        return ParseCase(ident, plugin, _block(source), True, values=values, on="cache")
    if test == "TestSetupTLS" and row.get("expectedServerName"):
        return ParseCase(ident, plugin, _block(source), not refused, servername=row["expectedServerName"])
    template = path == "plugin/template/setup_test.go"
    keys = "domain.com.:8053 dynamic.domain.com.:8053" if template else ".:1053"
    return ParseCase(ident, plugin, _block(source, keys), not refused)


_GO_DURATION = {"time.Second": 1.0, "time.Millisecond": 1e-3, "time.Minute": 60.0, "time.Hour": 3600.0}
_GO_CONSTANT = {"defaultReadTimeout": 2.0, "time.Duration(^uint32(0))": float(2**32 - 1)}
_RCODES = {"dns.RcodeNameError": 3, "dns.RcodeServerFailure": 2, "dns.RcodeRefused": 5}


def _go_number(go: Any) -> float:
    text = go["go"] if isinstance(go, dict) else str(go)
    if text in _GO_CONSTANT:
        return _GO_CONSTANT[text]
    if text in _GO_DURATION:
        return _GO_DURATION[text]
    number, _, unit = text.partition(" * ")
    value = _GO_CONSTANT[number] if number in _GO_CONSTANT else float(number)
    return value * (_GO_DURATION[unit] if unit else 1)


def _forward_values(row: dict[str, Any]) -> tuple[tuple[str, object], ...]:
    """The values CoreDNS's forward setup tests compare, as fields of our ForwardSpec."""
    test = row["test"]
    if test == "TestSetupMaxConcurrent":
        return (("max_concurrent", int(_go_number(row["expectedVal"]))),)
    if test == "TestSetupMaxIdleConns":
        return (("max_idle_conns", int(_go_number(row["expectedVal"]))),)
    if test == "TestSetupMaxAge":
        return (("max_age", _go_number(row["expectedVal"])),)
    if test == "TestSetupReadTimeout":
        return (("read_timeout", _go_number(row["expectedVal"])),)
    if test == "TestSetupMaxConnectAttempts":
        attempts = int(_go_number(row["expectedVal"])) if row["expectedSet"] else None
        return (("max_connect_attempts", attempts),)
    if test == "TestSourceAddress":
        ip = re.search(r'net\.ParseIP\("([^"]+)"\)', row["expectedSourceAddress"]["go"])
        return (("source", str(ipaddress.ip_address(ip.group(1))) if ip else None),)
    if test == "TestSetupPolicy":
        return (("policy", row["expectedPolicy"]),)
    if test == "TestSetupHealthCheck":
        return (("health_check_rd", row["expectedRecVal"]), ("health_check_name", row["expectedDomain"]))
    if test == "TestFailfastAllUnhealthyUpstreams":
        return (("failfast_all_unhealthy", row["expectedRecVal"]),)
    if test == "TestNextAlternate":
        rcodes = frozenset(_RCODES[c] for c in re.findall(r"dns\.Rcode\w+", row["expected"]["go"]))
        return (("next_rcodes", rcodes),)
    return ()


def _cache_values(row: dict[str, Any]) -> tuple[tuple[str, object], ...]:
    """The values CoreDNS's cache setup tests compare, as fields of our CacheSpec."""
    test = row["test"]
    if test == "TestServeStale":
        return (("serve_stale", _go_number(row["staleUpTo"])), ("serve_stale_verify", row["verifyStale"]),
                ("serve_stale_ttl", int(_go_number(row["staleTTL"]))))
    if test == "TestServeStaleFailureRecheck":
        return (("serve_stale_recheck", _go_number(row.get("wantRecheck", {"go": "0"}))),)
    if test == "TestServfail":
        return (("servfail_ttl", _go_number(row["failttl"])),)
    return ()


# Rows of tables otherwise ported that cannot be: (id, reason)
NOT_PORTED_ROWS = {
    "plugin/rewrite/rewrite_test.go:TestNewRule#16": "a regex with a byte that is not UTF-8",
    "plugin/rewrite/rewrite_test.go:TestNewRule#17": "a regex with a byte that is not UTF-8",
    "plugin/pkg/parse/host_test.go:TestHostPortOrFile#9": "a unix socket: the grpc plugin's upstream form",
    "plugin/pkg/parse/host_test.go:TestHostPortOrFile#10": "a unix socket: the grpc plugin's upstream form",
    "plugin/pkg/parse/host_test.go:TestParseHostPort#5":
        "the Go helper refuses a file name that `forward` (through HostPortOrFile) reads as a resolv.conf",
    "plugin/pkg/parse/transport_test.go:TestTransport#1":
        "the row checks the transport prefix of a string that is no zone name (`2003::1/64.`)",
}


# Tests of one case each, outside any table: (id, Corefile body, whether CoreDNS loads it)
SINGLES = (
    ("plugin/template/setup_test.go:TestSetup#0", "template ANY ANY {\n    rcode\n}", False),
    ("plugin/template/setup_test.go:TestSetup#1", "template ANY ANY {\n    rcode NXDOMAIN\n}", True),
    ("plugin/template/setup_test.go:TestSetupParseLargeRegex#0",
     "template ANY A example.com {\n    match " + "a" * 10001 + "\n}", False),
    ("plugin/errors/setup_test.go:TestErrorsParseLargeRegex#0",
     "errors {\n    consolidate 1m " + "a" * 10001 + "\n}", False),
    ("plugin/rewrite/name_test.go:TestNewNameRuleLargeRegex#0",
     "rewrite stop name regex " + "a" * 10001 + " replacement", False),
    ("plugin/log/setup_test.go:TestLogParseUnknownProperty#0", "log { unknown }", False),
)


@cache
def tables() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / "tables.json").read_text())
    return data


@cache
def parse_cases() -> tuple[ParseCase, ...]:
    out = []
    for row in tables()["rows"]:
        case = _case(row)
        if case is not None:
            out.append(case)
    out.extend(ParseCase(ident, _plugin(ident), _block(body), loads) for ident, body, loads in SINGLES)
    return tuple(out)
