"""The reference scenario end to end: a pod netns with our resolver and an OpenVPN sidecar.

Real processes in network namespaces (see tests/lab/topology.py for the picture): dnsmasq as
the cluster DNS, a real OpenVPN server and client, dnsmasq as the private-zone DNS and a TCP
service on 5432 behind the VPN server, iptables FORWARD + MASQUERADE there. Each DNS server
answers every flagship name with its own address (tests/lab/configs.py), so an answer proves
which server it came from; fresh names then prove it again from the servers' query logs.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lab import Lab, LabError, configs
from tests.lab.fixtures import lab_session, require_lab
from tests.lab.netns import alive, list_netns, run, wait_for
from tests.lab.state import ETC_NETNS, STATE_BASE, cleanup_stale, locked

pytestmark = pytest.mark.netns

TESTS_DIR = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with lab_session() as running:
        yield running


def fresh(suffix: str) -> str:
    """A name no cache has seen, so the answer must come from an upstream right now."""
    return f"lab-{secrets.token_hex(4)}.{suffix}"


def clients_seen(lab: Lab, server: str, name: str, timeout: float = 3.0) -> set[str]:
    """Client addresses `server` logged for `name` (waits briefly: dnsmasq logs lazily)."""

    def probe() -> set[str] | None:
        found = {q.client for q in lab.queries(server) if q.name == name}
        return found or None

    try:
        return wait_for(probe, what=f"{name} in the {server} DNS log", timeout=timeout)
    except LabError:
        return set()


# name asked in the pod, the answer that proves the right server, the other server's answer,
# a fresh name in the same zone, which server must log it and from which client address.
ROUTES = {
    "cluster-name": (
        configs.KUBERNETES_NAME, configs.KUBERNETES_IP, configs.CORP_DECOY_KUBERNETES_IP,
        "default.svc.cluster.local", "cluster", configs.POD_IP,
    ),
    "private-zone": (
        configs.DB_NAME, configs.DB_IP, configs.CLUSTER_DECOY_DB_IP,
        configs.PRIVATE_ZONE, "corp", configs.CORP_GW_IP,  # masqueraded by the VPN server
    ),
    "catch-all": (
        configs.CATCHALL_NAME, configs.CATCHALL_IP, configs.CORP_DECOY_CATCHALL_IP,
        configs.CATCHALL_NAME, "cluster", configs.POD_IP,
    ),
}  # fmt: skip
OWN_ZONE = {"cluster": "default.svc.cluster.local", "corp": configs.PRIVATE_ZONE}  # each server's own


@pytest.mark.parametrize("route", ROUTES.values(), ids=ROUTES.keys())
def test_dig_in_the_pod_answers_from_the_right_server(
    lab: Lab, route: tuple[str, str, str, str, str, str]
) -> None:
    name, expected, other_servers_answer, zone, server, client = route
    answer = lab.dig_short(name)  # dig @127.0.0.1 NAME +short, inside the pod
    assert answer == expected, (
        f"{name}: got {answer!r}, want {expected} from the {server} DNS"
        + (" (that is the OTHER server's answer)" if answer == other_servers_answer else "")
        + f"\n{lab.log_tails()}"
    )
    other = "corp" if server == "cluster" else "cluster"
    probe = fresh(zone)
    lab.dig_short(probe)
    assert clients_seen(lab, server, probe) == {client}, lab.log_tails()
    # A leak of the probe to the other server would reach it before a later query of its own
    # zone: once that marker is in its log, the probe's absence there is final.
    marker = fresh(OWN_ZONE[other])
    lab.dig_short(marker)
    assert clients_seen(lab, other, marker) != set(), lab.log_tails()
    assert probe not in {q.name for q in lab.queries(other)}, f"{probe} leaked to {other}"


def test_pod_resolv_conf_is_what_the_pod_spec_produces(lab: Lab) -> None:
    assert lab.pod_exec(["cat", "/etc/resolv.conf"]).stdout == configs.SCENARIO_RESOLV_CONF
    # The app's view: libc reads that file, asks 127.0.0.1, gets the tunnel zone's answer.
    out = lab.pod_exec(["getent", "ahostsv4", configs.DB_NAME]).stdout
    assert out.split()[:1] == [configs.DB_IP], out


def test_tcp_to_the_db_goes_through_the_tunnel(lab: Lab) -> None:
    result = lab.tcp_connect(configs.DB_NAME, configs.DB_PORT)
    assert result.ok, f"{result.detail}\n{lab.log_tails()}"
    assert result.detail == f"acme-db you are {configs.CORP_GW_IP}"  # seen after MASQUERADE


def test_split_dns_survives_replacing_the_pod(lab: Lab) -> None:
    before = lab.pod_pids()
    # Hand edits in the running pod (a `kubectl exec` fix of resolv.conf, and a network tweak) ...
    lab.pod_exec(["sh", "-c", f"echo 'nameserver {configs.CLUSTER_DNS_IP}' > /etc/resolv.conf"])
    lab.pod_exec(["ip", "addr", "add", "10.244.0.99/32", "dev", "lo"])
    assert configs.CLUSTER_DNS_IP in lab.pod_exec(["cat", "/etc/resolv.conf"]).stdout

    lab.replace_pod()

    after = lab.pod_pids()
    assert not set(before.values()) & set(after.values()), (before, after)
    # ... are gone: the new pod gets what its spec says, and the spec is what works.
    assert "10.244.0.99" not in lab.pod_exec(["ip", "addr", "show", "dev", "lo"]).stdout
    assert lab.pod_exec(["cat", "/etc/resolv.conf"]).stdout == configs.SCENARIO_RESOLV_CONF
    assert lab.dig_short(configs.DB_NAME) == configs.DB_IP, lab.log_tails()
    assert lab.dig_short(configs.KUBERNETES_NAME) == configs.KUBERNETES_IP, lab.log_tails()
    assert lab.tcp_connect(configs.DB_NAME, configs.DB_PORT).ok
    assert lab.timings["replace_pod"] < 15


def test_without_masquerade_names_resolve_but_tcp_to_5432_fails(lab: Lab) -> None:
    assert lab.tcp_connect(configs.DB_NAME, configs.DB_PORT).ok, "baseline"
    try:
        lab.set_masquerade(False)
        assert not lab.masquerade_enabled()
        # Names still resolve: the corp DNS host has a route back to the tunnel ...
        assert lab.dig_short(configs.DB_NAME) == configs.DB_IP
        assert lab.dig_short(fresh(configs.PRIVATE_ZONE)) == configs.CORP_WILDCARD_IP
        direct = fresh(configs.PRIVATE_ZONE)
        assert lab.dig_short(direct, server=configs.CORP_DNS_IP) == configs.CORP_WILDCARD_IP
        assert clients_seen(lab, "corp", direct) == {lab.tunnel_ip()}  # not translated any more
        # ... but the db has none, so its SYN-ACK never leaves: connect times out.
        t0 = time.monotonic()
        result = lab.tcp_connect(configs.DB_NAME, configs.DB_PORT, timeout=1.5)
        assert not result.ok and "timed out" in result.detail, result.detail
        assert time.monotonic() - t0 < 10
    finally:
        lab.set_masquerade(True)
    assert lab.masquerade_enabled()
    result = lab.tcp_connect(configs.DB_NAME, configs.DB_PORT)
    assert result.ok and result.detail == f"acme-db you are {configs.CORP_GW_IP}", result.detail


def test_a_tunnel_that_carries_the_query_but_not_the_reply_times_out(lab: Lab) -> None:
    # What a user sees: "looks exactly like a resolver that never received the query". It did.
    name = fresh(configs.PRIVATE_ZONE)
    try:
        lab.set_masquerade(False)
        lab.set_corp_dns_return_route(False)
        out = lab.dig_short(name, "+time=1", "+tries=1", server=configs.CORP_DNS_IP)
        assert "timed out" in out, out
        assert clients_seen(lab, "corp", name) == {lab.tunnel_ip()}
    finally:
        lab.set_corp_dns_return_route(True)
        lab.set_masquerade(True)
    again = fresh(configs.PRIVATE_ZONE)
    assert lab.dig_short(again, server=configs.CORP_DNS_IP) == configs.CORP_WILDCARD_IP


# ---- the lab itself: it must leave nothing behind -------------------------------------------
LAB_LINKS = {"eth0", "pod0", "kdns0", "vpn0", "corp0", "db0", "br0", "tun0"}


def host_links() -> set[str]:
    out = run(["ip", "-o", "link", "show"])
    return {line.split(":", 2)[1].strip().split("@")[0] for line in out.splitlines()}


def host_rules() -> list[str]:
    """The host's iptables rules without counters and comments."""
    out = run(["iptables-save"], check=False)
    return [r for r in out.splitlines() if not r.startswith(("#", ":"))]


def assert_gone(prefix: str, pids: list[tuple[int, int | None]]) -> None:
    assert not [ns for ns in list_netns() if ns.startswith(prefix + "-")]
    assert not (STATE_BASE / prefix).exists()
    assert not (ETC_NETNS / f"{prefix}-pod").exists()
    assert not [pid for pid, start in pids if alive(pid, start)]


def test_down_removes_everything_and_the_host_is_untouched() -> None:
    links, rules = host_links(), host_rules()
    with lab_session() as second:
        prefix = second.prefix
        pids = [(p.pid, p.start_time) for p in second.procs.values()]
        # Links are created inside the namespaces: none of ours ever shows up on the host.
        assert not (host_links() - links) & LAB_LINKS
        assert host_rules() == rules, "the lab changed the host's iptables rules"
    assert_gone(prefix, pids)
    assert host_rules() == rules


def test_nothing_can_leave_the_lab(lab: Lab) -> None:
    # Every namespace's default route ends at the node, and the node has none: a packet for
    # anything outside the lab's subnets dies there.
    for role in ("node", "corp", "db"):
        # `ip route get` itself must work (the namespace exists) and say there is no route;
        # any other failure is the test's, not "no route".
        run(["ip", "-n", lab.ns(role), "route", "show"])  # raises if the namespace is not there
        out = subprocess.run(["ip", "-n", lab.ns(role), "route", "get", "192.0.2.1"], capture_output=True,
                             text=True, timeout=10, check=False)
        assert out.returncode != 0 and "Network is unreachable" in out.stderr, \
            f"{role}: {out.returncode} {out.stdout}{out.stderr}"
    out = run(["ip", "-n", lab.pod, "route", "get", "192.0.2.1"])
    assert f"via {configs.NODE_POD_GW} dev eth0" in out


def test_a_crashed_run_is_cleaned_up_at_the_next_start() -> None:
    crash = (
        "import os, sys; from tests.lab import Lab; lab = Lab().up(); "
        "print(lab.prefix, *[p.pid for p in lab.procs.values()], flush=True); os._exit(9)"
    )
    require_lab()
    env = {**os.environ, "PYTHONPATH": str(TESTS_DIR.parent)}
    out = subprocess.run([sys.executable, "-c", crash], env=env, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.returncode == 9, out.stderr
    prefix, *pids = out.stdout.split()
    assert [ns for ns in list_netns() if ns.startswith(prefix + "-")], "nothing to clean?"
    with locked():
        removed = cleanup_stale()
    assert prefix in removed
    assert_gone(prefix, [(int(pid), None) for pid in pids])


def test_a_resolver_that_dies_fails_the_start_with_its_log(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = ["sh", "-c", "echo 'Corefile rejected: example error' >&2; exit 3"]
    monkeypatch.setattr(configs, "resolver_argv", lambda kind, corefile: broken)
    failing = Lab()
    with pytest.raises(LabError, match=r"(?s)exited with code 3.*Corefile rejected"):  # noqa: SIM117
        with lab_session(failing):
            pass
    assert failing.record is None and failing.last_prefix  # up() tore down what it built
    assert_gone(failing.last_prefix, [])
