"""A server's life, in process (tests/support/inprocess.py): `Runtime` around the real `Server`
on 127.0.0.1 with fake upstreams on 127.0.0.x. Live readiness, reloads, loop detection and
the tunnel's pushed servers and domains. Each behaviour also has one end-to-end test with a
real `splitdns serve` and real `dig` (named in each docstring); the cases beyond it live here."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import dns.message
import dns.rcode
import pytest

from splitdns.commands import openvpn_hook
from splitdns.shell import lifecycle
from tests.helpers import query, reply
from tests.support.hostile import figure, metric, ms
from tests.support.inprocess import (
    Answer,
    FakeClock,
    FakeUpstream,
    ask_wire,
    http,
    run,
    scrape,
    serving,
)
from tests.support.processes import free_port


def answering(address: str, ttl: int = 60) -> Answer:
    return lambda q: reply(q, f"{q.question[0].name} {ttl} IN A {address}")


def rdata(msg: dns.message.Message | None) -> list[str]:
    assert msg is not None, "no reply"
    return [rd.to_text() for rrset in msg.answer for rd in rrset]


def ede(msg: dns.message.Message | None) -> str:
    assert msg is not None, "no reply"
    return " ".join(o.text or "" for o in msg.options if o.otype == 15)


# --- live readiness (end to end: test_operations.py, test_runtime.py) ----------------------------

def test_ready_for_a_zone_follows_its_upstream_without_any_traffic() -> None:
    """`/ready?zone=Z` probes Z's upstreams that were silent for READY_HEARD_WITHIN: it goes
    503 when the upstream dies and 200 when it is back, with no client query at all. The fake
    clock makes the upstream silent at once; the probes themselves run on real time."""
    clock, ready, dead = FakeClock(), free_port("127.0.0.1"), [False]
    tunnel_answer = answering("192.0.2.7")

    def tunnel(q: dns.message.Message) -> dns.message.Message | None:
        return None if dead[0] else tunnel_answer(q)

    async def poll(status: int) -> tuple[int, str]:
        got = (0, "")
        for _ in range(100):  # bounded: 100 polls of 50 ms and their probes
            clock.advance(lifecycle.READY_HEARD_WITHIN + 0.1)
            got = await http(ready, "/ready?zone=svc.acme.internal")
            if got[0] == status:
                return got
            await asyncio.sleep(0.05)
        raise AssertionError(f"/ready?zone never answered {status}: {got}")

    async def scenario() -> tuple[str, list[str]]:
        async with FakeUpstream(tunnel, "127.0.0.22") as up, \
                serving(f""". {{
                    ready 127.0.0.1:{ready}
                    forward . 127.0.0.23:9
                }}
                svc.acme.internal {{
                    forward . {up.target} {{
                        read_timeout 300ms
                    }}
                }}""", clock=clock, runtime=True):
            await poll(200)
            dead[0] = True
            _, body = await poll(503)
            dead[0] = False
            await poll(200)
            return body, up.names()

    body, asked = run(scenario)
    assert "every upstream" in body
    assert not [n for n in asked if n not in (".", "svc.acme.internal.")]  # probes only


# --- reload (end to end: test_operations.py, a ConfigMap swap and SIGUSR1) -----------------------

def test_a_broken_corefile_is_reported_once_per_content_and_counted(tmp_path: Path) -> None:
    """What every poll of `reload` and every SIGUSR1 call: a Corefile that does not load is
    logged once and counted once in coredns_reload_failed_total until its content changes."""
    path, mport = tmp_path / "Corefile", free_port("127.0.0.1")
    good = f"example.org {{\n reload 2s 1s\n prometheus 127.0.0.1:{mport}\n forward . 127.0.0.23:9\n}}\n"
    path.write_text(good)

    async def scenario() -> tuple[list[bool], float, int, float, str]:
        async with serving(good, runtime=True, path=str(path)) as s:
            assert s.runtime is not None
            path.write_text(good.replace("\n}\n", "\n"))  # the closing brace is missing
            results = [await s.runtime.reload() for _ in range(3)]
            first = metric(await scrape(mport), "coredns_reload_failed_total")
            reported = s.log().count("could not be loaded")
            path.write_text(good.replace("forward", "forwrd"))  # broken another way
            results += [await s.runtime.reload() for _ in range(2)]
            return results, first, reported, metric(await scrape(mport), "coredns_reload_failed_total"), \
                s.log()

    results, first, reported, second, log = run(scenario)
    assert results == [False] * 5
    assert (reported, first) == (1, 1.0)
    assert (log.count("could not be loaded"), second) == (2, 2.0)
    assert "forwrd" in log and "Corefile:4" in log


def test_a_reload_that_changes_the_upstreams_drops_the_cached_answers(tmp_path: Path) -> None:
    """A reload whose cache settings and upstreams are the same keeps the cache; a new
    upstream means asking anew, not serving the old upstream's cached answer."""
    path = tmp_path / "Corefile"
    text = "example.org {{\n reload 2s 1s\n cache 300\n {extra}\n forward . {target}\n}}\n"

    async def scenario() -> tuple[list[list[str]], list[str], list[str], list[bool]]:
        async with FakeUpstream(answering("192.0.2.1", 300), "127.0.0.21") as up1, \
                FakeUpstream(answering("192.0.2.2", 300), "127.0.0.22") as up2:
            path.write_text(text.format(extra="", target=up1.target))
            async with serving(path.read_text(), runtime=True, path=str(path)) as s:
                assert s.runtime is not None
                seen, reloaded = [rdata(await s.ask(query("db.example.org")))], []
                path.write_text(text.format(extra="errors", target=up1.target))  # cache unaffected
                reloaded.append(await s.runtime.reload())
                seen.append(rdata(await s.ask(query("db.example.org"))))
                path.write_text(text.format(extra="errors", target=up2.target))
                reloaded.append(await s.runtime.reload())
                seen.append(rdata(await s.ask(query("db.example.org"))))
                return seen, up1.names(), up2.names(), reloaded

    seen, asked1, asked2, reloaded = run(scenario)
    assert reloaded == [True, True]
    assert seen == [["192.0.2.1"], ["192.0.2.1"], ["192.0.2.2"]]
    assert asked1 == ["db.example.org."]  # the first reload kept the cache
    assert asked2 == ["db.example.org."]  # the second asked the new upstream


# --- loop detection (end to end: test_operations.py, through a real dnsmasq) ----------------------

LOOP_COREFILE = """. {{
    forward . 127.0.0.30:9
}}
corp.example {{
    errors
    {guard}
    forward . {relay} {{
        {options}
    }}
}}"""


@pytest.mark.parametrize("guard", ["loop", ""])
def test_h4_a_relay_back_to_the_server_is_a_loop_caught_or_ended(guard: str) -> None:
    """Hostile catalogue H4: the zone's upstream relays every query back to this server. With
    `loop` the start-up probe finds it with a handful of packets, nothing crashes, and the
    zone answers SERVFAIL at once with the reason. Without it, a looping client query is ended
    by the merging of identical queries in flight: SERVFAIL, with a bounded number of packets."""
    port = free_port("127.0.0.1")
    relayed = [0]

    async def relay(q: dns.message.Message) -> bytes | None:
        relayed[0] += 1
        if relayed[0] > 1000:  # bounded, whatever the server does
            return None
        return await ask_wire(port, q.to_wire(), timeout=6)

    async def scenario() -> tuple[dns.message.Message | None, float, int, str, float]:
        async with FakeUpstream(relay, "127.0.0.31") as up:
            options = "read_timeout 500ms" if not guard else ""
            text = LOOP_COREFILE.format(guard=guard, relay=up.target, options=options)
            async with serving(text, runtime=True, clock=time.monotonic, port=port) as s:
                began = time.monotonic()
                if guard:
                    for _ in range(500):  # bounded: 5 s
                        if "loop detected" in s.log():
                            break
                        await asyncio.sleep(0.01)
                detected = time.monotonic() - began
                packets = relayed[0]
                began = time.monotonic()
                out = await s.ask(query("api.corp.example."), timeout=8)
                return out, time.monotonic() - began, packets, s.log(), detected

    out, elapsed, packets, log, detected = run(scenario)
    assert out is not None and out.rcode() == dns.rcode.SERVFAIL
    if guard:
        figure("H4", f"in process: loop through a relay detected {detected:.2f} s after start with "
                     f"{packets} relayed queries; then the zone answers SERVFAIL in {ms(elapsed)}")
        assert "loop detected" in log and packets < 10
        assert "forwarding loop detected for zone corp.example." in ede(out)
        assert elapsed < 0.5  # at once, not after a forward attempt's read timeout
    else:
        figure("H4", f"in process: without `loop` a looping query costs {relayed[0]} relayed "
                     f"queries and ends SERVFAIL after {elapsed:.1f} s")
        assert relayed[0] < 10


# --- the tunnel's pushed servers and domains (end to end: test_tunnel_serve.py) --------------------

def tunnel_corefile(cluster: str, state: Path, domains: bool = False) -> str:
    return f""". {{
    forward . {cluster}
}}
svc.acme.internal {{
    cache 30
    openvpn {{
        state {state}
        {"domains" if domains else ""}
    }}
}}"""


def hook(state: Path, script_type: str, **env: str) -> None:
    """What OpenVPN's --up/--down runs (`splitdns openvpn-hook`), called in process."""
    # `dev`: OpenVPN names its interface; the servers here are on loopback, so lo.
    assert openvpn_hook.run(str(state), {"script_type": script_type, "dev": "lo", **env}) == 0


def test_a_pushed_server_that_is_ourselves_is_caught(tmp_path: Path) -> None:
    state, port = tmp_path / "openvpn.json", free_port("127.0.0.1")

    async def scenario() -> tuple[dns.message.Message | None, dns.message.Message | None, str]:
        async with FakeUpstream(answering("192.168.240.10"), "127.0.0.21") as cluster, \
                serving(tunnel_corefile(cluster.target, state), runtime=True, port=port) as s:
            hook(state, "up", dns_server_1_address_1="127.0.0.1", dns_server_1_port_1=str(port))
            out = None
            for _ in range(100):  # the state file is polled every 200 ms; bounded: 5 s
                out = await s.ask(query("db.svc.acme.internal."))
                if "forwarding loop" in ede(out):
                    break
                await asyncio.sleep(0.05)
            return out, await s.ask(query("kubernetes.default.svc.cluster.local.")), s.log()

    looped, other, log = run(scenario)
    assert looped is not None and looped.rcode() == dns.rcode.SERVFAIL
    assert "which is this server itself" in ede(looped)
    assert f"pushed 127.0.0.1:{port}" in log
    assert rdata(other) == ["192.168.240.10"]  # the other zone is untouched


def test_pushed_domains_are_routed_to_the_tunnel_zone(tmp_path: Path) -> None:
    """`openvpn { domains }`: the block also owns what the VPN server says it resolves; the
    Corefile's own zones keep their owners."""
    state = tmp_path / "openvpn.json"

    async def scenario() -> tuple[list[str], list[str], list[str], list[str]]:
        async with FakeUpstream(answering("192.168.240.10"), "127.0.0.21") as cluster, \
                FakeUpstream(answering("192.168.240.30"), "127.0.0.22") as vpn, \
                serving(tunnel_corefile(cluster.target, state, domains=True), runtime=True) as s:
            before = rdata(await s.ask(query("api.corp.example.")))
            hook(state, "up", dns_server_1_address_1=vpn.addr, dns_server_1_port_1=str(vpn.port),
                 dns_server_1_resolve_domain_1="corp.example")
            routed: list[str] = []
            for _ in range(100):  # bounded: 5 s
                routed = rdata(await s.ask(query("www.corp.example.")))
                if routed == ["192.168.240.30"]:
                    break
                await asyncio.sleep(0.05)
            other = rdata(await s.ask(query("www.example.com.")))
            return before, routed, other, vpn.names()

    before, routed, other, vpn_asked = run(scenario)
    assert before == ["192.168.240.10"]  # the catch-all, before the push
    assert routed == ["192.168.240.30"] and vpn_asked[-1] == "www.corp.example."
    assert other == ["192.168.240.10"]


# --- endpoints during an outage (end to end: test_operations.py, test_runtime.py) ---------------

def test_j1_during_an_outage_health_and_ready_stay_200_and_the_zone_goes_503() -> None:
    """Hostile catalogue J1: every upstream blackholed while clients keep asking. /health stays
    200 and quick, /ready stays 200 (the documented rule: an upstream outage does not take the
    pod out of its Services), /ready?zone=corp.example ends 503, every upstream is marked down."""
    health, ready, mport = (free_port("127.0.0.1") for _ in range(3))
    dead = [False]
    answer = answering("192.0.2.1")

    def handle(q: dns.message.Message) -> dns.message.Message | None:
        return None if dead[0] else answer(q)

    # Marked down after two failures in a row: a query's two 300 ms attempts.
    quick = "read_timeout 300ms\n        max_fails 1"

    async def scenario() -> tuple[list[int], float, list[int], list[int], list[float]]:
        async with FakeUpstream(handle, "127.0.0.41") as any_, \
                FakeUpstream(handle, "127.0.0.42") as tunnel, \
                FakeUpstream(handle, "127.0.0.43") as cluster, \
                serving(f""". {{
                    health 127.0.0.1:{health}
                    ready 127.0.0.1:{ready}
                    prometheus 127.0.0.1:{mport}
                    forward . {any_.target} {{
                        {quick}
                    }}
                }}
                corp.example {{
                    forward . {tunnel.target} {{
                        {quick}
                    }}
                }}
                cluster.local {{
                    forward . {cluster.target} {{
                        {quick}
                    }}
                }}""", clock=time.monotonic, runtime=True) as s:
            for _ in range(100):  # bounded: 5 s
                if (await http(ready, "/ready"))[0] == 200:
                    break
                await asyncio.sleep(0.05)
            dead[0] = True
            healths, readies, zone, slowest, asking = [], [], [], 0.0, []
            end = time.monotonic() + 2
            for i in range(100):  # bounded: 2 s of polls 100 ms apart
                if time.monotonic() > end:
                    break
                began = time.monotonic()
                healths.append((await http(health, "/health"))[0])
                slowest = max(slowest, time.monotonic() - began)
                readies.append((await http(ready, "/ready"))[0])
                zone.append((await http(ready, "/ready?zone=corp.example"))[0])
                asking += [asyncio.ensure_future(s.ask(query(f"j{i}.{z}"), timeout=1))
                           for z in ("public.test.", "corp.example.", "svc.cluster.local.")]
                await asyncio.sleep(0.1)
            await asyncio.gather(*asking)
            values = await scrape(mport)
            down = [metric(values, "splitdns_upstream_healthy", to=up.target)
                    for up in (any_, tunnel, cluster)]
            return healths, slowest, readies, zone, down

    healths, slowest, readies, zone, down = run(scenario)
    figure("J1", f"in process: all upstreams blackholed for 2 s: /health {sorted(set(healths))} over "
                 f"{len(healths)} polls (slowest {ms(slowest)}), /ready {sorted(set(readies))}, "
                 f"/ready?zone=corp.example ends {zone[-1]}; splitdns_upstream_healthy {sorted(set(down))}")
    assert set(healths) == {200} and slowest < 0.5
    assert set(readies) == {200}
    assert zone[-1] == 503
    assert down == [0.0, 0.0, 0.0]
