"""Addresses as users write and read them: `host:port`, an IPv6 host in brackets.

Tests: tests/test_config.py, tests/test_check.py.
"""

from __future__ import annotations


def host_port(host: str, port: int | str) -> str:
    """`192.0.2.1:53`, `[2001:db8::1]:53`; an empty host (every address) gives `:53`."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
