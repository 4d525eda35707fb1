"""The asyncio shell's per-query behaviour, in process (tests/support/inprocess.py): the real
`Server` on 127.0.0.1, fake upstreams on 127.0.0.x, a fake clock for TTLs, stale windows and
prefetch. Each behaviour here also has one end-to-end test with a real `splitdns serve` and
real `dig` (named in each docstring); the cases beyond that one live here."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rrset
import pytest

from splitdns import config
from tests.helpers import query, reply
from tests.support.hostile import figure, metric, ms, percentile
from tests.support.inprocess import Answer, FakeClock, FakeUpstream, Handle, ask, run, scrape, serving
from tests.support.processes import free_port

TTL = 4  # the upstream's TTL in the prefetch tests


def answering(address: str, ttl: int = 60, asked_at: list[float] | None = None,
              clock: Callable[[], float] | None = None) -> Answer:
    """An upstream that answers every name with one A record; it notes when it was asked."""
    def handle(q: dns.message.Message) -> dns.message.Message:
        if asked_at is not None and clock is not None:
            asked_at.append(clock())
        return reply(q, f"{q.question[0].name} {ttl} IN A {address}")
    return handle


def rdata(msg: dns.message.Message | None) -> list[str]:
    assert msg is not None, "no reply"
    return [rd.to_text() for rrset in msg.answer for rd in rrset]


def ede(msg: dns.message.Message | None) -> str:
    assert msg is not None, "no reply"
    return " ".join(o.text or "" for o in msg.options if o.otype == 15)


async def until(what: str, check: Callable[[], bool], timeout: float = 3.0) -> None:
    """Wait (in steps of 5 ms, at most `timeout`) for work the server does in the background."""
    for _ in range(int(timeout / 0.005) + 1):
        if check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{what}: not within {timeout} s")


# --- prefetch (end to end: test_corefile_compat_serve.py, in a rewriting block) -------------------

def prefetch_corefile(mport: int, target: str, prefetch: str) -> str:
    return f""". {{
        prometheus 127.0.0.1:{mport}
        cache {{
            success 1024 3600 1
            {prefetch}
        }}
        forward . {target}
    }}"""


def test_prefetch_asks_the_upstream_again_before_expiry_and_clients_never_miss() -> None:
    clock, asked_at, mport = FakeClock(), list[float](), free_port("127.0.0.1")

    def asked_after(seen: int) -> Callable[[], bool]:
        return lambda: len(asked_at) > seen

    async def scenario() -> tuple[list[dns.message.Message | None], dict[str, float]]:
        async with FakeUpstream(answering("192.0.2.80", TTL, asked_at, clock)) as up, \
                serving(prefetch_corefile(mport, up.target, "prefetch 2 10s 50%"), clock=clock,
                        runtime=True) as s:
            answers = []
            for _ in range(15 * TTL):  # 3 TTLs of the fake clock, a lookup every 200 ms
                answers.append(await s.ask(query("hot.example")))
                if clock.now - asked_at[-1] > TTL / 2 + 0.1:
                    # Due (50 % of the TTL left) and not seen yet: the prefetch runs in the
                    # background after the reply; wait for it to reach the upstream.
                    await until("the prefetch", asked_after(len(asked_at)))
                clock.advance(0.2)
            return answers, await scrape(mport)

    answers, values = run(scenario)
    assert all(rdata(a) == ["192.0.2.80"] for a in answers), answers
    # Asked again while the entry still had time left: each gap between two asks is under the TTL.
    gaps = [b - a for a, b in itertools.pairwise(asked_at)]
    assert len(asked_at) >= 3 and all(gap < TTL for gap in gaps), gaps
    # Clients never saw a miss: one miss in all (the first lookup), every other answer a hit.
    assert metric(values, "coredns_cache_misses_total") == 1
    assert metric(values, "coredns_cache_hits_total") == len(answers) - 1
    assert metric(values, "coredns_cache_prefetch_total") == len(asked_at) - 1


def test_without_prefetch_the_same_clients_see_a_miss_each_ttl() -> None:
    """The control: the same traffic without `prefetch` misses once per expiry."""
    clock, asked_at, mport = FakeClock(), list[float](), free_port("127.0.0.1")

    async def scenario() -> tuple[list[dns.message.Message | None], dict[str, float]]:
        async with FakeUpstream(answering("192.0.2.80", TTL, asked_at, clock)) as up, \
                serving(prefetch_corefile(mport, up.target, ""), clock=clock, runtime=True) as s:
            answers = []
            for _ in range(5 * (2 * TTL + 1)):
                answers.append(await s.ask(query("hot.example")))
                clock.advance(0.2)
            return answers, await scrape(mport)

    answers, values = run(scenario)
    assert all(rdata(a) == ["192.0.2.80"] for a in answers)
    assert metric(values, "coredns_cache_misses_total") == len(asked_at) == 3  # at 0, 4 and 8 s
    assert [round(t - asked_at[0], 1) for t in asked_at] == [0, TTL, 2 * TTL]


# --- serve-stale (end to end: test_serve.py, verify mode) ---------------------------------------

def test_stale_answers_come_at_once_for_the_window_with_one_refresh_then_servfail() -> None:
    """Hostile catalogue B6: an expired entry is served stale (TTL 30) while the upstream is
    dead, at once, with at most one refresh (of at most 2 attempts) per 30 s; after the
    `serve_stale` window the name is SERVFAIL."""
    clock, dead = FakeClock(), [False]
    db = answering("10.8.0.5", ttl=2)

    async def scenario() -> tuple[list[float], list[dns.message.Message | None], int,
                                  dns.message.Message | None]:
        async with FakeUpstream(lambda q: None if dead[0] else db(q)) as up, \
                serving(f"""corp.example {{
                    cache 300 {{
                        success 9984 300 1
                        serve_stale 3s
                    }}
                    forward . {up.target} {{
                        read_timeout 500ms
                        max_fails 0
                    }}
                }}""", clock=clock) as s:
            assert rdata(await s.ask(query("db.corp.example."))) == ["10.8.0.5"]
            dead[0] = True
            clock.advance(2.2)  # expired 0.2 s ago
            times, stale = [], []
            for _ in range(15):  # 1.5 s of clients asking, all inside the 3 s window
                began = time.monotonic()
                stale.append(await s.ask(query("db.corp.example.")))
                times.append(time.monotonic() - began)
                clock.advance(0.1)
            await until("the refresh sent", lambda: len(up.asked) >= 2)
            refreshes = len(up.asked) - 1
            clock.advance(2 + 3.1 - 2.2 - 1.5)  # past the window
            return times, stale, refreshes, await s.ask(query("db.corp.example."))

    times, stale, refreshes, after = run(scenario)
    figure("B6", f"in process: stale answer (TTL {sorted({m.answer[0].ttl for m in stale if m})}) in "
                 f"{ms(max(times))} at worst; {refreshes} upstream attempts for 15 stale hits in 1.5 s; "
                 f"after the window: {dns.rcode.to_text(after.rcode()) if after else 'no reply'}")
    assert all(rdata(m) == ["10.8.0.5"] and m is not None and m.answer[0].ttl == 30 for m in stale)
    # At once: not after the refresh's 500 ms read timeout.
    assert max(times) < 0.4, times
    assert 1 <= refreshes <= 2
    assert after is not None and after.rcode() == dns.rcode.SERVFAIL and not after.answer


# --- failover and the SERVFAIL cache (end to end: test_hostile_upstream.py B5) ------------------

def test_failover_to_the_next_upstream_and_a_servfail_is_cached_five_seconds() -> None:
    """Hostile catalogue B5, the part that waits: with both upstreams failing, the SERVFAIL is
    kept 5 s (CoreDNS's `servfail` default) and never replaced by a stale answer; after that
    the next ask reaches the recovered upstream."""
    clock = FakeClock()
    good = answering("10.96.0.2")
    failing = {"first": True, "second": False}

    def servfail_or(which: str) -> Handle:
        return lambda q: reply(q, rcode=dns.rcode.SERVFAIL) if failing[which] else good(q)

    async def scenario() -> tuple[list[dns.message.Message | None], list[list[str]], list[str]]:
        async with FakeUpstream(servfail_or("first"), "127.0.0.11") as first, \
                FakeUpstream(servfail_or("second"), "127.0.0.10") as second, \
                serving(f"""cluster.local {{
                    cache 300 {{
                        serve_stale 1h
                    }}
                    forward . {first.target} {second.target} {{
                        policy sequential
                        failover SERVFAIL REFUSED
                    }}
                }}""", clock=clock) as s:
            out = [await s.ask(query("a.cluster.local."))]
            failing["second"] = True
            out.append(await s.ask(query("b.cluster.local.")))
            asked = [second.names()]
            clock.advance(4.9)
            out.append(await s.ask(query("b.cluster.local.")))  # from the cache
            asked.append(second.names())
            failing["first"] = failing["second"] = False
            clock.advance(0.2)
            out.append(await s.ask(query("b.cluster.local.")))
            return out, asked, first.names()

    (case1, case2, cached, back), (second_before, second_after), first_names = run(scenario)
    assert rdata(case1) == ["10.96.0.2"]
    assert first_names[:2] == ["a.cluster.local.", "b.cluster.local."]  # tried first, each time
    assert case2 is not None and case2.rcode() == dns.rcode.SERVFAIL
    assert cached is not None and cached.rcode() == dns.rcode.SERVFAIL and not cached.answer
    assert second_before == second_after  # kept, not asked again
    assert rdata(back) == ["10.96.0.2"]


# --- a dead upstream, health marking and probes (end to end: test_runtime.py, B1) ----------------

def test_a_blackholed_upstream_is_two_attempts_then_servfail_with_the_reason() -> None:
    """Two attempts of read_timeout each, then SERVFAIL with EDE 22 and an `errors` line. With
    the defaults that is 2 x 2 s within the 5 s overall deadline (CoreDNS's), which B1 and
    test_runtime.py see end to end; here with a 300 ms read timeout."""
    spec = config.loads(". {\n forward . 127.0.0.1:9\n}\n").blocks[0].forwards[0]
    assert (spec.read_timeout, spec.overall_timeout) == (2.0, 5.0)

    async def scenario() -> tuple[dns.message.Message | None, float, list[str], str]:
        async with FakeUpstream(lambda q: None) as up, \
                serving(f". {{\n errors\n forward . {up.target} {{\n read_timeout 300ms\n }}\n}}\n",
                        clock=time.monotonic) as s:
            began = time.monotonic()
            out = await s.ask(query("example.org"), timeout=5)
            return out, time.monotonic() - began, up.names(), s.log()

    out, elapsed, asked, log = run(scenario)
    assert out is not None and out.rcode() == dns.rcode.SERVFAIL
    assert asked == ["example.org.", "example.org."]
    assert 0.6 <= elapsed < 1.6, elapsed
    assert "timeout" in ede(out)
    assert "[ERROR] plugin/errors: 2 example.org. A:" in log


def test_a_dead_upstream_is_marked_down_fails_fast_probes_paced_and_comes_back() -> None:
    """Hostile catalogue B3 (the circuit breaker) with short timeouts: marked down after the
    first failed query and a probe; while down no query goes upstream and each is SERVFAIL at
    once with the reason; probes at most one per `health_check` (500 ms); back within about
    one probe after the upstream recovers."""
    mport, dead, probes = free_port("127.0.0.1"), [False], list[float]()
    good = answering("10.8.0.5")

    def handle(q: dns.message.Message) -> dns.message.Message | None:
        if q.question[0].name.to_text() == ".":
            probes.append(time.monotonic())
        return None if dead[0] else good(q)

    async def scenario() -> tuple[float, list[float], list[dns.message.Message | None], list[str],
                                  list[float], float]:
        async with FakeUpstream(handle, "127.0.0.22") as up, \
                serving(f"""corp.example {{
                    prometheus 127.0.0.1:{mport}
                    forward . {up.target} {{
                        read_timeout 300ms
                        failfast_all_unhealthy_upstreams
                    }}
                }}""", clock=time.monotonic, runtime=True) as s:
            assert rdata(await s.ask(query("api.corp.example."))) == ["10.8.0.5"]
            dead[0] = True
            failed_at = time.monotonic()
            first = await s.ask(query("x0.corp.example."), timeout=5)
            assert first is not None and first.rcode() == dns.rcode.SERVFAIL
            healthy = f'splitdns_upstream_healthy{{to="{up.target}"'
            for _ in range(300):  # bounded: 3 s of 10 ms polls
                if any(k.startswith(healthy) and v == 0 for k, v in (await scrape(mport)).items()):
                    break
                await asyncio.sleep(0.01)
            marked = time.monotonic() - failed_at
            fast, replies = [], []
            for i in range(1, 101):
                began = time.monotonic()
                replies.append(await s.ask(query(f"x{i}.corp.example.")))
                fast.append(time.monotonic() - began)
            window = time.monotonic()
            await asyncio.sleep(1.6)  # probes on their own schedule: about three
            paced = [t for t in probes if t >= window]
            dead[0] = False
            recovered = time.monotonic()
            for _ in range(300):  # bounded: 3 s
                if rdata(await s.ask(query("back.corp.example."), timeout=1)) == ["10.8.0.5"]:
                    break
                await asyncio.sleep(0.01)
            return marked, fast, replies, up.names(), paced, time.monotonic() - recovered

    marked, fast, replies, asked, paced, back = run(scenario)
    gaps = [b - a for a, b in itertools.pairwise(paced)]
    figure("B3", f"in process: marked down {marked:.2f} s after the first failure; while down SERVFAIL "
                 f"p99 {ms(percentile(fast, 99))}; {len(paced)} probes in 1.6 s, at least "
                 f"{min(gaps, default=0):.2f} s apart; first good answer {back:.2f} s after recovery")
    assert marked <= 2.0  # two 300 ms attempts, then a failed probe (300 ms) after 500 ms
    assert all(r is not None and r.rcode() == dns.rcode.SERVFAIL and "all upstreams are down" in ede(r)
               for r in replies)
    assert not [n for n in asked if n.startswith("x") and n != "x0.corp.example."]  # none went upstream
    assert percentile(fast, 99) < 0.3  # at once, not after the 300 ms read timeout
    assert len(paced) >= 2 and min(gaps) >= 0.4, gaps  # one per 500 ms, not a probe storm
    assert back <= 1.5


def test_an_upstream_going_down_and_coming_back_is_logged_once_each_with_zone_and_reason() -> None:
    """The metrics count it; the log says it, once when the upstream is marked down (zone,
    upstream, the last error) and once when it is back, however many queries and probes."""
    dead, target = [False], [""]
    good = answering("10.8.0.5")

    async def scenario() -> str:
        async with FakeUpstream(lambda q: None if dead[0] else good(q), "127.0.0.23") as up, \
                serving(f"corp.example {{\n forward . {up.target} {{\n read_timeout 200ms\n"
                        " }\n}\n", clock=time.monotonic, runtime=True) as s:
            target[0] = up.target
            dead[0] = True
            for i in range(4):
                await s.ask(query(f"x{i}.corp.example."), timeout=3)
            for _ in range(300):  # bounded: 3 s
                if "is down" in s.log():
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(1.2)  # more failed probes: still one line
            dead[0] = False
            for _ in range(300):  # bounded: 3 s
                if "is back" in s.log():
                    break
                await asyncio.sleep(0.01)
            for i in range(3):
                await s.ask(query(f"y{i}.corp.example."), timeout=3)
            return s.log()

    log = run(scenario)
    down = [ln for ln in log.splitlines() if "is down" in ln]
    assert len(down) == 1, log
    assert f"zone corp.example. upstream {target[0]} is down" in down[0] and "timeout" in down[0], down
    assert down[0].startswith("[WARNING] plugin/forward:")
    assert len([ln for ln in log.splitlines() if "is back" in ln]) == 1, log


# --- the pending cap (end to end: test_hostile_cache_load.py G2) -------------------------------

def test_past_the_pending_cap_a_zone_refuses_at_once_and_other_zones_answer() -> None:
    """`limits { pending 4 }`: four distinct names wait on a stuck upstream; the next ones are
    REFUSED at once, without reaching it; another zone still answers; when the upstream
    answers, the waiting four get their answers and new names are served again."""
    async def scenario() -> tuple[list[dns.message.Message | None], list[str], list[str], int,
                                  list[str]]:
        release = asyncio.Event()

        async def stuck(q: dns.message.Message) -> dns.message.Message:
            await asyncio.wait_for(release.wait(), 10)
            return answering("192.0.2.1")(q)

        async with FakeUpstream(stuck, "127.0.0.21") as slow, \
                FakeUpstream(answering("10.96.0.1"), "127.0.0.22") as cluster, \
                serving(f""". {{
                    limits {{
                        pending 4
                    }}
                    forward . {slow.target} {{
                        read_timeout 5s
                    }}
                }}
                cluster.local {{
                    forward . {cluster.target}
                }}""") as s:
            waiting = [asyncio.ensure_future(s.ask(query(f"n{i}.public.test."), timeout=8))
                       for i in range(4)]
            await until("four names upstream", lambda: len(slow.asked) == 4)
            refused = [await s.ask(query(f"m{i}.public.test."), timeout=1) for i in range(6)]
            other = await s.ask(query("kubernetes.default.svc.cluster.local."))
            reached = len(slow.asked)
            release.set()
            answered = await asyncio.gather(*waiting)
            fresh = await s.ask(query("fresh.public.test."))
            return refused, rdata(other), [r for a in answered for r in rdata(a)], reached, \
                rdata(fresh)

    refused, other, answered, reached, fresh = run(scenario)
    assert all(r is not None and r.rcode() == dns.rcode.REFUSED for r in refused)
    assert reached == 4  # the refused names never reached the upstream
    assert other == ["10.96.0.1"]
    assert answered == ["192.0.2.1"] * 4
    assert fresh == ["192.0.2.1"]


# --- the question's case (end to end: test_serve.py, case echoed to the client) -----------------

def test_mixed_case_is_relayed_and_a_reply_in_another_case_is_accepted() -> None:
    """What 0x20 case randomisation needs of a forwarder that does not randomise itself (the
    hostile catalogue's A8 is 'only if built', and splitdns does not build it): a client's
    mixed-case question goes upstream with its case, an upstream that lower-cases (or
    upper-cases) the question in its reply is still matched, and the client gets its own case
    back over UDP and TCP."""
    def recased(q: dns.message.Message) -> dns.message.Message:
        out = answering("192.0.2.9")(q)
        asked = q.question[0]
        name = asked.name.to_text()
        text = name.lower() if name.lower().startswith("lower") else name.upper()
        # Only the question is recased; the answer's owner keeps the case asked.
        out.question = [dns.rrset.RRset(dns.name.from_text(text), asked.rdclass, asked.rdtype)]
        return out

    async def scenario() -> tuple[list[dns.message.Message | None], list[str]]:
        async with FakeUpstream(recased) as up, serving(f". {{\n forward . {up.target}\n}}\n") as s:
            replies = [await s.ask(query("LoWeR.ExAmPlE.oRg")),
                       await s.ask(query("UpPeR.ExAmPlE.oRg")),
                       await s.ask(query("TcP.ExAmPlE.oRg"), tcp=True)]
            return replies, [a.message.question[0].name.to_text() for a in up.asked]

    replies, sent = run(scenario)
    assert sent == ["LoWeR.ExAmPlE.oRg.", "UpPeR.ExAmPlE.oRg.", "TcP.ExAmPlE.oRg."]
    assert [r.question[0].name.to_text() if r else None for r in replies] == sent
    assert all(rdata(r) == ["192.0.2.9"] for r in replies)


# --- truncation and TCP (end to end: test_hostile_upstream.py C3 and C4) --------------------------

@pytest.mark.parametrize("client", ["udp", "tcp"])
def test_a_truncated_reply_is_asked_again_over_tcp_and_a_big_answer_is_truncated_for_udp_clients(
        client: str) -> None:
    """An upstream's TC reply is asked again over TCP of the same upstream (and the client,
    over UDP or TCP, gets the full answer, no TC; the flight lands); an answer bigger than a
    client's UDP size (512 without EDNS, its EDNS size else) goes over UDP truncated with no
    records, whole over TCP, from the cache."""
    records = [f"many.example.org. 60 IN TXT \"{'x' * 100} {i}\"" for i in range(20)]

    def over_udp(q: dns.message.Message) -> dns.message.Message:
        return reply(q, tc=True)  # no records: "ask me over TCP"

    def over_tcp(q: dns.message.Message) -> dns.message.Message:
        if q.question[0].name.to_text() == "many.example.org.":
            return reply(q, *records)
        return reply(q, f"{q.question[0].name} 60 IN A 192.0.2.7")

    async def scenario() -> tuple[list[dns.message.Message | None], list[tuple[str, str]]]:
        async with FakeUpstream(over_udp, tcp_handle=over_tcp) as up, \
                serving(f". {{\n cache 30\n forward . {up.target}\n}}\n") as s:
            replies = [await s.ask(query("tc.example.org"), tcp=client == "tcp")]
            assert not s.server.flights.table
            replies += [await s.ask(query("many.example.org", "TXT", edns=-1)),
                       await s.ask(query("many.example.org", "TXT"), tcp=True),
                       await s.ask(query("many.example.org", "TXT", payload=1232))]
            return replies, [(a.transport, a.name) for a in up.asked]

    (small, no_edns, full, edns), asked = run(scenario)
    assert rdata(small) == ["192.0.2.7"] and small is not None and not small.flags & dns.flags.TC
    assert no_edns is not None and no_edns.flags & dns.flags.TC and not no_edns.answer
    assert full is not None and len(full.answer[0]) == 20 and not full.flags & dns.flags.TC
    assert edns is not None and edns.flags & dns.flags.TC  # about 2.2 kB: more than 1232
    assert asked == [("udp", "tc.example.org."), ("tcp", "tc.example.org."),
                     ("udp", "many.example.org."), ("tcp", "many.example.org.")]  # then cached


def test_a_reply_advertises_our_udp_size_whatever_the_client_offered() -> None:
    """RFC 6891 6.2.3: the size in a reply's OPT is the sender's, ours (1232); CoreDNS echoes
    the client's, a difference the README lists."""
    async def scenario() -> list[dns.message.Message | None]:
        async with FakeUpstream(answering("192.0.2.1")) as up, \
                serving(f". {{\n forward . {up.target}\n}}\n") as s:
            return [await s.ask(query(f"n{size}.example.org", payload=size)) for size in (512, 4096)]

    for got in run(scenario):
        assert got is not None and rdata(got) == ["192.0.2.1"]
        assert got.edns == 0 and got.payload == 1232


def test_one_zone_and_port_served_by_two_blocks_on_different_addresses() -> None:
    """As CoreDNS: blocks that bind different addresses may serve the same zone on one port;
    each address answers from its own block (and its own cache)."""
    async def scenario() -> list[list[str]]:
        async with FakeUpstream(answering("192.0.2.1")) as one, FakeUpstream(answering("192.0.2.2")) as two, \
                serving(f". {{\n bind 127.0.0.1\n cache 30\n forward . {one.target}\n}}\n"
                        f". {{\n bind 127.0.0.2\n cache 30\n forward . {two.target}\n}}\n") as s:
            out = []
            for _ in range(2):  # the second round from each block's cache
                for addr in ("127.0.0.1", "127.0.0.2"):
                    out.append(rdata(await ask(s.port, query("db.example.org"), addr=addr)))
            return out

    assert run(scenario) == [["192.0.2.1"], ["192.0.2.2"]] * 2
