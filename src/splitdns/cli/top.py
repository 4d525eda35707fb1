"""The grammar of `splitdns top` (cli.parser holds the others; this one keeps that module short).

Tests: tests/test_top.py.
"""

from __future__ import annotations

import argparse

from splitdns.cli.help import Parser


def add_top(commands: argparse._SubParsersAction[Parser]) -> None:
    p = commands.add_parser(
        "top", help="Watch one resolver live: per zone its rate, rcodes, hits, latency, upstreams, tunnel.",
        description="Read a resolver's /metrics (its `prometheus` directive) every --interval seconds "
                    "and show, per zone, the queries per second, the rcode mix, the cache hit ratio, "
                    "the 50th and 99th percentile latency, each upstream's health, the tunnel's state "
                    "and the zone's readiness, over the last interval. With POD, the pod's metrics "
                    "port (named dns-metrics, as render and the webhook declare it) is reached through "
                    "kubectl port-forward. Needs the optional extra `top` (pip install "
                    "'splitdns[top]'). Ctrl-C stops it.",
        epilog="exit codes:\n  0  stopped (Ctrl-C), or --once printed\n  1  the metrics could not be "
               "read (--once), or kubectl port-forward failed\n  2  wrong arguments\n"
               "  69 the extra is not installed (the message says what to install)")
    p.add_argument("pod", nargs="?", metavar="POD",
                   help="A pod to watch through kubectl port-forward (else --url is read).")
    p.add_argument("-n", "--namespace", help="The pod's namespace (default: kubectl's).")
    p.add_argument("--url", default="http://127.0.0.1:9153/metrics",
                   help="The metrics to read without POD (default http://127.0.0.1:9153/metrics).")
    p.add_argument("--interval", type=float, default=2.0, metavar="SECONDS",
                   help="Seconds between two readings (default 2).")
    p.add_argument("--once", action="store_true",
                   help="Print one view, over one interval, and exit (for scripts and tickets).")
    p.add_argument("--kubectl", default="kubectl", help="The kubectl to run (default: kubectl on PATH).")
