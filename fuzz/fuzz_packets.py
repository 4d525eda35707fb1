#!/usr/bin/env python3
"""Coverage-guided fuzz target (atheris) for the packet path: client queries and upstream replies.

    .venv/bin/pip install atheris
    .venv/bin/python fuzz/fuzz_packets.py -max_total_time=30        # libFuzzer flags after it
    .venv/bin/python fuzz/fuzz_packets.py fuzz/corpus -max_total_time=600   # keep a corpus

The first byte picks the path; the rest is the packet:
- even: what a client sends. `queries.read` decides (silence, an error reply, or a query); a
  query is routed, looked up in the cache, and every reply we would send must be valid DNS.
- odd: what an upstream sends back to a real query of ours. `wire.reply_matches`, then the
  full parse, the split-zone scrub, the cache, and the renderers (cache hit, pass-through,
  truncated for UDP). Whatever is rendered for the client must parse.
An exception out of any of these is a crash. Without atheris installed, the files named on
the command line (or stdin) are run through the same checks once, for regression cases.
"""

from __future__ import annotations

import random
import struct
import sys
from pathlib import Path

import dns.message

try:
    import atheris
except ImportError:  # the harness still runs inputs by hand
    atheris = None

if atheris is not None:
    with atheris.instrument_imports(include=["splitdns"]):
        from splitdns import config
        from splitdns.codec import entries, queries, wire
        from splitdns.core import resolve
        from splitdns.codec import reply as replies
else:
    from splitdns import config
    from splitdns.codec import entries, queries, wire
    from splitdns.core import resolve
    from splitdns.codec import reply as replies

COREFILE = """
. {
    cache 30
    forward . 192.0.2.10
}
corp.example {
    cache 30
    forward . 192.0.2.20
}
"""
_CFG = config.loads(COREFILE, "Corefile", env={})
ZONES = [resolve.Zone(b) for b in _CFG.blocks]
ROUTER = resolve.Router(ZONES)
_SEED_QUERY = wire.parse_query(dns.message.make_query("www.Example.org.", "A", use_edns=0).to_wire())
assert _SEED_QUERY is not None
SENT = wire.upstream_query(_SEED_QUERY, 0x4242)
NOW = 1000.0


def client_path(packet: bytes) -> None:
    verdict = queries.read(packet)
    if verdict is None:
        return
    if isinstance(verdict, bytes):
        dns.message.from_wire(verdict)  # every error reply we send is valid DNS
        return
    q = verdict
    zone = ROUTER.route(q.name)
    if zone is None:
        dns.message.from_wire(wire.error_reply(q, 5))
        return
    if zone.cache is not None:
        zone.cache.get(q.key, NOW)
    dns.message.from_wire(wire.error_reply(q, 2, (22, "fuzz")))
    dns.message.from_wire(wire.truncated(q, 0x8180))
    wire.upstream_query(q, 0x1234)


def upstream_path(packet: bytes) -> None:
    raw = SENT[:2] + packet  # the right ID, so the interesting checks run
    if not wire.reply_matches(SENT, raw):
        return
    got = replies.read_matched(raw)
    if got is None:
        return
    q = _SEED_QUERY
    zone = ROUTER.route(q.name)
    assert zone is not None
    # As the server does: the exchange decides what the reply means (a failure signal, TC, ...).
    exchange = resolve.Exchange(zone.forwards[0], NOW, random.Random(0))
    step = exchange.start()
    assert isinstance(step, resolve.Send)
    outcome = exchange.answered(step, got, NOW)
    if not isinstance(outcome, resolve.Done):
        return  # another attempt (the next upstream, or TCP after TC)
    done = resolve.scrub(outcome, zone, ROUTER)
    entry = zone.store(q, done, NOW)
    out = zone.render(q, done, entry, NOW)
    dns.message.from_wire(out)
    if entry is not None:
        dns.message.from_wire(entries.render(entry, entries.remaining(entry, NOW + 7), q))
    if done.reply is not None:
        dns.message.from_wire(resolve.Zone.render(q, done, None, NOW))
    if len(out) > q.max_udp:
        dns.message.from_wire(wire.truncated(q, struct.unpack_from("!H", out, 2)[0]))


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    (upstream_path if data[0] & 1 else client_path)(data[1:])


def main() -> None:
    if atheris is not None:
        atheris.Setup(sys.argv, TestOneInput)
        atheris.Fuzz()
        return
    paths = [a for a in sys.argv[1:] if not a.startswith("-")]
    inputs = [Path(p).read_bytes() for p in paths] if paths else [sys.stdin.buffer.read()]
    for data in inputs:
        TestOneInput(data)
    print(f"ran {len(inputs)} input(s) without atheris: no crash")


if __name__ == "__main__":
    main()
