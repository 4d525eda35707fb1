"""`filter_aaaa`: a zone whose tunnel carries no IPv6 answers AAAA with NODATA here.

Syntax (the name dnsmasq's `--filter-AAAA` and BIND's filter-aaaa plugin give the same idea):

    filter_aaaa

In the block's zones an AAAA query is answered NOERROR with no records and the zone's SOA
(NODATA, RFC 2308): never NXDOMAIN, which would deny the name, A records included (RFC 8020).
HTTPS and SVCB answers from the block's upstreams lose their `ipv6hint` and the AAAA records
of their additional section before they are kept, so a client is never handed an IPv6
address it cannot reach through the tunnel. Other zones are untouched: a cluster or public
zone with real IPv6 keeps it, unlike a global `template ANY AAAA`. No sockets, no clock.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from splitdns.codec import wire
from splitdns.corefile import Statement
from splitdns.directives import _args
from splitdns.directives._reshape import Reshape

if TYPE_CHECKING:
    import dns.message

    from splitdns.codec.reply import Reply

USAGE = "filter_aaaa"
T_AAAA, T_SVCB, T_HTTPS = 28, 64, 65
IPV6HINT = 6  # RFC 9460 SvcParamKey


def parse(st: Statement) -> bool:
    _args.arity(st, 0, 0, USAGE)
    _args.no_body(st, USAGE)
    return True


def worth_reading(reply: Reply) -> bool:
    """An answer to an HTTPS or SVCB question: the only ones that may carry an IPv6 hint."""
    if not reply.ancount:
        return False
    data = reply.data
    end = wire.skip_name(data, 12)
    return struct.unpack_from("!H", data, end)[0] in (T_SVCB, T_HTTPS)


def strip_ipv6(msg: dns.message.Message) -> None:
    """Drop `ipv6hint` from every HTTPS/SVCB record, and AAAA records from the additional
    section (the addresses of the targets)."""
    import dns.rrset

    for section in (msg.answer, msg.additional):
        for i, rrset in enumerate(section):
            if rrset.rdtype not in (T_SVCB, T_HTTPS):
                continue
            kept = dns.rrset.RRset(rrset.name, rrset.rdclass, rrset.rdtype)
            for rd in rrset:
                params = {k: v for k, v in rd.params.items() if int(k) != IPV6HINT}
                kept.add(rd.replace(params=params), rrset.ttl)
            section[i] = kept
    msg.additional = [r for r in msg.additional if r.rdtype != T_AAAA]


RESHAPE = Reshape(worth_reading, strip_ipv6)
