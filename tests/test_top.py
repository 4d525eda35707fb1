"""`splitdns top` on a real terminal: tmux runs it against a live `splitdns serve` (scripted
upstreams on loopback, the tunnel driven through the `openvpn` state file) while queries flow,
and the screen is captured and read as a user would: each zone's row with its rate, rcodes,
upstream health, tunnel state and readiness, following an upstream outage and a tunnel outage.

`splitdns top POD` goes through `kubectl port-forward`; no API server runs here, so a stand-in
kubectl (it says where it "forwards", to the live resolver's metrics port, and records how it
was called) shows that path, labelled as a stand-in.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import dns.exception
import dns.message
import dns.query

from splitdns.core.tunnel import UP, Pushed, TunnelState
from splitdns.shell.openvpn import write_state
from tests.support.prerequisites import need_tools
from tests.support.processes import free_port, poll_until, scripted_upstream
from tests.support.resolver import http_get, splitdns_serve

ANSWER = [{"suffix": ".", "records": ["{qname} 1 IN A 192.0.2.10"]}]
DROP = [{"suffix": ".", "action": "drop"}]


def corefile(cluster: str, state: Path, mport: int, rport: int) -> str:
    return f""". {{
    cache 30
    prometheus 127.0.0.1:{mport}
    ready 127.0.0.1:{rport}
    forward . {cluster} {{
        max_fails 1
        health_check 0.2s
        read_timeout 300ms
    }}
}}
svc.acme.internal {{
    cache 30
    openvpn {{
        state {state}
    }}
}}
"""


@contextmanager
def traffic(port: int) -> Iterator[None]:
    """About 50 queries a second to both zones until the block ends (bounded by a stop event)."""
    stop = threading.Event()

    def ask() -> None:
        for i in range(100_000):
            if stop.is_set():
                return
            for name in (f"t{i}.example.org.", "www.example.org.", f"d{i % 3}.svc.acme.internal."):
                with suppress(dns.exception.Timeout):  # an outage is part of the show
                    dns.query.udp(dns.message.make_query(name, "A"), "127.0.0.1", port=port, timeout=0.5)
            time.sleep(0.05)

    worker = threading.Thread(target=ask, daemon=True)
    worker.start()
    try:
        yield
    finally:
        stop.set()
        worker.join(5)


@contextmanager
def tmux(command: list[str]) -> Iterator[str]:
    """`command` in a detached tmux session on a tmux server of its own (never the user's)."""
    socket = f"splitdns-top-{os.getpid()}"
    # The terminal's own size, not one inherited from the test's environment.
    subprocess.run(["tmux", "-L", socket, "new-session", "-d", "-s", "top", "-x", "220", "-y", "30",
                    " ".join(["env", "-u", "COLUMNS", "-u", "LINES", *command])], check=True, timeout=10)
    try:
        yield socket
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], timeout=10, check=False)


def screen(socket: str) -> str:
    return subprocess.run(["tmux", "-L", socket, "capture-pane", "-p", "-t", "top"], capture_output=True,
                          text=True, timeout=10, check=True).stdout


def row(text: str, zone: str) -> str | None:
    """The table row of `zone` on the screen (cells split by rich's │)."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 2 and cells[1] == zone:
            return " | ".join(cells[1:-1])
    return None


SCREENS: list[str] = []  # the last screen read, shown when a wait times out


def seen(socket: str, zone: str, pattern: str) -> str | None:
    text = screen(socket)
    SCREENS[:] = [text]
    found = row(text, zone)
    return found if found is not None and re.search(pattern, found) else None


def on_screen(what: str, timeout: float, socket: str, zone: str, pattern: str) -> str:
    try:
        return poll_until(what, timeout, lambda: seen(socket, zone, pattern))
    except TimeoutError:
        raise AssertionError(f"{what}: not on the screen within {timeout} s:\n{SCREENS[-1]}") from None


def test_top_in_a_terminal_follows_the_resolver(tmp_path: Path) -> None:
    need_tools("tmux", hint="Debian's tmux; make deps-debian installs it")
    state = tmp_path / "openvpn.json"
    mport, rport = free_port("127.0.0.1"), free_port("127.0.0.1")
    with scripted_upstream(tmp_path, ANSWER, "127.0.0.21") as cluster, \
            scripted_upstream(tmp_path, ANSWER, "127.0.0.22") as vpn, \
            splitdns_serve(tmp_path, corefile(cluster.target, state, mport, rport)) as r:
        write_state(str(state), TunnelState(UP, "up script ran", Pushed(((vpn.addr, vpn.port),)), "lo"))
        poll_until("the zones ready", 5, lambda: True if http_get(rport, "/ready")[0] == 200 else None)
        top = [sys.executable, "-m", "splitdns", "top", "--url", f"http://127.0.0.1:{mport}/metrics",
               "--interval", "0.5"]
        with traffic(r.port), tmux(top) as socket:
            # Both zones answer, the tunnel is up, every upstream in service, the zones ready.
            catch_all = on_screen("the catch-all's row", 10, socket, ".", (
                rf"^\. \| [1-9][0-9.]* \| NOERROR 100% \| \d+% \| [0-9.]+ms \| [0-9.]+ms \| "
                rf"{re.escape(cluster.target)} up \| - \| yes$"))
            tunnel = on_screen("the tunnel zone's row", 10, socket, "svc.acme.internal.",
                               rf"{re.escape(vpn.target)} up \| up \| yes$")
            print(f"screen rows:\n{catch_all}\n{tunnel}")
            # The tunnel goes down: its zone says so, and why.
            write_state(str(state), TunnelState("down", "down script ran (ping-restart)", Pushed()))
            down = on_screen("the tunnel down on screen", 10, socket, "svc.acme.internal.",
                             r"SERVFAIL \d+%.*\| down \(down\) \| no$")
            # The catch-all's upstream stops answering: marked down on screen, the zone not ready.
            cluster.set_rules(DROP)
            dead = on_screen("the upstream down on screen", 15, socket, ".",
                             rf"{re.escape(cluster.target)} DOWN \| - \| no$")
            print(f"{down}\n{dead}")
            final = screen(socket)
        assert "splitdns top" in final and f"127.0.0.1:{mport}" in final


def test_top_of_a_pod_goes_through_kubectl_port_forward(tmp_path: Path) -> None:
    """A stand-in kubectl (no API server here): it records its arguments and says it forwards to
    the live resolver's metrics port, as `kubectl port-forward` says where it listens."""
    mport, rport = free_port("127.0.0.1"), free_port("127.0.0.1")
    record = tmp_path / "kubectl-args"
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(f"""#!{sys.executable}
import sys, time
open({str(record)!r}, "w").write(" ".join(sys.argv[1:]))
print("Forwarding from 127.0.0.1:{mport} -> 15382", flush=True)
time.sleep(30)
""")
    kubectl.chmod(0o755)
    with scripted_upstream(tmp_path, ANSWER, "127.0.0.21") as cluster, \
            splitdns_serve(tmp_path, corefile(cluster.target, tmp_path / "none.json", mport, rport)) as r:
        dns.query.udp(dns.message.make_query("www.example.org.", "A"), "127.0.0.1", port=r.port, timeout=2)
        out = subprocess.run([sys.executable, "-m", "splitdns", "top", "app-7d9f", "-n", "shop", "--once",
                              "--interval", "0.3", "--kubectl", str(kubectl)],
                             capture_output=True, text=True, timeout=30, env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    assert record.read_text() == "port-forward --address 127.0.0.1 pod/app-7d9f :dns-metrics -n shop"
    assert row(out.stdout, ".") is not None and row(out.stdout, "svc.acme.internal.") is not None, out.stdout
    assert f"127.0.0.1:{mport}/metrics" in out.stdout
    failed = subprocess.run([sys.executable, "-m", "splitdns", "top", "app", "--once",
                             "--kubectl", shutil.which("false") or "/bin/false"],
                            capture_output=True, text=True, timeout=30)
    assert failed.returncode == 1
    assert "kubectl port-forward to pod app port dns-metrics failed" in failed.stderr
