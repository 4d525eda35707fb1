"""Start-up only: exec to the first answer of `splitdns serve`, many times, from the virtualenv and
from the resolver image's own files.

    python -m bench.startup [--runs N] [--image] [--no-venv]

`make bench` measures start-up once per round beside everything else; this repeats only that,
so a change to what `serve` imports can be judged by a median over many starts within a minute.
The Corefile is the reference scenario's (a catch-all and a private zone, `errors`, `cache 30`),
both forwarding to a stand-in upstream on 127.0.0.2 that answers every A question; the first
answer counted is a NOERROR with an A record (bench/measure.py's `first_answer`, a query every
2 ms). The virtualenv runs with its bytecode compiled first (a machine that sets
PYTHONDONTWRITEBYTECODE would otherwise compile the package at every start); `--image` builds
the resolver image with podman (bench/image.py) and starts it by chroot as uid 65532, as
`make bench`'s `splitdns-image` row does. Loopback only.
"""

from __future__ import annotations

import argparse
import compileall
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import dns.message
import dns.rrset

from bench import image, measure

REPO = Path(__file__).resolve().parent.parent
PORT = 15390
UPSTREAM = "127.0.0.2"


def _answer_every_a(sock: socket.socket) -> None:
    while True:
        try:
            data, peer = sock.recvfrom(4096)
            q = dns.message.from_wire(data)
        except OSError:
            return  # closed: the benchmark is over
        except Exception:  # not a query: ignored, as a server would
            continue
        reply = dns.message.make_response(q)
        reply.answer.append(dns.rrset.from_text(q.question[0].name, 30, "IN", "A", "192.0.2.1"))
        sock.sendto(reply.to_wire(), peer)


def corefile(upstream_port: int) -> str:
    block = "{zone}:{port} {{\n    errors\n    cache 30\n    forward . {up}:{up_port}\n}}\n"
    return "".join(block.format(zone=zone, port=PORT, up=UPSTREAM, up_port=upstream_port)
                   for zone in (".", "svc.acme.internal"))


def starts(argv: list[str], env: dict[str, str], runs: int) -> list[float]:
    """Milliseconds from exec to the first answer, one start at a time."""
    times = []
    for i in range(runs):
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            times.append(1000 * measure.first_answer("127.0.0.1", PORT, f"start{i}.example.org", t0,
                                                     _alive(proc)))
        finally:
            proc.terminate()
            proc.wait(5)
    return times


def _alive(proc: subprocess.Popen[bytes]) -> Callable[[], bool]:
    return lambda: proc.poll() is None


def say(label: str, times: list[float]) -> None:
    print(f"{label}: exec to first answer median {statistics.median(times):.0f} ms "
          f"[{min(times):.0f}-{max(times):.0f}] over {len(times)}, load {os.getloadavg()[0]:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="starts per row (default 20)")
    parser.add_argument("--image", action="store_true",
                        help="also the resolver image (builds it with podman)")
    parser.add_argument("--no-venv", action="store_true", help="not the virtualenv")
    args = parser.parse_args(argv)
    if args.image:
        why = image.prepare()
        if why:
            print(f"no image row: {why}", file=sys.stderr)
            return 1
    upstream = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        upstream.bind((UPSTREAM, 0))
        threading.Thread(target=_answer_every_a, args=(upstream,), daemon=True).start()
        text = corefile(upstream.getsockname()[1])
        if not args.no_venv:
            compileall.compile_dir(str(REPO / "src" / "splitdns"), quiet=1)
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "Corefile"
                path.write_text(text)
                env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
                say("venv", starts([sys.executable, "-m", "splitdns", "serve", "-conf", str(path)], env,
                                   args.runs))
        built = image.built()
        if args.image and built:
            env = {"SPLITDNS_COREFILE": text, "PATH": "/usr/bin:/bin"}
            say("image", starts(["/usr/sbin/chroot", "--userspec=65532:65532", str(built["root"]),
                                 "/usr/bin/splitdns", "serve", "--corefile-env", "SPLITDNS_COREFILE"],
                                env, args.runs))
    finally:
        upstream.close()
        if args.image:
            image.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
