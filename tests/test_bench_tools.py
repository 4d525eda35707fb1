"""Benchmark pieces that need neither dnsperf nor NSD. No figure is judged here.

bench/wakeup.py times the real read callback over real loopback sockets: it must run both
shapes (a pod's pace, a queue) and get every reply back. bench/run.py's round order must
alternate, so that no server is always measured first. The curves' and the sidecar mix's
tables, chart and query files are built from figures given here."""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bench import calls, curves, environment, growth, measure, mix, peers, report, run, startup, wakeup

from tests.support import prerequisites

pytestmark = pytest.mark.tooling  # the benchmark's tools, counted apart from the product's tests


def test_wakeup_times_hits_at_a_pace_and_in_a_queue_and_every_reply_comes_back() -> None:
    # _per_hit stops with SystemExit on the first round that lacks a reply.
    figures = asyncio.run(wakeup.measure(rounds=40, queue=5))
    assert sorted(figures) == ["pace", "queue of 5"]
    assert all(0 < micros < 1e6 for micros in figures.values())


def test_calls_counts_each_kind_of_query_and_a_miss_costs_more_than_a_hit() -> None:
    figures = asyncio.run(calls.measure(queries=20))
    assert list(figures) == ["udp miss", "udp hit", "tcp miss", "tcp hit"]
    assert figures["udp miss"][0] > figures["udp hit"][0] > 0
    assert figures["tcp miss"][0] > figures["tcp hit"][0] > 0


def test_startup_times_real_starts_of_serve_against_its_stand_in_upstream(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert startup.main(["--runs", "2"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("venv: exec to first answer median ") and "over 2," in line


def test_wakeup_refuses_a_queue_larger_than_a_batch() -> None:
    done = subprocess.run([sys.executable, "-m", "bench.wakeup", "--queue", "65"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "queue within 1..64" in done.stderr


def test_rounds_alternate_the_order_of_the_servers() -> None:
    names = [[name for name, _, _ in run.round_order(r)] for r in range(4)]
    forwards = [name for name, _, _ in peers.PEERS]
    assert names == [forwards, forwards[::-1], forwards, forwards[::-1]]
    assert names[0][0] == "splitdns" and names[1][-1] == "splitdns"


# --- curves, the sidecar mix, the event loop: formatting and files ---------------------------


def _results_with_curves() -> report.Results:
    """Two rounds of figures as bench.growth records them, for splitdns and Unbound."""
    results = report.Results(rounds=2)
    for round_no, scale in enumerate((1.0, 1.2)):
        for server, rss in (("splitdns", 30.0), ("unbound-1t", 20.0)):
            for x in curves.NAMES.full:
                results.record(server, round_no, curves.key(curves.NAMES, curves.NAMES.figures[0], x),
                               rss * scale + x / 10_000)
            for x in curves.ZONES.full[:2]:  # 200 blocks not measured: no column for it
                results.record(server, round_no, curves.key(curves.ZONES, curves.ZONES.figures[0], x),
                               100_000.0 * scale)
    return results


def test_curves_are_selected_by_name_and_an_unknown_name_is_named() -> None:
    assert curves.select("all") == curves.CURVES and curves.select("none") == ()
    assert curves.select("reload,names") == (curves.NAMES, curves.RELOAD)  # the table's order
    with pytest.raises(ValueError, match="unknown curve sizes: choose from names, zones"):
        curves.select("names,sizes")
    done = subprocess.run([sys.executable, "-m", "bench.run", "--curves", "bogus"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2 and "unknown curve bogus" in done.stderr


def test_a_curve_table_has_a_column_per_measured_point_and_medians_over_rounds() -> None:
    results = _results_with_curves()
    table = curves.curve_table(results, curves.NAMES).splitlines()
    assert table[0] == "| server | figure | 10,000 | 100,000 | 1,000,000 |"
    # at 1M: round 1 30 + 100 = 130, round 2 36 + 100 = 136: median 133.0, spread [130.0–136.0]
    assert "| splitdns | RSS (MiB) | 34.0 [31.0–37.0] | 43.0 [40.0–46.0] | 133.0 [130.0–136.0] |" in table
    assert curves.measured_points(results, curves.ZONES) == [2, 20]
    assert curves.measured_points(results, curves.OUTSTANDING) == []


def test_a_curves_only_run_prints_the_curves_and_none_of_the_empty_headline_tables() -> None:
    text = report.console(_results_with_curves())
    assert "How cost grows: Memory against names cached" in text
    assert "How cost grows: Cache hits against the number of zones" in text
    assert "Cache-miss latency against queries outstanding" not in text  # nothing measured
    assert "Throughput" not in text and "Performance targets" not in text
    md = report.markdown(_results_with_curves())
    assert "## How cost grows: Memory against names cached" in md and curves.NAMES.note in md


def test_the_sidecar_mix_line_is_printed_with_its_figures() -> None:
    results = report.Results(rounds=1)
    for server, cpu in (("splitdns", 4.2), ("unbound-1t", 1.3), ("dnsmasq", 0.9)):
        results.record(server, 0, "mix_cpu", cpu)
        results.record(server, 0, "mix_rss", 30.0)
    text = report.console(results)
    assert "A realistic sidecar load: 1,000 q/s" in text
    assert "| splitdns | 4.2 | 30.0 | – | – | – |" in text


def test_the_chart_draws_a_line_panel_per_curve_figure(tmp_path: Path) -> None:
    # matplotlib is the bench extra's, which `make test` installs too: a skip here, a failure in CI.
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        prerequisites.skip_or_fail("matplotlib is not installed (the bench extra: pip install -e '.[bench]')")
    results = _results_with_curves()
    assert curves.panels(results) == [(curves.NAMES, curves.NAMES.figures[0]),
                                      (curves.ZONES, curves.ZONES.figures[0])]
    png = report.chart(results, tmp_path / "results.png")
    assert png is not None and png.read_bytes().startswith(b"\x89PNG")


def test_the_mix_is_ninety_percent_repeats_ten_percent_new_names_four_percent_search_list(
        tmp_path: Path) -> None:
    warm, queries = mix.write(tmp_path, 5.0, peers.ZONE)
    lines = queries.read_text().splitlines()
    assert len(lines) == 5500  # 1,000 q/s for 5 s, and 10 % to spare
    names = [line.split()[0] for line in lines]
    new = [n for n in names if n.startswith("mix-")]
    search = [n for n in names if n.endswith(f".{peers.NXDOMAIN_SUFFIX}")]
    assert len(new) == len(set(new)) == 550                 # each asked once: misses
    assert len(search) == 220                               # 4 %
    hot = set(names) - set(new) - set(search)
    assert len(hot) == mix.HOT and set(search) <= set(warm.read_text().split())
    assert hot <= set(warm.read_text().split())             # the warm-up makes the rest hits


def test_dnsperf_interval_lines_are_read_in_order() -> None:
    text = ("1796138471.836235: 24965.5\n1796138472.836240: 12.0\n"
            "Statistics:\n  Queries sent:         10\n  Queries completed:    10 (100.00%)\n"
            "  Queries lost:         0 (0.00%)\n")
    assert measure.parse_dnsperf(text).intervals == [24965.5, 12.0]
    assert measure.dnsperf_argv("127.0.0.10", 53, Path("q"), 1, outstanding=1000, interval=1)[-6:] == \
        ["-c", "4", "-q", "1000", "-t", "2", "-S", "1"][-6:]


def test_hit_names_take_every_route_of_the_zones_curve(tmp_path: Path) -> None:
    zones = growth.zone_names(200)
    assert zones[0] == peers.ZONE and zones[-1] == f"z199.{peers.ZONE}" and len(set(zones)) == 200
    names = growth.hit_names(tmp_path / "h.txt", zones).read_text().split("\n")
    assert {n.split(" ")[0].split(".", 1)[1] for n in names if n} == set(zones)


def test_the_event_loop_is_read_from_what_the_server_logged(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text(".:15300\nsplitdns-0.1.0\n[INFO] event loop: uvloop 0.23.0\n")
    assert environment.logged_event_loop(log) == "uvloop 0.23.0"
    log.write_text("splitdns-0.1.0\n")
    assert environment.logged_event_loop(log) is None
    assert environment.logged_event_loop(tmp_path / "missing.log") is None


def test_schedstat_cpu_time_follows_the_cpu_time_the_kernel_accounts() -> None:
    def used() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    before, rusage_before = measure.run_seconds([os.getpid()]), used()
    deadline = time.monotonic() + 30  # a busy machine gives us the CPU slowly
    while used() - rusage_before < 0.1 and time.monotonic() < deadline:
        pass
    spent = used() - rusage_before
    assert spent >= 0.1
    assert 0.8 * spent <= measure.run_seconds([os.getpid()]) - before <= 1.2 * spent + 0.02


def test_miss_cost_runs_the_miss_paths_calls_and_prints_a_figure(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import miss_cost

    assert miss_cost.main(["--misses", "300", "--laps", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("core + codec: ") and "of 2 laps of 300 new names" in out
    micros = float(out.split()[3])
    assert 0 < micros < 10_000
    lap = miss_cost.Lap()
    data, upstream_reply = miss_cost.prepared(1)[0]
    reply = lap.miss(data, upstream_reply)
    assert reply[:2] == data[:2] and reply[3] & 0xF == 0  # the client's ID, NOERROR
    with pytest.raises(SystemExit):  # the same name twice would be a hit, not a miss
        lap.miss(data, upstream_reply)
