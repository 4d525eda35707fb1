"""`loadbalance`: each answer puts another of a name's addresses first.

Syntax:

    loadbalance [round_robin]

CoreDNS shuffles the A, AAAA and MX records of every reply at random. We rotate the
addresses of each run of A or AAAA records with the same owner, one step per reply, so
over n replies each of n addresses comes first once: the spread clients see (they mostly
take the first address) without a random draw per reply, and with the n orders computed
once per cached answer, so a repeated question stays a lookup (memo.py). MX records are
not shuffled: their targets are names, and moving them would break the compression of
the records after them. As CoreDNS does, each section of an upstream's reply is put in the
order CNAME, other types, A and AAAA, MX before it is stored (glibc follows a CNAME chain
only in that order): `out_of_order` finds the rare reply that needs it, on its bytes.
`weighted` (and its weight file) and `prefer CIDR...` are not implemented.

`rotations` works on a reply's bytes: pure, no sockets, no clock.
Tests: tests/test_plugins.py.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from splitdns.codec import wire
from splitdns.corefile import Statement
from splitdns.directives import _args
from splitdns.directives._reshape import Reshape
from splitdns.errors import ConfigError

if TYPE_CHECKING:
    import dns.message

USAGE = "loadbalance [round_robin]"
MAX_ROTATIONS = 16  # a longer run still rotates its first 16 places; memory per hot answer stays bounded
_RR = struct.Struct("!HHIH")
T_A, T_AAAA = 1, 28
_RANK = {5: 0, T_A: 2, T_AAAA: 2, 15: 3}  # CNAME first, then the rest, then A/AAAA, then MX


def parse(st: Statement) -> bool:
    for opt in st.body or ():
        if opt.name == "prefer":
            raise ConfigError(opt.where, "loadbalance prefer is not implemented by splitdns; remove the "
                                         f"block (addresses then rotate with no preference): {USAGE}")
    _args.no_body(st, USAGE)
    if st.args and st.args[0] == "weighted":
        raise ConfigError(st.where, "loadbalance weighted is not implemented by splitdns; "
                                    f"use {USAGE}")
    _args.arity(st, 0, 1, USAGE)
    if st.args and st.args[0] != "round_robin":
        raise ConfigError(st.where, f"loadbalance: unknown policy {st.args[0]!r}; usage: {USAGE}")
    return True


def in_order(msg: dns.message.Message) -> None:
    """Each section in CoreDNS's order, CNAMEs first (glibc's resolver reads a chain only in
    that order); the sort is stable."""
    for section in (msg.answer, msg.authority, msg.additional):
        section.sort(key=lambda rrset: rank(rrset.rdtype))


def rank(rtype: int) -> int:
    return _RANK.get(rtype, 1)


def out_of_order(reply: bytes) -> bool:
    """Whether a section of the reply is not in CoreDNS's order (see `rank`)."""
    try:
        counts = struct.unpack_from("!HHHH", reply, 4)
        pos = 12
        for _ in range(counts[0]):
            pos = wire.skip_name(reply, pos) + 4
            if pos < 4:
                return False
        for count in counts[1:]:
            last = 0
            for _ in range(count):
                pos = wire.skip_name(reply, pos)
                if pos < 0:
                    return False
                rtype, _, _, rdlen = _RR.unpack_from(reply, pos)
                pos += 10 + rdlen
                if rtype != 41:  # OPT stays where it is
                    if rank(rtype) < last:
                        return True
                    last = rank(rtype)
        return False
    except (IndexError, struct.error):
        return False


def rotations(reply: bytes) -> tuple[bytes, ...]:
    """The reply with its address runs rotated by 0, 1, ... places (the first is `reply`
    itself): one element when there is nothing to rotate."""
    runs = _runs(reply)
    if not runs:
        return (reply,)
    turns = min(MAX_ROTATIONS, max(count for _, _, _, count in runs))
    return tuple(_rotated(reply, runs, turn) for turn in range(turns))


def rotated(reply: bytes, turn: int) -> bytes:
    """The reply with each address run rotated by `turn` places."""
    runs = _runs(reply)
    return _rotated(reply, runs, turn) if runs else reply


def _rotated(reply: bytes, runs: list[tuple[int, int, int, int]], turn: int) -> bytes:
    if turn == 0:
        return reply
    buf = bytearray(reply)
    for start, size, rdlen, count in runs:
        values = [reply[start + i * size:start + i * size + rdlen] for i in range(count)]
        shift = turn % count
        for i, value in enumerate(values[shift:] + values[:shift]):
            buf[start + i * size:start + i * size + rdlen] = value
    return bytes(buf)


def _runs(reply: bytes) -> list[tuple[int, int, int, int]]:
    """Runs of two or more A (or AAAA) records in the answer section with identical owner
    bytes, type and class: (first rdata offset, distance between records, rdata length, count)."""
    try:
        qdcount, ancount = struct.unpack_from("!HH", reply, 4)
        pos = 12
        for _ in range(qdcount):
            pos = wire.skip_name(reply, pos) + 4
            if pos < 4:
                return []
        runs: list[tuple[int, int, int, int]] = []
        current: list[int] = []  # [first rdata, record size, rdata length, count]
        head = b""
        for _ in range(ancount):
            start = pos
            pos = wire.skip_name(reply, pos)
            if pos < 0:
                return []
            rtype, _, _, rdlen = _RR.unpack_from(reply, pos)
            this_head = reply[start:pos + 4]
            rdata = pos + 10
            pos = rdata + rdlen
            if rtype not in (T_A, T_AAAA):
                head = b""
                continue
            if current and this_head == head and pos - start == current[1] and \
                    rdata == current[0] + current[3] * current[1]:
                current[3] += 1
                continue
            if current and current[3] >= 2:
                runs.append((current[0], current[1], current[2], current[3]))
            current, head = [rdata, pos - start, rdlen, 1], this_head
        if current and current[3] >= 2:
            runs.append((current[0], current[1], current[2], current[3]))
        return runs
    except (IndexError, struct.error):
        return []


# Replies are kept in CoreDNS's order (rare: most already are); the rotation is per send.
RESHAPE = Reshape(lambda reply: out_of_order(reply.data), in_order)
