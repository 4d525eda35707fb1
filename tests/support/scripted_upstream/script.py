"""The scripted upstream's script: a JSON list of rules (the keys are listed in the package's
docstring), read into Rules; the first rule that matches a query decides its reply."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dns.exception
import dns.name
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import dns.tokenizer
import dns.ttl

DEFAULT_TTL = 300
QNAME_TEMPLATE = dns.name.from_text("{qname}.")

ACTIONS = frozenset({"answer", "servfail", "drop", "truncate", "raw", "close", "stall"})
RULE_KEYS = frozenset(
    {
        "qname", "suffix", "qtype", "transport", "action", "records", "authority",
        "additional", "rcode", "ttl", "aa", "delay_ms", "forge", "hex", "patch_id", "comment",
        "repeat",
    }
)  # fmt: skip
FORGE_KEYS = frozenset(
    {"wrong_id", "wrong_port", "wrong_question", "wrong_qtype", "wrong_qclass", "qr_clear", "wrong_addr"}
)


class ScriptError(ValueError):
    """The script is not a valid list of rules."""


@dataclass(frozen=True)
class Forge:
    wrong_id: int = 0
    wrong_port: int = 0
    wrong_question: int = 0
    wrong_qtype: int = 0
    wrong_qclass: int = 0
    qr_clear: int = 0
    wrong_addr: int = 0


@dataclass(frozen=True)
class Rule:
    qname: dns.name.Name | None = None
    suffix: dns.name.Name | None = None
    qtype: dns.rdatatype.RdataType | None = None
    transport: str | None = None
    action: str = "answer"
    records: tuple[dns.rrset.RRset, ...] = ()
    authority: tuple[dns.rrset.RRset, ...] = ()
    additional: tuple[dns.rrset.RRset, ...] = ()
    rcode: dns.rcode.Rcode = dns.rcode.NOERROR
    aa: bool = False
    delay: float = 0.0
    forge: Forge = field(default_factory=Forge)
    raw: bytes = b""
    patch_id: bool = False
    repeat: int = 0

    def matches(self, qname: dns.name.Name, qtype: int, transport: str) -> bool:
        # dns.name comparisons ignore case, which is what DNS matching wants.
        if self.qname is not None and qname != self.qname:
            return False
        if self.suffix is not None and not qname.is_subdomain(self.suffix):
            return False
        if self.qtype is not None and qtype != self.qtype:
            return False
        return self.transport is None or transport == self.transport



def load_script(path: Path) -> tuple[Rule, ...]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ScriptError(f"{path}: {e}") from e
    if not isinstance(data, list):
        raise ScriptError(f"{path}: the script must be a JSON list of rules")
    return tuple(parse_rule(index, raw) for index, raw in enumerate(data))


def parse_rule(index: int, raw: object) -> Rule:
    if not isinstance(raw, dict):
        raise ScriptError(f"rule {index}: must be a JSON object")
    # Unknown keys are almost always typos ("delay": 100) that would silently do nothing.
    unknown = sorted(set(raw) - RULE_KEYS)
    if unknown:
        raise ScriptError(f"rule {index}: unknown keys {unknown}")
    try:
        return build_rule(raw)
    except (dns.exception.DNSException, ValueError, TypeError) as e:
        raise ScriptError(f"rule {index}: {e}") from e


def build_rule(raw: dict[str, Any]) -> Rule:
    action = raw.get("action", "answer")
    if action not in ACTIONS:
        raise ScriptError(f"unknown action {action!r}; expected one of {sorted(ACTIONS)}")
    transport = raw.get("transport")
    if transport not in (None, "udp", "tcp"):
        raise ScriptError(f"transport must be 'udp' or 'tcp', not {transport!r}")
    if action == "raw" and not raw.get("hex"):
        raise ScriptError('action "raw" needs "hex"')
    ttl = raw.get("ttl")
    rcode = raw.get("rcode", "SERVFAIL" if action == "servfail" else "NOERROR")
    return Rule(
        qname=optional_name(raw.get("qname")),
        suffix=optional_name(raw.get("suffix")),
        qtype=dns.rdatatype.from_text(raw["qtype"]) if "qtype" in raw else None,
        transport=transport,
        action=action,
        records=parse_records(raw.get("records", []), ttl),
        authority=parse_records(raw.get("authority", []), ttl),
        additional=parse_records(raw.get("additional", []), ttl),
        rcode=dns.rcode.from_text(rcode),
        aa=bool(raw.get("aa", False)),
        delay=float(raw.get("delay_ms", 0)) / 1000,
        forge=parse_forge(raw.get("forge", {})),
        raw=bytes.fromhex(raw.get("hex", "")),
        patch_id=bool(raw.get("patch_id", False)),
        repeat=int(raw.get("repeat", 0)),
    )


def optional_name(text: object) -> dns.name.Name | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise ScriptError(f"a name must be a string, not {text!r}")
    return dns.name.from_text(text)


def parse_forge(raw: object) -> Forge:
    if not isinstance(raw, dict) or set(raw) - FORGE_KEYS:
        raise ScriptError(f"forge must be an object with keys from {sorted(FORGE_KEYS)}")
    counts = {key: int(value) for key, value in raw.items()}
    if any(count < 0 for count in counts.values()):
        raise ScriptError("forge counts must not be negative")
    return Forge(**counts)


def parse_records(lines: object, ttl: int | None) -> tuple[dns.rrset.RRset, ...]:
    if not isinstance(lines, list) or not all(isinstance(line, str) for line in lines):
        raise ScriptError("records must be a list of zone-file lines")
    # One RRset per line keeps the script's order and duplicates, byte for byte on the wire.
    return tuple(parse_record(line, ttl) for line in lines)


def parse_record(line: str, ttl_override: int | None) -> dns.rrset.RRset:
    """Parse `name [ttl] [class] type rdata` (ttl and class in either order)."""
    tokens = dns.tokenizer.Tokenizer(line)
    name = tokens.get_name(origin=dns.name.root)
    ttl: int | None = None
    rdclass: dns.rdataclass.RdataClass | None = None
    token = tokens.get_string()
    for _ in range(2):
        if ttl is None and token[:1].isdigit():
            ttl = dns.ttl.from_text(token)
        elif rdclass is None and is_rdclass(token):
            rdclass = dns.rdataclass.from_text(token)
        else:
            break
        token = tokens.get_string()
    rdclass = dns.rdataclass.IN if rdclass is None else rdclass
    rdtype = dns.rdatatype.from_text(token)
    rdata = dns.rdata.from_text(rdclass, rdtype, tokens, origin=dns.name.root, relativize=False)
    if ttl_override is not None:
        ttl = int(ttl_override)
    return dns.rrset.from_rdata(name, DEFAULT_TTL if ttl is None else ttl, rdata)


def is_rdclass(token: str) -> bool:
    try:
        dns.rdataclass.from_text(token)
    except dns.rdataclass.UnknownRdataclass:
        return False
    return True

