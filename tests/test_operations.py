"""Living in a pod: health, readiness, metrics, reload, loops, graceful stop. Real processes."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import dns.message
import dns.rcode
import pytest

from tests.helpers import query
from tests.support import user_text
from tests.support.processes import dig, free_port, poll_until, scripted_upstream, stop
from tests.support.resolver import dnsmasq_forwarder, http_get, splitdns_serve

TUNNEL = [{"suffix": "svc.acme.internal", "records": ["db.svc.acme.internal. 300 IN A 192.168.240.10"]}]
CLUSTER = [{"suffix": ".", "records": ["{qname} 30 IN A 10.96.0.1"]}]


def ops_corefile(cluster: str, tunnel: str, health: int, ready: int, metrics: int,
                 extra_tunnel: str = "", reload: str = "") -> str:
    return f"""
. {{
    health 127.0.0.1:{health} {{
        lameduck 1s
    }}
    ready 127.0.0.1:{ready} {{
        probe db.svc.acme.internal
    }}
    prometheus 127.0.0.1:{metrics}
    {reload}
    errors
    cache 30
    forward . {cluster}
}}
svc.acme.internal {{
    errors
    cache 30
    loop
    forward . {tunnel} {{
        max_fails 1
        health_check 200ms
        read_timeout 300ms
        {extra_tunnel}
    }}
}}
"""


class Ports:
    def __init__(self) -> None:
        self.health, self.ready, self.metrics = (free_port("127.0.0.1") for _ in range(3))


def test_health_ready_and_metrics_endpoints(tmp_path: Path) -> None:
    ports = Ports()
    with scripted_upstream(tmp_path, CLUSTER, "127.0.0.21") as cluster, \
            scripted_upstream(tmp_path, [{"suffix": ".", "action": "drop"}], "127.0.0.22") as tunnel, \
            splitdns_serve(tmp_path, ops_corefile(cluster.target, tunnel.target, ports.health,
                                                  ports.ready, ports.metrics)) as r:
        assert http_get(ports.health, "/health") == (200, "OK")
        # The tunnel's DNS does not answer yet: not ready, and the body says which zone and why.
        status, body = http_get(ports.ready, "/ready")
        assert status == 503 and "svc.acme.internal." in body and "db.svc.acme.internal" in body
        assert http_get(ports.ready, "/ready?zone=svc.acme.internal")[0] == 503
        tunnel.set_rules(TUNNEL)
        poll_until("ready", 5, lambda: True if http_get(ports.ready, "/ready")[0] == 200 else None)
        assert http_get(ports.ready, "/ready?zone=svc.acme.internal") == (200, "OK")
        assert http_get(ports.ready, "/ready?zone=nope.example")[0] == 404

        for _ in range(3):
            dig("db.svc.acme.internal", server="127.0.0.1", port=r.port)
        status, text = http_get(ports.metrics, "/metrics")
        assert status == 200
        server = f"dns://:{r.port}"
        assert (f'coredns_dns_requests_total{{family="1",proto="udp",server="{server}",type="A",'
                'view="",zone="svc.acme.internal."} 3.0') in text
        assert (f'coredns_cache_hits_total{{server="{server}",type="success",view="",'
                'zones="svc.acme.internal."} 2.0') in text
        assert 'coredns_proxy_request_duration_seconds_count{proxy_name="forward",rcode="NOERROR",' \
            f'to="{tunnel.target}",zone="svc.acme.internal."}}' in text
        assert f'splitdns_upstream_healthy{{to="{tunnel.target}",zone="svc.acme.internal."}} 1.0' in text
        assert 'splitdns_zone_ready{zone="svc.acme.internal."} 1.0' in text
        assert "db.svc" not in text  # no query names in labels

        # A later tunnel outage: /ready stays up (no flapping the pod out of service), the
        # per-zone view says the zone is down, and the zone answers at once.
        tunnel.set_rules([{"suffix": ".", "action": "drop"}])
        for i in range(3):
            dig(f"x{i}.svc.acme.internal", server="127.0.0.1", port=r.port, timeout=3)
        poll_until("zone marked down", 5, lambda: True if http_get(
            ports.ready, "/ready?zone=svc.acme.internal")[0] == 503 else None)
        assert http_get(ports.ready, "/ready")[0] == 200
        status, body = http_get(ports.ready, "/ready?zone=svc.acme.internal")
        assert "every upstream" in body and "down" in body


def kubelet_volume(root: Path, corefile: str) -> Path:
    """A ConfigMap volume as the kubelet lays it out: Corefile -> ..data/Corefile, ..data -> ..TS."""
    root.mkdir(exist_ok=True)
    swap_configmap(root, corefile)
    (root / "Corefile").symlink_to("..data/Corefile")
    return root / "Corefile"


def swap_configmap(root: Path, corefile: str) -> None:
    """The kubelet's atomic update: a new timestamped dir, then `..data` renamed over."""
    stamp = root / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.monotonic_ns()}"
    stamp.mkdir()
    (stamp / "Corefile").write_text(corefile)
    tmp = root / "..data_tmp"
    tmp.symlink_to(stamp.name)
    os.replace(tmp, root / "..data")


@contextlib.contextmanager
def serve_path(tmp_path: Path, path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """splitdns on an existing Corefile path (the symlinked one); stopped on exit, and what it wrote
    goes to the suite's check of user-facing text (tests/support/user_text.py)."""
    port = free_port("127.0.0.1")
    out_log, err_log = tmp_path / "out.log", tmp_path / "err.log"
    with out_log.open("wb") as out, err_log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "splitdns", "serve", "-conf", str(path), "-dns.port",
                                 str(port)], stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    try:
        poll_until("start", 10, lambda: True if "splitdns-" in out_log.read_text() else None)
        yield proc, port
    finally:
        stop(proc)
        user_text.seen("serve stdout", out_log.read_text(errors="replace"))
        user_text.seen("serve stderr", err_log.read_text(errors="replace"))


def test_reload_follows_a_configmap_symlink_swap_and_keeps_serving_on_a_bad_one(tmp_path: Path) -> None:
    metrics = free_port("127.0.0.1")
    one = [{"suffix": ".", "records": ["{qname} 60 IN A 192.0.2.1"]}]
    two = [{"suffix": ".", "records": ["{qname} 60 IN A 192.0.2.2"]}]
    with scripted_upstream(tmp_path, one, "127.0.0.21") as up1, \
            scripted_upstream(tmp_path, two, "127.0.0.22") as up2:
        text = f"example.org {{{{\n reload 2s 1s\n prometheus 127.0.0.1:{metrics}\n forward . {{}}\n}}}}\n"
        path = kubelet_volume(tmp_path / "volume", text.format(up1.target))
        with serve_path(tmp_path, path) as (proc, port):
            assert dig("a.example.org", server="127.0.0.1", port=port).rdata == ["192.0.2.1"]
            started = time.monotonic()
            swap_configmap(tmp_path / "volume", text.format(up2.target))
            poll_until("the new upstream", 6, lambda: True if dig(
                "b.example.org", server="127.0.0.1", port=port).rdata == ["192.0.2.2"] else None)
            print(f"reload picked up the ConfigMap swap after {time.monotonic() - started:.1f} s")

            # A bad Corefile: logged with file and line, the old config keeps answering.
            swap_configmap(tmp_path / "volume", "example.org {\n reload 2s 1s\n forward . nowhere\n}\n")
            proc.send_signal(signal.SIGUSR1)  # and SIGUSR1 reloads at once
            poll_until("the reload error", 5, lambda: True if "forward" in (tmp_path / "err.log").read_text()
                       and "still serving" in (tmp_path / "err.log").read_text() else None)
            err = (tmp_path / "err.log").read_text()
            assert "Corefile:3:" in err and "hostnames are not supported" in err
            assert dig("c.example.org", server="127.0.0.1", port=port).rdata == ["192.0.2.2"]
            assert "coredns_reload_failed_total 1.0" in http_get(metrics, "/metrics")[1]
            assert proc.poll() is None


def test_sigterm_under_load_loses_no_query_and_exits_zero(tmp_path: Path) -> None:
    ports = Ports()
    slow = [{"suffix": "svc.acme.internal", "records": ["db.svc.acme.internal. 300 IN A 192.168.240.10"],
             "delay_ms": 250}]
    with scripted_upstream(tmp_path, CLUSTER, "127.0.0.21") as cluster, \
            scripted_upstream(tmp_path, slow, "127.0.0.22") as tunnel, \
            splitdns_serve(tmp_path, ops_corefile(cluster.target, tunnel.target, ports.health,
                                                  ports.ready, ports.metrics)) as r:
        poll_until("ready", 5, lambda: True if http_get(ports.ready, "/ready")[0] == 200 else None)
        results: list[str] = []

        def load() -> None:
            """Queries back to back for 0.8 s, inside the 1 s lameduck; each must be answered."""
            deadline = time.monotonic() + 0.8
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.settimeout(1.0)
                for i in range(10_000):
                    if time.monotonic() > deadline:
                        break
                    sock.sendto(query(f"n{i}.example.com.").to_wire(), ("127.0.0.1", r.port))
                    try:
                        results.append(dns.rcode.to_text(dns.message.from_wire(sock.recv(4096)).rcode()))
                    except TimeoutError:
                        results.append("TIMEOUT")

        tcp_result: list[str] = []
        in_flight = threading.Thread(target=lambda: tcp_result.append(
            dig("slow.svc.acme.internal", "+tcp", server="127.0.0.1", port=r.port).status))
        in_flight.start()
        time.sleep(0.1)  # the TCP query is now waiting on the 250 ms upstream
        loader = threading.Thread(target=load)
        loader.start()
        r.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        # At once (the signal takes a few ms to arrive): the pod leaves its Services.
        poll_until("/ready to fail", 0.3, lambda: True if http_get(ports.ready, "/ready")[0] == 503 else None)
        print(f"/ready failed {1000 * (time.monotonic() - signalled):.0f} ms after SIGTERM")
        assert http_get(ports.health, "/health")[0] == 200  # but it is alive
        loader.join(10)
        in_flight.join(10)
        assert r.process.wait(10) == 0
        print(f"SIGTERM under load: {len(results)} queries during lameduck, "
              f"{results.count('NOERROR')} answered")
        assert len(results) > 50 and results == ["NOERROR"] * len(results)
        assert tcp_result == ["NOERROR"]


def test_a_loop_created_by_a_reload_is_caught_without_a_crash(tmp_path: Path) -> None:
    """dnsmasq, a real server, forwards back to us: the classic loop through another resolver."""
    ports = Ports()
    dns_port = free_port("127.0.0.1")
    with scripted_upstream(tmp_path, CLUSTER, "127.0.0.21") as cluster, \
            scripted_upstream(tmp_path, TUNNEL, "127.0.0.22") as tunnel, \
            dnsmasq_forwarder(tmp_path, "127.0.0.31", f"127.0.0.1#{dns_port}") as loop_port:
        text = ops_corefile(cluster.target, tunnel.target, ports.health, ports.ready, ports.metrics,
                            reload="reload 2s 1s")
        with splitdns_serve(tmp_path, text, port=dns_port) as r:
            poll_until("ready", 5, lambda: True if http_get(ports.ready, "/ready")[0] == 200 else None)
            corefile = r.workdir / "Corefile"
            corefile.write_text(text.replace(tunnel.target, f"127.0.0.31:{loop_port}"))
            r.process.send_signal(signal.SIGUSR1)
            poll_until("loop detection", 6, lambda: True if "loop detected" in r.stderr() else None)
            started = time.monotonic()
            out = dig("db.svc.acme.internal", server="127.0.0.1", port=r.port)
            elapsed = time.monotonic() - started
            print(f"looping zone answered {out.status} in {elapsed * 1000:.0f} ms")
            assert out.status == "SERVFAIL" and "forwarding loop" in out.stdout and elapsed < 1
            status, body = http_get(ports.ready, "/ready")
            assert status == 503 and "forwarding loop detected for zone svc.acme.internal." in body
            assert dig("kubernetes.default.svc.cluster.local", server="127.0.0.1", port=r.port).status \
                == "NOERROR"  # the other zone is untouched
            assert r.process.poll() is None  # no crash, no restart loop
            # Fix the Corefile: the zone comes back.
            corefile.write_text(text)
            r.process.send_signal(signal.SIGUSR1)
            poll_until("zone back", 6, lambda: True if dig(
                "db.svc.acme.internal", server="127.0.0.1", port=r.port).status == "NOERROR" else None)


@pytest.mark.parametrize(("directive", "line"), [("health :notaport", 2), ("reload 1s", 2),
                                                 ("ready {\n probe\n }", 3), ("loop extra", 2)])
def test_bad_operations_directives_are_config_errors(directive: str, line: int) -> None:
    from splitdns import config
    from splitdns.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        config.loads(f". {{\n {directive}\n forward . 192.0.2.1\n}}\n", "Corefile", env={})
    assert str(caught.value).startswith(f"Corefile:{line}: ")
