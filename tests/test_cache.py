"""The answer cache: what is stored, for how long, and what never is. Time is passed in."""

from __future__ import annotations

import gc

import dns.message
import dns.rcode

from splitdns import config, directives
from splitdns.codec import entries, wire
from splitdns.core.cache import Cache
from splitdns.directives.cache import CacheSpec
from tests.helpers import SOA, indexed, query, reply
from tests.helpers import wire as to_wire


def put(cache: Cache, msg: dns.message.Message, client: dns.message.Message, now: float = 0.0):  # type: ignore[no-untyped-def]
    q = wire.parse_query(to_wire(client))
    assert q is not None
    return q, cache.put(q.key, q.name, indexed(msg), now)


def test_ttl_cap_from_cache_30_and_countdown() -> None:
    cache = Cache(CacheSpec(success_ttl=30, denial_ttl=30))
    client = query("example.org.")
    q, entry = put(cache, reply(client, "example.org. 3600 IN A 192.0.2.1"), client, now=100.0)
    assert entry is not None and entries.ttl(entry) == 30
    assert cache.get(q.key, 100.5) is entry and entries.remaining(entry, 100.5) == 30
    assert entries.remaining(entry, 110.0) == 20
    assert cache.get(q.key, 129.9) is entry
    assert cache.get(q.key, 130.0) is None  # expired, and gone without serve_stale
    assert len(cache) == 0


def test_an_authority_ttl_is_never_raised_by_default() -> None:
    """RFC 1035 3.2.1, RFC 2181 8: TTL 0 is used once and not cached; TTL 2 is served as 2
    and counts down (CoreDNS would raise both to its MINTTL default, 5)."""
    cache = Cache(CacheSpec())
    client = query("example.org.")
    q, entry = put(cache, reply(client, "example.org. 2 IN A 192.0.2.1"), client, now=10.0)
    assert entry is not None and entries.ttl(entry) == 2
    assert entries.remaining(entry, 11.0) == 1 and cache.get(q.key, 12.0) is None
    for zero in ("example.org. 0 IN A 192.0.2.1",):
        _, entry = put(cache, reply(client, zero), client, now=20.0)
        assert entry is None and cache.get(q.key, 20.0) is None
    nodata = query("example.org.", "AAAA")
    soa_zero = "example.org. 300 IN SOA ns.example.org. hostmaster.example.org. 1 3600 600 86400 0"
    _, entry = put(cache, reply(nodata, authority=(soa_zero,)), nodata)
    assert entry is None  # a negative TTL 0 is not cached either


def test_an_explicit_minimum_ttl_still_applies() -> None:
    cache = Cache(CacheSpec(success_min_ttl=5, denial_min_ttl=7))
    client = query("example.org.")
    _, entry = put(cache, reply(client, "example.org. 1 IN A 192.0.2.1"), client)
    assert entry is not None and entries.ttl(entry) == 5
    _, entry = put(cache, reply(client, "example.org. 0 IN A 192.0.2.1"), client)
    assert entry is not None and entries.ttl(entry) == 5  # a floor asked for is a floor
    nx = query("nope.example.org.")
    _, entry = put(cache, reply(nx, rcode=dns.rcode.NXDOMAIN, authority=(SOA.rsplit(" ", 1)[0] + " 0",)), nx)
    assert entry is not None and entries.ttl(entry) == 7


def test_the_cap_of_replies_not_stored() -> None:
    """`cache 30` caps what is relayed without being cached too: the denial cap for negative
    answers, the success cap for the rest (a referral is NOERROR, no answer, no SOA)."""
    cache = Cache(CacheSpec(success_ttl=30, denial_ttl=20))
    client = query("sub.example.org.")
    referral = reply(client, authority=("sub.example.org. 3600 IN NS ns.sub.example.org.",))
    assert cache.cap(indexed(referral)) == 30
    assert cache.cap(indexed(reply(client, rcode=dns.rcode.NXDOMAIN, authority=(SOA,)))) == 20
    assert cache.cap(indexed(reply(client, authority=(SOA,)))) == 20
    assert cache.cap(indexed(reply(client, "sub.example.org. 0 IN A 192.0.2.1"))) == 30


def test_negative_answers_need_an_soa_and_use_its_minimum() -> None:
    cache = Cache(CacheSpec())
    client = query("nope.example.org.")
    _, entry = put(cache, reply(client, rcode=dns.rcode.NXDOMAIN, authority=(SOA,)), client)
    assert entry is not None and entries.kind(entry) == "denial"
    assert entries.ttl(entry) == 60  # min(300, minimum 60)
    other = query("gone.example.org.")
    _, entry = put(cache, reply(other, rcode=dns.rcode.NXDOMAIN), other)
    assert entry is None  # RFC 2308: no SOA, no negative caching
    nodata = query("example.org.", "AAAA")
    _, entry = put(cache, reply(nodata, authority=(SOA,)), nodata)
    assert entry is not None and entries.kind(entry) == "denial"


def test_an_empty_noerror_without_soa_is_not_kept() -> None:
    """CoreDNS keeps it (5 s); the README lists why we do not: RFC 2308 5, a negative answer
    without an SOA SHOULD NOT be cached."""
    cache = Cache(CacheSpec())
    client = query("example.org.", "AAAA")
    _, entry = put(cache, reply(client), client)
    assert entry is None
    _, entry = put(cache, reply(client, authority=(SOA,)), client)
    assert entry is not None  # the same answer under its SOA is kept: NODATA


def test_servfail_is_cached_briefly_and_other_errors_not_at_all() -> None:
    cache = Cache(CacheSpec())
    client = query("example.org.")
    _, entry = put(cache, reply(client, rcode=dns.rcode.SERVFAIL), client)
    assert entry is not None and entries.kind(entry) == "servfail" and entries.ttl(entry) == 5
    refused = query("example.net.")
    _, entry = put(cache, reply(refused, rcode=dns.rcode.REFUSED), refused)
    assert entry is None


def test_truncated_replies_are_never_cached() -> None:
    cache = Cache(CacheSpec())
    client = query("example.org.")
    _, entry = put(cache, reply(client, "example.org. 60 IN A 192.0.2.1", tc=True), client)
    assert entry is None and len(cache) == 0


def test_do_and_cd_bits_are_part_of_the_key() -> None:
    cache = Cache(CacheSpec())
    plain = query("example.org.")
    q_plain, _ = put(cache, reply(plain, "example.org. 60 IN A 192.0.2.1"), plain)
    for other in (query("example.org.", do=True), query("example.org.", cd=True)):
        q = wire.parse_query(to_wire(other))
        assert q is not None and q.key != q_plain.key and cache.get(q.key, 1.0) is None
    upper = wire.parse_query(to_wire(query("EXAMPLE.org.")))
    assert upper is not None and cache.get(upper.key, 1.0) is not None  # case-insensitive


def test_capacity_evicts_the_oldest() -> None:
    cache = Cache(CacheSpec(success_capacity=1024))
    keys = []
    for i in range(1030):
        client = query(f"n{i}.example.org.")
        q, entry = put(cache, reply(client, f"n{i}.example.org. 60 IN A 192.0.2.1"), client)
        assert entry is not None
        keys.append(q.key)
    assert len(cache) == 1024 and cache.evictions == 6
    assert cache.get(keys[0], 1.0) is None and cache.get(keys[-1], 1.0) is not None


def test_cache_zones_limit_what_is_stored() -> None:
    cache = Cache(CacheSpec(zones=("example.org.",)))
    inside, outside = query("www.example.org."), query("www.example.net.")
    assert put(cache, reply(inside, "www.example.org. 60 IN A 192.0.2.1"), inside)[1] is not None
    assert put(cache, reply(outside, "www.example.net. 60 IN A 192.0.2.1"), outside)[1] is None


def test_serve_stale_keeps_expired_entries_for_the_window() -> None:
    cache = Cache(CacheSpec(success_ttl=30, serve_stale=3600))
    client = query("example.org.")
    q, entry = put(cache, reply(client, "example.org. 60 IN A 192.0.2.1"), client, now=0.0)
    assert entry is not None
    assert cache.get(q.key, 31.0) is None
    assert cache.get_stale(q.key, 31.0) is entry and entries.remaining(entry, 31.0) == 0
    assert cache.get_stale(q.key, 3631.0) is None


def test_serve_stale_ttl_and_recheck_are_the_ones_the_corefile_gives() -> None:
    """`serve_stale 1h immediate 10s 2m`: a stale answer carries TTL 10 (not RFC 8767's 30),
    and after a refresh is tried the next waits 2 minutes (not 30 s), as CoreDNS reads them."""
    spec = config.loads(". {\n    cache {\n        serve_stale 1h immediate 10s 2m\n    }\n}\n"
                        ).blocks[0][directives.CACHE]
    assert spec is not None
    for cache, ttl, recheck in ((Cache(spec), 10, 120.0), (Cache(CacheSpec(serve_stale=3600)), 30, 30.0)):
        client = query("example.org.")
        q, _ = put(cache, reply(client, "example.org. 60 IN A 192.0.2.1"), client, now=0.0)
        stale = cache.stale_answer(q, 61.0)
        assert stale is not None and dns.message.from_wire(stale).answer[0].ttl == ttl
        cache.hold_refresh(q.key, 61.0)
        assert not cache.refresh_due(q.key, 61.0 + recheck - 1) and cache.refresh_due(q.key, 61.0 + recheck)


def test_cache_memory_budget_evicts_before_capacity() -> None:
    big = [f'many.example.org. 60 IN TXT "{"x" * 200}"' for _ in range(5)]
    cache = Cache(CacheSpec(), max_bytes=20_000)
    for i in range(50):
        client = query(f"n{i}.example.org.", "TXT")
        records = [r.replace("many", f"n{i}") for r in big]
        put(cache, reply(client, *records), client)
    assert cache.bytes <= 20_000 and 0 < len(cache) < 50 and cache.evictions == 50 - len(cache)


def test_an_entry_is_one_plain_bytes_object_that_keeps_every_field() -> None:
    """Memory, not speed: 100k cached names must not cost 100k objects with a field each."""
    cache = Cache(CacheSpec(success_ttl=3600))
    client = query("aa.example.org.")
    _, entry = put(cache, reply(client, "aa.example.org. 300 IN A 192.0.2.1",
                                "aa.example.org. 300 IN A 192.0.2.2"), client, now=12.5)
    assert entry is not None and type(entry) is bytes and not gc.is_tracked(entry)
    stored_at = entries.HEAD.unpack_from(entry)[0]
    assert (stored_at, entries.ttl(entry), entries.kind(entry)) == (12.5, 300, "success")
    stored = entries.reply(entry)
    assert [int.from_bytes(stored[o:o + 4], "big") for o in entries.offsets(entry)] == [300, 300]
    served = dns.message.from_wire(entries.reply(entry))
    assert served.id == 0 and sorted(rd.to_text() for rd in served.answer[0]) == ["192.0.2.1", "192.0.2.2"]
