"""A real OpenConnect tunnel (ocserv and openconnect) in the namespace lab, and our vpnc-script.

The pod runs a stock openconnect with our hook as its `--script`: the tunnel comes up, the
corp DNS answers through it (dig from the pod, seen at the corp DNS as the gateway's SNAT
address), the hook records what ocserv pushed and leaves the pod's resolv.conf alone, and
goes down with the state file removed at `disconnect`. Figures are printed (run with -s).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from splitdns.core import openconnect as oc
from tests.lab import Lab, configs
from tests.lab.fixtures import lab_session, require_lab
from tests.lab.netns import ns_run, wait_for
from tests.lab.openconnect import OpenConnectLab, missing_prerequisite
from tests.support.prerequisites import skip_or_fail

pytestmark = pytest.mark.netns


def require_openconnect() -> None:
    require_lab()
    reason = missing_prerequisite()
    if reason is not None:
        skip_or_fail(reason)


@pytest.fixture(scope="module")
def lab() -> Iterator[OpenConnectLab]:
    require_openconnect()
    with lab_session(OpenConnectLab()) as running:
        assert isinstance(running, OpenConnectLab)
        yield running


def dig_corp(lab: Lab, name: str = configs.DB_NAME) -> str:
    """Ask the corp DNS itself from the pod (not the resolver): only the tunnel reaches it.
    dig's stdout: the address, or its complaint that no server could be reached."""
    out = lab.pod_exec(["dig", f"@{configs.CORP_DNS_IP}", name, "+short", "+time=1", "+tries=1"])
    return out.stdout.strip()


def test_the_corp_dns_answers_the_pod_through_the_openconnect_tunnel(lab: OpenConnectLab) -> None:
    assert dig_corp(lab) == configs.DB_IP
    # Through the tunnel and the gateway's SNAT (the corp DNS sees the gateway's address).
    assert any(q.client == configs.CORP_GW_IP and q.name == configs.DB_NAME for q in lab.queries("corp"))
    routes = ns_run(lab.pod, ["ip", "route", "show", "192.168.240.0/24"])
    assert f"dev {lab.iface}" in routes, routes  # the split-include route, set by the stock vpnc-script
    tcp = lab.tcp_connect(configs.DB_NAME, configs.DB_PORT)
    assert tcp.ok, tcp.detail


def test_the_hook_records_what_ocserv_pushed_and_leaves_resolv_conf_alone(lab: OpenConnectLab) -> None:
    recorded = oc.parse(lab.state_file.read_text(), str(lab.state_file))
    assert recorded.reason == "connect" and recorded.tundev == lab.iface
    assert recorded.servers == (configs.CORP_DNS_IP,)
    assert recorded.default_domains == (f"{configs.PRIVATE_ZONE}.",)
    assert recorded.split_domains == (f"{configs.PRIVATE_ZONE}.",)
    # `ip netns exec` shows the pod its /etc/netns/<pod>/resolv.conf: what a vpnc-script would rewrite.
    assert lab.pod_exec(["cat", "/etc/resolv.conf"]).stdout == lab.pod_spec.resolv_conf


def test_openconnect_stopping_removes_the_state_and_the_tunnel_then_it_comes_back(
        lab: OpenConnectLab) -> None:
    lab.stop_vpn_client()  # SIGTERM, as the kubelet stops the VPN container: `disconnect` runs
    stopped = time.monotonic()
    wait_for(lambda: True if not lab.state_file.exists() else None, what="the state file to go", timeout=5)
    print(f"\nopenconnect stopped: state file gone {1000 * (time.monotonic() - stopped):.0f} ms "
          "after SIGTERM")
    assert ns_run(lab.pod, ["ip", "link", "show", lab.iface], check=False) == ""
    assert "no servers could be reached" in dig_corp(lab)  # no tunnel, no route to the corp DNS
    assert lab.pod_exec(["cat", "/etc/resolv.conf"]).stdout == lab.pod_spec.resolv_conf
    started = time.monotonic()
    lab.start_vpn_client()
    print(f"openconnect started: state file written {1000 * (time.monotonic() - started):.0f} ms "
          "after")
    wait_for(lambda: True if dig_corp(lab) == configs.DB_IP else None, what="the corp DNS again", timeout=5)
