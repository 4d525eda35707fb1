"""The lab's stand-in database: `python tcpsvc.py HOST PORT BANNER LOG`.

Accepts TCP connections, writes one line "<BANNER> you are <peer ip>" and closes, and appends
"connection from <peer ip>:<port>" to LOG, so a test can see whether the VPN server's
MASQUERADE rewrote the source address. Standard library only: it runs as a script in a
namespace, not as part of the test package.
"""

from __future__ import annotations

import socket
import sys


def serve(host: str, port: int, banner: str, log_path: str) -> None:
    with (
        socket.create_server((host, port), reuse_port=False) as server,
        open(log_path, "a", buffering=1) as log,
    ):
        log.write(f"listening on {host}:{port}\n")
        while True:
            conn, (peer, peer_port) = server.accept()
            with conn:
                log.write(f"connection from {peer}:{peer_port}\n")
                try:
                    conn.sendall(f"{banner} you are {peer}\n".encode())
                except OSError as exc:
                    log.write(f"send to {peer} failed: {exc}\n")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit("usage: tcpsvc.py HOST PORT BANNER LOG")
    serve(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])
