"""What a cache entry costs the process, against what the cache counts for `cache_memory`.

    python -m bench.cache_cost [--entries N]

Fills one block's cache with N distinct A answers, in process, and prints the RSS growth per
entry beside the cache's own count (`cache.ENTRY_OVERHEAD` is set from this figure). The two
should agree within a few per cent; if the real cost runs ahead, a full cache grows the process
past what `cache_memory` promises, and past the rendered memory limit.
"""

from __future__ import annotations

import argparse
import gc
import os

import dns.message
import dns.rrset

from splitdns.codec import wire
from splitdns.codec.reply import read_canonical
from splitdns.core.cache import Cache
from splitdns.directives.cache import CacheSpec


def rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def answer(name: str, address: str) -> bytes:
    msg = dns.message.make_response(dns.message.make_query(name, "A", use_edns=False))
    msg.answer.append(dns.rrset.from_text(name, 300, "IN", "A", address))
    data: bytes = msg.to_wire()
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=200_000,
                        help="answers to cache (default: %(default)s)")
    count = parser.parse_args().entries
    cache = Cache(CacheSpec(success_capacity=10 * count), max_bytes=1 << 40)
    gc.collect()
    before = rss()
    for i in range(count):
        name = f"n{i}.bench.example.org."
        reply = read_canonical(answer(name, f"192.0.2.{i % 250}"))
        assert reply is not None
        owner = wire.name_to_wire(name)
        cache.put(owner + b"\x00\x01\x00\x01\x00", owner, reply, 0.0)
    gc.collect()
    real = (rss() - before) / len(cache)
    counted = cache.bytes / len(cache)
    print(f"{len(cache)} entries: {real:.0f} bytes each in RSS, {counted:.0f} counted "
          f"({counted / real:.2f}x)")


if __name__ == "__main__":
    main()
