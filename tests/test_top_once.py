"""`splitdns top --once` as scripts and tickets use it, in process against a small HTTP server on
loopback standing in for the metrics endpoint (a real resolver's screen is tests/test_top.py): a
page that is no metrics is named for what it is, a view written to a pipe keeps its width, and a
missing `rich` is the install's exit 69 as for every other command."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from splitdns import cli

HTML = b"<!DOCTYPE html><html><head><title>Grafana</title></head><body>login</body></html>"
UPSTREAMS = [f"192.0.2.{i}:53" for i in range(1, 7)]
METRICS = "".join(
    ['coredns_dns_requests_total{server="dns://:53",zone="example.org.",proto="udp",type="A"} 10\n']
    + [f'splitdns_upstream_healthy{{zone="example.org.",to="{to}"}} 1\n' for to in UPSTREAMS]).encode()


@contextmanager
def serving(body: bytes, content_type: str) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_page_that_is_no_metrics_is_named_for_what_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    with serving(HTML, "text/html; charset=utf-8") as url:
        assert cli.main(["top", "--once", "--interval", "0.05", "--url", url]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "could not convert" not in out
    assert out.endswith(f"{url} answered text/html ({len(HTML)} bytes, starting '<!DOCTYPE html><html>"
                        "<head><title>Grafan'), not Prometheus metrics: give --url the resolver's /metrics "
                        "(the address of its `prometheus` directive)"), out


def test_a_view_written_to_a_pipe_is_not_cut_at_80_columns(capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    with serving(METRICS, "text/plain; version=0.0.4") as url:
        assert cli.main(["top", "--once", "--interval", "0.05", "--url", url]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "example.org." in line)
    assert all(f"{to} up" in row for to in UPSTREAMS), out
    assert len(row) > 80


def test_without_rich_top_exits_69_naming_the_extra(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rich.console", None)  # as if the extra were not installed
    assert cli.main(["top", "--once", "--url", "http://127.0.0.1:9/metrics"]) == 69
    assert capsys.readouterr().err.strip() == ("splitdns top: the module rich is not installed; it comes "
                                               "with the `top` extra: pip install 'splitdns[top]'")
