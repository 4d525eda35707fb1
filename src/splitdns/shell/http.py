"""The HTTP side: /health, /ready, /metrics on their own listeners. Reads state, decides nothing.

Deliberately tiny (GET only, one request per connection, bounded reads): the kubelet and
Prometheus are the only clients, and a web framework would cost more start-up time than
the whole resolver.
Tests: tests/test_operations.py, tests/test_lifecycle_inprocess.py.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

Response = tuple[int, str, bytes]  # status, content type, body
Handler = Callable[[dict[str, list[str]]], Response]

MAX_HEADER_BYTES = 8192
READ_TIMEOUT = 5.0
REASONS = {200: "OK", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
           503: "Service Unavailable", 400: "Bad Request"}


async def serve(host: str, port: int, routes: dict[str, Handler]) -> asyncio.Server:
    strict = _loopback(host)

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(READ_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
            status, ctype, body = _dispatch(head, routes, strict)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            status, ctype, body = 400, "text/plain", b"bad request\n"
        try:
            writer.write(f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\nContent-Type: {ctype}\r\n"
                         f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    return await asyncio.start_server(client, host or None, port, limit=MAX_HEADER_BYTES,
                                      reuse_address=True)


def _dispatch(head: bytes, routes: dict[str, Handler], strict_host: bool = False) -> Response:
    try:
        lines = head.decode("ascii").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
    except (UnicodeDecodeError, ValueError):
        return 400, "text/plain", b"bad request\n"
    if method not in ("GET", "HEAD"):
        return 405, "text/plain", b"only GET\n"
    if strict_host and not _host_is_local(lines[1:]):
        # DNS rebinding: a page in a browser of this pod asks its own name, which now
        # resolves to 127.0.0.1. Only loopback listeners need this; the pod IP's are
        # reachable anyway, and scrapers there may well use a Service name.
        return 403, "text/plain", b"the Host header must be an address or localhost\n"
    url = urlsplit(target)
    handler = routes.get(url.path)
    if handler is None:
        return 404, "text/plain", b"not found\n"
    status, ctype, body = handler(parse_qs(url.query))
    return status, ctype, b"" if method == "HEAD" else body


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _host_is_local(headers: list[str]) -> bool:
    for line in headers:
        name, _, value = line.partition(":")
        if name.strip().lower() == "host":
            host = _without_port(value.strip())
            return host.lower() == "localhost" or _is_address(host)
    return True  # HTTP/1.0 without Host: no name was resolved to get here


def _without_port(value: str) -> str:
    if value.startswith("["):       # [::1]:8080
        return value[1:value.find("]")]
    if value.count(":") == 1:       # 127.0.0.1:8080, localhost:8080
        return value.rsplit(":", 1)[0]
    return value                    # no port: an IPv4 address, a name, or a bare IPv6 address


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
