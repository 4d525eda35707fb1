"""`splitdns serve` and `splitdns check`: load a Corefile, then serve it or report on it."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
from collections.abc import Coroutine
from pathlib import Path

from splitdns import __version__, config
from splitdns.errors import ConfigError
from splitdns.shell import logs
from splitdns.shell.lifecycle import Runtime
from splitdns.shell.server import Server

EXIT_OK, EXIT_START, EXIT_CONFIG = 0, 1, 2
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 128 * 1024  # glibc's default starting value, kept from then on


DEFAULT_CONF = "Corefile"


def run(path: str, port: int) -> int:
    try:
        loaded = config.load(path, default_port=port)
    except ConfigError as err:
        if path == DEFAULT_CONF and not Path(path).exists():
            logs.error("no ./Corefile here: pass the Corefile to serve with -conf FILE")
        else:
            logs.error(str(err))
        return EXIT_CONFIG
    return run_loop(serve(loaded, path, port))


def run_from_env(name: str, port: int) -> int:
    """The Corefile from an environment variable: the injected pods carry it in their spec."""
    text = os.environ.get(name)
    if text is None:
        logs.error(f"--corefile-env {name}: the environment variable {name} is not set")
        return EXIT_CONFIG
    try:
        loaded = config.loads(text, file=f"${name}", default_port=port)
    except ConfigError as err:
        logs.error(str(err))
        return EXIT_CONFIG
    return run_loop(serve(loaded, None, port))


def run_loop(main: Coroutine[object, object, int]) -> int:
    """Run a coroutine on uvloop when it is installed (a default dependency on Linux and macOS
    CPython), else on the stock asyncio loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    result: int = uvloop.run(main)
    return result


def pin_mmap_threshold() -> bool:
    """Keep glibc's mmap threshold where it starts, so that a freed large block goes back to
    the system. By default glibc raises the threshold to the size of each mmapped block freed
    (up to 32 MiB): once a cache's table has been resized, the next tables come from the
    heap and stay in the process's RSS after they are freed. Under a flood of new names that
    grew a server with a full `cache_memory 64MB` by about 20 MiB at each resize, past the
    memory limit `render` sets (bench/README.md, "RSS against cached names"). False where
    there is no glibc mallopt (musl's does nothing and says so; other systems lack it)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


async def serve(loaded: config.Config, path: str | None, port: int = config.DEFAULT_PORT) -> int:
    pin_mmap_threshold()
    runtime = Runtime(Server(loaded), path, port)
    try:
        await runtime.start()
    except OSError as err:
        logs.error(str(err))
        return EXIT_START
    # What start-up built lives as long as the process: out of the collector's sight, a full
    # collection no longer walks the modules, the config and dnspython's tables each time.
    gc.freeze()
    # Which loop serves decides a miss's cost by about 15 %: say it, so figures can be checked.
    # Before the banner, which tells scripts the server is up and takes signals.
    logs.info(f"event loop: {loop_name(asyncio.get_running_loop())}")
    # CoreDNS prints its blocks, then its version: people grep for both.
    for block in loaded.blocks:
        print(block.name, flush=True)
    print(f"splitdns-{__version__}", flush=True)
    return await runtime.run_until_signalled()


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """"uvloop 0.21.0" or "asyncio _UnixSelectorEventLoop": the loop that runs, not the one hoped for."""
    module = type(loop).__module__.split(".")[0]
    if module == "uvloop":
        import uvloop

        return f"uvloop {getattr(uvloop, '__version__', '')}".rstrip()
    return f"{module} {type(loop).__name__}"
