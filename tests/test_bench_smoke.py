"""The benchmark harness works: real servers, a real dnsperf, parsed output, a written report.

Fast (a few seconds) and free of timing assertions: figures live in `make bench`, not here.
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench import measure, peers, report

NSD_ADDR, SPLITDNS_ADDR = "127.0.0.2", "127.0.0.10"

pytestmark = pytest.mark.skipif(
    not all(shutil.which(b) for b in ("dnsperf", "nsd", "taskset")),
    reason="needs dnsperf and nsd (make deps-debian)")


def _free_port(addr: str) -> int:
    """A port free for both UDP and TCP on `addr` (servers here listen on both)."""
    for _ in range(32):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind((addr, 0))
            port: int = udp.getsockname()[1]
        try:
            peers.check_free(addr, port)
        except peers.StartError:
            continue
        return port
    raise RuntimeError(f"no free port on {addr}")


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[peers.Process, peers.Process]]:
    """NSD and splitdns with a tiny cache in front of it, both answering; stopped afterwards."""
    up = peers.start(peers.nsd(tmp_path, _free_port(NSD_ADDR), NSD_ADDR), tmp_path, None)
    started = [up]
    try:
        peers.wait_serving(up, tmp_path)
        target = f"{up.spec.addr}:{up.spec.port}"
        spec = peers.splitdns(tmp_path, SPLITDNS_ADDR, _free_port(SPLITDNS_ADDR), target, cache=1024)
        proc = peers.start(spec, tmp_path, None)
        started.append(proc)
        peers.wait_serving(proc, tmp_path)
        yield up, proc
    finally:
        for p in reversed(started):
            p.stop()
    assert not any(p.alive() for p in started)


def test_dnsperf_against_splitdns_is_parsed_and_reported(
        servers: tuple[peers.Process, peers.Process], tmp_path: Path) -> None:
    up, proc = servers
    spec = proc.spec
    assert measure.check_answers(spec.addr, spec.port, ["www.bench.test", "new.bench.test"]) == []
    names = measure.write_names(tmp_path / "hit.txt", "h", 20)

    full = measure.run_dnsperf(measure.dnsperf_argv(spec.addr, spec.port, names, 1), None,
                               proc.pids(), up.pids(), tmp_path / "full.log")
    res = full.result
    assert res.sent > 0 and res.completed + res.lost == res.sent
    assert res.rcodes.get("NOERROR", 0) == res.completed and res.noerror_pct == 100.0
    assert res.runtime > 0 and res.qps > 0 and res.latencies_ms == []
    assert full.server_cpu >= 0 and full.dnsperf_cpu > 0

    paced = measure.run_dnsperf(measure.dnsperf_argv(spec.addr, spec.port, names, 1, rate=200,
                                                     verbose=True),
                                None, proc.pids(), up.pids(), tmp_path / "paced.log")
    lat = paced.result
    assert len(lat.latencies_ms) == lat.completed > 0
    p50, p99, p999 = (lat.percentile(p) for p in (50, 99, 99.9))
    assert p50 is not None and p99 is not None and p999 is not None
    assert 0 < p50 <= p99 <= p999 <= max(lat.latencies_ms)

    rss, hwm = measure.memory_mib(proc.pids())
    assert 0 < rss <= hwm
    assert len(up.pids()) >= 1 and measure.cpu_seconds(proc.pids()) > 0

    results = report.Results(rounds=2, env={"rate": "200"})
    for round_no in range(2):
        results.record("splitdns", round_no, "hit_qps", res.qps)
        results.record("splitdns", round_no, "hit_p99", p99)
        results.record("splitdns", round_no, "rss_idle", rss)
        results.record("unbound-1t", round_no, "hit_qps", res.qps * 2)
    results.fail("dnsdist", 0, "not installed")
    text = report.markdown(results)
    assert "## Throughput" in text and "## The issue's targets" in text
    assert "| unbound-1t | 2.00 [2.00–2.00] |" in text  # per-round ratios to splitdns
    assert "dnsdist: round 1: not installed" in text
    md, _ = report.write(results, tmp_path / "out")
    assert md.read_text() == report.markdown(results, "results.png" if (tmp_path / "out" / "results.png")
                                             .exists() else None)
