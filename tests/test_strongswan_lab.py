"""A real strongSwan IPsec tunnel (two charons, kernel-libipsec, PSK) in the namespace lab,
and the pod's resolver following it (`strongswan { resolve FILE }`).

The gateway's charon hands the pod's a virtual IP, the corp DNS and (RFC 8598) the split
domain; the pod's `resolve` plugin writes the name server to a file in the shared volume,
never to resolv.conf. The corp DNS answers the pod through the tunnel (seen at the corp DNS
as the gateway's SNAT address); the IKE SA going (swanctl --terminate) takes the name server
out of the file and the route with it; charon dying leaves the file but takes the tun device.
The resolver answers both zones; each of those makes the tunnel zone fail fast with the
cluster zone untouched, a charon restarted over the old file is not trusted before an IKE SA
writes it again, and the zone answers once it does, with no restart; `splitdns verify` tells
naming from routing. Figures are printed (run with -s).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from splitdns.core import strongswan as ss
from tests.lab import configs
from tests.lab.fixtures import lab_session, require_lab
from tests.lab.netns import ns_run, wait_for
from tests.lab.strongswan import TUN, StrongSwanLab, missing_prerequisite
from tests.support.prerequisites import skip_or_fail
from tests.test_openconnect_lab import (
    CAP_NET_ADMIN,
    CAP_NET_BIND_SERVICE,
    capabilities,
    comes_back,
    dig_corp,
    fails_fast,
    servfail,
    verify_separates_naming_from_routing,
)

pytestmark = pytest.mark.netns


def require_strongswan() -> None:
    require_lab()
    reason = missing_prerequisite()
    if reason is not None:
        skip_or_fail(reason)


@pytest.fixture(scope="module")
def lab() -> Iterator[StrongSwanLab]:
    require_strongswan()
    with lab_session(StrongSwanLab()) as running:
        assert isinstance(running, StrongSwanLab)
        yield running


def test_the_corp_dns_answers_the_pod_through_the_ipsec_tunnel(lab: StrongSwanLab) -> None:
    assert dig_corp(lab) == configs.DB_IP
    assert any(q.client == configs.CORP_GW_IP and q.name == configs.DB_NAME for q in lab.queries("corp"))
    routes = ns_run(lab.pod, ["ip", "route", "show", "table", "all", "192.168.240.0/24"])
    assert f"dev {TUN}" in routes, routes  # charon's route into libipsec's tun device
    # Up as its container would run it: NET_ADMIN (tun, addresses, routes), NET_BIND_SERVICE (500, 4500).
    assert capabilities(lab.procs["vpn-client"].pid) == 1 << CAP_NET_ADMIN | 1 << CAP_NET_BIND_SERVICE
    tcp = lab.tcp_connect(configs.DB_NAME, configs.DB_PORT)
    assert tcp.ok, tcp.detail


def test_the_resolver_answers_both_zones_following_strongswan(lab: StrongSwanLab) -> None:
    assert lab.dig_short(configs.KUBERNETES_NAME) == configs.KUBERNETES_IP
    assert lab.dig_short(configs.DB_NAME) == configs.DB_IP
    assert lab.dig_short(configs.CATCHALL_NAME) == configs.CATCHALL_IP


def test_the_resolve_plugin_writes_the_pushed_server_to_the_shared_file_only(lab: StrongSwanLab) -> None:
    text = lab.resolve_file.read_text()
    assert ss.nameservers(text, str(lab.resolve_file)) == (configs.CORP_DNS_IP,)
    assert "# by strongSwan" in text
    assert lab.pod_exec(["cat", "/etc/resolv.conf"]).stdout == lab.pod_spec.resolv_conf
    # The gateway sent the split domain (RFC 8598); the resolve plugin has nowhere to put it.
    assert "building INTERNAL_DNS_DOMAIN attribute" in lab.log("charon-gw").read_text()
    assert configs.PRIVATE_ZONE not in text


def test_terminating_the_ike_sa_empties_the_file_and_initiating_brings_it_back(lab: StrongSwanLab) -> None:
    lab.terminate()
    done = time.monotonic()
    wait_for(lambda: True if ss.nameservers(lab.resolve_file.read_text(), "f") == () else None,
             what="the name server to leave the file", timeout=5)
    print(f"\nIKE SA terminated: name server gone from the file {1000 * (time.monotonic() - done):.0f} "
          "ms after")
    assert "no servers could be reached" in dig_corp(lab)
    assert ns_run(lab.pod, ["ip", "link", "show", TUN], check=False) != ""  # the tun stays with charon
    started = time.monotonic()
    lab.initiate()
    print(f"IKE SA initiated: name server in the file {1000 * (time.monotonic() - started):.0f} ms after")
    assert dig_corp(lab) == configs.DB_IP


def test_charon_dying_leaves_the_file_but_takes_the_tun_device(lab: StrongSwanLab) -> None:
    lab.kill_vpn_client()
    assert ss.nameservers(lab.resolve_file.read_text(), "f") == (configs.CORP_DNS_IP,)  # stale
    lab.start_vpn_client()  # the container restarts
    assert dig_corp(lab) == configs.DB_IP


def test_the_ike_sa_going_fails_fast_and_a_new_one_answers(lab: StrongSwanLab) -> None:
    fails_fast(lab, lab.terminate, "IKE SA terminated", "lists no name server: no IKE SA with DNS is up")
    comes_back(lab, lab.initiate, "IKE SA initiated again")


def test_charon_dying_fails_fast_and_a_new_charon_is_trusted_once_its_sa_writes(
        lab: StrongSwanLab) -> None:
    fails_fast(lab, lab.kill_vpn_client, "charon killed", f"interface {TUN} is gone or down")
    lab.start_charon()  # the container restarts; its SA is not up yet
    stale = wait_for(lambda: next((r for r in [servfail(lab)] if r and "was written before" in r["ede"]),
                                  None), what="the old file to read as stale", timeout=5)
    assert "no IKE SA has handed DNS since" in stale["ede"]
    comes_back(lab, lab.initiate, "IKE SA of the new charon")
    # The new charon added its line above the dead one's; the SA going takes both out.
    assert lab.resolve_file.read_text().count("nameserver") == 2
    lab.terminate()
    wait_for(lambda: True if lab.resolve_file.read_text() == "" else None, what="an empty file", timeout=5)
    lab.initiate()


def test_verify_separates_naming_from_routing_through_ipsec(lab: StrongSwanLab, tmp_path: Path) -> None:
    verify_separates_naming_from_routing(lab, tmp_path)
