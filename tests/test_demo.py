"""`splitdns demo` (what `make run` starts): it asks itself its example queries and prints the
answers, so a newcomer sees the split without dig. A real process; everything on loopback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from splitdns.commands import demo_upstreams
from tests.support import user_text
from tests.support.processes import free_port, poll_until, stop


def test_the_demo_shows_the_split_by_asking_itself(tmp_path: Path) -> None:
    port = free_port("127.0.0.1")
    out = tmp_path / "out.log"
    with out.open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "splitdns", "demo", "--port", str(port)],
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        text = poll_until("the demo's own answers and instructions", 20,
                          lambda: out.read_text() if "Press Ctrl-C" in out.read_text() else None)
    finally:
        stop(process)
    user_text.seen("splitdns demo", out.read_text())
    asked = text.split(f"splitdns demo asked itself, on 127.0.0.1:{port}:\n", 1)[1].split("\n\n", 1)[0]
    lines = asked.splitlines()
    cluster, tunnel, lookalike = lines[0], lines[2], lines[4]
    assert cluster.split()[:3] == ["kubernetes.default.svc.cluster.local", "->", "10.96.0.1"]
    assert "answered by the cluster DNS stand-in (catch-all)" in cluster
    assert tunnel.split()[:3] == ["db.svc.acme.internal", "->", "192.168.240.10"]
    assert "answered by the tunnel DNS stand-in (svc.acme.internal)" in tunnel
    # A name that only looks like it is in the tunnel zone goes to the catch-all.
    assert lookalike.split()[:3] == ["svc.acme.internal.example.net", "->", "192.0.2.80"]
    assert "answered by the cluster DNS stand-in" in lookalike
    assert "apt-get install bind9-dnsutils" in text
    assert len(lines) == 2 * len(demo_upstreams.EXAMPLES)


def test_a_port_given_and_taken_is_an_error_not_another_port(tmp_path: Path) -> None:
    """`--port N` is that port or nothing: falling back is for when no port was given."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as holder:
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "splitdns", "demo", "--port", str(port)],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    user_text.seen("splitdns demo", done.stdout + done.stderr)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout == ""  # nothing served, so no Corefile and no answers
    assert done.stderr == (f"splitdns demo: cannot listen on dns://127.0.0.1:{port}: Address already in use: "
                           "another process holds that address and port (`ss -lntup` shows which); stop it, "
                           "or use another port: another --port, or none to let demo take 53 or 5300\n")
