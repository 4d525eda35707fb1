"""What a user relies on at run time, end to end: a real `splitdns serve`, real `dig` and
HTTP, scripted upstreams on 127.0.0.x. Failing fast, readiness, stopping, metrics. Each test
prints the figure it measures. Live readiness per zone and the reloads' cases are tested in
process (tests/test_lifecycle_inprocess.py); end to end, test_operations.py reloads."""

from __future__ import annotations

import re
import signal
import socket
import time
from pathlib import Path

import pytest

from tests.support.processes import dig, free_port, poll_until, scripted_upstream, stop
from tests.support.resolver import BANNER, http_get, splitdns_serve, start

DROP = [{"suffix": ".", "action": "drop"}]
ANSWER = [{"suffix": ".", "records": ["{qname} 60 IN A 192.0.2.7"]}]
QUERY_TIME = re.compile(r";; Query time: (\d+) msec")


def query_ms(stdout: str) -> int:
    """dig's own measure of the exchange, without its process start-up."""
    found = QUERY_TIME.search(stdout)
    assert found is not None, stdout
    return int(found.group(1))


def test_a_blackholed_upstream_costs_one_query_then_fails_fast_until_a_probe_is_answered(
        tmp_path: Path) -> None:
    """The README's catch-all block, no options: the first query pays its 2 attempts; after that every
    query is SERVFAIL with the reason at once; a probe answered brings the upstream back."""
    with scripted_upstream(tmp_path, DROP) as up, \
            splitdns_serve(tmp_path, f". {{\n errors\n forward . {up.target}\n}}\n") as r:
        first = dig("first.example.org", server="127.0.0.1", port=r.port, timeout=8)
        assert first.status == "SERVFAIL"
        attempts = [q for q in up.queries() if q.get("qname") == "first.example.org."]
        later = []
        for i in range(20):
            out = dig(f"later{i}.example.org", server="127.0.0.1", port=r.port)
            assert out.status == "SERVFAIL", out.stdout
            later.append(query_ms(out.stdout))
        print(f"blackholed upstream: first query {first.elapsed:.2f} s ({len(attempts)} attempts), "
              f"then {len(later)} queries of at most {max(later)} ms each")
        assert len(attempts) <= 2
        assert max(later) <= 50
        assert "EDE: 22" in out.stdout and "all upstreams are down" in out.stdout
        assert f"{up.target}: " in out.stdout and "timeout" in out.stdout  # why, per upstream
        assert not [q for q in up.queries() if q.get("qname", "").startswith("later")]
        up.set_rules(ANSWER)
        recovered = time.monotonic()
        poll_until("a probe to bring the upstream back", 5, lambda: True if dig(
            "back.example.org", server="127.0.0.1", port=r.port).rdata == ["192.0.2.7"] else None)
        print(f"answers again {time.monotonic() - recovered:.2f} s after the upstream recovered")
        # Said once each in the log, with the zone and why, not only counted in the metrics.
        poll_until("the upstream's return in the log", 5, lambda: "is back" in r.stderr() or None)
        log = r.stderr().splitlines()
    down = [ln for ln in log if f"zone . upstream {up.target} is down" in ln]
    assert len(down) == 1 and "timeout" in down[0], log
    assert len([ln for ln in log if f"upstream {up.target} is back" in ln]) == 1, log


def ops_ports() -> tuple[int, int, int]:
    return free_port("127.0.0.1"), free_port("127.0.0.1"), free_port("127.0.0.1")


@pytest.mark.parametrize("lameduck", [0.0, 1.0])
def test_sigterm_with_probes_running_exits_at_once_or_after_the_lameduck_and_frees_the_ports(
        tmp_path: Path, lameduck: float) -> None:
    health, ready, metrics = ops_ports()
    option = f" {{\n  lameduck {lameduck:g}s\n }}" if lameduck else ""
    text = f""". {{
 health :{health}{option}
 ready 127.0.0.1:{ready}
 prometheus 127.0.0.1:{metrics}
 forward . {{target}}
}}
"""
    with scripted_upstream(tmp_path, DROP) as up:
        corefile = text.replace("{target}", up.target)
        with splitdns_serve(tmp_path, corefile) as r:
            assert dig("example.org", server="127.0.0.1", port=r.port, timeout=8).status == "SERVFAIL"
            for port, path in ((health, "/health"), (ready, "/ready"), (metrics, "/metrics")):
                http_get(port, path)  # connections the server closes: TIME_WAIT on its ports
            signalled = time.monotonic()
            r.process.send_signal(signal.SIGTERM)
            code = r.process.wait(10)
            took = time.monotonic() - signalled
            print(f"SIGTERM with health probes running, lameduck {lameduck:g} s: exit {code} "
                  f"after {took:.2f} s")
            assert code == 0
            assert lameduck <= took <= lameduck + 1.0
            again = start(r.workdir, corefile, r.port)  # the same ports, at once
            try:
                poll_until("the restart", 10, lambda: True if BANNER in r.stdout() or
                           again.poll() is not None else None)
                assert again.poll() is None, r.stderr()
                assert http_get(health, "/health") == (200, "OK")
            finally:
                stop(again)


def metric_lines(port: int, name: str) -> list[str]:
    return [ln for ln in http_get(port, "/metrics")[1].splitlines() if ln.startswith(name)]


def test_every_answer_is_counted_and_zone_ready_only_reported_with_a_ready_directive(
        tmp_path: Path) -> None:
    metrics = free_port("127.0.0.1")
    with scripted_upstream(tmp_path, ANSWER) as up, \
            splitdns_serve(tmp_path, f"example.org {{\n prometheus 127.0.0.1:{metrics}\n"
                                     f" forward . {up.target}\n}}\n") as r:
        assert dig("version.bind", "CH", "TXT", server="127.0.0.1", port=r.port).status == "REFUSED"
        assert dig("example.net", server="127.0.0.1", port=r.port).status == "REFUSED"  # no zone
        assert dig("example.net", "+tcp", server="127.0.0.1", port=r.port).status == "REFUSED"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # a FORMERR
            s.settimeout(2)
            s.sendto(b"\xab\xcd\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07exam", ("127.0.0.1", r.port))
            s.recvfrom(512)
        assert dig("www.example.org", server="127.0.0.1", port=r.port).rdata == ["192.0.2.7"]
        server = f'server="dns://:{r.port}"'
        requests = metric_lines(metrics, "coredns_dns_requests_total")
        responses = metric_lines(metrics, "coredns_dns_responses_total")
        print("\n".join(requests + responses))
        dropped = [ln for ln in requests if 'zone="dropped"' in ln and server in ln]
        assert sum(float(ln.rsplit(" ", 1)[1]) for ln in dropped) == 4
        assert any('proto="udp"' in ln and 'type="TXT"' in ln for ln in dropped)  # version.bind CH
        assert any('proto="tcp"' in ln for ln in dropped)
        refused = [ln for ln in responses if 'zone="dropped"' in ln and 'rcode="REFUSED"' in ln]
        assert [ln.rsplit(" ", 1)[1] for ln in refused] == ["3.0"]
        # The one answer of the zone; SERVFAIL is there at 0 from the start (for rate()).
        zone = {ln.split('rcode="')[1].split('"')[0]: ln.rsplit(" ", 1)[1]
                for ln in responses if 'zone="example.org."' in ln}
        assert zone == {"NOERROR": "1.0", "SERVFAIL": "0.0"}
        # No `ready` directive: no readiness rule and no probe, so no splitdns_zone_ready series
        # (a 0 would read as "not ready" while the zone answers).
        assert metric_lines(metrics, "splitdns_zone_ready{") == []
        assert metric_lines(metrics, 'splitdns_upstream_healthy{') != []


def test_the_catch_all_is_ready_when_its_upstream_refuses_the_root_but_a_chosen_probe_must_answer(
        tmp_path: Path) -> None:
    """A cluster DNS may refuse `. NS`, the apex probe of a block with no probe names, and still
    resolve every name: that refusal proves the upstream answers, so the pod can start. A name the
    user chose to probe must be answered (NOERROR or NXDOMAIN): a refusal keeps it not ready."""
    ready = free_port("127.0.0.1")
    refuse_all: list[dict[str, object]] = []  # a query no rule matches gets REFUSED
    with scripted_upstream(tmp_path, refuse_all) as up:
        plain = f". {{\n forward . {up.target}\n ready 127.0.0.1:{ready}\n}}\n"
        with splitdns_serve(tmp_path, plain):
            poll_until("the catch-all ready on a refused apex probe", 5,
                       lambda: True if http_get(ready, "/ready")[0] == 200 else None)
        chosen = (f". {{\n forward . {up.target}\n"
                  f" ready 127.0.0.1:{ready} {{\n  probe probe.example.org\n }}\n}}\n")
        with splitdns_serve(tmp_path, chosen):
            poll_until("the probe name asked", 5, lambda: True if [
                q for q in up.queries() if q.get("qname") == "probe.example.org."] else None)
            status, body = http_get(ready, "/ready")
            assert status == 503, body
            assert "probe.example.org. answered REFUSED" in body


def test_sighup_is_logged_and_ignored_sigusr1_reloads_and_sigterm_says_it_drains(tmp_path: Path) -> None:
    """As CoreDNS: SIGHUP does not end the server (here it is logged as ignored), SIGUSR1 reloads
    the Corefile (with no `reload` directive too), SIGTERM drains and exits 0, each with its line."""
    with scripted_upstream(tmp_path, ANSWER) as up, \
            splitdns_serve(tmp_path, f"example.org {{\n forward . {up.target}\n}}\n") as r:
        r.process.send_signal(signal.SIGHUP)
        poll_until("the SIGHUP line", 5, lambda: "SIGHUP" in r.stderr() or None)
        assert r.process.poll() is None, r.stderr()
        assert dig("a.example.org", server="127.0.0.1", port=r.port).status == "NOERROR"
        (r.workdir / "Corefile").write_text(f"example.org example.net {{\n forward . {up.target}\n}}\n")
        r.process.send_signal(signal.SIGUSR1)
        poll_until("the reload", 5, lambda: "Running configuration" in r.stderr() or None)
        assert dig("a.example.net", server="127.0.0.1", port=r.port).status == "NOERROR"
        r.process.send_signal(signal.SIGTERM)
        assert r.process.wait(10) == 0
        log = r.stderr()
    assert "[INFO] SIGHUP: ignored" in log
    assert "[INFO] SIGUSR1: reloading" in log
    assert "[INFO] SIGTERM: draining" in log


def test_sigusr2_is_ignored_with_a_line_and_sigquit_stops_at_once(tmp_path: Path) -> None:
    with scripted_upstream(tmp_path, ANSWER) as up, \
            splitdns_serve(tmp_path, f"example.org {{\n forward . {up.target}\n}}\n") as r:
        r.process.send_signal(signal.SIGUSR2)
        poll_until("the SIGUSR2 line", 5, lambda: "SIGUSR2" in r.stderr() or None)
        assert r.process.poll() is None and dig("a.example.org", server="127.0.0.1",
                                                port=r.port).status == "NOERROR"
        r.process.send_signal(signal.SIGQUIT)
        assert r.process.wait(5) == 0
        log = r.stderr()
    assert "[INFO] SIGUSR2: ignored" in log and "[INFO] SIGQUIT: quitting at once" in log
