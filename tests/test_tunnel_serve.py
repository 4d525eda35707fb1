"""The tunnel zone follows the tunnel: state from `splitdns openvpn-hook`'s file, real processes.

OpenVPN itself drives these in test_openvpn_lab.py; here the hook's state file is written by
the hook command itself, the way OpenVPN would run it, so each behaviour is cheap to check.
A pushed server that is this server is tested in process (tests/test_lifecycle_inprocess.py);
test_openvpn_lab.py has that loop with a real OpenVPN.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import dns.message
import dns.query
import dns.rcode

from tests.support.processes import poll_until, scripted_upstream
from tests.support.resolver import splitdns_serve

ANSWER = [{"suffix": ".", "records": ["{qname} 1 IN A 192.168.240.10"]}]
ANSWER_B = [{"suffix": ".", "records": ["{qname} 1 IN A 192.168.240.20"]}]


def hook(state: Path, script_type: str, **env: str) -> None:
    """Run `splitdns openvpn-hook` exactly as OpenVPN does: its own variables, no PATH."""
    subprocess.run([sys.executable, "-m", "splitdns", "openvpn-hook", "--state", str(state),
                    "tun0", "1500", "0", "10.8.0.2", "255.255.255.0", "init"],
                   # `dev`: OpenVPN names its interface; the servers here are on loopback, so lo.
                   env={"script_type": script_type, "dev": "lo", **env,
                        "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
                   check=True, timeout=10)


def ask(port: int, name: str) -> tuple[str, float, dns.message.Message]:
    query = dns.message.make_query(name, "A", use_edns=0)
    start = time.perf_counter()
    reply = dns.query.udp(query, "127.0.0.1", port=port, timeout=5)
    return dns.rcode.to_text(reply.rcode()), time.perf_counter() - start, reply


def answered(port: int, name: str, rcode: str) -> bool | None:
    return True if ask(port, name)[0] == rcode else None


def ede_text(reply: dns.message.Message) -> str:
    return " ".join(o.text or "" for o in reply.options if o.otype == 15)


def corefile(cluster: str, state: Path) -> str:
    return f"""
. {{
    forward . {cluster}
}}
svc.acme.internal {{
    cache 30 {{
        success 1024 30 1
        serve_stale 1h
    }}
    openvpn {{
        state {state}
    }}
}}
"""


def test_tunnel_zone_follows_the_hook_state(tmp_path: Path) -> None:
    state = tmp_path / "run" / "openvpn.json"
    with scripted_upstream(tmp_path, ANSWER, "127.0.0.21") as cluster, \
            scripted_upstream(tmp_path, ANSWER, "127.0.0.22") as vpn_a, \
            scripted_upstream(tmp_path, ANSWER_B, "127.0.0.23") as vpn_b, \
            splitdns_serve(tmp_path, corefile(cluster.target, state)) as r:
        # No state yet: the zone answers at once, and says why.
        rcode, elapsed, reply = ask(r.port, "db.svc.acme.internal.")
        # At once: a quarter of the 2 s read timeout tells "answered now" from "waited it out".
        assert rcode == "SERVFAIL" and "no state file" in ede_text(reply) and elapsed < 0.5

        hook(state, "up", dns_server_1_address_1=vpn_a.addr, dns_server_1_port_1=str(vpn_a.port))
        poll_until("tunnel up", 2, lambda: answered(r.port, "db.svc.acme.internal.", "NOERROR"))
        assert ask(r.port, "x.svc.acme.internal.")[2].answer[0].to_text().endswith("192.168.240.10")

        # Tunnel down: answers come at once, from stale cache where there is one, else SERVFAIL.
        time.sleep(1.1)  # the cached entries have expired (TTL 1)
        baseline = [ask(r.port, f"c{i}.cluster.local.")[1] for i in range(50)]
        hook(state, "down", signal="ping-restart")
        # A new name each time: an answered name would be served stale, as it should.
        names = (f"new{i}.svc.acme.internal." for i in range(10_000))
        poll_until("tunnel down", 2, lambda: answered(r.port, next(names), "SERVFAIL"))
        rcode, elapsed, reply = ask(r.port, "other.svc.acme.internal.")
        assert rcode == "SERVFAIL"
        assert "the tunnel is down (down script ran (ping-restart))" in ede_text(reply)
        down_times = [ask(r.port, f"d{i}.svc.acme.internal.")[1] for i in range(50)]
        stale_rcode, _, stale = ask(r.port, "db.svc.acme.internal.")
        assert stale_rcode == "NOERROR" and stale.answer[0].ttl == 30  # RFC 8767 stale TTL
        during = [ask(r.port, f"o{i}.cluster.local.")[1] for i in range(50)]
        p99 = lambda xs: sorted(xs)[int(len(xs) * 0.99) - 1]  # noqa: E731
        print(f"tunnel down: SERVFAIL median {1000 * statistics.median(down_times):.2f} ms, max "
              f"{1000 * max(down_times):.2f} ms; cluster p99 before {1000 * p99(baseline):.2f} ms, "
              f"during {1000 * p99(during):.2f} ms")
        assert max(down_times) < 0.5  # at once (tens of ms, printed above), not the 2 s timeout
        assert max(during) < 0.5  # the cluster zone is not held up by the dead tunnel

        # Back up with another pushed address: followed within a second.
        # (dhcp-option DNS carries no port, so the scripted server's port goes in 2.6's variables.)
        hook(state, "up", dns_server_1_address_1=vpn_b.addr, dns_server_1_port_1=str(vpn_b.port))
        started = time.monotonic()
        poll_until("the new pushed server", 1.0, lambda: True if ask(r.port, "n.svc.acme.internal.")[2].answer
                   and ask(r.port, "m.svc.acme.internal.")[2].answer[0].to_text().endswith("192.168.240.20")
                   else None)
        print(f"followed the new pushed DNS in {1000 * (time.monotonic() - started):.0f} ms")


def test_pushed_domains_are_routed_to_the_tunnel_zone(tmp_path: Path) -> None:
    """`openvpn { domains }`: the block also owns what the VPN server says it resolves."""
    state = tmp_path / "openvpn.json"
    text = corefile("{cluster}", state).replace(f"state {state}", f"state {state}\n        domains")
    corp = [{"suffix": ".", "records": ["{qname} 60 IN A 192.168.240.30"]}]
    with scripted_upstream(tmp_path, ANSWER, "127.0.0.21") as cluster, \
            scripted_upstream(tmp_path, corp, "127.0.0.22") as vpn, \
            splitdns_serve(tmp_path, text.replace("{cluster}", cluster.target)) as r:
        catch_all = ask(r.port, "api.corp.example.")[2]
        assert catch_all.answer[0].to_text().endswith("192.168.240.10")
        hook(state, "up", dns_server_1_address_1=vpn.addr, dns_server_1_port_1=str(vpn.port),
             dns_server_1_resolve_domain_1="corp.example")

        def routed() -> bool | None:
            answer = ask(r.port, "www.corp.example.")[2].answer
            return True if answer and answer[0].to_text().endswith("192.168.240.30") else None

        poll_until("the pushed domain", 2, routed)
        assert [q["qname"] for q in vpn.queries() if "qname" in q][-1] == "www.corp.example."
        # The Corefile's own zones keep their owners: the catch-all still answers other names.
        assert ask(r.port, "www.example.com.")[2].answer[0].to_text().endswith("192.168.240.10")
