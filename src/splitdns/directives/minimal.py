"""`minimal`: answers without their authority and additional sections, unless they are needed.

Syntax:

    minimal

As CoreDNS's plugin of the same name: a positive answer (NOERROR with records in the answer
section, or NOERROR with neither an SOA nor an NS record in its authority) loses the authority
and additional sections; a denial (NXDOMAIN, or NODATA with its SOA), a referral (NS records
in the authority) and an error keep every section, since a client needs them there. The EDNS
record stays. Useful over a thin tunnel: a corporate server that adds its NS records and their
addresses to every answer makes each reply several times larger than the answer itself.

The block's answers are minimised where they are kept (`RESHAPE`: an upstream's reply before
the cache stores it, a `template` or `hosts` answer before it is kept), so a cache hit costs
nothing more. No sockets, no clock.
Tests: tests/test_minimal.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from splitdns.corefile import Statement
from splitdns.directives import _args
from splitdns.directives._reshape import Reshape

if TYPE_CHECKING:
    import dns.message

    from splitdns.codec.reply import Reply

USAGE = "minimal"
NOERROR = 0
T_NS, T_SOA = 2, 6


def parse(st: Statement) -> bool:
    _args.arity(st, 0, 0, USAGE)
    _args.no_body(st, USAGE)
    return True


def worth_reading(reply: Reply) -> bool:
    """Whether a reply may lose sections, from what the reader already knows: NOERROR with
    some record other than OPT in its authority or additional section."""
    return reply.rcode() == NOERROR and bool(reply.owners)


def minimize(msg: dns.message.Message) -> None:
    """Drop the authority and additional sections of a positive answer (CoreDNS's
    `response.Typify` says NoError); leave a denial, a referral or an error as it is."""
    if msg.rcode() != NOERROR:
        return
    if not msg.answer and any(rrset.rdtype in (T_SOA, T_NS) for rrset in msg.authority):
        return  # NODATA (SOA) or a referral (NS): the client needs the authority
    msg.authority = []
    msg.additional = []  # dnspython keeps the OPT record apart: EDNS stays


RESHAPE = Reshape(worth_reading, minimize)
