"""`splitdns serve` end to end: a real process, real `dig`, scripted upstreams on 127.0.0.x.

Truncation (a TC reply asked again over TCP, big answers truncated for UDP clients) is end to
end in the hostile catalogue (C3, C4) and in process in tests/test_server_inprocess.py, as are
a dead upstream's two attempts and the serve-stale window.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import dns.message
import dns.rcode
import pytest

from tests.support.processes import dig, free_port, poll_until, scripted_upstream, stop
from tests.support.resolver import run_to_exit, splitdns_serve
from tests.support.scripted_upstream import POISON_A

CLUSTER = [
    {"suffix": "cluster.local", "records": ["kubernetes.default.svc.cluster.local. 30 IN A 10.96.0.1"]},
    {"suffix": ".", "qtype": "A", "records": ["{qname} 3600 IN A 192.0.2.80"]},
]
TUNNEL = [{"suffix": "svc.acme.internal", "records": ["db.svc.acme.internal. 300 IN A 192.168.240.10"]}]


def corefile(cluster: str, tunnel: str, extra: str = "") -> str:
    # The reference scenario's layout without its `:53`, so that -dns.port puts it on a free port.
    return f"""
. {{
    errors
    cache 30
    forward . {cluster}
}}
svc.acme.internal {{
    errors
    cache 30
    forward . {tunnel} {{
        {extra}
    }}
}}
"""


def names(upstream: Any) -> list[str]:
    return [q["qname"].lower() for q in upstream.queries() if "qname" in q]


@pytest.fixture
def pod_layout(tmp_path: Path) -> Any:
    with scripted_upstream(tmp_path, CLUSTER, "127.0.0.21") as cluster, \
            scripted_upstream(tmp_path, TUNNEL, "127.0.0.22") as tunnel, \
            splitdns_serve(tmp_path, corefile(cluster.target, tunnel.target)) as resolver:
        yield resolver, cluster, tunnel


def test_each_zone_goes_to_its_own_upstream(pod_layout: Any) -> None:
    resolver, cluster, tunnel = pod_layout
    k8s = dig("kubernetes.default.svc.cluster.local", server="127.0.0.1", port=resolver.port)
    db = dig("db.svc.acme.internal", server="127.0.0.1", port=resolver.port)
    assert (k8s.status, k8s.rdata) == ("NOERROR", ["10.96.0.1"])
    assert (db.status, db.rdata) == ("NOERROR", ["192.168.240.10"])
    assert names(cluster) == ["kubernetes.default.svc.cluster.local."]
    assert names(tunnel) == ["db.svc.acme.internal."]


def test_label_boundary_sends_lookalike_to_the_catch_all(pod_layout: Any) -> None:
    resolver, cluster, tunnel = pod_layout
    out = dig("svc.acme.internal.example.net", server="127.0.0.1", port=resolver.port)
    assert out.rdata == ["192.0.2.80"]
    assert names(cluster) == ["svc.acme.internal.example.net."] and names(tunnel) == []
    apex = dig("svc.acme.internal", "TXT", server="127.0.0.1", port=resolver.port)
    assert apex.status == "NOERROR" and names(tunnel) == ["svc.acme.internal."]


def test_case_is_ignored_for_routing_and_echoed_to_the_client(pod_layout: Any) -> None:
    resolver, _, tunnel = pod_layout
    out = dig("DB.Svc.ACME.Internal", server="127.0.0.1", port=resolver.port)
    assert out.rdata == ["192.168.240.10"]
    assert out.question == [("DB.Svc.ACME.Internal.", "A")]
    assert names(tunnel) == ["db.svc.acme.internal."]


def test_cache_hit_is_served_without_asking_upstream_and_ttl_is_capped(pod_layout: Any) -> None:
    resolver, cluster, _ = pod_layout
    first = dig("www.example.com", server="127.0.0.1", port=resolver.port)
    assert first.answers[0][1] == 30  # upstream said 3600; `cache 30` caps it
    time.sleep(1.1)
    second = dig("WWW.example.com", server="127.0.0.1", port=resolver.port)
    assert second.rdata == ["192.0.2.80"] and second.answers[0][1] in (28, 29)
    assert second.question == [("WWW.example.com.", "A")]
    assert len(names(cluster)) == 1


def test_upstream_sees_fresh_ids_and_ports_never_the_clients(pod_layout: Any) -> None:
    resolver, cluster, _ = pod_layout
    for i in range(5):
        dig(f"n{i}.example.com", "+noedns", server="127.0.0.1", port=resolver.port)
    seen = [q for q in cluster.queries() if "qname" in q]
    assert len(seen) == 5
    assert len({q["src"] for q in seen}) == 5  # a new socket, so a new source port, each time
    assert all(q["edns"] and q["edns_payload"] == 1232 for q in seen)  # our EDNS, not the client's
    assert len({q["id"] for q in seen}) >= 4  # 16 random bits: a repeat in 5 is very unlikely


def test_no_matching_zone_is_refused_and_so_is_another_class(tmp_path: Path) -> None:
    with scripted_upstream(tmp_path, TUNNEL) as tunnel, \
            splitdns_serve(tmp_path, f"svc.acme.internal {{\n forward . {tunnel.target}\n}}\n") as r:
        assert dig("example.org", server="127.0.0.1", port=r.port).status == "REFUSED"
        assert dig("db.svc.acme.internal", "CH", "TXT", server="127.0.0.1", port=r.port).status == "REFUSED"
        assert tunnel.queries() == []


def test_forged_replies_are_dropped_and_the_genuine_one_accepted(tmp_path: Path) -> None:
    rules = [{"suffix": ".", "records": ["www.example.org. 60 IN A 192.0.2.1"], "delay_ms": 50,
              "forge": {"wrong_id": 20, "wrong_port": 20, "wrong_question": 20}}]
    with scripted_upstream(tmp_path, rules) as up, \
            splitdns_serve(tmp_path, f". {{\n forward . {up.target}\n}}\n") as r:
        for i in range(5):
            out = dig(f"www{i}.example.org", server="127.0.0.1", port=r.port)
            assert out.rdata == ["192.0.2.1"], out.stdout
            assert POISON_A not in out.stdout


def test_nothing_listening_fails_fast(tmp_path: Path) -> None:
    with splitdns_serve(tmp_path, ". {\n forward . 127.0.0.23:9\n}\n") as r:
        out = dig("example.org", server="127.0.0.1", port=r.port)
        print(f"refused upstream: SERVFAIL after {out.elapsed:.3f} s")
        assert out.status == "SERVFAIL" and out.elapsed < 1.0  # ICMP unreachable, no timeout
        assert "EDE: 22" in out.stdout  # No Reachable Authority, with the reason


def test_identical_queries_in_flight_share_one_upstream_query(tmp_path: Path) -> None:
    rules = [{"suffix": ".", "records": ["slow.example.org. 60 IN A 192.0.2.5"], "delay_ms": 300}]
    with scripted_upstream(tmp_path, rules) as up, \
            splitdns_serve(tmp_path, f". {{\n forward . {up.target}\n}}\n") as r:
        results: list[str] = []

        def ask() -> None:
            results.extend(dig("slow.example.org", server="127.0.0.1", port=r.port).rdata)

        threads = [threading.Thread(target=ask) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert results == ["192.0.2.5"] * 8
        assert len(up.queries()) == 1


def test_malformed_queries_never_crash_the_server(pod_layout: Any) -> None:
    resolver, _, _ = pod_layout
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(5)
        s.sendto(b"\x01\x02\x03", ("127.0.0.1", resolver.port))
        s.sendto(b"\xab\xcd\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07exam", ("127.0.0.1", resolver.port))
        # The server reads its socket in order: the first reply is to the truncated query, so
        # the 3-byte packet (fewer than 12 bytes) got no answer at all.
        data, _ = s.recvfrom(512)
        reply = dns.message.from_wire(data)
        assert reply.id == 0xABCD and reply.rcode() == dns.rcode.FORMERR
    assert dig("db.svc.acme.internal", server="127.0.0.1", port=resolver.port).status == "NOERROR"


def test_tcp_clients_are_served_with_pipelining(pod_layout: Any) -> None:
    resolver, _, _ = pod_layout
    out = dig("db.svc.acme.internal", "kubernetes.default.svc.cluster.local", "+tcp", "+keepopen",
              server="127.0.0.1", port=resolver.port)
    assert "192.168.240.10" in out.stdout and "10.96.0.1" in out.stdout


def test_log_lines_use_corednss_format(tmp_path: Path) -> None:
    with scripted_upstream(tmp_path, TUNNEL) as up, \
            splitdns_serve(tmp_path, f"svc.acme.internal {{\n log\n forward . {up.target}\n}}\n") as r:
        dig("db.svc.acme.internal", server="127.0.0.1", port=r.port)
        line = next(ln for ln in r.stderr().splitlines() if ln.startswith("[INFO] 127.0.0.1:"))
        assert '"A IN db.svc.acme.internal. udp' in line and " NOERROR qr,rd,ra " in line


def test_forward_to_itself_refuses_to_start_and_explains(tmp_path: Path) -> None:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\noptions ndots:5\n")
    code, stderr = run_to_exit(tmp_path, f".:53 {{\n forward . {resolv}\n}}\n")
    assert code == 2
    assert "this server itself" in stderr and "dnsPolicy: None" in stderr and "Corefile:2" in stderr


def test_bad_corefile_exits_2_naming_file_and_line(tmp_path: Path) -> None:
    code, stderr = run_to_exit(tmp_path, ". {\n errors\n etcd example.org\n}\n")
    assert code == 2
    assert "Corefile:3: 'etcd' is a CoreDNS plugin that splitdns does not implement" in stderr


def test_serve_stale_answers_from_an_expired_entry_when_the_upstream_dies(tmp_path: Path) -> None:
    rules = [{"suffix": ".", "records": ["db.svc.acme.internal. 1 IN A 192.168.240.10"]}]
    text = """svc.acme.internal {{
        cache 1 {{
            success 1024 1 1
            serve_stale 1h verify
        }}
        forward . {target} {{
            max_fails 0
            read_timeout 300ms
        }}
    }}"""
    with scripted_upstream(tmp_path, rules) as up, \
            splitdns_serve(tmp_path, text.format(target=up.target)) as r:
        assert dig("db.svc.acme.internal", server="127.0.0.1", port=r.port).rdata == ["192.168.240.10"]
        up.set_rules([{"suffix": ".", "action": "drop"}])
        time.sleep(1.2)  # the entry has expired
        out = dig("db.svc.acme.internal", server="127.0.0.1", port=r.port)
        assert (out.status, out.rdata) == ("NOERROR", ["192.168.240.10"])
        assert out.answers[0][1] == 1  # RFC 8767's 30 s, lowered to the cap (`cache 1`)
        assert len([q for q in up.queries() if "qname" in q]) >= 2  # it did ask first (verify)


def test_log_and_errors_can_write_one_json_object_per_line(tmp_path: Path) -> None:
    import json

    text = """. {{
        log {{
            format json
        }}
        errors {{
            format json
        }}
        forward . {target}
    }}"""
    with splitdns_serve(tmp_path, text.format(target="127.0.0.23:9")) as r:  # nothing listens there
        dig("example.org", server="127.0.0.1", port=r.port)
        lines = [json.loads(ln) for ln in r.stderr().splitlines() if ln.startswith("{")]
        info = next(x for x in lines if x["level"] == "info")
        error = next(x for x in lines if x["level"] == "error")
        assert (info["name"], info["type"], info["rcode"]) == ("example.org.", "A", "SERVFAIL")
        assert error["rcode"] == 2 and "connection refused" in error["error"]


def test_a_dead_upstream_is_named_by_its_address_in_the_ede_and_the_errors_line(tmp_path: Path) -> None:
    with splitdns_serve(tmp_path, ". {\n errors\n forward . 127.0.0.23:9\n}\n") as r:
        out = dig("example.org", server="127.0.0.1", port=r.port)
        want = "127.0.0.23:9: connection refused (nothing listens there)"
        assert out.status == "SERVFAIL" and want in out.stdout, out.stdout
        errors = [ln for ln in r.stderr().splitlines() if ln.startswith("[ERROR] plugin/errors:")]
        assert errors and all(want in ln for ln in errors), r.stderr()


def test_a_port_in_use_names_the_address_and_the_way_out(tmp_path: Path) -> None:
    """A real process against a real TCP listener on its port: no Python wording reaches the user."""
    import subprocess
    import sys

    corefile = tmp_path / "Corefile"
    corefile.write_text(". {\n forward . 192.0.2.1\n}\n")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "splitdns", "serve", "-conf", str(corefile),
                               "-dns.port", str(port)], stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=30)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(f"[ERROR] cannot listen on dns://127.0.0.1:{port}: Address already in use: "
                                  "another process holds that address and port"), done.stderr
    assert "attempting" not in done.stderr and "Errno" not in done.stderr


# What serving must never load (the sidecar's memory, and its image holds none of them): the
# cluster tools' modules, and what only a rare reply, a typo or another directive needs.
NOT_FOR_SERVING = ("splitdns.kube.deploy.admission", "splitdns.kube.deploy.manifests",
                   "splitdns.commands.render",
                   "yaml", "lightkube", "kubernetes_validate", "jsonschema", "aiohttp", "cryptography",
                   "prometheus_client", "dns.message", "dns.name", "importlib.metadata", "email",
                   "hashlib", "secrets", "difflib", "ssl", "_ssl")


@pytest.mark.parametrize("metrics", [False, True], ids=["scenario", "with-prometheus-unscraped"])
def test_serving_the_scenario_loads_nothing_of_the_cluster_tools(tmp_path: Path, metrics: bool) -> None:
    """The scenario's Corefile served (a hit and a miss in each zone, plain answers) and stopped as
    the kubelet stops it: the modules the process held at exit, none of NOT_FOR_SERVING. Without
    uvloop, as the resolver image runs (uvloop imports ssl itself). With a `prometheus` endpoint
    nobody scraped, still none: prometheus_client is imported by the first scrape."""
    loaded_file, conf = tmp_path / "modules.txt", tmp_path / "Corefile"
    code = ("import atexit, sys\nsys.modules['uvloop'] = None\nfrom splitdns.cli import main\n"
            "out = sys.argv.pop(1)\n"
            "atexit.register(lambda: open(out, 'w').write('\\n'.join(sorted(sys.modules))))\n"
            "sys.argv[0] = 'splitdns'\nsys.exit(main())\n")
    with scripted_upstream(tmp_path, CLUSTER, "127.0.0.21") as cluster, \
            scripted_upstream(tmp_path, TUNNEL, "127.0.0.22") as tunnel:
        port, metrics_port = free_port("127.0.0.1"), free_port("127.0.0.1")
        conf.write_text(corefile(cluster.target, tunnel.target).replace(
            "errors\n", f"errors\n    prometheus 127.0.0.1:{metrics_port}\n", 1) if metrics else
            corefile(cluster.target, tunnel.target))
        with (tmp_path / "out.log").open("wb") as out:
            process = subprocess.Popen([sys.executable, "-c", code, str(loaded_file), "serve", "-conf",
                                        str(conf), "-dns.port", str(port)], stdout=out,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            poll_until("splitdns serve to listen", 10.0,
                       lambda: True if "splitdns-" in (tmp_path / "out.log").read_text() else None)
            for name in ("www.example.com", "db.svc.acme.internal") * 2:  # a miss, then a hit
                assert dig(name, server="127.0.0.1", port=port).status == "NOERROR"
        finally:
            stop(process)
    loaded = set(loaded_file.read_text().split())
    assert "splitdns.shell.server" in loaded  # it did serve
    assert not {m for m in loaded for heavy in NOT_FOR_SERVING if m == heavy or m.startswith(heavy + ".")}
