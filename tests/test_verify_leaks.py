"""`splitdns verify leaks`: where the tunnel zones' queries leave, from the resolver's counters.

In process: a real `Server` + `Runtime` with its /metrics, the VPN's DNS a fake upstream on
127.0.0.x, the command run in a thread as a user runs it. The namespace lab runs it around a
real tunnel and a packet counter on eth0 (test_confinement_lab.py)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import pytest

from splitdns import cli
from splitdns.commands import verify as verify_command
from splitdns.commands.verify import leaks
from tests.support.inprocess import FakeUpstream, http, run, serving
from tests.support.processes import free_port
from tests.test_confinement_inprocess import ZONE, corefile, corp_dns, up


def verify(tmp_path: Path, binding: str, whole: bool = False) -> tuple[int, str, dict[str, object]]:
    """`verify leaks` (or, `whole`, the whole `splitdns verify` with its artifact) against a
    server whose tunnel zone is up on `lo`."""
    state, ready, prom = tmp_path / "openvpn.json", free_port("127.0.0.1"), free_port("127.0.0.1")
    conf, out = tmp_path / "Corefile", tmp_path / "leaks"
    result: dict[str, object] = {}

    async def scenario() -> None:
        async with FakeUpstream(corp_dns, "127.0.0.21") as cluster, \
                FakeUpstream(corp_dns, "127.0.0.22") as vpn:
            text = corefile(cluster.target, state, ready, prom, binding)
            conf.write_text(text)
            async with serving(text, runtime=True, clock=time.monotonic, port=free_port("127.0.0.1")) as s:
                up(state, vpn, "lo")
                for _ in range(50):  # bounded: 5 s
                    if (await http(ready, f"/ready?zone={ZONE}"))[0] == 200:
                        break
                    await asyncio.sleep(0.1)
                if whole:
                    resolv = tmp_path / "resolv.conf"  # the pod's, as the kubelet writes it for us
                    resolv.write_text("nameserver 127.0.0.1\noptions ndots:5\n")
                    whole_opts = verify_command.Options(names=[f"db.{ZONE}"], tcp=[], port=s.port,
                                                        conf=str(conf), out=str(out),
                                                        resolv_conf=str(resolv))
                    result["code"] = await asyncio.to_thread(verify_command.run, whole_opts)
                    return
                opts = leaks.Options(conf=str(conf), port=s.port, names=2, out=str(out), down="true",
                                     settle=0.0)
                result["code"] = await asyncio.to_thread(leaks.run, opts)

    run(scenario)
    return int(result["code"]), out.with_suffix(".md").read_text(), \
        json.loads(out.with_suffix(".json").read_text())


def test_bound_every_query_left_by_the_tunnel(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, md, data = verify(tmp_path, "")
    printed = capsys.readouterr().out
    assert code == leaks.EXIT_OK, printed
    assert printed.startswith("no leak: every query sent (4) was bound to its tunnel's interface")
    # The fake upstream's port is not 53 (a random port may begin with 53: whole port only).
    assert re.search(r"to 127\.0\.0\.22:53\b", printed) is None
    assert printed.count("bound to lo: by lo or not at all") == 4
    assert "## after --down" in md and "Ran `true` first." in md
    assert data["leaks"] == 0 and [len(p["queries"]) for p in data["phases"]] == [2, 2]  # type: ignore[index, union-attr]


def test_unbound_queries_are_shown_as_leaks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, data = verify(tmp_path, "bind_to_tunnel off")
    printed = capsys.readouterr().out
    assert code == leaks.EXIT_LEAK, printed
    assert printed.startswith(f"leaks: 4 of the tunnel zones' queries were sent unbound; the upstreams of "
                              f"{ZONE}. are NOT bound")
    assert "NOT bound: where the routing table says" in printed
    assert f"{ZONE}. NOT bound: 127.0.0.22:" in printed
    assert data["leaks"] == 4 and data["unbound"] is True


def test_the_verify_artifact_says_where_the_tunnel_zones_queries_leave(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, md, data = verify(tmp_path, "", whole=True)
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "tunnel zones (local): no leak: every query sent (2) was bound" in printed
    assert "### Where the tunnel zones' queries leave (as `splitdns verify leaks`)" in md
    assert md.count("bound to lo: by lo or not at all") == 2
    assert data["phases"][0]["leaks"][0].startswith("no leak:")  # type: ignore[index]


def test_where_a_query_went_from_two_readings_of_the_counters() -> None:
    zone = f"{ZONE}."
    count = "coredns_proxy_request_duration_seconds_count"
    sent = (count, (("proxy_name", "forward"), ("rcode", "NOERROR"), ("to", "10.8.0.1:53"), ("zone", zone)))
    device = ("splitdns_upstream_interface_info", (("interface", "tun0"), ("to", "10.8.0.1:53"),
                                                   ("zone", zone)))
    before: leaks.Samples = {sent: 4.0}
    fast_key = ("splitdns_fail_fast_answers_total", (("reason", "tunnel_down"), ("zone", zone)))
    after: leaks.Samples = {sent: 5.0, device: 1.0, fast_key: 0.0}
    routes = [(0, 0, "eth0"), (0xC0A8F000, 0xFFFFFF00, "tun0")]
    q = leaks._query(zone, "x", "NOERROR", 1.0, before, after, routes)
    assert q.sent_to == ("10.8.0.1:53",) and q.bound_to == ("tun0",) and not q.leak
    fast = {**after, fast_key: 1.0}
    q = leaks._query(zone, "y", "SERVFAIL", 1.0, after, fast, routes)
    assert q.sent_to == () and q.where() == "not sent: answered at once"
    assert leaks._route_of("192.168.240.1:53", routes) == "by tun0 now"
    assert leaks._route_of("192.0.2.1:53", routes) == "by eth0 now"
    assert leaks._route_of("[2001:db8::1]:53", routes) == "route unknown"


def test_the_main_table_is_read_from_proc(tmp_path: Path) -> None:
    table = tmp_path / "route"
    table.write_text("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
                     "eth0\t00000000\t0100F40A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
                     "tun0\t00F0A8C0\t0100080A\t0003\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
                     "tun1\t0000080A\t00000000\t0000\t0\t0\t0\t00FFFFFF\t0\t0\t0\n")  # not up
    assert leaks._routes(str(table)) == [(0, 0, "eth0"), (0xC0A8F000, 0xFFFFFF00, "tun0")]
    assert leaks._routes(str(tmp_path / "absent")) == []


@pytest.mark.parametrize(("corefile_text", "said"), [
    (". {\n forward . 192.0.2.1\n prometheus 127.0.0.1:9153\n}\n", "has no tunnel zone"),
    ("corp.example {\n openvpn {\n  state /run/s.json\n }\n}\n", "has no `prometheus` directive"),
])
def test_what_it_needs_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str], corefile_text: str,
                               said: str) -> None:
    conf = tmp_path / "Corefile"
    conf.write_text(corefile_text)
    assert cli.main(["verify", "leaks", "-conf", str(conf)]) == leaks.EXIT_USAGE
    assert said in capsys.readouterr().err
