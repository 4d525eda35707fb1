"""`splitdns demo`: run the resolver in a VPN pod's layout against built-in loopback upstreams.

Tests: tests/test_demo.py.
"""

from __future__ import annotations

import asyncio
import errno
import sys

from splitdns import config
from splitdns.commands import demo_upstreams, serve
from splitdns.shell import logs
from splitdns.shell.lifecycle import Runtime
from splitdns.shell.server import Server

DEFAULT_PORT, FALLBACK_PORT = 53, 5300


def run(port: int | None) -> int:
    """`port` None: 53, else 5300; a port the user gave is that port or an error."""
    return serve.run_loop(_main(port))


async def _main(port: int | None) -> int:
    cluster, tunnel = demo_upstreams.upstreams()
    cluster.start(demo_upstreams.CLUSTER_ADDR)
    tunnel.start(demo_upstreams.TUNNEL_ADDR)
    for candidate in (port,) if port is not None else (DEFAULT_PORT, FALLBACK_PORT):
        loaded = config.loads(demo_upstreams.corefile(candidate, cluster, tunnel), "<demo Corefile>")
        runtime = Runtime(Server(loaded))
        try:
            await runtime.start()
        except OSError as err:
            if port is None and getattr(err, "errno", None) in (errno.EADDRINUSE, errno.EACCES):
                logs.info(f"port {candidate} is not available ({err.strerror}); trying another")
                continue
            elsewhere = "--port N" if port is None else "another --port, or none to let demo take 53 or 5300"
            print(f"splitdns demo: {serve.start_error(err, elsewhere)}", file=sys.stderr)
            return serve.EXIT_START
        print(demo_upstreams.corefile(candidate, cluster, tunnel))
        serving = asyncio.ensure_future(runtime.run_until_signalled())
        # Ask itself the examples (in a thread: the resolver answers on this loop meanwhile), so
        # the split shows even where dig is not installed.
        answers = await asyncio.get_running_loop().run_in_executor(
            None, demo_upstreams.ask_examples, candidate)
        print(f"splitdns demo asked itself, on 127.0.0.1:{candidate}:")
        print("\n".join(answers) + "\n")
        print(demo_upstreams.instructions(candidate), flush=True)
        return await serving
    print("splitdns demo: no free port; pass --port N", file=sys.stderr)
    return serve.EXIT_START
