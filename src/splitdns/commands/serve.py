"""`splitdns serve` and `splitdns check`: load a Corefile, then serve it or report on it."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Coroutine

from splitdns import __version__, config, logs
from splitdns.errors import ConfigError
from splitdns.server import Server

EXIT_OK, EXIT_START, EXIT_CONFIG = 0, 1, 2


def check(paths: list[str]) -> int:
    code = EXIT_OK
    for path in paths:
        try:
            loaded = config.load(path)
        except ConfigError as err:
            print(err, file=sys.stderr)
            code = EXIT_CONFIG
        else:
            print(f"{path}: ok, {len(loaded.blocks)} server block(s): "
                  + ", ".join(b.name for b in loaded.blocks))
    return code


def run(path: str, port: int) -> int:
    try:
        loaded = config.load(path, default_port=port)
    except ConfigError as err:
        logs.error(str(err))
        return EXIT_CONFIG
    return run_loop(serve(loaded))


def run_loop(main: Coroutine[object, object, int]) -> int:
    """Run a coroutine on uvloop when it is installed, else on the stock asyncio loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    result: int = uvloop.run(main)
    return result


async def serve(loaded: config.Config, banner: bool = True) -> int:
    server = Server(loaded)
    try:
        await server.start()
    except OSError as err:
        logs.error(str(err))
        return EXIT_START
    if banner:
        for block in loaded.blocks:
            print(block.name, flush=True)
        print(f"splitdns-{__version__}", flush=True)
    await wait_for_signal()
    server.close()
    return EXIT_OK


async def wait_for_signal() -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
