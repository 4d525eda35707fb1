"""The messages a rule describes: the genuine reply (fitted to the client's UDP size, EDNS, DO
and CD echoed) and the forged ones, which carry poison a test can look for."""

from __future__ import annotations

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from tests.support.scripted_upstream.script import QNAME_TEMPLATE, Rule

EDNS_PAYLOAD = 1232
# Without EDNS a client takes at most 512 bytes over UDP (RFC 1035 4.2.1).
PLAIN_UDP_LIMIT = 512
# Documentation-range data: easy to spot in a resolver's answer, and never routable.
POISON_A = "203.0.113.66"
POISON_AAAA = "2001:db8::66"
POISON_TTL = 3600
POISON = {dns.rdatatype.A: POISON_A, dns.rdatatype.AAAA: POISON_AAAA}
WRONG_QUESTION = dns.name.from_text("forged.invalid.")


def new_response(query: dns.message.Message, rcode: int = dns.rcode.NOERROR) -> dns.message.Message:
    # make_response echoes ID, RD and the question as received, and EDNS if the query had it.
    response = dns.message.make_response(query, recursion_available=True, our_payload=EDNS_PAYLOAD)
    # Validating resolvers look at CD and DO in replies (RFC 6840 5.9, RFC 3225 3).
    response.flags |= query.flags & dns.flags.CD
    if query.ednsflags & dns.flags.DO:
        response.want_dnssec(True)
    response.set_rcode(dns.rcode.Rcode.make(rcode))
    return response


def answer_message(query: dns.message.Message, rule: Rule) -> dns.message.Message:
    response = new_response(query, rule.rcode)
    if rule.aa:
        response.flags |= dns.flags.AA
    name = query.question[0].name
    response.answer = [with_owner(r, name) for r in rule.records]
    response.authority = list(rule.authority)
    response.additional = list(rule.additional)
    return response


def with_owner(rrset: dns.rrset.RRset, qname: dns.name.Name) -> dns.rrset.RRset:
    """The record as scripted, its owner {qname} replaced by the question's name."""
    if rrset.name != QNAME_TEMPLATE:
        return rrset
    return dns.rrset.from_rdata_list(qname, rrset.ttl, list(rrset))


def truncated_wire(query: dns.message.Message) -> bytes:
    response = new_response(query)
    response.flags |= dns.flags.TC
    return response.to_wire()


def udp_limit(query: dns.message.Message) -> int:
    # RFC 6891 6.2.5: an advertised size below 512 means 512.
    return max(query.payload, PLAIN_UDP_LIMIT) if query.edns >= 0 else PLAIN_UDP_LIMIT


def forged_message(
    query: dns.message.Message,
    msg_id: int,
    qname: dns.name.Name | None = None,
    rdtype: int | None = None,
    rdclass: int | None = None,
    qr: bool = True,
) -> bytes:
    question = query.question[0]
    response = new_response(query)
    response.id = msg_id & 0xFFFF
    name = question.name if qname is None else qname
    qtype = question.rdtype if rdtype is None else dns.rdatatype.RdataType.make(rdtype)
    qclass = question.rdclass if rdclass is None else dns.rdataclass.RdataClass.make(rdclass)
    if (qname, rdtype, rdclass) != (None, None, None):
        response.question = [dns.rrset.RRset(name, qclass, qtype)]
    # The poison is what the victim asked for (an A for an A query), whatever the question says.
    poison = POISON.get(question.rdtype) if question.rdclass == dns.rdataclass.IN else None
    if poison is None:
        response.set_rcode(dns.rcode.NXDOMAIN)
    else:
        response.answer = [
            dns.rrset.from_text(question.name, POISON_TTL, "IN", question.rdtype, poison)
        ]
    if not qr:
        response.flags &= ~dns.flags.QR
    return response.to_wire()

