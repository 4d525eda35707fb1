"""Measuring the curves of bench/curves.py: each server started fresh for each, as in a round.

- names: one server, filled with names asked once each up to every point in turn; RSS, the
  entries the cache holds (splitdns's own metric), the fill rate on the way and in its last
  second (a cliff when eviction starts would show there, as dnsmasq's does).
- zones and reload: a fresh server per point with that many blocks (splitdns) or forward
  zones (Unbound), all to the same upstream; hits spread over every zone, at full speed;
  then a configuration with one zone more, a signal, and the time to its first answer.
- outstanding: one server, new names at full speed with 10, 100, 1000 queries in flight.
"""

from __future__ import annotations

import contextlib
import re
import signal
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from bench import curves, measure, peers

if TYPE_CHECKING:
    from bench.run import Bench

SETTLE = 1.0
FILL_RATE_FLOOR = 2_000      # names a second a fill may fall to before its time limit cuts it
RELOAD_TIMEOUT = 20.0        # seconds from the signal to the new configuration's first answer
HIT_NAMES = 200              # spread over the zones: one per zone up to 200 zones
OUTSTANDING_NAMES_PER_SECOND = 60_000  # above any server's miss rate here


Step = Callable[["Bench", int, str, tuple[int, ...], set[str]], None]


def run_curves(bench: Bench, round_no: int, selected: tuple[curves.Curve, ...], quick: bool) -> None:
    """Every selected curve for each server that can do its work, failures recorded, not raised."""
    names = {c.name for c in selected}
    for server in curves.SERVERS:
        if server not in bench.opts.servers:
            continue
        candidates: tuple[tuple[curves.Curve, Step], ...] = (
            (curves.NAMES, _names), (curves.OUTSTANDING, _outstanding))
        steps = [(c, fn) for c, fn in candidates if c.name in names]
        if names & {"zones", "reload"}:
            steps.append((curves.ZONES if "zones" in names else curves.RELOAD, _zones_and_reload))
        for c, fn in steps:
            began = time.monotonic()
            try:
                fn(bench, round_no, server, c.points(quick), names)
            except (peers.StartError, measure.DnsperfError, TimeoutError, RuntimeError, OSError) as err:
                bench.results.fail(server, round_no, f"curve {c.name}: {str(err)[:300]}")
                _log(f"  {server}: curve {c.name} FAILED: {err}")
            else:
                _log(f"  {server}: curve {c.name} in {time.monotonic() - began:.0f} s")


def _log(message: str) -> None:
    from bench.run import log

    log(message)


def _upstream(bench: Bench) -> str:
    assert bench.upstream is not None
    return f"{bench.upstream.spec.addr}:{bench.upstream.spec.port}"


def _addr(server: str) -> str:
    return next(addr for name, addr, _ in peers.PEERS if name == server)


@contextlib.contextmanager
def _serving(bench: Bench, spec: peers.Spec) -> Iterator[peers.Process]:
    proc = peers.start(spec, bench.workdir, bench.placement.server)
    bench.running.append(proc)
    try:
        peers.wait_serving(proc, bench.workdir)
        yield proc
    finally:
        proc.stop()
        bench.running.remove(proc)


def _dnsperf(bench: Bench, proc: peers.Process, round_no: int, tag: str, names: Path, seconds: float,
             **kwargs: object) -> measure.Run:
    assert bench.upstream is not None
    argv = measure.dnsperf_argv(proc.spec.addr, proc.spec.port, names, seconds, **kwargs)  # type: ignore[arg-type]
    logfile = bench.workdir / "logs" / f"r{round_no + 1}-{proc.spec.name}-curve-{tag}.txt"
    logfile.parent.mkdir(exist_ok=True)
    run = measure.run_dnsperf(argv, bench.placement.load, proc.pids(), bench.upstream.pids(), logfile)
    if not proc.alive():
        raise RuntimeError(f"{proc.spec.name} exited during the {tag} run")
    return run


def _record(bench: Bench, server: str, round_no: int, c: curves.Curve, figure_key: str, x: int,
            value: float | None) -> None:
    figure = next(f for f in c.figures if f.key == figure_key)
    bench.results.record(server, round_no, curves.key(c, figure, x), value)


# --- names -------------------------------------------------------------------------------------


def _names(bench: Bench, round_no: int, server: str, points: tuple[int, ...], _: set[str]) -> None:
    addr, port, top = _addr(server), bench.opts.port, max(points)
    if server == "splitdns":
        # Room for every name by count: what bounds the cache is `limits { cache_memory }`, at its default.
        metrics_port = port + 1
        # (capacities are rounded down to a multiple of 256: one more block keeps count from binding)
        spec = peers.splitdns(bench.workdir, addr, port, _upstream(bench), cache=top + 256,
                              extra=f"\n    prometheus {addr}:{metrics_port}")
    else:
        spec, metrics_port = peers.unbound(bench.workdir, addr, port, _upstream(bench)), 0
    queries = bench.workdir / "queries"
    with _serving(bench, spec) as proc:
        done = 0
        for x in points:
            names = measure.write_names(queries / f"names-{x}.txt", f"n{x}-", x - done)
            limit = max(10.0, (x - done) / FILL_RATE_FLOOR)
            run = _dnsperf(bench, proc, round_no, f"names-{x}", names, limit, once=True, interval=1)
            _record(bench, server, round_no, curves.NAMES, "fill_qps", x, run.result.qps)
            tail = run.result.intervals[-2:-1] or run.result.intervals[-1:]  # the last whole second
            _record(bench, server, round_no, curves.NAMES, "fill_tail_qps", x, tail[0] if tail else None)
            if run.result.completed < 0.99 * (x - done):  # a memory figure for fewer names would flatter
                raise RuntimeError(f"the fill to {x:,} names answered {run.result.completed:,} of "
                                   f"{x - done:,} in {limit:.0f} s: no figures from this point on")
            done = x
            time.sleep(SETTLE)
            _record(bench, server, round_no, curves.NAMES, "rss", x, measure.memory_mib(proc.pids())[0])
            if metrics_port:
                _record(bench, server, round_no, curves.NAMES, "entries", x,
                        cache_entries(addr, metrics_port))


_ENTRIES = re.compile(r'^coredns_cache_entries\{[^}]*type="(?:success|denial)"[^}]*\} (\S+)$', re.M)


def cache_entries(addr: str, port: int) -> float | None:
    """Entries splitdns's caches hold, from its own /metrics (loopback only)."""
    peers.assert_loopback(addr)
    try:
        with urllib.request.urlopen(f"http://{addr}:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
    except OSError:
        return None
    found = _ENTRIES.findall(text)
    return sum(float(v) for v in found) if found else None


# --- outstanding -------------------------------------------------------------------------------


def _outstanding(bench: Bench, round_no: int, server: str, points: tuple[int, ...], _: set[str]) -> None:
    seconds = bench.opts.seconds
    queries = bench.workdir / "queries"
    factory = next(f for name, _, f in peers.PEERS if name == server)
    with _serving(bench, factory(bench.workdir, _addr(server), bench.opts.port, _upstream(bench))) as proc:
        for x in points:
            names = measure.write_names(queries / f"outstanding-{x}.txt", f"o{x}-",
                                        int(OUTSTANDING_NAMES_PER_SECOND * seconds))
            run = _dnsperf(bench, proc, round_no, f"outstanding-{x}", names, seconds, once=True,
                           outstanding=x, verbose=True)
            res = run.result
            for figure, value in (("p50", res.percentile(50)), ("p99", res.percentile(99)),
                                  ("qps", res.qps), ("noerror", res.noerror_pct)):
                _record(bench, server, round_no, curves.OUTSTANDING, figure, x, value)


# --- zones and reload --------------------------------------------------------------------------


def zone_names(blocks: int) -> tuple[str, ...]:
    """The zone of the wildcard and blocks - 1 zones under it: z1.bench.test, z2.bench.test, ..."""
    return (peers.ZONE, *(f"z{i}.{peers.ZONE}" for i in range(1, blocks)))


def hit_names(path: Path, zones: tuple[str, ...]) -> Path:
    """HIT_NAMES names, name i in zone i mod len(zones): every route is taken."""
    path.write_text("".join(f"h{i}.{zones[i % len(zones)]} A\n" for i in range(HIT_NAMES)))
    return path


def _spec(bench: Bench, server: str, blocks: int, reloaded: bool = False) -> peers.Spec:
    zones, addr, port = zone_names(blocks), _addr(server), bench.opts.port
    if server == "splitdns":
        return peers.splitdns(bench.workdir, addr, port, _upstream(bench),
                              zones=(*zones, peers.RELOAD_ZONE) if reloaded else zones,
                              extra="\n    reload 1h")  # reloads only on our SIGUSR1
    return peers.unbound(bench.workdir, addr, port, _upstream(bench),
                         zones=(*zones, peers.RELOAD_ZONE) if reloaded else zones,
                         refused=() if reloaded else (peers.RELOAD_ZONE,))


def _zones_and_reload(bench: Bench, round_no: int, server: str, points: tuple[int, ...],
                      names: set[str]) -> None:
    queries = bench.workdir / "queries"
    for blocks in points:  # zones and reload have the same points: one start serves both
        spec = _spec(bench, server, blocks)
        with _serving(bench, spec) as proc:
            time.sleep(SETTLE)
            rss = measure.memory_mib(proc.pids())[0]
            if "zones" in names:
                hits = hit_names(queries / f"zones-{blocks}.txt", zone_names(blocks))
                _dnsperf(bench, proc, round_no, f"zones-{blocks}-warm", hits, 10.0, once=True)
                run = _dnsperf(bench, proc, round_no, f"zones-{blocks}", hits, bench.opts.seconds)
                _record(bench, server, round_no, curves.ZONES, "hit_qcpu", blocks, run.q_per_cpu_s)
                _record(bench, server, round_no, curves.ZONES, "hit_qps", blocks, run.result.qps)
            if "reload" in names:
                _record(bench, server, round_no, curves.RELOAD, "rss_start", blocks, rss)
                took = reload(bench.workdir, proc, _spec(bench, server, blocks, reloaded=True))
                _record(bench, server, round_no, curves.RELOAD, "reload_ms", blocks, took * 1000)
                time.sleep(SETTLE)
                _record(bench, server, round_no, curves.RELOAD, "rss_reload", blocks,
                        measure.memory_mib(proc.pids())[0])


def reload(workdir: Path, proc: peers.Process, new: peers.Spec) -> float:
    """Write the new configuration, signal the server, and time its first answer from it: a
    name in a zone only the new configuration routes (REFUSED before)."""
    directory = workdir / proc.spec.name
    for name, text in new.files.items():
        (directory / name).write_text(text)
    probe = f"x.{peers.RELOAD_ZONE}"
    if measure.check_answers(proc.spec.addr, proc.spec.port, [probe]) == []:
        raise RuntimeError(f"{probe} was answered before the reload: the curve would time nothing")
    t0 = time.monotonic()
    proc.popen.send_signal(signal.SIGUSR1 if proc.spec.name == "splitdns" else signal.SIGHUP)
    return measure.first_answer(proc.spec.addr, proc.spec.port, probe, t0, proc.alive, RELOAD_TIMEOUT)
