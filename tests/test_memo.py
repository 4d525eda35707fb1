"""The memo of rendered cache hits: it answers a repeat exactly as the cache would, or not at all."""

from __future__ import annotations

import dns.edns
import dns.message
from hypothesis import given, settings
from hypothesis import strategies as st

from splitdns import config
from splitdns.codec import entries, wire
from splitdns.core.memo import Memo
from splitdns.core.routing import Router
from splitdns.core.zone import Zone
from splitdns.shell.listener import Listener
from tests.helpers import indexed, memo_lookup, query, reply
from tests.helpers import wire as to_wire

COREFILE = ". {\n cache 30\n forward . 192.0.2.10\n}\ncorp.example {\n cache 30\n forward . 192.0.2.20\n}\n"
NAME = "api.corp.example."


def setup() -> tuple[Router, Zone]:
    router = Router(Zone(b) for b in config.loads(COREFILE, "Corefile", env={}).blocks)
    zone = router.route(wire.name_to_wire(NAME))
    assert zone is not None and zone.cache is not None
    return router, zone


def fill(zone: Zone, client: dns.message.Message, now: float, ttl: int = 30,
         address: str = "10.8.0.5") -> None:
    q = wire.parse_query(to_wire(client))
    assert q is not None and zone.cache is not None
    zone.cache.put(q.key, q.name, indexed(reply(client, f"{NAME} {ttl} IN A {address}")), now)


def served(router: Router, memo: Memo[Zone], data: bytes, now: float) -> bytes | None:
    """What the shell's hot path sends: the memo's reply, else a rendered hit (remembered)."""
    repeat = memo_lookup(memo, data, now)
    if repeat is not None:
        return repeat[0]
    q = wire.parse_query(data)
    assert q is not None
    zone = router.route(q.name)
    entry = zone.cache.get(q.key, now) if zone is not None and zone.cache is not None else None
    if zone is None or entry is None:
        return None
    ttl = entries.remaining(entry, now)
    out = entries.render(entry, ttl, q)
    denial = int(entries.kind(entry) != entries.SUCCESS)
    memo.remember(data, zone, q.key, entry, ttl, q.qtype, out, now, denial=denial)
    return out


def rendered(zone: Zone, data: bytes, now: float) -> bytes | None:
    """The reference: the cache's answer, rendered afresh."""
    q = wire.parse_query(data)
    assert q is not None and zone.cache is not None
    entry = zone.cache.get(q.key, now)
    return None if entry is None else entries.render(entry, entries.remaining(entry, now), q)


def test_a_repeat_gets_the_same_reply_with_its_own_id() -> None:
    router, zone = setup()
    memo: Memo[Zone] = Memo()
    fill(zone, query(NAME), now=100.0)
    first = served(router, memo, to_wire(query(NAME, qid=1)), 100.0)
    assert len(memo) == 1
    again = memo_lookup(memo, to_wire(query(NAME, qid=0xBEEF)), 100.5)
    assert first is not None and again is not None
    assert again[0] == rendered(zone, to_wire(query(NAME, qid=0xBEEF)), 100.5)
    assert again[0][:2] == b"\xbe\xef" and again[0][2:] == first[2:]


def test_a_new_second_patches_the_ttl_and_a_replaced_entry_or_expiry_end_the_memo() -> None:
    router, zone = setup()
    memo: Memo[Zone] = Memo()
    data = to_wire(query(NAME))
    fill(zone, query(NAME), now=100.0)
    served(router, memo, data, 100.0)
    older = memo_lookup(memo, data, 101.0)  # a second later: the same reply, TTL patched
    assert older is not None and older[0] == rendered(zone, data, 101.0)
    assert dns.message.from_wire(older[0]).answer[0].ttl == 29
    fill(zone, query(NAME), now=101.2, address="10.8.0.6")  # a refresh replaced the entry
    assert memo_lookup(memo, data, 101.3) is None
    out = served(router, memo, data, 101.3)
    assert out is not None and b"\x0a\x08\x00\x06" in out
    assert memo_lookup(memo, data, 131.3) is None and served(router, memo, data, 131.3) is None  # expired


def test_other_bytes_are_other_questions() -> None:
    router, zone = setup()
    memo: Memo[Zone] = Memo()
    fill(zone, query(NAME), now=100.0)
    served(router, memo, to_wire(query(NAME)), 100.0)
    for other in (query(NAME.upper()), query(NAME, do=True), query(NAME, edns=-1), query(NAME, "AAAA")):
        assert memo_lookup(memo, to_wire(other), 100.0) is None


def test_learning_zones_forgets_and_the_memo_is_bounded() -> None:
    router, zone = setup()
    memo: Memo[Zone] = Memo()
    fill(zone, query(NAME), now=100.0)
    served(router, memo, to_wire(query(NAME)), 100.0)
    listener = Listener("127.0.0.1", 0, router, memo=memo)  # the memo is the listener's
    listener.learn(zone, ["pushed.example."])
    assert len(memo) == 0
    small = Memo(limit=2)
    entry = entries.make(b"\x00" * 12, (), entries.SUCCESS, 30, 100.0)
    for i in range(5):
        small.remember(bytes([0, i]) + b"q%d" % i, zone, b"k", entry, 30, 1, b"\x00\x00\x81\x80", 100.0,
                       denial=0)
        assert len(small) <= 2
    padded = query(NAME)
    padded.use_edns(0, options=[dns.edns.GenericOption(65001, b"x" * 600)])
    long_query = to_wire(padded)
    before = len(small)
    small.remember(long_query, zone, b"k", entry, 30, 1, b"\x00\x00\x81\x80", 100.0, denial=0)
    assert long_query[2:] not in small.table and len(small) == before


@given(steps=st.lists(st.tuples(st.floats(0, 3), st.integers(0, 0xFFFF),
                                st.sampled_from([NAME, NAME.upper()]), st.booleans(), st.booleans()),
                      min_size=1, max_size=30))
@settings(max_examples=200, deadline=None)
def test_the_memo_never_answers_other_than_the_cache(steps: list[tuple[float, int, str, bool, bool]]) -> None:
    router, zone = setup()
    memo: Memo[Zone] = Memo()
    now = 1000.0
    for delay, qid, name, refill, do in steps:
        now += delay
        if refill:
            fill(zone, query(NAME), now, ttl=1 + qid % 40, address=f"10.8.{qid % 200}.1")
        data = to_wire(query(name, qid=qid, do=do))
        assert served(router, memo, data, now) == rendered(zone, data, now)


def test_a_truncated_reply_is_not_patched_but_rendered_anew() -> None:
    _, zone = setup()
    memo: Memo[Zone] = Memo()
    data = to_wire(query(NAME, edns=-1))
    fill(zone, query(NAME, edns=-1), now=100.0)
    q = wire.parse_query(data)
    assert q is not None and zone.cache is not None
    entry = zone.cache.get(q.key, 100.0)
    assert entry is not None
    cut = wire.truncated(q, 0x8180)  # as the shell sends when the answer is over 512 bytes
    memo.remember(data, zone, q.key, entry, entries.remaining(entry, 100.0), q.qtype, cut, 100.0, denial=0)
    same_second = memo_lookup(memo, data, 100.5)
    assert same_second is not None and same_second[0] == cut
    assert memo_lookup(memo, data, 101.0) is None and len(memo) == 0


def test_a_repeat_with_a_cookie_gets_its_own_cookie_answered() -> None:
    """Queries that differ only in their client cookie are different bytes: each repeat gets
    the reply the cache would render for it, with its own cookie and our server cookie."""
    router, zone = setup()
    memo: Memo[Zone] = Memo()
    fill(zone, query(NAME), now=100.0)
    for client_cookie in (bytes(range(8)), bytes(range(8, 16))):
        msg = query(NAME)
        msg.use_edns(0, 0, 1232, options=[dns.edns.CookieOption(client_cookie, b"")])
        data = to_wire(msg)
        first, again = served(router, memo, data, 100.2), served(router, memo, data, 100.4)
        assert first is not None and first == again == rendered(zone, data, 100.4)
        (option,) = dns.message.from_wire(again).options
        assert isinstance(option, dns.edns.CookieOption) and option.client == client_cookie
        assert option.server == wire.cookie_option(client_cookie)[12:]
