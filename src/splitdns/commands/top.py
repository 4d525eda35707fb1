"""`splitdns top`: one resolver, live in the terminal, from its /metrics (the `prometheus`
directive's endpoint). `splitdns top POD` (or `kubectl splitdns top POD`) reads a pod's through
`kubectl port-forward` to its `dns-metrics` port. The terminal is drawn with `rich`, an optional
extra (`pip install 'splitdns[top]'`): the resolver's image does not carry it.
Tests: tests/test_top.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from splitdns.commands.top_view import RCODES, Reading, ZoneRow, rows

if TYPE_CHECKING:
    from rich.console import RenderableType

EXIT_OK, EXIT_UNREACHABLE, EXIT_INPUT = 0, 1, 2
METRICS_PORT_NAME = "dns-metrics"  # kube.deploy.manifests' name for the resolver's metrics port
PIPE_WIDTH = 1000  # columns of a view written to a pipe: wider than any table top draws
FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+)")


@dataclass(frozen=True)
class Options:
    url: str = "http://127.0.0.1:9153/metrics"
    interval: float = 2.0
    once: bool = False
    pod: str | None = None
    namespace: str | None = None
    kubectl: str = "kubectl"


def run(opts: Options) -> int:
    # Without the extra, ModuleNotFoundError: the command line says what to install, exit 69, as
    # for every command's missing module.
    from rich.console import Console
    from rich.live import Live

    if opts.interval <= 0:
        print("splitdns top: --interval must be more than 0 seconds", file=sys.stderr)
        return EXIT_INPUT
    with _forwarded(opts) as url:
        if url is None:
            return EXIT_UNREACHABLE
        # Into a pipe or a file rich would cut every line at 80 columns: the table keeps its width.
        wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
        console = Console(width=PIPE_WIDTH if wide else None)
        before = _read(url)
        if opts.once:
            time.sleep(opts.interval)
            now = _read(url)
            console.print(frame(url, now if isinstance(now, Reading) else str(now),
                                before if isinstance(before, Reading) else None, again=False))
            return EXIT_OK if isinstance(now, Reading) else EXIT_UNREACHABLE
        with contextlib.suppress(KeyboardInterrupt), Live(console=console, auto_refresh=False) as live:
            previous = before if isinstance(before, Reading) else None
            live.update(frame(url, before, None), refresh=True)
            while True:
                time.sleep(opts.interval)
                now = _read(url)
                live.update(frame(url, now, previous), refresh=True)
                if isinstance(now, Reading):
                    previous = now
    return EXIT_OK


def _read(url: str) -> Reading | str:
    """A reading, or why there is none (shown in the frame; the next refresh tries again)."""
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            body = response.read()
            kind = response.headers.get_content_type()
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", None) or err
        return f"cannot read {url}: {reason}"
    text = body.decode("utf-8", "replace")
    try:
        reading = Reading.parse(text, time.time())
    except ValueError:
        reading = None
    if reading is None or not reading.samples:
        start = " ".join(text.split())[:40]
        shown = f", starting {start!r}" if start else ""
        return (f"{url} answered {kind} ({len(body):,} bytes{shown}), not Prometheus metrics: give --url "
                "the resolver's /metrics (the address of its `prometheus` directive)")
    return reading


@contextlib.contextmanager
def _forwarded(opts: Options) -> Iterator[str | None]:
    """The URL to read: the one given, or a local port `kubectl port-forward` opens to the pod."""
    if opts.pod is None:
        yield opts.url
        return
    command = [opts.kubectl, "port-forward", "--address", "127.0.0.1", f"pod/{opts.pod}",
               f":{METRICS_PORT_NAME}", *(["-n", opts.namespace] if opts.namespace else [])]
    try:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    except OSError as err:
        print(f"splitdns top: cannot run {opts.kubectl}: {err.strerror}", file=sys.stderr)
        yield None
        return
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # kubectl says where it listens, or exits
        found = FORWARDING.search(line)
        if found is None:
            proc.kill()
            said = proc.stderr.read().strip() if proc.stderr is not None else ""
            print(f"splitdns top: kubectl port-forward to pod {opts.pod} port {METRICS_PORT_NAME} failed: "
                  f"{said or line.strip() or 'no output'}", file=sys.stderr)
            yield None
            return
        yield f"http://127.0.0.1:{found.group(1)}/metrics"
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)


def frame(url: str, now: Reading | str, before: Reading | None, again: bool = True) -> RenderableType:
    from rich.markup import escape
    from rich.table import Table

    if isinstance(now, str):  # what the URL gave may hold brackets: text, not markup
        retry = " (trying again)" if again else ""
        return f"[bold]splitdns top[/bold] {escape(url)}\n[red]{escape(now)}[/red]{retry}"
    table = Table(title=f"splitdns top  {url}  {time.strftime('%H:%M:%S')}", title_justify="left")
    for name, justify in (("zone", "left"), ("q/s", "right"), ("rcodes", "left"), ("hits", "right"),
                          ("p50", "right"), ("p99", "right"), ("upstreams", "left"), ("tunnel", "left"),
                          ("ready", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in rows(now, before):
        table.add_row(*_cells(row))
    return table


def _cells(row: ZoneRow) -> list[str]:
    mix = [f"{rcode} {share:.0%}" for rcode, share in sorted(row.rcodes.items(), key=lambda kv: -kv[1])
           if rcode in RCODES or share >= 0.01]
    ups = " ".join(f"{to} {'up' if healthy else '[red]DOWN[/red]'}" for to, healthy in row.upstreams)
    tunnel = "-" if row.tunnel is None else (row.tunnel if row.tunnel == "up" else f"[red]{row.tunnel}[/red]")
    ready = "-" if row.ready is None else ("yes" if row.ready else "[red]no[/red]")
    return [row.zone, f"{row.qps:.1f}", " ".join(mix) or "-",
            "-" if row.hit_ratio is None else f"{row.hit_ratio:.0%}", _ms(row.p50), _ms(row.p99),
            ups or "-", tunnel, ready]


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}ms"
