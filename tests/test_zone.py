"""The zone's decisions as transcripts: begin, depart, the flight, finish with a clock the
test moves and upstream replies the test writes (tests/support/transcript.py). No sockets,
no sleeps, no event loop.
"""

from __future__ import annotations

import dns.message
import dns.rcode
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splitdns import config, directives
from splitdns.codec import wire
from splitdns.codec.reply import Reply
from splitdns.core import liveness
from splitdns.core.cache import STALE_RECHECK
from splitdns.core.decisions import Answer, Forward, LogLine, QueryError
from splitdns.core.exchange import Done, Send
from splitdns.core.loop import LOOP_PROBE_ATTEMPTS
from splitdns.core.routing import Router
from splitdns.core.tunnel import UP, Pushed, TunnelState
from splitdns.core.zone import Zone
from splitdns.directives.forward import Upstream
from tests.helpers import indexed, query, reply
from tests.helpers import wire as to_wire
from tests.support.transcript import Transcript, answering, failing, parse


def rcode_of(out: bytes) -> int:
    return out[3] & 0xF


def answer_ttl(out: bytes) -> int:
    return int(dns.message.from_wire(out).answer[0].ttl)


def ede_text(out: bytes) -> str:
    msg = dns.message.from_wire(out)
    return " ".join(str(getattr(o, "text", "")) for o in msg.options)


# -- serve_stale ---------------------------------------------------------------------------------

STALE = ". {\n cache 3600 {\n  serve_stale 1h\n }\n forward . 192.0.2.1\n}\n"
STALE_VERIFY = ". {\n cache 3600 {\n  serve_stale 1h verify\n }\n forward . 192.0.2.1\n}\n"


def test_serve_stale_answers_at_once_and_refreshes_once_per_recheck() -> None:
    t = Transcript(STALE)
    q = parse("www.example.org.")
    asked: list[str] = []
    out = t.ask(q, answering(ttl=10, log=asked), now=100.0)
    assert answer_ttl(out) == 10 and len(asked) == 1
    assert answer_ttl(t.ask(q, failing(log=asked), now=105.0)) == 5 and len(asked) == 1  # a hit
    # Expired: the stale answer at once with RFC 8767's 30 s TTL, one refresh behind it.
    first = t.begin(q, 115.0)
    assert isinstance(first, Answer) and rcode_of(first.reply) == 0 and answer_ttl(first.reply) == 30
    assert first.refresh is not None and first.refresh.why == "refreshing a stale answer"
    second = t.begin(q, 116.0)  # within STALE_RECHECK of the first refresh: stale, no refresh
    assert isinstance(second, Answer) and second.refresh is None
    third = t.begin(q, 115.0 + STALE_RECHECK + 0.1)
    assert isinstance(third, Answer) and third.refresh is not None  # the recheck is over
    # A refresh that fails logs, and the next waits STALE_RECHECK again.
    zone = t.zone("www.example.org.")
    assert t.ask(q, failing(log=asked), now=200.0) and len(asked) > 1
    assert any(isinstance(n, QueryError) and "refreshing a stale answer" in n.reason for n in t.notes)
    assert isinstance(t.begin(q, 201.0), Answer) and zone.stats.served_stale == 5
    # A refresh that succeeds replaces the entry: a fresh hit, no refresh.
    fresh = t.ask(q, answering(ttl=60, address="192.0.2.81"), now=300.0)
    assert b"\xc0\x00\x02\x50" in fresh  # the stale answer went out ...
    hit = t.begin(q, 301.0)
    assert isinstance(hit, Answer) and hit.refresh is None and b"\xc0\x00\x02\x51" in hit.reply


def test_serve_stale_verify_asks_first_and_answers_stale_only_when_the_upstream_fails() -> None:
    t = Transcript(STALE_VERIFY)
    q = parse("www.example.org.")
    t.ask(q, answering(ttl=10), now=100.0)
    decided = t.begin(q, 115.0)
    assert isinstance(decided, Forward) and decided.stale is not None  # verify: upstream first
    out = t.ask(q, answering(ttl=10, address="192.0.2.81"), now=115.0)
    assert b"\xc0\x00\x02\x51" in out  # the upstream answered: its fresh answer
    later = t.begin(q, 130.0)
    assert isinstance(later, Forward)
    out = t.ask(q, failing(), now=130.0)
    assert rcode_of(out) == 0 and b"\xc0\x00\x02\x51" in out  # failed: the stale answer
    assert any(isinstance(n, QueryError) for n in t.notes)
    held = t.begin(q, 131.0)  # after a failure, stale at once until STALE_RECHECK is over
    assert isinstance(held, Answer) and held.refresh is None
    assert isinstance(t.begin(q, 130.0 + STALE_RECHECK + 0.1), Forward)


# -- the tunnel ----------------------------------------------------------------------------------

TUNNEL = """\
. {\n forward . 192.0.2.10\n}
svc.acme.internal {\n cache 30 {\n  serve_stale 1h\n }\n openvpn {\n  management 127.0.0.1:7505\n }\n}
"""


def test_tunnel_down_answers_at_once_stale_or_servfail_and_up_forwards_to_the_pushed_server() -> None:
    t = Transcript(TUNNEL)
    zone = t.zone("db.svc.acme.internal.")
    q = parse("db.svc.acme.internal.")
    down = t.begin(q, 100.0)
    assert isinstance(down, Answer) and rcode_of(down.reply) == dns.rcode.SERVFAIL
    assert "tunnel is down" in ede_text(down.reply)
    assert isinstance(t.begin(parse("www.example.org."), 100.0), Forward)  # other zones go on
    zone.tunnel = TunnelState(UP, "", Pushed(servers=(("10.8.0.1", 53),)))
    for fwd in zone.forwards:
        fwd.set_upstreams([Upstream("10.8.0.1", 53, "pushed by the VPN server")])
    up = t.begin(q, 101.0)
    assert isinstance(up, Forward) and str(up.fwd.upstreams[0]) == "10.8.0.1:53"
    asked: list[str] = []
    assert rcode_of(t.ask(q, answering(ttl=5, log=asked), now=101.0)) == 0 and asked == ["10.8.0.1:53"]
    zone.tunnel = TunnelState("down", "SIGTERM")
    stale = t.begin(q, 110.0)  # expired, down: the stale answer, nothing asked
    assert isinstance(stale, Answer) and stale.refresh is None and rcode_of(stale.reply) == 0
    assert zone.stats.served_stale == 1


# -- loops -----------------------------------------------------------------------------------------

LOOPING = ". {\n loop\n forward . 192.0.2.53\n}\nexample.net {\n forward . 192.0.2.3\n}\n"


def test_a_loop_probe_that_comes_back_is_a_loop_until_a_probe_is_answered() -> None:
    t = Transcript(LOOPING)
    zone = t.zone("example.org.")
    guard = zone.loop
    name = guard.probe_name("aaaa", "bbbb")
    assert name == "aaaa.bbbb."
    key = wire.name_to_wire(name)
    before = guard.probe_sent(key)
    back = t.begin(parse(name, "HINFO"), 100.0)  # our own probe reached us again
    assert isinstance(back, Answer) and rcode_of(back.reply) == dns.rcode.SERVFAIL
    assert zone.loop.error is not None and "192.0.2.53:53" in zone.loop.error
    assert any(isinstance(n, LogLine) and n.level == "error" and "plugin/loop" in n.text for n in t.notes)
    assert guard.probe_finished(key, answered=False, detected_before=before)  # learned: stop
    assert key not in t.loop_probes and zone.stats.loops_detected == 1
    looping = t.begin(parse("www.example.org."), 101.0)
    assert isinstance(looping, Answer) and "forwarding loop" in ede_text(looping.reply)
    assert liveness.live(zone)[0] is False
    # A later probe an upstream answers, that never came back: no loop any more.
    key = wire.name_to_wire(guard.probe_name("cccc", "dddd"))
    before = guard.probe_sent(key)
    assert guard.probe_finished(key, answered=True, detected_before=before)
    assert zone.loop.error is None and isinstance(t.begin(parse("www.example.org."), 102.0), Forward)
    # A probe neither answered nor back teaches nothing: ask again.
    key = wire.name_to_wire(guard.probe_name("eeee", "ffff"))
    assert not guard.probe_finished(key, answered=False, detected_before=guard.probe_sent(key))


def test_loop_probes_go_on_until_one_teaches_something_at_most_thirty() -> None:
    """The retry rule (CoreDNS's loop plugin): a probe neither answered nor back teaches
    nothing and another follows; one that comes back or is answered ends the round; 30 at most."""
    t = Transcript(LOOPING)
    zone = t.zone("example.org.")
    probing = zone.loop.probing()
    asked = []
    while (name := probing.next(f"a{len(asked)}", "b")) is not None:
        asked.append(name)
        probing.finished(answered=False)  # a timeout, say
    assert len(asked) == LOOP_PROBE_ATTEMPTS == 30 and not t.loop_probes
    probing = zone.loop.probing()
    name = probing.next("c", "d")
    assert name == "c.d." and wire.name_to_wire(name) in t.loop_probes
    probing.finished(answered=True)
    assert probing.over and probing.next("e", "f") is None and zone.loop.error is None
    probing = zone.loop.probing()
    name = probing.next("g", "h")
    assert name is not None
    t.begin(parse(name, "HINFO"), 100.0)  # it came back to us
    probing.finished(answered=False)
    assert probing.over and zone.loop.error is not None


def test_a_probe_back_on_another_zone_still_proves_the_senders_loop() -> None:
    t = Transcript(LOOPING)
    sender, other = t.zone("example.org."), t.zone("example.net.")
    key = wire.name_to_wire("aaaa.bbbb.example.net.")
    sender.loop.probe_sent(key)
    assert isinstance(t.begin(parse("aaaa.bbbb.example.net.", "HINFO"), 100.0), Answer)
    assert sender.loop.error is not None and other.loop.error is None


def test_the_vpn_pushing_this_server_is_a_loop_and_other_servers_clear_it() -> None:
    t = Transcript(TUNNEL)
    zone = t.zone("svc.acme.internal.")
    line = zone.loop.servers_pushed(["127.0.0.1:53"])
    assert line is not None and "pushed 127.0.0.1:53" in line and zone.stats.loops_detected == 1
    zone.tunnel = TunnelState(UP, "", Pushed(servers=(("127.0.0.1", 53),)))
    refused = t.begin(parse("db.svc.acme.internal."), 100.0)
    assert isinstance(refused, Answer) and "this server itself" in ede_text(refused.reply)
    assert zone.loop.servers_pushed([]) is None and zone.loop.error is None


# -- merging and the pending cap -------------------------------------------------------------------

def test_identical_queries_share_a_flight_and_the_pending_cap_refuses_beyond_it() -> None:
    t = Transcript(". {\n forward . 192.0.2.1\n}\n", pending_limit=2)
    zone = t.zone("example.org.")
    one, two, three = (parse(f"{n}.example.org.") for n in ("one", "two", "three"))
    forwards = [t.begin(q, 100.0) for q in (one, two, three)]
    assert all(isinstance(f, Forward) for f in forwards)
    first = zone.depart(one, forwards[0], 2)
    again = zone.depart(parse("one.example.org.", qid=9), forwards[0], 2)
    assert again is first and zone.pending == 1  # merged: one exchange, counted once
    second = zone.depart(two, forwards[1], 2)
    refused = zone.depart(three, forwards[2], 2)
    assert isinstance(refused, Done) and refused.rcode == dns.rcode.REFUSED
    assert "limits pending" in (refused.error or "")
    assert not isinstance(first, Done) and not isinstance(second, Done)
    assert zone.forwards[0].inflight == 2
    first.abandon()
    assert zone.pending == 1 and not isinstance(zone.depart(three, forwards[2], 2), Done)


# -- failover and health ---------------------------------------------------------------------------

NEXT = """. {
 forward . 192.0.2.1 {
  next NXDOMAIN
 }
 forward . 192.0.2.2
}
"""


def test_next_hands_an_nxdomain_on_to_the_next_forward_line() -> None:
    t = Transcript(NEXT)
    zone = t.zone("example.org.")
    asked: list[str] = []

    def upstream(send: Send, q: wire.Query) -> Reply:
        asked.append(send.upstream.label)
        code = dns.rcode.NXDOMAIN if send.upstream.label == "192.0.2.1:53" else dns.rcode.NOERROR
        return answering(rcode=code)(send, q)

    out = t.ask(parse("www.example.org."), upstream, 100.0)
    assert asked == ["192.0.2.1:53", "192.0.2.2:53"] and rcode_of(out) == dns.rcode.NOERROR
    assert [f.inflight for f in zone.forwards] == [0, 0] and zone.pending == 0
    out = t.ask(parse("www.example.net."), answering(rcode=dns.rcode.SERVFAIL), 100.0)
    assert rcode_of(out) == dns.rcode.SERVFAIL  # SERVFAIL is not in the first line's list


def test_sequential_policy_fails_over_and_marks_an_upstream_down_after_max_fails() -> None:
    t = Transcript(". {\n forward . 192.0.2.1 192.0.2.2 {\n  policy sequential\n  max_fails 2\n }\n}\n")
    zone = t.zone("example.org.")
    first, second = zone.forwards[0].upstreams
    asked: list[str] = []

    def first_dead(send: Send, q: wire.Query) -> Reply | str:
        asked.append(send.upstream.label)
        return "timeout after 2s" if send.upstream is first else answering()(send, q)

    for i in range(3):
        assert rcode_of(t.ask(parse(f"n{i}.example.org."), first_dead, 100.0 + i)) == 0
    assert asked == ["192.0.2.1:53", "192.0.2.2:53"] * 3 and first.down(2)
    asked.clear()
    assert rcode_of(t.ask(parse("n3.example.org."), first_dead, 104.0)) == 0
    assert asked == ["192.0.2.2:53"]  # down: skipped
    first.replied(105.0)  # a health probe got a reply: back in service at once
    asked.clear()
    t.ask(parse("n4.example.org."), first_dead, 106.0)
    assert asked[0] == "192.0.2.1:53"
    assert not second.down(2)


def test_every_upstream_down_fails_fast_with_the_reason() -> None:
    t = Transcript(". {\n forward . 192.0.2.1 {\n  max_fails 1\n }\n}\n")
    zone = t.zone("example.org.")
    t.ask(parse("n0.example.org."), failing("connection refused"), 100.0)  # two attempts
    assert zone.forwards[0].upstreams[0].down(1) and zone.forwards[0].broken == 0
    asked: list[str] = []
    out = t.ask(parse("n9.example.org."), failing(log=asked), 101.0)
    assert asked == [] and rcode_of(out) == dns.rcode.SERVFAIL  # nobody asked: at once
    assert "all upstreams are down" in ede_text(out) and "connection refused" in ede_text(out)
    assert zone.forwards[0].broken == 1
    zone.forwards[0].upstreams[0].replied(102.0)  # the probe revives it
    assert rcode_of(t.ask(parse("n9.example.org."), answering(), 103.0)) == 0


# -- the order of the steps ------------------------------------------------------------------------

def test_the_steps_follow_directives_order(monkeypatch: pytest.MonkeyPatch) -> None:
    corefile = ". {\n cache 30\n hosts {\n  192.0.2.9 www.example.org\n  fallthrough\n }\n" \
               " forward . 192.0.2.1\n}\n"
    q = parse("www.example.org.")
    t = Transcript(corefile)
    t.ask(q, answering(address="192.0.2.80"), 100.0)  # hosts answers: 192.0.2.9, nothing asked
    assert b"\xc0\x00\x02\x09" in t.ask(q, failing(), 100.0)
    order = list(directives.REGISTRY)
    order.remove(directives.FORWARD)
    order.insert(order.index(directives.HOSTS), directives.FORWARD)  # hosts would never act
    monkeypatch.setattr(directives, "REGISTRY", tuple(order))
    t = Transcript(corefile)
    assert b"\xc0\x00\x02\x50" in t.ask(q, answering(address="192.0.2.80"), 100.0)


def test_a_query_the_hot_path_missed_is_counted_once_and_not_looked_up_again() -> None:
    """The UDP hot path runs the zone's `known` step; on a miss (counted there) the shell
    walks on from the step after it, so routing and lookup happen once per miss."""
    zone = Zone(config.loads(hot_corefile(""), "Corefile", env={}).blocks[0])
    assert zone.cache is not None
    q = parse("a.example.org.")
    assert zone.known(q, 101.0) is None and isinstance(zone.walk(q, 101.0), Forward)
    assert (zone.stats.cache_misses, zone.stats.cache_hits) == (1, 0)
    zone.cache.put(q.key, q.name, indexed(reply(query("a.example.org."), "a.example.org. 10 IN A 10.0.0.1")),
                   100.0)
    hit = zone.begin(q, 101.0)
    assert isinstance(hit, Answer) and hit.hit == 0  # a hit (not of a denial), counted where sent
    assert (zone.stats.cache_misses, zone.stats.cache_hits) == (1, 0)
    made = parse("made.example.org.")  # the steps after the cache still run
    assert zone.known(made, 101.0) is None and isinstance(zone.walk(made, 101.0), Answer)
    known = zone.known(made, 101.0)  # and what the block made is known from then on
    assert known is not None and known.held is not None


def test_the_cache_is_the_first_step_so_known_may_run_before_the_walk() -> None:
    walked = [d for d in directives.REGISTRY if d.step not in (None, directives.REPLY_STEP)]
    assert walked[0] is directives.CACHE


# -- the hot path makes the same decision --------------------------------------------------------

class _Shell:
    """Stands in for a read batch and the flights: what the hot path sends, logs and
    refreshes for each datagram."""

    def __init__(self) -> None:
        self.sent: dict[int, bytes] = {}
        self.logged: list[bytes] = []
        self.refreshed: list[bytes] = []

    def reply(self, i: int, out: bytes) -> None:
        self.sent[i] = out

    def peer(self, i: int) -> tuple[str, int]:
        return ("127.0.0.1", 5300)

    def log_query(self, block: object, q: wire.Query, *args: object) -> None:
        self.logged.append(q.name)

    def refresh(self, zone: object, forward: Forward, q: wire.Query, router: object) -> None:
        self.refreshed.append(q.name)


def hot_corefile(extra: str) -> str:
    return f""". {{
 cache 30 {{
  {"prefetch 1 1m 90%" if "prefetch" in extra else ""}
 }}
 {extra.replace("prefetch", "")}
 hosts {{
  192.0.2.9 made.example.org
  192.0.2.10 made.example.org
  fallthrough
 }}
 forward . 192.0.2.1
}}
"""


HOT_NAMES = ("a.example.org.", "b.example.org.", "big.example.org.", "made.example.org.",
             "none.example.org.")
# Every directive that can touch a hit, alone and together.
HOT_EXTRAS = ("", "loadbalance", "log", "prefetch", "minimal", "loadbalance\n log\n prefetch\n minimal")


@given(extra=st.sampled_from(HOT_EXTRAS),
       asks=st.lists(st.tuples(st.sampled_from(HOT_NAMES), st.floats(0, 12), st.booleans(),
                               st.integers(0, 0xFFFF)), min_size=1, max_size=25))
@settings(max_examples=200, deadline=None)
def test_the_udp_hot_path_answers_exactly_what_begin_answers(
        extra: str, asks: list[tuple[str, float, bool, int]]) -> None:
    """Two zones of the same block get the same queries: one through the UDP hot path (and,
    on a miss, the walk the shell goes on with), one through `Zone.begin`. Whenever the hot
    path answers, begin answers the same bytes (truncated as UDP sends them), with the same
    refresh behind it, logged where the block logs; whenever begin answers from the cache or
    an answer the block made before, the hot path answered too; both count the same."""
    from splitdns.core.memo import Memo
    from splitdns.shell import udp
    from splitdns.shell.flights import Flights
    from splitdns.shell.listener import Listener

    cfg = config.loads(hot_corefile(extra), "Corefile", env={})
    hot_zone, begin_zone = Zone(cfg.blocks[0]), Zone(cfg.blocks[0])
    listener = Listener("127.0.0.1", 0, Router([hot_zone]), memo=Memo())
    path = udp.UdpPath(lambda: 0.0, Flights(lambda: cfg, lambda: 0.0, lambda coro: coro.close()))
    shell = _Shell()
    path.flights = shell  # type: ignore[assignment]
    for zone in (hot_zone, begin_zone):
        assert zone.cache is not None
        for name, ttl in (("a.example.org.", 10), ("b.example.org.", 25), ("big.example.org.", 20)):
            q = parse(name)
            count = 40 if name.startswith("big") else 2
            answer = indexed(reply(query(name), *(f"{name} {ttl} IN A 10.0.0.{i}" for i in range(count)),
                                   authority=("example.org. 60 IN NS ns.example.org.",)))
            zone.cache.put(q.key, q.name, answer, 100.0)
    now = 100.0
    hot_hits: list[tuple[object, int, int, int]] = []
    begin_hits: list[int] = []  # each hit begin answered: its `Answer.hit`
    for name, delay, small, qid in asks:
        now += delay
        data = to_wire(query(name, qid=qid, edns=-1 if small else 0))
        q = wire.parse_query(data)
        assert q is not None
        held = begin_zone.local is not None and q.key in begin_zone.local.answers  # made before
        logged, refreshed = len(shell.logged), len(shell.refreshed)
        hot = path._answer_hit(hot_zone, q, data, listener, shell, 0, hot_hits, now)  # type: ignore[arg-type]
        decided = begin_zone.begin(q, now)
        if isinstance(decided, Answer) and decided.hit is not None:
            begin_hits.append(decided.hit)
        if hot:
            assert isinstance(decided, Answer)
            expected = decided.reply
            if len(expected) > q.max_udp:
                expected = wire.truncated(q, int.from_bytes(expected[2:4], "big"))
            assert shell.sent[0] == expected
            assert len(shell.refreshed) - refreshed == (decided.refresh is not None)
            assert len(shell.logged) - logged == ("log" in extra)
        else:
            assert not (isinstance(decided, Answer) and decided.hit is not None) and not held  # nor did begin
            walked = hot_zone.walk(q, now)  # what the shell does next with the miss
            assert type(walked) is type(decided)
            if isinstance(walked, Answer):
                assert isinstance(decided, Answer) and walked.reply == decided.reply
        assert [denial for *_, denial in hot_hits] == begin_hits  # the same hits, of the same kinds
        assert hot_zone.stats.cache_misses == begin_zone.stats.cache_misses
