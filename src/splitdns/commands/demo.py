"""`splitdns demo`: run the resolver in a VPN pod's layout against built-in loopback upstreams."""

from __future__ import annotations

import asyncio
import errno
import sys

from splitdns import config
from splitdns.commands import demo_upstreams, serve
from splitdns.shell import logs
from splitdns.shell.lifecycle import Runtime
from splitdns.shell.server import Server

FALLBACK_PORT = 5300


def run(port: int) -> int:
    return serve.run_loop(_main(port))


async def _main(port: int) -> int:
    cluster, tunnel = demo_upstreams.upstreams()
    cluster.start(demo_upstreams.CLUSTER_ADDR)
    tunnel.start(demo_upstreams.TUNNEL_ADDR)
    for candidate in dict.fromkeys((port, FALLBACK_PORT)):
        loaded = config.loads(demo_upstreams.corefile(candidate, cluster, tunnel), "<demo Corefile>")
        runtime = Runtime(Server(loaded))
        try:
            await runtime.start()
        except OSError as err:
            if getattr(err, "errno", None) in (errno.EADDRINUSE, errno.EACCES):
                logs.info(f"port {candidate} is not available ({err.strerror}); trying another")
                continue
            logs.error(str(err))
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
