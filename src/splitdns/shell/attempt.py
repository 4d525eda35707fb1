"""What every upstream attempt shares, over UDP, TCP or TLS: how it fails, what it drops,
and how a reply read off a stream is checked.
Tests: tests/test_upstream.py, tests/test_dot.py.
"""

from __future__ import annotations

from splitdns.codec import reply as replies
from splitdns.codec import wire


class UpstreamError(Exception):
    """An attempt failed: timeout, refused, reset, or a TCP reply that did not match."""


class UpstreamTimeout(UpstreamError):
    """An attempt got no reply in its time (or had no time left before the deadline)."""


class Counters:
    """Evidence of spoofing or brokenness, for metrics: replies we dropped."""

    def __init__(self) -> None:
        self.mismatched = 0
        self.unparseable = 0


def describe(err: OSError) -> str:
    if isinstance(err, ConnectionRefusedError):
        return "connection refused (nothing listens there)"
    return err.strerror or str(err)


def stream_reply(sent: bytes, data: bytes, counters: Counters, transport: str) -> replies.Reply:
    """A reply read off a stream (TCP, TLS), matched to its query and read, or the reason not."""
    if not wire.reply_matches(sent, data):
        counters.mismatched += 1
        raise UpstreamError(f"{transport} reply does not match the query")
    reply = replies.read_matched(data)
    if reply is None:
        counters.unparseable += 1
        raise UpstreamError(f"{transport} reply does not parse")
    return reply
