"""The command line: argparse lives here and only here; each command returns an exit code."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from splitdns import __version__
from splitdns.commands import demo, serve


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="splitdns",
        description="An in-pod split-DNS resolver for pods with an OpenVPN sidecar.",
    )
    parser.add_argument("--version", action="version", version=f"splitdns {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    p = commands.add_parser(
        "serve", help="Run the resolver configured by a Corefile.",
        description="Run the resolver configured by a Corefile. Accepts CoreDNS's -conf and "
                    "-dns.port, so a pod spec written for CoreDNS works unchanged. Exit codes: "
                    "0 stopped cleanly, 1 could not start (port in use, ...), 2 bad Corefile.")
    p.add_argument("-conf", "--conf", dest="conf", default="Corefile",
                   help="The Corefile to load (default: ./Corefile).")
    p.add_argument("-dns.port", "--dns-port", dest="port", type=int, default=53,
                   help="The port of server blocks whose keys name none (default: 53).")
    p.set_defaults(run=lambda a: serve.run(a.conf, a.port))

    p = commands.add_parser(
        "demo", help="Run the resolver with built-in upstreams on loopback, to try with dig.",
        description="Run the resolver on 127.0.0.1 with two small built-in upstreams on "
                    "loopback addresses, in the seed's layout (a catch-all and the tunnel "
                    "zone svc.acme.internal), and print dig commands to try.")
    p.add_argument("--port", type=int, default=53,
                   help="Port on 127.0.0.1 (default 53; falls back to 5300 if 53 is taken).")
    p.set_defaults(run=lambda a: demo.run(a.port))

    p = commands.add_parser(
        "check", help="Load a Corefile and report the first error, with file and line.",
        description="Load a Corefile the way serve would and report errors as FILE:LINE: "
                    "message. Exit codes: 0 fine, 2 the Corefile has an error.")
    p.add_argument("files", nargs="+", metavar="COREFILE")
    p.set_defaults(run=lambda a: serve.check(a.files))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    code: int = args.run(args)
    return code
