"""Runs the scripted upstream: `python -m tests.support.scripted_upstream --help`."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

import tests.support.scripted_upstream as package
from tests.support.scripted_upstream.script import ScriptError
from tests.support.scripted_upstream.server import QueryLog, ScriptedServer, UdpProtocol

# wrong_addr forgeries come from here: loopback, but not the address the resolver asked.
FORGE_ADDR = "127.0.0.253"
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
# With --port 0 another process may hold the TCP side of the port UDP picked; retry a bit.
BIND_ATTEMPTS = 64


def bind_pair(addr: str, port: int) -> tuple[socket.socket, socket.socket]:
    """Bind UDP and TCP sockets to the same address and port (port 0: pick one)."""
    last_error: OSError | None = None
    for _ in range(1 if port else BIND_ATTEMPTS):
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            udp.bind((addr, port))
            # Lets a fixed --port be reused while an earlier run's connections sit in TIME_WAIT.
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tcp.bind((addr, udp.getsockname()[1]))
            tcp.listen(128)
        except OSError as e:
            udp.close()
            tcp.close()
            last_error = e
            continue
        udp.setblocking(False)
        tcp.setblocking(False)
        return udp, tcp
    raise OSError(f"cannot bind UDP+TCP on {addr}:{port}: {last_error}")


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


async def serve(args: argparse.Namespace) -> int:
    log = QueryLog(args.log)
    server = ScriptedServer(args.script, log)
    udp_sock, tcp_sock = bind_pair(args.addr, args.port)
    other_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    other_sock.bind((args.addr, 0))
    other_sock.setblocking(False)

    loop = asyncio.get_running_loop()
    other, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, sock=other_sock)
    elsewhere_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    elsewhere_sock.bind((FORGE_ADDR, 0))
    elsewhere_sock.setblocking(False)
    elsewhere, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, sock=elsewhere_sock)
    main, _ = await loop.create_datagram_endpoint(
        lambda: UdpProtocol(server, other, elsewhere), sock=udp_sock
    )
    tcp_server = await asyncio.start_server(server.serve_tcp, sock=tcp_sock)

    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    # Installed before the ready file appears: SIGHUP's default action would kill us.
    loop.add_signal_handler(signal.SIGHUP, server.reload)

    write_atomically(args.ready_file, f"{udp_sock.getsockname()[1]}\n")
    await stop.wait()

    tcp_server.close()
    main.close()
    other.close()
    elsewhere.close()
    server.cancel_all()
    log.close()
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripted_upstream",
                                     description=(package.__doc__ or "").split("\n\n")[0])
    parser.add_argument("--addr", required=True, help="loopback IPv4 address to listen on")
    parser.add_argument("--port", type=int, default=0, help="0 picks a port free for UDP+TCP")
    parser.add_argument("--script", type=Path, required=True, help="JSON list of rules")
    parser.add_argument("--log", type=Path, required=True, help="JSON-lines query log")
    parser.add_argument("--ready-file", type=Path, required=True, help="gets the port")
    args = parser.parse_args(argv)
    # Project rule: nothing leaves loopback, so refuse to listen anywhere else.
    try:
        on_loopback = ipaddress.ip_address(args.addr) in LOOPBACK
    except ValueError:
        on_loopback = False
    if not on_loopback:
        parser.error(f"--addr must be an IPv4 address in {LOOPBACK}, not {args.addr!r}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return asyncio.run(serve(args))
    except (ScriptError, OSError) as e:
        print(f"scripted_upstream: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
