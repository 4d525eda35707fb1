"""Hostile catalogue B and C: upstream failure and timing, malformed or hostile upstream replies.

Real resolver process and scripted upstreams on 127.0.0.x. B1, B2, B5 and C1-C5 run in
`make test` (and so in CI); B3's circuit breaker, B5's SERVFAIL cache and B6's stale window are
tested in process (tests/test_server_inprocess.py, also in `make test`). `@pytest.mark.hostile`
(`make test-hostile`): the load runs (B2 near saturation, B3's two minutes of flapping), B4,
whose 0.9 and 1.1 x T_a delays leave the resolver 100 ms either side by design, and C5's CPU
cost per heavy reply, a performance figure.
"""

from __future__ import annotations

import struct
import threading
import time
from pathlib import Path

import dns.flags
import dns.message
import dns.rcode
import dns.rrset
import pytest

from tests.helpers import query
from tests.support.hostile import (
    Split,
    ask_tcp,
    ask_udp,
    cpu_seconds,
    dnsperf,
    fd_count,
    figure,
    ms,
    names_seen,
    percentile,
    rcode_of,
    rdata,
    rss_kib,
    split_dns,
    udp_burst,
    wire_of,
)
from tests.support.processes import poll_until, scripted_upstream
from tests.support.resolver import splitdns_serve

DROP = [{"suffix": ".", "action": "drop"}]


def upstream_attempts(s: Split, name: str) -> int:
    return names_seen(s.tunnel).count(name)


# --- B1 ------------------------------------------------------------------------------------

def test_b1_dead_tunnel_zone_fails_in_bounded_time(tmp_path: Path) -> None:
    t_a = 1.5
    with split_dns(tmp_path, tunnel_rules=DROP, tunnel_forward=f"read_timeout {t_a}s") as s:
        msg, blackhole = s.timed("api.corp.example.")
        attempts = upstream_attempts(s, "api.corp.example.")
        assert msg is not None and msg.rcode() == dns.rcode.SERVFAIL
        # (b) nothing listens on the tunnel's port any more: ICMP port unreachable, at once.
        s.tunnel.process.terminate()
        s.tunnel.process.wait(5)
        closed_times = []
        for i in range(5):
            msg, elapsed = s.timed(f"api{i}.corp.example.")
            assert msg is not None and msg.rcode() == dns.rcode.SERVFAIL
            closed_times.append(elapsed)
    figure("B1", f"blackholed tunnel: SERVFAIL after {blackhole:.3f} s with {attempts} upstream attempts "
                 f"(T_a {t_a} s, bound {2 * t_a + 0.2:.2f} s); port closed: SERVFAIL after "
                 f"{ms(max(closed_times))} at worst of 5")
    # The bound is the behaviour: two attempts of T_a (3 s), never a third (4.5 s); the attempts
    # are counted too. 1 s of margin for a runner whose two cores are busy.
    assert blackhole <= 2 * t_a + 1.0 and attempts <= 2
    # A closed port fails at once (ICMP), not after T_a: a third of T_a tells the two apart.
    assert max(closed_times) <= t_a / 3


# --- B2 ------------------------------------------------------------------------------------

def cluster_names(tag: str, n: int) -> list[str]:
    """Half hot names (cached after their first query), half never seen before."""
    hot = [f"hot{i % 50}.default.svc.cluster.local A" for i in range(n // 2)]
    cold = [f"{tag}{i}.default.svc.cluster.local A" for i in range(n // 2)]
    return [x for pair in zip(hot, cold, strict=True) for x in pair]


def test_b2_tunnel_outage_does_not_spill_onto_the_cluster_zone(tmp_path: Path) -> None:
    run_b2(tmp_path, 400, 3, "B2")


@pytest.mark.hostile
def test_b2_at_80_percent_of_what_the_scripted_upstream_sustains(tmp_path: Path) -> None:
    """Near saturation: with half misses through the Python scripted upstream, this 2-core
    machine's baseline p99 was over 100 ms at 2,200 qps (queues build) and about 3 ms at 1,200."""
    run_b2(tmp_path, 1200, 8, "B2x")


def run_b2(tmp_path: Path, qps: int, seconds: int, code: str) -> None:
    with split_dns(tmp_path, tunnel_rules=DROP, tunnel_forward="read_timeout 1500ms") as s:
        for i in range(50):
            s.ask(f"hot{i}.default.svc.cluster.local.")
        baseline = dnsperf(s.r.port, cluster_names("base", qps * seconds), seconds=seconds, qps=qps)
        stop = threading.Event()
        tunnel_sent = [0]

        def tunnel_load() -> None:
            """50 qps of tunnel names, each of which waits out its attempts."""
            for i in range(50 * (seconds + 2)):
                if stop.is_set():
                    break
                udp_burst(s.r.port, [wire_of(query(f"t{i}.corp.example."))], per_socket=True, timeout=0)
                tunnel_sent[0] += 1
                time.sleep(0.02)

        loader = threading.Thread(target=tunnel_load)
        loader.start()
        time.sleep(1)  # the outage is under way: tunnel queries pending, upstream marked down
        try:
            outage = dnsperf(s.r.port, cluster_names("out", qps * seconds), seconds=seconds, qps=qps)
        finally:
            stop.set()
            loader.join(10)
        at_tunnel = [n for n in names_seen(s.tunnel) if not n.endswith("corp.example.") and n != "."]
    ok = outage.rcodes.get("NOERROR", 0) / max(1, outage.sent)
    figure(code, f"cluster zone at {qps} qps (half misses) while the tunnel is blackholed and gets "
                 f"{tunnel_sent[0]} queries at 50 qps: success {ok * 100:.2f} %, p99 {ms(outage.p(99))} "
                 f"vs {ms(baseline.p(99))} without the outage "
                 f"(p50 {ms(outage.p(50))} vs {ms(baseline.p(50))})")
    assert baseline.rcodes.get("NOERROR", 0) >= 0.999 * baseline.sent
    assert ok >= 0.999
    assert at_tunnel == [], f"cluster names sent to the dead tunnel: {at_tunnel[:5]}"
    spilled = sum(1 for t in outage.latencies if t >= SPILLED)
    assert spilled <= 0.05 * outage.sent, f"{spilled} cluster queries took {SPILLED} s or more"


# A cluster query that spilled onto the dead tunnel would be sent there, fail, or wait out its
# read_timeout (1.5 s): all three are checked. The catalogue's target (p99 within 5 ms of the
# baseline) is a performance figure: figure() prints it (results/hostile.md keeps it), and it is
# not asserted, since on a busy 2-core runner the outage's own load generators alone move p99 by
# tens of ms, and a runner with both cores busy stalled every process for over a second once
# (63 of 1,200 queries at 1.0-1.2 s, all answered). A spill of the misses would put half the
# queries past 1.5 s; 5 % is the allowance for a stall.
SPILLED = 1.5


# --- B3 ------------------------------------------------------------------------------------

# B3's circuit breaker (marked down, fail fast, paced probes, recovery) is tested in process:
# tests/test_server_inprocess.py. Here, in `make test-hostile`, the tunnel flaps under load.
B3_TUNNEL = "read_timeout 1s\n        failfast_all_unhealthy_upstreams"


@pytest.mark.hostile
def test_b3_flapping_tunnel_under_load(tmp_path: Path) -> None:
    """Two minutes of 5 s up / 5 s down with load: SERVFAIL only in down windows (+1 s)."""
    up_rules = [{"suffix": ".", "records": ["{qname} 60 IN A 10.8.0.5"]}]
    with split_dns(tmp_path, tunnel_forward=B3_TUNNEL, cache="") as s:
        pid = s.r.process.pid
        s.ask("warm.corp.example.")
        start_rss, start_fds = rss_kib(pid), fd_count(pid)
        flips: list[tuple[float, bool]] = [(time.monotonic(), True)]
        results: list[tuple[float, str]] = []
        stop = threading.Event()

        def load() -> None:
            for i in range(100_000):
                if stop.is_set():
                    break
                sent = time.monotonic()
                data, _ = ask_udp(s.r.port, query(f"f{i}.corp.example."), timeout=3)
                results.append((sent, rcode_of(data)))
                time.sleep(0.02)

        loader = threading.Thread(target=load)
        loader.start()
        try:
            for cycle in range(12):
                time.sleep(5)
                s.tunnel.set_rules(DROP if cycle % 2 == 0 else up_rules)
                flips.append((time.monotonic(), cycle % 2 == 1))
            time.sleep(5)
        finally:
            stop.set()
            loader.join(10)
        end_rss, end_fds = rss_kib(pid), fd_count(pid)
        final = s.ask("final.corp.example.")

    def up_at(t: float) -> bool:
        state = True
        for when, up in flips:
            if when <= t:
                state = up
        return state

    def excused(t: float) -> bool:
        """Down at some point from 1.05 s before the query was sent (recovery takes up to one probe
        timeout, 1 s, plus a round trip) to 2 s after (the query's own attempts, 2 x 1 s)."""
        return any(not up_at(t + d / 20) for d in range(-21, 41))

    bad = [t for t, rc in results if rc != "NOERROR" and not excused(t)]
    figure("B3f", f"2 min flapping (5 s up / 5 s down), {len(results)} queries: {len(bad)} failures outside "
                  f"down windows (+ 1 s to notice a recovery); RSS {start_rss} -> {end_rss} KiB, fds "
                  f"{start_fds} -> {end_fds}")
    assert not bad
    assert rdata(final) == ["10.8.0.5"]  # no stuck "down" state
    assert end_fds <= start_fds + 2 and end_rss <= start_rss * 1.10 + 2048


# --- B6 ------------------------------------------------------------------------------------
# Serve-stale's window (stale at once with TTL 30, one refresh per 30 s, SERVFAIL after the
# window) is tested in process against a fake clock: tests/test_server_inprocess.py; end to
# end, test_serve.py serves a stale answer from a real process.


# --- B4, B5 (hostile) ------------------------------------------------------------------------

@pytest.mark.hostile
def test_b4_slow_or_dead_member_of_a_pool(tmp_path: Path) -> None:
    t_a = 1.0
    slow_rules = [{"suffix": ".", "delay_ms": 900, "records": ["{qname} 30 IN A 10.96.0.1"]}]
    fast_rules = [{"suffix": ".", "records": ["{qname} 30 IN A 10.96.0.2"]}]
    with scripted_upstream(tmp_path, slow_rules, "127.0.0.11") as slow, \
            scripted_upstream(tmp_path, fast_rules, "127.0.0.10") as fast, \
            splitdns_serve(tmp_path, f"""cluster.local {{
                forward . {slow.target} {fast.target} {{
                    read_timeout {t_a}s
                    policy sequential
                }}
            }}""") as r:
        m09, t09 = _timed(r.port, "a.default.svc.cluster.local.")
        slow.set_rules([{"suffix": ".", "delay_ms": 1100, "records": ["{qname} 30 IN A 10.96.0.1"]}])
        m11, t11 = _timed(r.port, "b.default.svc.cluster.local.")
        slow_seen = names_seen(slow)
        slow.set_rules(DROP)
        msgs = [wire_of(query(f"l{i}.default.svc.cluster.local.", qid=i)) for i in range(600)]
        outcomes = udp_burst(r.port, msgs, rate=50, timeout=4)
        ok = sum(1 for o in outcomes if o.rcode == "NOERROR")
        late = [o.latency or 9 for o in outcomes[-200:]]
    figure("B4", f"0.9 x T_a: {rdata(m09)} in {t09:.2f} s; 1.1 x T_a: {rdata(m11)} in {t11:.2f} s (retried "
                 f"on the other); one member blackholed: {ok}/600 answered, p99 of the last 200 "
                 f"{ms(percentile(late, 99))}")
    assert rdata(m09) == ["10.96.0.1"] and slow_seen.count("a.default.svc.cluster.local.") == 1
    assert rdata(m11) == ["10.96.0.2"] and t11 < 2 * t_a
    assert ok >= 0.999 * 600
    assert percentile(late, 99) <= 0.5  # marked down: no T_a (1 s) penalty; the figure says how little


def _timed(port: int, name: str) -> tuple[dns.message.Message, float]:
    data, elapsed = ask_udp(port, query(name), timeout=8)
    assert data is not None
    return dns.message.from_wire(data), elapsed


def test_b5_servfail_and_refused_from_upstream(tmp_path: Path) -> None:
    """Failover to the next upstream, then SERVFAIL when both fail, kept in the cache and never
    replaced by a stale answer. That the SERVFAIL is kept 5 s and the recovered upstream asked
    after that is tested in process against a fake clock (tests/test_server_inprocess.py)."""
    good = [{"suffix": ".", "records": ["{qname} 60 IN A 10.96.0.2"]}]
    servfail = [{"suffix": ".", "action": "servfail"}]
    with scripted_upstream(tmp_path, servfail, "127.0.0.11") as first, \
            scripted_upstream(tmp_path, good, "127.0.0.10") as second, \
            splitdns_serve(tmp_path, f"""cluster.local {{
                cache 300 {{
                    serve_stale 1h
                }}
                forward . {first.target} {second.target} {{
                    policy sequential
                    failover SERVFAIL REFUSED
                }}
            }}""") as r:
        case1, _ = _timed(r.port, "a.cluster.local.")
        second.set_rules(servfail)
        case2, _ = _timed(r.port, "b.cluster.local.")
        before = len(names_seen(second))
        again, _ = _timed(r.port, "b.cluster.local.")
        cached = len(names_seen(second)) == before
    figure("B5", f"first SERVFAIL, second answers: {rdata(case1)}; both SERVFAIL: "
                 f"{dns.rcode.to_text(case2.rcode())} (again: {dns.rcode.to_text(again.rcode())}, from "
                 f"cache: {cached}, never stale)")
    assert rdata(case1) == ["10.96.0.2"]
    assert names_seen(first)[:2] == ["a.cluster.local.", "b.cluster.local."]
    assert case2.rcode() == dns.rcode.SERVFAIL and again.rcode() == dns.rcode.SERVFAIL and cached
    assert not again.answer


# --- C1 ------------------------------------------------------------------------------------

def raw_reply(qname: str, body: bytes, ancount: int = 1) -> str:
    """A reply header (ID patched by the upstream) + the question + `body`, as hex."""
    q = dns.message.from_wire(wire_of(query(qname, edns=-1)))
    question = wire_of(q)[12:]
    header = struct.pack("!HHHHHH", 0, 0x8180, 1, ancount, 0, 0)
    return (header + question + body).hex()


def compression_attacks(base: str) -> dict[str, tuple[str, str]]:
    """name -> (qname, hex). P is the offset of the answer RR, right after the question."""
    out: dict[str, tuple[str, str]] = {}
    rr_tail = struct.pack("!HHIH", 1, 1, 60, 4) + bytes([203, 0, 113, 66])

    def p_of(qname: str) -> int:
        return 12 + len(wire_of(query(qname, edns=-1))) - 12

    name = f"self.{base}"
    p = p_of(name)
    out["answer name points to itself"] = (name, raw_reply(name, struct.pack("!H", 0xC000 | p) + rr_tail))
    name = f"cycle.{base}"
    p = p_of(name)
    cycle = struct.pack("!HH", 0xC000 | (p + 2), 0xC000 | p)
    out["two-pointer cycle"] = (name, raw_reply(name, cycle + rr_tail))
    name = f"past.{base}"
    out["pointer past the end"] = (name, raw_reply(name, struct.pack("!H", 0xC000 | 0x3FFF) + rr_tail))
    name = f"fwd.{base}"
    p = p_of(name)
    target = b"\x03fwd\x00"
    out["forward pointer"] = (name, raw_reply(name, struct.pack("!H", 0xC000 | (p + 2 + len(rr_tail)))
                                                  + rr_tail + target))
    name = f"q.{base}"
    header = struct.pack("!HHHHHH", 0, 0x8180, 1, 0, 0, 0)
    out["question is a pointer to itself (C0 0C)"] = (name, (header + b"\xc0\x0c\x00\x01\x00\x01").hex())
    return out


def test_c1_compression_attacks_are_no_reply(tmp_path: Path) -> None:
    attacks = compression_attacks("public.test")
    rules = [{"qname": qname, "action": "raw", "hex": hexdata, "patch_id": True}
             for qname, hexdata in attacks.values()]
    rules.append({"suffix": ".", "records": ["{qname} 60 IN A 192.0.2.1"]})
    t_a = 0.3
    with split_dns(tmp_path, any_rules=rules, any_forward=f"read_timeout {t_a}s\n max_fails 0") as s:
        pid = s.r.process.pid
        cpu0, unp0, mis0 = cpu_seconds(pid), s.unparseable(), s.mismatched()
        lines = []
        for what, (qname, _) in attacks.items():
            msg, elapsed = s.timed(qname)
            assert msg is not None and msg.rcode() == dns.rcode.SERVFAIL and not msg.answer, what
            # Each bad reply is dropped and its attempt times out: two attempts, counted, and no
            # hang beyond them (1 s of margin for a busy runner).
            assert names_seen(s.any).count(qname.rstrip(".") + ".") == 2, what
            assert elapsed <= 2 * t_a + 1.0, what
            lines.append(f"{what}: SERVFAIL in {ms(elapsed)}")
        cpu = cpu_seconds(pid) - cpu0
        dropped = (s.unparseable() - unp0, s.mismatched() - mis0)
        alive = s.r.process.poll() is None and "Traceback" not in s.r.stderr()
        assert rdata(s.ask("fine.public.test.")) == ["192.0.2.1"]
    figure("C1", "; ".join(lines) + f"; dropped unparseable {dropped[0]:.0f}, mismatched {dropped[1]:.0f}; "
                 f"resolver CPU {cpu * 1000:.0f} ms for all")
    assert alive and dropped[0] == 2 * 4 and dropped[1] == 2 * 1
    assert cpu < 1.0


# --- C3 ------------------------------------------------------------------------------------

def big_reply_hex(qname: str, size: int) -> str:
    q = dns.message.from_wire(wire_of(query(qname, "TXT", edns=-1)))
    r = dns.message.make_response(q)
    chunk = "x" * 200
    for i in range(size // 215):
        r.answer.append(dns.rrset.from_text(qname, 60, "IN", "TXT", f'"{chunk}" "{i}"'))
    data = wire_of(r)
    assert len(data) >= size - 250
    return data.hex()


def test_c3_oversized_reply_is_truncated_for_udp_clients(tmp_path: Path) -> None:
    rules = [{"qname": "big.public.test", "action": "raw", "patch_id": True,
              "hex": big_reply_hex("big.public.test.", 4000)}]
    with split_dns(tmp_path, any_rules=rules) as s:
        sizes = {}
        for label, kw in (("EDNS 1232", {"payload": 1232}), ("EDNS 4096", {"payload": 4096}),
                          ("no EDNS", {"edns": -1})):
            data, _ = ask_udp(s.r.port, query("big.public.test.", "TXT", **kw))  # type: ignore[arg-type]
            assert data is not None
            msg = dns.message.from_wire(data)
            limit = 512 if label == "no EDNS" else 1232
            assert len(data) <= limit and msg.flags & dns.flags.TC and not msg.answer, label
            sizes[label] = len(data)
        full, _ = ask_tcp(s.r.port, query("big.public.test.", "TXT"))
        assert full is not None
        msg = dns.message.from_wire(full)
        upstream = len(names_seen(s.any))
    figure("C3", f"4,000-byte upstream answer: UDP replies {sizes} bytes, all TC; TCP retry "
                 f"{len(full)} bytes "
                 f"with {len(msg.answer[0])} TXT records; {upstream} upstream query")
    assert len(full) > 3500 and not msg.flags & dns.flags.TC and upstream == 1


# --- C4 ------------------------------------------------------------------------------------

def test_c4_upstream_truncation_and_tcp_stall(tmp_path: Path) -> None:
    t_a = 1.0
    rules = [{"qname": "tc.public.test", "action": "truncate",
              "records": ["tc.public.test. 60 IN A 192.0.2.7"]},
             {"qname": "stall.public.test", "transport": "udp", "action": "truncate"},
             {"qname": "stall.public.test", "transport": "tcp", "action": "stall"}]
    with split_dns(tmp_path, any_rules=rules, any_forward=f"read_timeout {t_a}s\n max_fails 0") as s:
        pid = s.r.process.pid
        first = s.ask("tc.public.test.")
        second = s.ask("tc.public.test.")
        transports = [q["transport"] for q in s.any.queries() if q.get("qname") == "tc.public.test."]
        fds_before = fd_count(pid)
        msg, elapsed = s.timed("stall.public.test.")
        closed = poll_until("both stalled connections to be closed", 3, lambda: (lambda c: c if len(c) >= 2
                                                                                  else None)(
            [q for q in s.any.queries() if q.get("tcp_closed")]))
        time.sleep(0.2)
        fds_after = fd_count(pid)
    figure("C4", f"TC then TCP: {rdata(first)}, asked again from cache ({transports}); TCP stall after 1 "
                 f"length byte: SERVFAIL in {elapsed:.2f} s, {len(closed)} stalled connections closed by the "
                 f"resolver after {', '.join(format(c['after'], '.2f') for c in closed)} s; "
                 f"fds {fds_before} -> {fds_after}")
    assert rdata(first) == ["192.0.2.7"] and rdata(second) == ["192.0.2.7"]
    assert transports == ["udp", "tcp"]  # the truncated reply was never cached
    assert msg is not None and msg.rcode() == dns.rcode.SERVFAIL
    # Two attempts (B1's bound, not a third at 3 s), each stall abandoned after T_a; the margins
    # are for a runner with both cores busy.
    assert elapsed <= 2 * t_a + 0.8
    assert all(c["after"] <= t_a + 0.5 for c in closed) and len(closed) == 2
    assert fds_after <= fds_before


# --- C2, C5 (hostile) ------------------------------------------------------------------------

def lying_structures(base: str) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    a_tail = struct.pack("!HHIH", 1, 1, 60, 4) + bytes([203, 0, 113, 66])

    def add(label: str, body: bytes, ancount: int = 1, name: str | None = None) -> None:
        qname = name or f"{label.replace(' ', '-')[:40]}.{base}"
        out[label] = (qname, raw_reply(qname, body, ancount))

    add("label of 64", b"\x40" + b"a" * 64 + b"\x00" + a_tail)
    add("name over 255", b"\x3f" + b"a" * 63 + b"\x3f" + b"b" * 63 + b"\x3f" + b"c" * 63 + b"\x3f" + b"d" * 63
        + b"\x00" + a_tail)
    add("rdlength past the end", b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 400) + bytes(4))
    add("ancount 65535 with 1 rr", b"\xc0\x0c" + a_tail, ancount=65535)
    add("cut inside an rr", b"\xc0\x0c" + a_tail[:6])
    opt = b"\x00" + struct.pack("!HHIH", 41, 1232, 0, 0)
    add("two opt", b"\xc0\x0c" + a_tail, ancount=1)
    out["two opt"] = (out["two opt"][0], _with_additional(out["two opt"][1], opt + opt, 2))
    add("opt in the answer", opt)
    add("edns version 1", b"\xc0\x0c" + a_tail)
    out["edns version 1"] = (out["edns version 1"][0], _with_additional(
        out["edns version 1"][1], b"\x00" + struct.pack("!HHBBHH", 41, 1232, 0, 1, 0, 0), 1))
    return out


def _with_additional(hexdata: str, extra: bytes, arcount: int) -> str:
    data = bytearray(bytes.fromhex(hexdata) + extra)
    struct.pack_into("!H", data, 10, arcount)
    return data.hex()


def test_c2_structure_that_lies(tmp_path: Path) -> None:
    cases = lying_structures("public.test")
    rules = [{"qname": q, "action": "raw", "hex": h, "patch_id": True} for q, h in cases.values()]
    # opcode changed and rcodes 11-15: a genuine answer with those header bits.
    good = dns.message.make_response(dns.message.from_wire(wire_of(query("op.public.test.", edns=-1))))
    good.answer.append(dns.rrset.from_text("op.public.test.", 60, "IN", "A", "203.0.113.66"))
    op = bytearray(wire_of(good))
    op[2] |= 0x10  # opcode 2 (STATUS)
    rules.append({"qname": "op.public.test", "action": "raw", "hex": op.hex(), "patch_id": True})
    for rc in range(11, 16):
        name = f"rc{rc}.public.test."
        m = dns.message.make_response(dns.message.from_wire(wire_of(query(name, edns=-1))))
        data = bytearray(wire_of(m))
        data[3] = (data[3] & 0xF0) | rc
        rules.append({"qname": name, "action": "raw", "hex": data.hex(), "patch_id": True})
    with split_dns(tmp_path, any_rules=rules, any_forward="read_timeout 300ms\n max_fails 0") as s:
        outcome = {}
        for label, (qname, _) in cases.items():
            msg, _ = s.timed(qname)
            outcome[label] = rcode_of(None) if msg is None else dns.rcode.to_text(msg.rcode())
            assert msg is not None and "203.0.113.66" not in msg.to_text(), label
        op_msg, _ = s.timed("op.public.test.")
        rcs = {rc: s.timed(f"rc{rc}.public.test.")[0] for rc in range(11, 16)}
        alive = s.r.process.poll() is None and "Traceback" not in s.r.stderr()
    figure("C2", f"lying structures: {outcome}; opcode STATUS in a reply: "
                 f"{dns.rcode.to_text(op_msg.rcode()) if op_msg else None}; replies with rcodes 11-15: "
                 f"{[dns.rcode.to_text(m.rcode()) if m else None for m in rcs.values()]} "
                 "(dropped as no reply)")
    assert alive and all(v == "SERVFAIL" for v in outcome.values())
    assert op_msg is not None and op_msg.rcode() == dns.rcode.SERVFAIL
    assert all(m is not None and m.rcode() == dns.rcode.SERVFAIL for m in rcs.values())


def heavy_rules() -> tuple[bytes, list[dict[str, object]]]:
    q = dns.message.from_wire(wire_of(query("heavy.public.test.", edns=-1)))
    heavy = dns.message.make_response(q)
    heavy.answer.append(dns.rrset.from_text_list("heavy.public.test.", 60, "IN", "A",
                                                 [f"10.{i // 250}.{i % 250}.1" for i in range(3000)]))
    data = wire_of(heavy)
    chain = [f"c{i}.public.test. 60 IN CNAME c{i + 1}.public.test." for i in range(30)]
    chain.append("c30.public.test. 60 IN A 192.0.2.30")
    rules: list[dict[str, object]] = [
        {"qname": "heavy.public.test", "transport": "udp", "action": "truncate"},
        {"qname": "heavy.public.test", "transport": "tcp", "action": "raw", "hex": data.hex(),
         "patch_id": True},
        {"qname": "c0.public.test", "records": chain},
        {"suffix": ".", "records": ["{qname} 60 IN A 192.0.2.1"]}]
    return data, rules


def test_c5_heavy_but_valid_replies_memory_and_chains(tmp_path: Path) -> None:
    data, rules = heavy_rules()
    with split_dns(tmp_path, any_rules=rules) as s:
        pid = s.r.process.pid
        s.ask("warm.public.test.")
        rss0 = rss_kib(pid)
        msg = s.ask("heavy.public.test.", tcp=True, timeout=5)
        hit = s.ask("heavy.public.test.", tcp=True)
        chained = s.ask("c0.public.test.")
        rss = rss_kib(pid) - rss0
    figure("C5", f"{len(data)}-byte TCP answer with 3000 RRs: {len(msg.answer[0])} RRs relayed and cached, "
                 f"RSS +{rss} KiB; CNAME chain of 30: passed through ({len(chained.answer)} RRsets), policy: "
                 "a forwarder relays the chain its upstream resolved")
    assert len(msg.answer[0]) == 3000 and len(hit.answer[0]) == 3000
    assert len(chained.answer) == 31 and rss < 10_000


@pytest.mark.hostile
def test_c5_heavy_reply_costs_under_50ms_of_cpu(tmp_path: Path) -> None:
    data, rules = heavy_rules()
    with split_dns(tmp_path, any_rules=rules) as s:
        pid = s.r.process.pid
        s.ask("warm.public.test.")
        cpu0 = cpu_seconds(pid)
        s.ask("heavy.public.test.", tcp=True, timeout=5)
        cpu = cpu_seconds(pid) - cpu0
    figure("C5cpu", f"{len(data)}-byte, 3000-RR reply: {cpu * 1000:.0f} ms of resolver CPU "
                    "(catalogue: < 50 ms; read by reply.py, dnspython's parse cost 230 ms)")
    assert cpu < 0.05
