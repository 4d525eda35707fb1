"""asyncio for `splitdns serve`, with TLS support only for a Corefile that forwards over TLS.

asyncio imports the ssl module as it loads, whether or not anything asks for TLS, and ssl loads
OpenSSL's libssl and libcrypto: about 4 MiB of RSS, a fifth of an idle resolver, in every pod.
asyncio itself runs without ssl where Python has none (its own `except ImportError`), so for a
Corefile with no `tls://` upstream serve imports it as on such a Python, then makes ssl
importable again for anything that needs it later. A reloaded Corefile that adds a `tls://`
upstream to a process started without TLS is refused with a message that says to restart it
(its old Corefile keeps being served); uvloop, where it is installed, has its own TLS support.
Tests: tests/test_event_loop.py, tests/test_serve.py.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from splitdns.errors import ConfigError

if TYPE_CHECKING:
    from splitdns.config import Block, Config


def forwards_over_tls(loaded: Config) -> tuple[Block, str] | None:
    """The first block with a `tls://` upstream, and that upstream as written; None if none."""
    for block in loaded.blocks:
        for spec in block.forwards:
            for up in spec.upstreams:
                if up.tls:
                    return block, up.origin
    return None


def load(loaded: Config) -> None:
    """Import asyncio before anything of ours does: without TLS support unless `loaded` forwards
    over TLS. Once asyncio is loaded this changes nothing (the first choice holds)."""
    if "asyncio" in sys.modules or "ssl" in sys.modules or forwards_over_tls(loaded):
        import asyncio
        return
    sys.modules["ssl"] = None  # type: ignore[assignment]  # asyncio's `import ssl` fails: no TLS
    try:
        import asyncio  # noqa: F401
    finally:
        if sys.modules.get("ssl", 0) is None:
            del sys.modules["ssl"]


def has_tls() -> bool:
    """Whether the loop can open TLS connections: asyncio loaded with ssl, or uvloop running."""
    sslproto = sys.modules.get("asyncio.sslproto")
    return (sslproto is None or getattr(sslproto, "ssl", None) is not None
            or sys.modules.get("uvloop") is not None)


def check_reload(new: Config) -> None:
    """Raise a ConfigError for a reloaded Corefile this process cannot serve: one that forwards over
    TLS when the process started without TLS."""
    found = forwards_over_tls(new)
    if found and not has_tls():
        block, origin = found
        raise ConfigError(block.where, f"forward {origin}: this process started without TLS (its Corefile "
                                       "had no tls:// upstream, and TLS costs about 4 MiB of memory); "
                                       "restart it to serve a Corefile that forwards over TLS")
