"""The readiness rule and the tunnel's effect on a zone, as the core decides them (no sockets,
no clock): what proves a zone ready, what `/ready` and `/ready?zone=` say, and what a zone
does when its tunnel pushes new servers."""

from __future__ import annotations

import dns.message
import dns.rcode

from splitdns import config
from splitdns.core import liveness
from splitdns.core.exchange import Done
from splitdns.core.routing import Router
from splitdns.core.tunnel import UP, Pushed, TunnelState
from splitdns.core.zone import Zone
from tests.helpers import indexed, reply

TUNNEL = """. {
 forward . 192.0.2.1
}
corp.example {
 loop
 openvpn {
  state /run/openvpn/state.json
  domains
 }
}
"""


def _zones(text: str = TUNNEL) -> tuple[Router, list[Zone]]:
    zones = [Zone(b) for b in config.loads(text, read_files=False).blocks]
    return Router(zones), zones


def _answer(name: str, rcode: int) -> Done:
    return Done(indexed(reply(dns.message.make_query(name, "A"), rcode=rcode)))


def test_a_zone_is_probed_with_the_names_it_owns_else_its_apex() -> None:
    router, (root, corp) = _zones()
    chosen = ["db.corp.example", "www.example.org"]
    assert liveness.probes(corp, chosen, router.route) == (liveness.Probe("db.corp.example", 1),)
    assert liveness.probes(root, ["db.corp.example"], router.route) == (liveness.Probe(".", 2),)


def test_what_proves_a_zone_ready() -> None:
    _, (root, corp) = _zones()
    name = liveness.Probe("db.corp.example", 1)
    apex = liveness.Probe(".", 2)
    assert liveness.proves_ready(corp, name, _answer("db.corp.example", dns.rcode.NXDOMAIN))
    assert not liveness.proves_ready(corp, name, _answer("db.corp.example", dns.rcode.REFUSED))
    assert liveness.proves_ready(root, apex, _answer(".", dns.rcode.REFUSED))  # it answered at all
    assert not liveness.proves_ready(root, apex, Done(error="timeout after 2s"))


def test_readiness_latches_and_says_why_until_then() -> None:
    _, (root, _) = _zones()
    apex = (liveness.Probe(".", 2),)
    liveness.waiting(root, apex)
    assert "waiting for . to be answered through 192.0.2.1:53" in root.not_ready_reason
    assert liveness.probed(root, [(apex[0], Done(error="timeout after 2s"))]) is None
    assert liveness.problems([root], None, stopping=False) == [".: probe .: timeout after 2s"]
    assert liveness.probed(root, [(apex[0], _answer(".", dns.rcode.NOERROR))]) == \
        "zone . is ready: its upstreams answered"
    assert root.ready and liveness.problems([root], None, stopping=False) == []
    assert liveness.problems([root], None, stopping=True) == ["shutting down"]


def test_the_live_check_follows_the_tunnel_but_the_pod_check_does_not() -> None:
    _, (root, corp) = _zones()
    root.ready = corp.ready = True
    assert liveness.problems([root, corp], {"corp.example."}, stopping=False) == \
        ["corp.example.: the tunnel is down (no word from OpenVPN yet)"]
    assert liveness.problems([root, corp], None, stopping=False) == []  # /ready stays 200
    liveness.follow_tunnel(corp, TunnelState(UP, "", Pushed((("10.8.0.1", 53),))), set())
    # Up, but the path is not proven until the tunnel's canary is answered (core.confinement).
    round_ = corp.stats.canary.start("splitdns-canary-1.corp.example.", "tun0")
    assert liveness.problems([root, corp], {"corp.example."}, stopping=False) == [
        "corp.example.: the tunnel canary splitdns-canary-1.corp.example. has not been answered yet "
        "bound to tun0"]
    corp.stats.canary.answered(round_, dns.rcode.NXDOMAIN, None, "10.8.0.1:53", 0.0)
    assert liveness.problems([root, corp], {"corp.example."}, stopping=False) == []


def test_a_tunnel_pushing_new_servers_swaps_them_in_and_routes_its_domains() -> None:
    _, (_, corp) = _zones()
    state = TunnelState(UP, "", Pushed((("10.8.0.1", 53),), ("svc.acme.internal",)))
    change = liveness.follow_tunnel(corp, state, {("127.0.0.1", 53)})
    assert change == liveness.TunnelChange(("svc.acme.internal",), None, True)  # `loop`: probe
    assert [str(u.upstream) for f in corp.forwards for u in f.upstreams] == ["10.8.0.1:53"]
    same = liveness.follow_tunnel(corp, state, {("127.0.0.1", 53)})
    assert same == liveness.TunnelChange(("svc.acme.internal",), None, False)  # nothing new to probe


def test_a_tunnel_that_pushes_this_very_server_is_a_loop_said_at_once() -> None:
    _, (_, corp) = _zones()
    state = TunnelState(UP, "", Pushed((("127.0.0.1", 53),)))
    change = liveness.follow_tunnel(corp, state, {("127.0.0.1", 53)})
    assert change.loop_error is not None and "127.0.0.1:53" in change.loop_error
    assert not change.probe_loops and corp.loop.error is not None
