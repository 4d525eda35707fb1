"""What a cache entry costs the process, against what the cache counts for `cache_memory`.

    python -m bench.cache_cost [--entries N] [--flood NAMES]

Fills one block's cache with N distinct A answers, in process, and prints the RSS growth per
entry beside the cache's own count. With `--flood`, the cache is held to `cache_memory 64MB`
and NAMES new names are stored one after the other, as a flood of names asked once does to a
server: the cache fills, then evicts one entry per name stored, and the process's RSS growth
is printed beside the 64 MiB the cache counts at each step. Both runs pin glibc's mmap
threshold as `splitdns serve` does (commands/serve.py). `cache.ENTRY_OVERHEAD` is set so
that the flood's RSS growth stays within what the cache counts: if the real cost runs ahead,
a full cache grows the process past what `cache_memory` promises, and past the rendered
memory limit.
"""

from __future__ import annotations

import argparse
import gc
import os

import dns.message
import dns.rrset

from splitdns.codec import wire
from splitdns.codec.reply import read_canonical
from splitdns.commands.serve import pin_mmap_threshold
from splitdns.core.cache import Cache
from splitdns.directives.cache import CacheSpec

MIB = 1 << 20
FLOOD_LIMIT = 64 * MIB  # `limits cache_memory`'s default


def rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def answer(name: str, address: str) -> bytes:
    msg = dns.message.make_response(dns.message.make_query(name, "A", use_edns=False))
    msg.answer.append(dns.rrset.from_text(name, 300, "IN", "A", address))
    data: bytes = msg.to_wire()
    return data


def store(cache: Cache, i: int) -> None:
    name = f"n{i}.bench.example.org."
    reply = read_canonical(answer(name, f"192.0.2.{i % 250}"))
    assert reply is not None
    owner = wire.name_to_wire(name)
    cache.put(owner + b"\x00\x01\x00\x01\x00", owner, reply, 0.0)


def fill(count: int) -> None:
    cache = Cache(CacheSpec(success_capacity=10 * count), max_bytes=1 << 40)
    gc.collect()
    before = rss()
    for i in range(count):
        store(cache, i)
    gc.collect()
    real = (rss() - before) / len(cache)
    counted = cache.bytes / len(cache)
    print(f"{len(cache)} entries: {real:.0f} bytes each in RSS, {counted:.0f} counted "
          f"({counted / real:.2f}x)")


def flood(names: int) -> None:
    cache = Cache(CacheSpec(success_capacity=10 * names), max_bytes=FLOOD_LIMIT)
    gc.collect()
    before = rss()
    steps = sorted({names // 10, names // 5, names // 2, names})
    for i in range(1, names + 1):
        store(cache, i)
        if i in steps:
            print(f"{i:>9} names stored: {len(cache)} held, {cache.evictions} evicted; RSS grew "
                  f"{(rss() - before) / MIB:.1f} MiB, the cache counts {cache.bytes / MIB:.1f} MiB "
                  f"(limit {FLOOD_LIMIT // MIB} MiB)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=200_000,
                        help="answers to cache (default: %(default)s)")
    parser.add_argument("--flood", type=int, metavar="NAMES",
                        help="new names stored into a cache held to 64 MiB, instead")
    args = parser.parse_args()
    pin_mmap_threshold()
    if args.flood:
        flood(args.flood)
    else:
        fill(args.entries)


if __name__ == "__main__":
    main()
