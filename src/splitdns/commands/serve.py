"""`splitdns serve` and `splitdns check`: load a Corefile, then serve it or report on it.

Tests: tests/test_serve.py, tests/test_first_commands.py.
"""

from __future__ import annotations

import ctypes
import errno
import gc
import os
import re
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING

from splitdns import __version__, config, corefile
from splitdns.errors import ConfigError
from splitdns.shell import event_loop, logs

if TYPE_CHECKING:
    import asyncio

EXIT_OK, EXIT_START, EXIT_CONFIG = 0, 1, 2
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 128 * 1024  # glibc's default starting value, kept from then on


DEFAULT_CONF = "Corefile"


# The first line of Kubernetes YAML (a ConfigMap holding the Corefile, as check and explain take it).
_KUBERNETES_YAML = re.compile(r"\A(?:\s*#[^\n]*\n|\s*---\s*\n|\s*\n)*\s*(apiVersion|kind)\s*:", re.ASCII)


def run(path: str, port: int | None) -> int:
    """`port` None: -dns.port not given (53)."""
    try:
        blocks = corefile.load(path)
        loaded = config.build(blocks, path, config.DEFAULT_PORT if port is None else port)
    except ConfigError as err:
        if path == DEFAULT_CONF and not Path(path).exists():
            logs.error("no ./Corefile here: pass the Corefile to serve with -conf FILE")
        else:
            logs.error(_kubernetes_yaml(path) or str(err))
        return EXIT_CONFIG
    if port is not None and config.ports_named(blocks):
        logs.warning(f"-dns.port {port} changes nothing: every server key of {path} names its own port "
                  f"({', '.join(sorted({str(b.port) for b in loaded.blocks}))}), as in CoreDNS")
    event_loop.load(loaded)  # before the modules that import asyncio
    return run_loop(serve(loaded, path, config.DEFAULT_PORT if port is None else port))


def _kubernetes_yaml(path: str) -> str | None:
    """What to say when -conf names Kubernetes YAML (the ConfigMap that holds the Corefile)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    if not _KUBERNETES_YAML.match(text):
        return None
    what = "a Kubernetes ConfigMap" if re.search(r"^kind:\s*ConfigMap\s*$", text, re.M) else "Kubernetes YAML"
    return (f"{path} is {what}, not a Corefile: serve reads the Corefile itself. "
            "Mount the ConfigMap into the container and pass the file it holds (render mounts it as "
            "-conf /etc/coredns/Corefile), or write its data.Corefile to a file; check, explain and "
            "render read the ConfigMap as it is")


def run_from_env(name: str, port: int | None) -> int:
    """The Corefile from an environment variable: the injected pods carry it in their spec."""
    port = config.DEFAULT_PORT if port is None else port
    text = os.environ.get(name)
    if text is None:
        logs.error(f"--corefile-env {name}: the environment variable {name} is not set")
        return EXIT_CONFIG
    try:
        loaded = config.loads(text, file=f"${name}", default_port=port)
    except ConfigError as err:
        logs.error(str(err))
        return EXIT_CONFIG
    event_loop.load(loaded)  # before the modules that import asyncio
    return run_loop(serve(loaded, None, port))


SERVE_ELSEWHERE = "-dns.port N for server keys without a port, or KEY:PORT in the Corefile"


def start_error(err: OSError, elsewhere: str = SERVE_ELSEWHERE) -> str:
    """Why serve (or demo) could not start, and what to do: never Python's own wording.
    `elsewhere`: how to choose another port."""
    reason = err.strerror or str(err)
    if err.errno == errno.EADDRINUSE:
        return (f"{reason}: another process holds that address and port (`ss -lntup` shows which); "
                f"stop it, or use another port: {elsewhere}")
    if err.errno == errno.EACCES:
        return (f"{reason}: a port below 1024 needs root, CAP_NET_BIND_SERVICE or the sysctl "
                f"net.ipv4.ip_unprivileged_port_start; or use a port above 1023: {elsewhere}")
    return reason


def run_loop(main: Coroutine[object, object, int]) -> int:
    """Run a coroutine on uvloop when it is installed (a default dependency on Linux and macOS
    CPython), else on the stock asyncio loop."""
    import asyncio

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
    import asyncio

    from splitdns.shell.lifecycle import Runtime
    from splitdns.shell.server import Server

    pin_mmap_threshold()
    runtime = Runtime(Server(loaded), path, port)
    try:
        await runtime.start()
    except OSError as err:
        logs.error(start_error(err))
        return EXIT_START
    # What start-up built lives as long as the process: out of the collector's sight, a full
    # collection no longer walks the modules, the config and dnspython's tables each time.
    gc.freeze()
    # Which loop serves decides a miss's cost by about 15 %: say it, so figures can be checked.
    # Before the banner, which tells scripts the server is up and takes signals.
    runtime.take_signals()
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
