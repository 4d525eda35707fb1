"""Whether a NOERROR reply with records in its answer answers its question, and whether its
signatures are still valid: what decides that the cache may keep it, as CoreDNS decides.

Only replies the reader did not find plain (codec/reply.py: an answer of the asked type, no
CNAME, DNAME or RRSIG) come here, so the common miss never pays for the dnspython parse.
Pure: no sockets, no clock (the wall time comes in).
Tests: tests/test_cache.py, tests/test_properties.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import dns.flags
import dns.rdataclass
import dns.rdatatype

if TYPE_CHECKING:
    import dns.name
    import dns.rrset

_YEAR68 = 1 << 31  # RFC 4034 3.1.5: signature times are serial numbers (RFC 1982), modulo 2**32


def judge(data: bytes, wall: float) -> tuple[bool, bool]:
    """(whether the answer reaches the asked type, whether an RRSIG of a DO reply has expired
    or is not yet valid). Unreadable by dnspython: neither answers nor is judged expired."""
    # Here, not above: dnspython's parser and its name module weigh about 5 MiB of RSS that a
    # resolver whose replies are all plain never pays.
    import dns.exception
    import dns.message

    try:
        msg = dns.message.from_wire(data, one_rr_per_rrset=True)  # two CNAMEs at one owner stay two
    except dns.exception.DNSException:
        return False, False
    if not msg.question:
        return False, False
    q = msg.question[0]
    expired = bool(msg.ednsflags & dns.flags.DO) and any(
        not _valid(rrset, wall) for section in (msg.answer, msg.authority, msg.additional)
        for rrset in section if rrset.rdtype == dns.rdatatype.RRSIG)
    return _answers(msg.answer, q.name, q.rdtype, q.rdclass), expired


def _valid(rrset: dns.rrset.RRset, wall: float) -> bool:
    """miekg/dns's RRSIG.ValidityPeriod, which CoreDNS's cache asks, for each signature."""
    now = int(wall)
    for sig in rrset:
        ti = sig.inception + _trunc(sig.inception - now) * _YEAR68
        te = sig.expiration + _trunc(sig.expiration - now) * _YEAR68
        if not ti <= now <= te:
            return False
    return True


def _trunc(delta: int) -> int:
    """Go's integer division by 2**31, which truncates toward zero."""
    return -(-delta // _YEAR68) if delta < 0 else delta // _YEAR68


def _answers(answer: list[dns.rrset.RRset], name: dns.name.Name, rdtype: int, rdclass: int) -> bool:
    """CoreDNS's answerHasType (plugin/cache): an ANY question is answered by any record at the
    name; a CNAME question by the name's one CNAME; any other type by a record of that type at
    the end of the CNAME chain from the name (RFC 1034 3.6.2). A chain that loops, or a name
    with two different CNAMEs (RFC 2181 10.1), answers nothing."""
    def fits(rrset: dns.rrset.RRset) -> bool:
        return rdclass == dns.rdataclass.ANY or rrset.rdclass == rdclass

    def target(owner: dns.name.Name) -> tuple[dns.name.Name | None, bool]:
        found: dns.name.Name | None = None
        for rrset in answer:
            if rrset.rdtype == dns.rdatatype.CNAME and fits(rrset) and rrset.name == owner:
                for rr in rrset:
                    if found is not None and rr.target != found:
                        return None, False
                    found = rr.target
        return found, True

    if rdtype == dns.rdatatype.ANY:
        return any(fits(r) and r.name == name for r in answer)
    if rdtype == dns.rdatatype.CNAME:
        found, ok = target(name)
        return ok and found is not None
    seen: set[dns.name.Name] = set()
    while True:
        if name in seen:
            return False
        seen.add(name)
        found, ok = target(name)
        if not ok:
            return False
        if found is None:
            break
        name = found
    return any(r.rdtype == rdtype and fits(r) and r.name == name for r in answer)
