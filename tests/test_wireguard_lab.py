"""The tunnel zone follows a real WireGuard tunnel (wireguard-go both ends), in the namespace lab.

The pod runs a stock `wg-quick up` whose config has a `DNS =` line, with our resolvconf shim
first on its PATH (as the VPN container of a rendered pod has it), and the shim's handshake
watcher. Both zones answer, TCP to the corp service connects, the tunnel going down (wg-quick
down, or the VPN container dying) makes the zone fail fast, and it comes back with no restart;
`splitdns verify` tells naming from routing through WireGuard as through OpenVPN. Figures are
printed (run with -s).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lab import configs
from tests.lab.fixtures import lab_session, require_lab
from tests.lab.netns import wait_for
from tests.lab.wireguard import WireGuardLab, missing_prerequisite
from tests.support.prerequisites import skip_or_fail
from tests.test_openvpn_lab import ask, fresh
from tests.test_verify_lab import verify_in_pod

pytestmark = pytest.mark.netns


def require_wireguard() -> None:
    require_lab()
    reason = missing_prerequisite()
    if reason is not None:
        skip_or_fail(reason)


@pytest.fixture(scope="module")
def lab() -> Iterator[WireGuardLab]:
    require_wireguard()
    with lab_session(WireGuardLab()) as running:
        assert isinstance(running, WireGuardLab)
        yield running


def tunnel_answers(lab: WireGuardLab) -> bool | None:
    return True if ask(lab, *fresh(configs.PRIVATE_ZONE))[0]["a"] == [configs.CORP_WILDCARD_IP] else None


def test_both_zones_answer_and_tcp_to_the_corp_service_connects(lab: WireGuardLab) -> None:
    assert lab.dig_short(configs.KUBERNETES_NAME) == configs.KUBERNETES_IP
    assert lab.dig_short(configs.DB_NAME) == configs.DB_IP
    assert lab.dig_short(configs.CATCHALL_NAME) == configs.CATCHALL_IP
    tcp = lab.tcp_connect(configs.DB_NAME, configs.DB_PORT)
    assert tcp.ok, tcp.detail
    # What the stock wg-quick handed over, through the shim, and the watcher's real `wg show`.
    assert (lab.run_dir / lab.iface).read_text() == \
        f"nameserver {configs.CORP_DNS_IP}\nsearch {configs.PRIVATE_ZONE}\n"
    latest = (lab.run_dir / f"{lab.iface}.handshakes").read_text().splitlines()
    assert len(latest) == 2 and int(latest[1].split()[1]) > 0  # one peer, handshaken
    # The query reached the corp DNS through the tunnel (and the VPN server's MASQUERADE).
    assert any(q.client == configs.CORP_GW_IP and q.name == configs.DB_NAME for q in lab.queries("corp"))


def test_wg_quick_down_fails_fast_and_up_comes_back_without_restart(lab: WireGuardLab) -> None:
    resolver_pid = lab.procs["resolver"].pid
    baseline = ask(lab, *fresh("default.svc.cluster.local", 30))
    lab.wg_quick("down")
    downed = time.monotonic()
    first = wait_for(lambda: next((r for r in ask(lab, *fresh(configs.PRIVATE_ZONE))
                                   if r["rcode"] == "SERVFAIL"), None), what="fail-fast", timeout=5)
    noticed = time.monotonic() - downed
    down = ask(lab, *fresh(configs.PRIVATE_ZONE, 30))
    during = ask(lab, *fresh("default.svc.cluster.local", 30))
    tunnel_ms = [float(r["ms"]) for r in down]  # type: ignore[arg-type]
    cluster_ms = [float(r["ms"]) for r in during]  # type: ignore[arg-type]
    base_ms = [float(r["ms"]) for r in baseline]  # type: ignore[arg-type]
    print(f"\nwg-quick down: noticed {noticed * 1000:.0f} ms after; tunnel-zone SERVFAIL median "
          f"{statistics.median(tunnel_ms):.2f} ms, max {max(tunnel_ms):.2f} ms; cluster zone median "
          f"{statistics.median(base_ms):.2f} -> {statistics.median(cluster_ms):.2f} ms")
    assert "wg-quick has not handed" in str(first["ede"]), first
    assert all(r["rcode"] == "SERVFAIL" and "the tunnel is down" in str(r["ede"]) for r in down)
    assert max(tunnel_ms) < 500
    assert all(r["rcode"] == "NXDOMAIN" for r in during) and max(cluster_ms) < 500
    assert lab.procs["resolver"].running()

    # Without the shim, as in any container: wg-quick cannot apply its DNS line, gives up and
    # takes the interface down again (the failure users meet).
    no_shim = lab.pod_exec(["env", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", *lab.vpn_env()[2:], "wg-quick", "up",
                            str(lab.client_conf)], timeout=30)
    assert no_shim.returncode != 0 and "resolvconf" in no_shim.stderr, no_shim.stderr
    assert ask(lab, *fresh(configs.PRIVATE_ZONE))[0]["rcode"] == "SERVFAIL"

    lab.wg_quick("up")
    up_at = time.monotonic()
    wait_for(lambda: tunnel_answers(lab), what="the zone after wg-quick up", timeout=5)
    print(f"wg-quick up: the zone answered {1000 * (time.monotonic() - up_at):.0f} ms after")
    assert lab.procs["resolver"].pid == resolver_pid  # no restart


def test_the_vpn_container_dying_is_noticed_from_the_interface(lab: WireGuardLab) -> None:
    """No `down` runs: the shim's file stays; the interface going is what the resolver sees."""
    lab.kill_vpn_client()
    killed = time.monotonic()
    first = wait_for(lambda: next((r for r in ask(lab, *fresh(configs.PRIVATE_ZONE))
                                   if r["rcode"] == "SERVFAIL"), None), what="fail-fast", timeout=5)
    print(f"\nVPN container killed: failing fast {1000 * (time.monotonic() - killed):.0f} ms after: "
          f"{first['ede']}")
    assert f"interface {lab.iface} is gone or down" in str(first["ede"])
    assert float(first["ms"]) < 500  # type: ignore[arg-type]
    assert lab.dig_short(configs.KUBERNETES_NAME) == configs.KUBERNETES_IP
    lab.wg_quick("up")  # the container restarts
    wait_for(lambda: tunnel_answers(lab), what="the zone after the restart", timeout=5)


def test_a_dead_vpn_server_fails_fast_after_one_timeout_and_comes_back(lab: WireGuardLab) -> None:
    """The peer dies: the interface stays and the last handshake ages only over minutes, so
    the forward's own health keeps the zone quick (one timeout, then failing fast until a
    probe gets through), and a revived server is found by the probes."""
    lab.stop_vpn_server()
    try:
        stopped = time.monotonic()
        wait_for(lambda: next((r for r in ask(lab, *fresh(configs.PRIVATE_ZONE))
                               if r["rcode"] == "SERVFAIL" and float(r["ms"]) < 100), None),  # type: ignore[arg-type]
                 what="fail-fast", timeout=15)
        print(f"\nVPN server dead: failing fast {1000 * (time.monotonic() - stopped):.0f} ms after")
        assert lab.dig_short(configs.KUBERNETES_NAME) == configs.KUBERNETES_IP
    finally:
        lab.start_vpn_server()
    back = time.monotonic()
    # The client's session died with the server: WireGuard starts a new handshake once data has
    # gone unanswered for KEEPALIVE_TIMEOUT + REKEY_TIMEOUT (15 s), then the health probe succeeds.
    wait_for(lambda: tunnel_answers(lab), what="the zone after the server came back", timeout=30)
    print(f"VPN server back: the zone answered {time.monotonic() - back:.2f} s after")


def test_verify_separates_naming_from_routing_through_wireguard(lab: WireGuardLab, tmp_path: Path) -> None:
    code, text, data = verify_in_pod(lab, tmp_path / "healthy")
    assert code == 0, text
    lab.set_masquerade(False)
    try:
        code, text, data = verify_in_pod(lab, tmp_path / "routing")
    finally:
        lab.set_masquerade(True)
    assert code == 5, text
    assert "Names resolve, connections fail: this is routing" in text
    assert data["verdict"]["code"] == "routing"  # type: ignore[index]


def test_verify_says_the_tunnel_is_down_after_wg_quick_down(tmp_path: Path) -> None:
    """A lab of its own: in the shared one the db's name may still be cached (TTL 30), and a
    cached answer is served while the tunnel is down, as it should be."""
    require_wireguard()
    lab = WireGuardLab().up()
    try:
        lab.wg_quick("down")
        code, text, _ = verify_in_pod(lab, tmp_path / "tunnel")
    finally:
        lab.down()
    assert code == 4, text
    assert "The tunnel is down" in text


@pytest.mark.hostile
def test_a_handshake_older_than_reject_after_time_reads_as_down_with_real_wireguard() -> None:
    """Slow (about 4 minutes: WireGuard's 180 s are compiled in), so in `make test-hostile`: the
    server dies, the interface stays, only the watcher's `wg show` can tell; past 195 s the zone
    says so, and a revived server is handshaken again by the keepalive and our queries."""
    require_wireguard()
    lab = WireGuardLab().up()
    try:
        lab.stop_vpn_server()
        stopped = time.monotonic()
        first = wait_for(lambda: next((r for r in ask(lab, *fresh(configs.PRIVATE_ZONE))
                                       if "the last handshake on" in str(r["ede"])), None),
                         what="the handshake age", timeout=260, interval=2)
        print(f"\nVPN server dead: read as down by handshake age {time.monotonic() - stopped:.0f} s "
              f"after: {first['ede']}")
        assert first["rcode"] == "SERVFAIL" and float(first["ms"]) < 500  # type: ignore[arg-type]
        assert lab.dig_short(configs.KUBERNETES_NAME) == configs.KUBERNETES_IP
        lab.start_vpn_server()
        back = time.monotonic()
        wait_for(lambda: tunnel_answers(lab), what="the zone after a new handshake", timeout=60, interval=1)
        print(f"VPN server back: the zone answered {time.monotonic() - back:.1f} s after")
    finally:
        lab.down()
