"""What the core decides about a query, as values the shell carries out.

`Zone.begin` gives an `Answer` (send these bytes now) or a `Forward` (ask these upstreams),
`Zone.known` what the hot path sends at once (`Known`); a `Flight` (flight.py) walks a
forward's upstreams to the `Settled` outcome; `Zone.finish` gives each waiting client its
`Answer`. Logging is the shell's: decisions carry `Note`s.

The decisions made per miss are slotted dataclasses, not frozen ones: a frozen dataclass sets
each field through `object.__setattr__`, four times the cost of a slotted one (bench/README.md,
"Figures behind the code"), and a miss builds half a dozen. They are still treated as values:
nobody changes one once made.
Tests: tests/test_flight.py, tests/test_zone.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from splitdns.codec import reply as replies
from splitdns.codec import wire
from splitdns.core.exchange import Done, ForwardState
from splitdns.core.local import Rewritten, revert

if TYPE_CHECKING:
    import dns.message
    import dns.rrset

    from splitdns.codec.entries import Entry
    from splitdns.directives._reshape import Reshape


@dataclass(frozen=True, slots=True)
class LogLine:
    """A line for the process log: `level` is "error", "warning" or "info"."""

    level: str
    text: str


@dataclass(frozen=True, slots=True)
class QueryError:
    """A line for the `errors` directive (logged only when the block has it)."""

    rcode: int
    reason: str


Note = LogLine | QueryError


@dataclass(slots=True)
class Forward:
    """Ask `fwd`'s upstreams `asked` (the client's query, or what `rewrite` made of it)."""

    fwd: ForwardState
    asked: wire.Query
    rewritten: Rewritten | None = None
    stale: bytes | None = None  # serve_stale `verify`: the answer if the exchange fails
    why: str | None = None      # a refresh behind an answer: what its error line says it did


@dataclass(slots=True)
class Answer:
    """Send `reply` now; run `refresh` behind it (serve_stale, prefetch); log `notes`.
    `hit`: what the zone knew at once (`Known.denial`: a cache hit, counted where it is sent),
    None for any other answer."""

    reply: bytes
    refresh: Forward | None = None
    notes: tuple[Note, ...] = ()
    hit: int | None = None


@dataclass(slots=True)
class Known:
    """An answer the zone knows at once: a fresh cache entry, or an answer the block made
    before and keeps (`held` is then the table it is kept in). `reply` is what to send, with
    `loadbalance`'s rotation applied (`turns`: every rotation, for the memo to hand out in
    turn); `refresh`, a prefetch to run behind it; `replayable`, whether the memo may send it
    again without asking the zone (no directive of the block must see each query)."""

    reply: bytes
    entry: Entry
    ttl: int | None
    held: dict[bytes, Entry] | None
    turns: tuple[bytes, ...] | None
    refresh: Forward | None
    replayable: bool
    denial: int  # 1 when from a denial or SERVFAIL entry (entries.KINDS), else 0


@dataclass(slots=True)
class Settled:
    """A flight's outcome, cleaned and stored; `entry` is what the cache kept. `upstream`:
    the upstream whose reply ended the exchange (None when it ended on a failure), and
    `rtt` that attempt's round trip in seconds."""

    done: Done
    entry: Entry | None
    notes: tuple[Note, ...] = ()
    upstream: str | None = None
    rtt: float = 0.0


def unrewrite(done: Done, rewritten: Rewritten | None) -> Done:
    """The reply to a query `rewrite` changed, under the names the client asked for."""
    if rewritten is None or done.reply is None:
        return done
    reply = revert(done.reply, rewritten)
    if reply is None:
        return Done(error="the reply to a rewritten query could not be mapped back to the name asked")
    return Done(reply, done.rcode, done.error, done.ede, done.upstream, done.seconds)


def reshaped(done: Done, reshape: Reshape) -> Done:
    """The reply as a directive of the block rewrites what it keeps (`minimal`, `loadbalance`'s
    order); the reply as it came when the directive has nothing to do, or when dnspython could
    not rewrite it (it is still valid)."""
    reply = done.reply
    if reply is None or not reshape.wanted(reply):
        return done
    rewritten = replies.rewrite_with_dnspython(reply.data, reshape.edit)
    if rewritten is None:
        return done
    return Done(rewritten, done.rcode, done.error, done.ede, done.upstream, done.seconds)


def scrub(done: Done, zone: object, owner_of: Callable[[bytes], object]) -> Done:
    """The reply without authority and additional records another zone owns (`owner_of`
    routes a name, as the listener's router does).

    An upstream speaks only for its own zone: the catch-all's server must not hand the client
    an NS or address for a name the tunnel or cluster zone owns (Unbound's scrub_sanitize, in
    split-DNS terms). The answer section is kept as it is: it answers the question asked.
    Rare, so the reply is rewritten (`reply.rewrite_with_dnspython`).
    """
    reply = done.reply
    if reply is None or not reply.owners or all(owner_of(owner) is zone for owner in reply.owners):
        return done

    def ours(rrset: dns.rrset.RRset) -> bool:
        return owner_of(rrset.name.canonicalize().to_wire() or b"\x00") is zone

    def drop_foreign(msg: dns.message.Message) -> None:
        msg.authority = [r for r in msg.authority if ours(r)]
        msg.additional = [r for r in msg.additional if ours(r)]

    scrubbed = replies.rewrite_with_dnspython(reply.data, drop_foreign)
    if scrubbed is None:  # dnspython could not rewrite it (a gap in the reader): refuse, not leak
        return Done(error="the upstream reply could not be rewritten without foreign records")
    return Done(scrubbed, done.rcode, done.error, done.ede, done.upstream, done.seconds)
