"""The `private_addresses` filter: A and AAAA records into private networks leave the reply.

Checked on every reply the block's upstreams send, so the check reads the cached form in
place (the TTL offsets locate every record: type before, rdata after) and decides with
integer masks; only a reply that holds such an address is rewritten (`reply.rewrite_with_dnspython`), as
`decisions.scrub` does. Pure: no sockets, no clock.
Tests: tests/test_rebinding.py.
"""

from __future__ import annotations

import ipaddress
import struct
from typing import TYPE_CHECKING

from splitdns.codec import reply as replies
from splitdns.codec import wire
from splitdns.codec.reply import T_A, T_AAAA
from splitdns.directives.private import PrivateSpec

if TYPE_CHECKING:
    import dns.message
    import dns.name

_U16 = struct.Struct("!H")


class PrivateFilter:
    def __init__(self, spec: PrivateSpec) -> None:
        nets = [ipaddress.ip_network(n) for n in spec.networks]
        self.v4 = tuple((int(n.network_address), int(n.netmask)) for n in nets if n.version == 4)
        self.v6 = tuple((int(n.network_address), int(n.netmask)) for n in nets if n.version == 6)
        self.allow = tuple(wire.name_to_wire(zone) for zone in spec.allow)

    def private(self, rdata: bytes) -> bool:
        value = int.from_bytes(rdata, "big")
        nets = self.v4 if len(rdata) == 4 else self.v6
        return any(value & mask == network for network, mask in nets)

    def holds_private(self, reply: replies.Reply) -> bool:
        stored = reply.stored
        for off in reply.offsets:
            rtype = _U16.unpack_from(stored, off - 4)[0]
            if rtype in (T_A, T_AAAA):
                size = _U16.unpack_from(stored, off + 4)[0]
                if size in (4, 16) and self.private(stored[off + 6:off + 6 + size]):
                    return True
        return False

    def apply(self, reply: replies.Reply) -> tuple[replies.Reply | None, list[str]] | None:
        """None if the reply holds no private address outside `allow`; else the reply
        without them (None if it could not be rewritten), and the addresses removed."""
        if not self.holds_private(reply):
            return None
        removed: list[str] = []
        rewritten = replies.rewrite_with_dnspython(reply.data, lambda msg: self._drop_private(msg, removed))
        if rewritten is not None and not removed:
            return None  # every private address belonged to an allowed name
        return rewritten, removed

    def _drop_private(self, msg: dns.message.Message, removed: list[str]) -> None:
        import dns.rrset  # rare: a reply that tries to rebind; dnspython only then

        for section in (msg.answer, msg.authority, msg.additional):
            for rrset in list(section):
                if rrset.rdtype not in (T_A, T_AAAA) or self._allowed(rrset.name):
                    continue
                bad = [rd for rd in rrset if self.private(rd.to_digestable())]
                if not bad:
                    continue
                removed.extend(rd.to_text() for rd in bad)
                kept = [rd for rd in rrset if rd not in bad]
                section.remove(rrset)
                if kept:
                    section.append(dns.rrset.from_rdata_list(rrset.name, rrset.ttl, kept))

    def _allowed(self, owner: dns.name.Name) -> bool:
        name = owner.canonicalize().to_wire() or b"\x00"
        return any(wire.is_subdomain(name, zone) for zone in self.allow)
