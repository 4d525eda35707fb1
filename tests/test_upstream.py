"""How an upstream attempt fails: a timeout is its own type (`UpstreamTimeout`), and the miss
path counts it under "timeout", not "error". Real sockets on loopback, no upstream process."""

from __future__ import annotations

import asyncio
import random
import socket

import pytest

from splitdns import config
from splitdns.core.exchange import Done
from splitdns.core.zone import Zone
from splitdns.directives.forward import Upstream
from splitdns.shell import upstream
from splitdns.shell.server import Server
from tests.helpers import query
from tests.helpers import wire as to_wire

SENT = to_wire(query("example.org."))


def silent(kind: int) -> socket.socket:
    """A loopback socket that takes queries and never answers."""
    sock = socket.socket(socket.AF_INET, kind)
    sock.bind(("127.0.0.1", 0))
    if kind == socket.SOCK_STREAM:
        sock.listen()
    return sock


@pytest.mark.parametrize("tcp", [False, True])
def test_no_reply_in_time_is_a_timeout(tcp: bool) -> None:
    with silent(socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM) as sock:
        up = Upstream("127.0.0.1", sock.getsockname()[1], "test")
        with pytest.raises(upstream.UpstreamTimeout, match=r"timeout after 0\.05s"):
            asyncio.run(upstream.ask(SENT, up, tcp, 0.05, upstream.Counters()))


def test_a_refusal_is_an_error_but_not_a_timeout() -> None:
    with silent(socket.SOCK_DGRAM) as sock:
        port = sock.getsockname()[1]
    # Nothing listens on the port now: the connected socket gets ICMP port unreachable.
    with pytest.raises(upstream.UpstreamError) as caught:
        asyncio.run(upstream.ask(SENT, Upstream("127.0.0.1", port, "test"), False, 2.0,
                                 upstream.Counters()))
    assert not isinstance(caught.value, upstream.UpstreamTimeout)


def test_the_miss_path_counts_a_timeout_as_timeout() -> None:
    with silent(socket.SOCK_DGRAM) as sock:
        port = sock.getsockname()[1]
        cfg = config.loads(f". {{\n forward . 127.0.0.1:{port} {{\n  read_timeout 50ms\n"
                           "  max_connect_attempts 1\n }\n}\n", "Corefile", env={})
        zone = Zone(cfg.blocks[0])

        async def probe() -> Done:
            server = Server(cfg, asyncio.get_running_loop().time, random.Random(1))
            try:
                return await server.ask_upstreams(zone, "example.org.", 1)
            finally:
                server.close()  # and the health check the failure started

        done = asyncio.run(probe())
    assert done.error is not None and "timeout" in done.error
    assert [kind for _, kind in zone.stats.upstream] == ["timeout"]
