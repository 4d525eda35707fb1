"""/metrics carries every state an alert or a panel needs, with bounded labels: read from a
real server in process (tests/support/inprocess.py), an upstream and a tunnel failing under it.

The end-to-end proof (a real Prometheus scraping a real `splitdns serve`, every panel query
and alert expression evaluated) is tests/test_monitoring_e2e.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import dns.message
import dns.rcode

from splitdns.core import metrics as core_metrics
from tests.helpers import query, reply
from tests.support.hostile import metric
from tests.support.inprocess import FakeUpstream, http, run, scrape, serving
from tests.support.processes import free_port


def _answers(dead: list[bool]) -> object:
    def handle(q: dns.message.Message) -> dns.message.Message | None:
        if dead[0]:
            return None
        name = q.question[0].name.to_text()
        if name.startswith("nx"):
            return reply(q, rcode=dns.rcode.NXDOMAIN,
                         authority=("example.net. 300 IN SOA ns.example.net. h.example.net. 1 2 3 4 300",))
        return reply(q, f"{name} 300 IN A 192.0.2.7")
    return handle


def corefile(mport: int, rport: int, target: str, state: Path) -> str:
    return f""". {{
    cache 30
    prometheus 127.0.0.1:{mport}
    ready 127.0.0.1:{rport}
    forward . {target} {{
        max_fails 1
        health_check 0.2s
        read_timeout 300ms
    }}
}}
svc.example.org {{
    openvpn {{
        state {state}
    }}
}}
"""


def write_state(path: Path, status: str, reason: str, servers: list[tuple[str, int]]) -> None:
    path.write_text(json.dumps({"status": status, "reason": reason, "servers": [list(s) for s in servers],
                                "domains": [], "search": [], "device": "lo"}), encoding="utf-8")


def series(values: dict[str, float], name: str) -> list[str]:
    return sorted(k for k in values if k.partition("{")[0] == name)


async def _until(what: str, check: object, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if await check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what}: not within {seconds} s")


def test_the_signals_of_an_upstream_and_a_tunnel_outage(tmp_path: Path) -> None:
    mport, rport = free_port("127.0.0.1"), free_port("127.0.0.1")
    state = tmp_path / "openvpn.json"
    dead = [False]
    seen: dict[str, dict[str, float]] = {}

    async def scenario() -> None:
        async with FakeUpstream(_answers(dead)) as up, FakeUpstream(_answers([False]), "127.0.0.22") as vpn, \
                serving(corefile(mport, rport, up.target, state), clock=time.monotonic, runtime=True) as s:
            write_state(state, "up", "up script ran", [(vpn.addr, vpn.port)])
            await _until("the tunnel up", lambda: _rcode(s, "db.svc.example.org", dns.rcode.NOERROR))
            for name in ("www.example.net", "www.example.net", "nx.example.net", "nx.example.net"):
                await s.ask(query(name))
            await s.ask(query("www.example.net"), tcp=True)
            await _until("the tunnel zone ready", lambda: _status(rport, "/ready?zone=svc.example.org", 200))
            seen["up"] = await scrape(mport)
            write_state(state, "down", "down script ran (ping-restart)", [])
            await _until("the tunnel down", lambda: _rcode(s, "x.svc.example.org", dns.rcode.SERVFAIL))
            await s.ask(query("y.svc.example.org"))
            dead[0] = True
            for i in range(3):  # two timeouts mark the one upstream down; then SERVFAIL at once
                await s.ask(query(f"gone{i}.example.net"), timeout=2)
            seen["down"] = await scrape(mport)
            seen["ready"] = {"pod": float((await http(rport, "/ready"))[0]),
                             "zone": float((await http(rport, "/ready?zone=.."))[0])}

    run(scenario)
    up, down = seen["up"], seen["down"]
    # The process, as CoreDNS's dashboards read it.
    assert metric(up, "process_start_time_seconds") > 0 and metric(up, "process_resident_memory_bytes") > 0
    assert metric(up, "process_open_fds") > 0
    # Sizes: every reply counted once, by protocol; the query sizes are what was sent.
    answered = metric(up, "coredns_dns_responses_total", zone=".")
    assert metric(up, "coredns_dns_response_size_bytes_count", zone=".") == answered == 5
    assert metric(up, "coredns_dns_request_size_bytes_count", zone=".", proto="tcp") == 1
    sent = sum(len(query(n).to_wire()) for n in ("www.example.net",) * 3 + ("nx.example.net",) * 2)
    assert metric(up, "coredns_dns_request_size_bytes_sum", zone=".") == sent
    # Cache hits by type: the repeated NXDOMAIN is a denial hit; the repeats of www success.
    assert metric(up, "coredns_cache_hits_total", type="denial") == 1
    assert metric(up, "coredns_cache_hits_total", type="success") == 2
    # Who gave each answer: the cache (the UDP repeat of each) or the forward.
    assert metric(up, "coredns_dns_responses_total", zone=".", plugin="cache") == 2
    assert metric(up, "coredns_dns_responses_total", zone=".", plugin="forward") == 3
    # Which upstream answered, per zone.
    assert metric(up, "coredns_proxy_request_duration_seconds_count", zone="svc.example.org.",
                  rcode="NOERROR") >= 1
    # The tunnel, up, then down with a bounded reason, and since when.
    assert metric(up, "splitdns_tunnel_up", zone="svc.example.org.", kind="openvpn") == 1
    assert metric(up, "splitdns_tunnel_info", state="up", reason="connected") == 1
    assert metric(down, "splitdns_tunnel_up", zone="svc.example.org.") == 0
    assert metric(down, "splitdns_tunnel_info", state="down", reason="down") == 1
    assert series(down, "splitdns_tunnel_info") == [
        'splitdns_tunnel_info{kind="openvpn",reason="down",state="down",zone="svc.example.org."}']
    since_up = metric(up, "splitdns_tunnel_last_change_timestamp_seconds")
    since_down = metric(down, "splitdns_tunnel_last_change_timestamp_seconds")
    assert time.time() - 60 < since_up < since_down <= time.time()
    # Failing fast: the tunnel zone's SERVFAILs, and the catch-all's once its upstream is down.
    assert metric(down, "splitdns_fail_fast_answers_total", zone="svc.example.org.",
                  reason="tunnel_down") >= 2
    assert metric(down, "splitdns_fail_fast_answers_total", zone=".", reason="upstreams_down") >= 1
    assert metric(up, "splitdns_fail_fast_answers_total") == 0
    assert metric(down, "splitdns_upstream_healthy", zone=".") == 0
    # Readiness, live per zone as /ready?zone= says, while the pod-level /ready holds.
    assert metric(up, "splitdns_zone_ready", zone=".") == 1
    assert metric(up, "splitdns_zone_ready", zone="svc.example.org.") == 1
    assert metric(down, "splitdns_zone_ready", zone=".") == 0 and seen["ready"]["zone"] == 503
    assert metric(down, "splitdns_zone_ready", zone="svc.example.org.") == 0
    assert metric(down, "splitdns_ready") == 1 and seen["ready"]["pod"] == 200


def test_health_probe_failures_are_counted_per_upstream_and_zone() -> None:
    mport = free_port("127.0.0.1")

    async def scenario() -> dict[str, float]:
        async with FakeUpstream(lambda q: None) as up, serving(f""". {{
                prometheus 127.0.0.1:{mport}
                forward . {up.target} {{
                    health_check 0.1s
                    read_timeout 200ms
                }}
            }}""", clock=time.monotonic, runtime=True) as s:
            await s.ask(query("a.example.net"), timeout=3)
            await asyncio.sleep(0.8)
            return await scrape(mport)

    values = run(scenario)
    failures = series(values, "coredns_forward_healthcheck_failures_total")
    assert len(failures) == 1 and 'zone="."' in failures[0] and 'to="127.0.0.21:' in failures[0]
    assert metric(values, "coredns_forward_healthcheck_failures_total") >= 2


async def _status(port: int, path: str, status: int) -> bool:
    return (await http(port, path))[0] == status


async def _rcode(s: object, name: str, rcode: int) -> bool:
    got = await s.ask(query(name), timeout=1)  # type: ignore[attr-defined]
    return got is not None and got.rcode() == rcode


def test_a_tunnel_reason_is_one_of_a_few_labels() -> None:
    cases = {
        ("up", True, "up script ran"): "connected",
        ("up", False, "connected"): "no_dns_pushed",
        ("unknown", False, "no word from OpenVPN yet"): "unknown",
        ("unknown", False, "no state file at /run/x yet (is the hook set?)"): "no_state",
        ("down", False, "RECONNECTING: ping-restart"): "reconnecting",
        ("down", False, "EXITING: SIGTERM"): "exiting",
        ("down", False, "WAIT"): "connecting",
        ("down", False, "cannot reach OpenVPN's management interface at 127.0.0.1:7505"): "unreachable",
        ("down", False, "down script ran (ping-restart)"): "down",
        ("down", False, "the state file is not one splitdns openvpn-hook wrote"): "no_state",
    }
    got = {case: core_metrics.tunnel_reason(*case) for case in cases}
    assert got == cases
    assert set(got.values()) <= set(core_metrics.TUNNEL_REASONS)


def test_a_wireguard_zone_is_a_tunnel_zone_of_its_kind(tmp_path: Path) -> None:
    """The tunnel series are per tunnel zone whatever the tunnel: a WireGuard zone (its DNS from
    the wg-quick config alone, `lo` standing for the interface) reads `kind="wireguard"`."""
    mport = free_port("127.0.0.1")
    conf = tmp_path / "wg0.conf"
    conf.write_text("[Interface]\nDNS = 127.0.0.22\n", encoding="utf-8")

    async def scenario() -> dict[str, float]:
        async with FakeUpstream(_answers([False])) as up, serving(f""". {{
                prometheus 127.0.0.1:{mport}
                forward . {up.target}
            }}
            svc.example.org {{
                wireguard {{
                    config {conf}
                    interface lo
                }}
            }}""", clock=time.monotonic, runtime=True) as s:
            await _until("the tunnel up", lambda: _metric_is(mport, "splitdns_tunnel_up", 1.0))
            await s.ask(query("www.example.net"))
            return await scrape(mport)

    values = run(scenario)
    assert series(values, "splitdns_tunnel_info") == [
        'splitdns_tunnel_info{kind="wireguard",reason="connected",state="up",zone="svc.example.org."}']
    assert metric(values, "splitdns_tunnel_last_change_timestamp_seconds", kind="wireguard") > 0


async def _metric_is(port: int, name: str, value: float) -> bool:
    return metric(await scrape(port), name) == value
