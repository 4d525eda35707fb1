"""The grammar of `splitdns verify leaks` (a word after `verify`, not a pod: cli.parser's
`verify TARGET` keeps its meaning, and a pod named leaks is still `pod/leaks`).
Tests: tests/test_cli.py, tests/test_verify_leaks.py.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from splitdns.cli.help import Parser
from splitdns.kube.shared.image import COREFILE


def _count(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 100:
        raise argparse.ArgumentTypeError(f"{text}: give a number of names from 1 to 100")
    return int(text)


def build(prog: str) -> argparse.ArgumentParser:
    p = Parser(
        prog=f"{prog} verify leaks",
        description="Show where the tunnel zones' queries leave the pod. Fresh names under each "
                    "tunnel zone (openvpn, wireguard) are asked through the resolver, and its "
                    "/metrics (the Corefile's `prometheus`) are read before and after each: which "
                    "upstream was asked, and which interface that upstream's sockets are bound to. "
                    "A query bound to the tunnel's interface leaves by the tunnel or not at all; "
                    "one sent unbound goes where the routing table says, which is read too. With "
                    "--down and --up, the same again after each command (one that takes the tunnel "
                    "or its route away, and one that brings it back).",
        epilog="exit codes:\n  0  no leak: every query sent was bound to its tunnel's interface\n"
               "  1  could not run (no tunnel zone, no prometheus, the counters unreadable, a "
               "command failed)\n  8  a tunnel zone's query was sent unbound: it may leave by any "
               "interface")
    p.add_argument("-conf", "--conf", dest="conf", default=COREFILE,
                   help=f"The resolver's Corefile (default {COREFILE}).")
    p.add_argument("--port", type=int, default=53, help="The resolver's port on 127.0.0.1 (default 53).")
    p.add_argument("--names", type=_count, default=3, metavar="N",
                   help="Fresh names to ask per zone and phase (default 3).")
    p.add_argument("--down", metavar="COMMAND", help="A shell command that takes the tunnel (or its "
                   "route) away, run after the first phase.")
    p.add_argument("--up", metavar="COMMAND", help="A shell command that brings it back, run after "
                   "the --down phase.")
    p.add_argument("--settle", type=float, default=2.0, metavar="SECONDS",
                   help="Seconds to wait after each command (default 2).")
    p.add_argument("--out", metavar="PATH", help="Write the artifact as PATH.md and PATH.json.")
    return p


def main(argv: Sequence[str], prog: str) -> int:
    from splitdns.commands.verify import leaks

    a = build(prog).parse_args(list(argv))
    return leaks.run(leaks.Options(conf=a.conf, port=a.port, names=a.names, down=a.down, up=a.up,
                                   settle=a.settle, out=a.out))
