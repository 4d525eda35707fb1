"""How a directive rewrites the replies its block keeps (`Reshape`), for the registry to carry.

Tests: tests/test_directives_registry.py, tests/test_minimal.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import dns.message

    from splitdns.codec.reply import Reply


@dataclass(frozen=True)
class Reshape:
    """A directive's rewrite of every reply its block keeps: an upstream's before the cache
    stores it, a `template` or `hosts` answer before it is kept, so that a hit costs nothing
    more. `wanted` tells from what the hand reader already knows whether the reply needs it
    (most do not: only those are read with dnspython); `edit` changes the message."""

    wanted: Callable[[Reply], bool]
    edit: Callable[[dns.message.Message], None]
