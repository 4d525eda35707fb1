"""Answers a server block makes itself: `rewrite`, `template` and `hosts`, in CoreDNS's order.

After the cache and before `forward`, as CoreDNS's plugin.cfg runs them: `rewrite` changes
the name the later steps see, `template` answers what its regexes match, `hosts` what its
entries name. The steps run in `directives.REGISTRY`'s order, the one per-query order. What
they decide is a reply made here (an `Entry`, kept per question so the next one is a
lookup, as a cache hit is), a rewritten query for the upstream (`Rewritten`, whose reply
`revert` maps back to the client's names), or nothing (the query goes upstream as asked).

The answers made here depend only on the question and the configuration (and the hosts
file, whose reload empties them), so they are kept in `answers`, bounded, and answered
from wire bytes like a cache hit (shell/udp.py, memo.py). Records are built with dnspython
once per question. Sans-io: no sockets, no clock; the shell reads the hosts file.
Tests: tests/test_plugins.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import dns.rcode
import dns.rdataclass
import dns.rdatatype

from splitdns import directives
from splitdns.codec import entries, wire
from splitdns.codec import reply as replies
from splitdns.directives import hosts as hosts_directive
from splitdns.directives._args import domain_name
from splitdns.directives.hosts import in_zone
from splitdns.directives.rewrite import RewriteRule, expand
from splitdns.directives.template import ANY, TemplateSpec

if TYPE_CHECKING:
    import dns.message
    import dns.name
    import dns.rdata

    from splitdns.codec.entries import Entry
    from splitdns.config import Block
    from splitdns.core.cache import Cache

MAX_ANSWERS = 4096  # questions answered here and kept; a flood of new names only empties it
T_PTR = 12
SERVFAIL = 2
# The name field of each type CoreDNS's reverter rewrites (getRecordValueForRewrite)
_TARGETS = {"CNAME": "target", "DNAME": "target", "NS": "target", "PTR": "target",
            "MX": "exchange", "SRV": "target", "SOA": "mname", "NAPTR": "replacement"}


def steps_of(block: Block) -> tuple[str, ...]:
    """The block's local steps (`rewrite`, `template`, `hosts`), in the registry's order."""
    return tuple(d.name for d in directives.steps(directives.LOCAL_STEP) if block.uses(d))


@dataclass(frozen=True)
class Rewritten:
    """A query `rewrite` changed: what goes upstream, and how its reply comes back."""

    query: wire.Query
    original: str                     # the client's name, lower-case
    applied: tuple[tuple[RewriteRule, str, str], ...]  # rule, name before, name after


class Local:
    def __init__(self, block: Block) -> None:
        self.block = block
        self.steps = steps_of(block)
        self.rules: tuple[RewriteRule, ...] = block.every(directives.REWRITE)
        self.templates: tuple[TemplateSpec, ...] = block.every(directives.TEMPLATE)
        spec = block[directives.HOSTS]
        self.hosts_spec = spec
        self.hosts_zones = (spec.zones or block.zones) if spec else ()
        self.hosts = hosts_directive.build("", spec.inline, self.hosts_zones) if spec else None
        self.hosts_file_seen: tuple[int, int] | None = None  # (mtime_ns, size) last read
        self.answers: dict[bytes, Entry] = {}
        self.reshapes = tuple(d.reshape for d in directives.REGISTRY
                              if d.reshape is not None and block.uses(d))

    def load_hosts(self, text: str, seen: tuple[int, int] | None) -> None:
        """A new hosts file (read by the shell): the answers made from the old one go."""
        assert self.hosts_spec is not None
        self.hosts = hosts_directive.build(text, self.hosts_spec.inline, self.hosts_zones)
        self.hosts_file_seen = seen
        self.answers.clear()  # in place: the memo checks its entries against this very dict

    def decide(self, q: wire.Query) -> Entry | Rewritten | None:
        known = self.answers.get(q.key)
        if known is not None:
            return known
        original = name = wire.wire_to_text(q.name)
        applied: list[tuple[RewriteRule, str, str]] = []
        for step in self.steps:
            if step == "rewrite":
                name = self._rewrite(name, applied)
                continue
            made = self._template(q, name) if step == "template" else self._hosts(q, name)
            if made is not None:
                return self._keep(q, made, original, tuple(applied))
        if not applied:
            return None
        try:
            raw = wire.name_to_wire(domain_name(name))
        except (ValueError, UnicodeError):
            return self._keep(q, SERVFAIL, original, ())  # CoreDNS: not a legal name, an error
        query = wire.Query(q.id, q.flags, raw + q.question[-4:], raw, q.qtype, q.edns, q.payload, q.do)
        return Rewritten(query, original, tuple(applied))

    # -- rewrite -----------------------------------------------------------------------------

    def _rewrite(self, name: str, applied: list[tuple[RewriteRule, str, str]]) -> str:
        for rule in self.rules:
            new = rule.apply(name)
            if new is None:
                continue
            applied.append((rule, name, new))
            name = new
            if rule.stop:
                break
        return name

    # -- template ----------------------------------------------------------------------------

    def _template(self, q: wire.Query, name: str) -> dns.message.Message | int | None:
        block_zones = self.block.zones
        if not any(in_zone(name, z) for t in self.templates for z in (t.zones or block_zones)):
            return None
        for spec in self.templates:
            zone = _longest(name, spec.zones or block_zones)
            if zone is None or (spec.qclass not in (ANY, wire.CLASS_IN)) or \
                    (spec.qtype not in (ANY, q.qtype) and q.qtype != ANY):
                continue
            match = next((m for m in (rx.search(name) for rx in spec.regexes) if m), None)
            if match is None:
                if spec.fallthrough is not None and \
                        (not spec.fallthrough or any(in_zone(name, z) for z in spec.fallthrough)):
                    continue
                return SERVFAIL
            if spec.rcode == SERVFAIL:
                return SERVFAIL
            return _template_reply(spec, q, name, zone, match)
        return None

    # -- hosts -------------------------------------------------------------------------------

    def _hosts(self, q: wire.Query, name: str) -> dns.message.Message | int | None:
        spec, table = self.hosts_spec, self.hosts
        assert spec is not None and table is not None
        in_zones = any(in_zone(name, z) for z in self.hosts_zones)
        records: list[tuple[str, str]] = []
        if q.qtype == T_PTR:
            owners = table.reverse.get(name, []) if not spec.no_reverse else []
            if not owners:
                return None  # CoreDNS: on to the next plugin, fallthrough or not
            records = [("PTR", owner) for owner in owners]
        elif not in_zones:
            return None
        elif q.qtype in (1, 28):
            records = [("A" if q.qtype == 1 else "AAAA", ip)
                       for ip in table.addresses(name, 4 if q.qtype == 1 else 6)]
        elif spec.fallthrough_unsupported and _falls(spec.fallthrough, name):
            return None
        if not records and not table.known(name):
            if _falls(spec.fallthrough, name):
                return None
            return SERVFAIL  # no SOA to say NXDOMAIN with, as CoreDNS answers
        return _message(q, name, 0, [("answer", f"{name} {spec.ttl} IN {rtype} {value}")
                                     for rtype, value in records])

    # -- replies -----------------------------------------------------------------------------

    def _keep(self, q: wire.Query, made: dns.message.Message | int,
              original: str, applied: tuple[tuple[RewriteRule, str, str], ...]) -> Entry:
        if isinstance(made, int):
            stored = wire.HEADER.pack(0, wire.QR | wire.RA | made, 1, 0, 0, 0) + q.question
            entry = entries.make(stored, (), entries.SERVFAIL, 0.0, 0.0)
        else:
            if applied:
                revert_message(made, original, applied)
            for reshape in self.reshapes:  # as the block's upstream replies are (flight.py)
                reshape.edit(made)
            reply = replies.read_canonical(made.to_wire(want_shuffle=False))  # hosts order, as written
            if reply is None:  # dnspython wrote what our reader refuses: say so, do not guess
                return self._keep(q, SERVFAIL, original, ())
            negative = reply.rcode() == 3 or (reply.rcode() == 0 and not reply.answer)
            entry = entries.make(reply.stored, reply.offsets,
                                 entries.DENIAL if negative else entries.SUCCESS, 0.0, 0.0)
        if len(self.answers) >= MAX_ANSWERS:
            self.answers.clear()  # in place: the memo checks its entries against this very dict
        self.answers[q.key] = entry
        return entry


def render(entry: Entry, q: wire.Query, cache: Cache | None) -> bytes:
    """A reply the block made itself, for `q`: authoritative, as CoreDNS's hosts and template
    answer (they hold the data; `wire.render` clears AA for what is relayed), and with its
    TTLs under the cache's cap when the block caches, as CoreDNS's cache in front would."""
    cap = cache.cap_of(entry) if cache is not None else None
    out = wire.render(entries.reply(entry), entries.offsets(entry), None, q, cap)
    return out[:2] + bytes((out[2] | wire.AA >> 8,)) + out[3:]


def revert(reply: replies.Reply, rewritten: Rewritten) -> replies.Reply | None:
    """An upstream's reply to a rewritten query, under the client's names (None if it
    cannot be rewritten)."""
    return replies.rewrite_with_dnspython(reply.data, lambda msg: revert_message(msg, rewritten.original,
                                                                  rewritten.applied))


def revert_message(msg: dns.message.Message, original: str,
                   applied: tuple[tuple[RewriteRule, str, str], ...]) -> None:
    """The question back to the client's name, and the record names as the rules say."""
    import dns.name
    import dns.rrset

    maps: list[tuple[str, re.Pattern[str] | tuple[str, str], str]] = []  # field, how, to
    for rule, before, after in applied:
        if rule.auto:
            how: tuple[str, str] = ("suffix", rule.target) if rule.kind == "suffix" else ("remap", after)
            to = rule.source if rule.kind == "suffix" else before
            maps += [("name", how, to), ("value", how, to)]
        maps += [(a.field, a.pattern, a.replacement) for a in rule.answers]

    def mapped(field: str, name: dns.name.Name) -> dns.name.Name:
        text = name.to_text().lower()
        new = text
        for what, how, to in reversed(maps):  # undone last-applied first, as CoreDNS's reverter
            if what == field:
                new = _map(new, how, to)
        return name if new == text else dns.name.from_text(new)

    question = msg.question[0]
    msg.question = [dns.rrset.RRset(dns.name.from_text(original),
                                    dns.rdataclass.RdataClass.make(question.rdclass),
                                    dns.rdatatype.RdataType.make(question.rdtype))]
    for section in (msg.answer, msg.authority, msg.additional):
        for i, rrset in enumerate(list(section)):
            owner = mapped("name", rrset.name)
            field = _TARGETS.get(dns.rdatatype.to_text(rrset.rdtype))
            rdatas = [rd.replace(**{field: mapped("value", getattr(rd, field))}) if field else rd
                      for rd in rrset]
            section[i] = dns.rrset.from_rdata_list(owner, rrset.ttl, rdatas)


def _map(name: str, how: re.Pattern[str] | tuple[str, str], to: str) -> str:
    if isinstance(how, re.Pattern):
        match = how.search(name)
        return expand(to, match) if match else name
    kind, source = how
    if kind == "suffix":
        return name[:-len(source)] + to if name.endswith(source) else name
    if name == source:
        return to
    return name[:-len(source)] + to if name.endswith("." + source) else name


def _falls(fallthrough: tuple[str, ...] | None, name: str) -> bool:
    """`fallthrough [ZONES...]` covers the name (none given: every name)."""
    return fallthrough is not None and (not fallthrough or any(in_zone(name, z) for z in fallthrough))


def _longest(name: str, zones: tuple[str, ...]) -> str | None:
    found = [z for z in zones if in_zone(name, z)]
    return max(found, key=len) if found else None


def _template_reply(spec: TemplateSpec, q: wire.Query, name: str, zone: str,
                    match: re.Match[str]) -> dns.message.Message | int:
    fields = {"Name": name, "Zone": zone, "Class": "IN",
              "Type": dns.rdatatype.to_text(dns.rdatatype.RdataType.make(q.qtype))}
    try:
        records = [(section, t.render(fields, match))
                   for section in ("answer", "authority", "additional")
                   for t in getattr(spec, section)]
        return _message(q, name, spec.rcode, records)
    except (IndexError, ValueError, LookupError):
        return SERVFAIL  # CoreDNS: a template that fails or makes no record answers SERVFAIL


def _message(q: wire.Query, name: str, rcode: int, records: list[tuple[str, str]]) -> dns.message.Message:
    """An authoritative reply to `q` under `name`, with records in zone-file form. Raises
    ValueError for a record dnspython cannot read."""
    import dns.exception
    import dns.message
    import dns.name
    import dns.rrset

    msg = dns.message.Message(id=0)
    msg.flags = wire.QR | wire.AA | (q.flags & (wire.RD | wire.CD))
    msg.set_rcode(dns.rcode.Rcode.make(rcode))
    msg.question = [dns.rrset.RRset(dns.name.from_text(name), dns.rdataclass.IN,
                                    dns.rdatatype.RdataType.make(q.qtype))]
    sections = {"answer": msg.answer, "authority": msg.authority, "additional": msg.additional}
    for section, text in records:
        try:
            owner, ttl, rdata = _record(text)
        except (dns.exception.DNSException, ValueError) as err:
            raise ValueError(f"{text!r} is not a record: {err}") from None
        rrset = msg.find_rrset(sections[section], owner, rdata.rdclass, rdata.rdtype, create=True)
        rrset.add(rdata, ttl)
    return msg


def _record(text: str) -> tuple[dns.name.Name, int, dns.rdata.Rdata]:
    """`NAME [TTL] [CLASS] TYPE RDATA` as miekg/dns's NewRR reads it: names are absolute,
    the TTL 3600 when left out."""
    import dns.name
    import dns.rdata
    import dns.rdataclass
    import dns.rdatatype
    import dns.tokenizer

    tok = dns.tokenizer.Tokenizer(text)
    owner = dns.name.from_text(tok.get_string(), dns.name.root)
    token = tok.get_string()
    ttl = 3600
    if token.isdigit():
        ttl, token = int(token), tok.get_string()
    rdclass = dns.rdataclass.IN
    if token.upper() in ("IN", "CH", "HS", "ANY"):
        rdclass, token = dns.rdataclass.from_text(token), tok.get_string()
    rdtype = dns.rdatatype.from_text(token)
    rdata = dns.rdata.from_text(rdclass, rdtype, tok, dns.name.root, relativize=False)
    return owner, ttl, rdata

