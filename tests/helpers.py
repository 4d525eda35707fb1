"""Small builders for tests: queries and replies made with dnspython, the reference."""

from __future__ import annotations

import dns.flags
import dns.message
import dns.rcode
import dns.rrset

from splitdns.codec.reply import Reply, read_canonical
from splitdns.core.memo import Memo, Remembered


def query(name: str, rdtype: str = "A", *, qid: int = 0x1234, edns: int = 0, payload: int = 1232,
          do: bool = False, cd: bool = False, rd: bool = True) -> dns.message.QueryMessage:
    msg = dns.message.make_query(name, rdtype, use_edns=edns, payload=payload, want_dnssec=do)
    msg.id = qid
    if cd:
        msg.flags |= dns.flags.CD
    if not rd:
        msg.flags &= ~dns.flags.RD
    return msg


def reply(q: dns.message.Message, *answers: str, rcode: int = dns.rcode.NOERROR,
          authority: tuple[str, ...] = (), tc: bool = False) -> dns.message.Message:
    """An upstream's reply to `q`, with records given as zone-file lines."""
    msg = dns.message.make_response(q)
    msg.flags |= dns.flags.RA
    msg.set_rcode(rcode)
    for text in answers:
        msg.answer.append(dns.rrset.from_text(*text.split(maxsplit=4)))
    for text in authority:
        msg.authority.append(dns.rrset.from_text(*text.split(maxsplit=4)))
    if tc:
        msg.flags |= dns.flags.TC
    return msg


def wire(msg: dns.message.Message) -> bytes:
    data = msg.to_wire()
    assert isinstance(data, bytes)
    return data


SOA = "example.org. 300 IN SOA ns.example.org. hostmaster.example.org. 1 3600 600 86400 60"


def indexed(msg: dns.message.Message) -> Reply:
    """An upstream reply as the core sees it (read by the hand reader, no query to match)."""
    got = read_canonical(wire(msg))
    assert got is not None
    return got


def memo_lookup(memo: Memo, data: bytes, now: float) -> tuple[bytes, Remembered] | None:
    """The memo's reply to these query bytes, as the shell builds it, and what it remembered."""
    seen = memo.find(data[2:], now)
    return None if seen is None else (data[:2] + seen.tail, seen)
