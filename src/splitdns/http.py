"""The HTTP side: /health, /ready, /metrics on their own listeners. Reads state, decides nothing.

Deliberately tiny (GET only, one request per connection, bounded reads): the kubelet and
Prometheus are the only clients, and a web framework would cost more start-up time than
the whole resolver.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

Response = tuple[int, str, bytes]  # status, content type, body
Handler = Callable[[dict[str, list[str]]], Response]

MAX_HEADER_BYTES = 8192
READ_TIMEOUT = 5.0
REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable",
           400: "Bad Request"}


async def serve(host: str, port: int, routes: dict[str, Handler]) -> asyncio.Server:
    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(READ_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
            status, ctype, body = _dispatch(head, routes)
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


def _dispatch(head: bytes, routes: dict[str, Handler]) -> Response:
    try:
        method, target, _ = head.split(b"\r\n", 1)[0].decode("ascii").split(" ", 2)
    except (UnicodeDecodeError, ValueError):
        return 400, "text/plain", b"bad request\n"
    if method not in ("GET", "HEAD"):
        return 405, "text/plain", b"only GET\n"
    url = urlsplit(target)
    handler = routes.get(url.path)
    if handler is None:
        return 404, "text/plain", b"not found\n"
    status, ctype, body = handler(parse_qs(url.query))
    return status, ctype, b"" if method == "HEAD" else body
