"""DNS over TLS upstreams: `forward . tls://...` against a real Unbound serving DoT on loopback.

The test makes its own CA and server certificate with openssl; Unbound answers from
local-data only (nothing leaves loopback). Checked: the answer comes through a verified
connection that is reused, a wrong server name is refused before any query is sent, the
server going away fails at once, and it is used again when it comes back.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from splitdns import config
from splitdns.directives.forward import TlsSettings
from splitdns.errors import ConfigError
from tests.support.processes import assert_loopback, dig, free_port, poll_until, stop
from tests.support.resolver import run_to_exit, splitdns_serve

DOT_ADDR = "127.0.0.31"
SERVER_NAME = "dot.test.internal"


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture
def certificates(tmp_path: Path) -> Path:
    """A CA, and a server certificate it signed for SERVER_NAME and DOT_ADDR."""
    d = tmp_path / "pki"
    d.mkdir()
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=splitdns test CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", f"/CN={SERVER_NAME}", cwd=d)
    (d / "ext.cnf").write_text(f"subjectAltName=DNS:{SERVER_NAME},IP:{DOT_ADDR}\n"
                               "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
                               "extendedKeyUsage=serverAuth\nauthorityKeyIdentifier=keyid\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf", cwd=d)
    return d


@contextmanager
def unbound_dot(workdir: Path, pki: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """Unbound serving DNS over TLS on DOT_ADDR:port, answering a.dot.test from local-data."""
    assert_loopback(DOT_ADDR)
    conf = workdir / "unbound.conf"
    conf.write_text(f"""server:
  num-threads: 1
  interface: {DOT_ADDR}@{port}
  port: {port}
  tls-port: {port}
  tls-service-key: "{pki / 'server.key'}"
  tls-service-pem: "{pki / 'server.pem'}"
  do-ip6: no
  access-control: 127.0.0.0/8 allow
  module-config: "iterator"
  local-zone: "dot.test." static
  local-data: "a.dot.test. 60 IN A 10.9.0.1"
  chroot: ""
  username: ""
  directory: "{workdir}"
  pidfile: ""
  use-syslog: no
  logfile: ""
  verbosity: 1
remote-control:
  control-enable: no
""")
    log = workdir / f"unbound-{time.monotonic_ns()}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(["unbound", "-d", "-c", str(conf)], stdin=subprocess.DEVNULL,
                                   stdout=out, stderr=out)
    try:
        def listening() -> bool | None:
            if process.poll() is not None:
                raise RuntimeError(f"unbound exited: {log.read_text(errors='replace')}")
            listeners = subprocess.run(["ss", "-Htln", f"( sport = :{port} )"], capture_output=True,
                                       text=True, timeout=10).stdout
            return True if DOT_ADDR in listeners else None

        poll_until("unbound to listen for DoT", 10.0, listening)
        yield process
    finally:
        stop(process)


def established(port: int) -> int:
    out = subprocess.run(["ss", "-Htn", "state", "established", f"( dport = :{port} )"],
                         capture_output=True, text=True, timeout=10).stdout
    return len([line for line in out.splitlines() if line.strip()])


def test_dot_upstream_verified_reused_refused_for_a_wrong_name_and_back_after_an_outage(
        tmp_path: Path, certificates: Path) -> None:
    port = free_port(DOT_ADDR)
    ca = certificates / "ca.pem"
    corefile = f"""dot.test {{
    errors
    forward . tls://{DOT_ADDR}:{port} {{
        tls_servername {SERVER_NAME}
        tls {ca}
        max_fails 1
        health_check 200ms
    }}
}}
wrong.dot.test {{
    errors
    forward . tls://{DOT_ADDR}:{port} {{
        tls_servername wrong.name.internal
        tls {ca}
    }}
}}
"""
    with unbound_dot(tmp_path, certificates, port), splitdns_serve(tmp_path, corefile) as r:
        for _ in range(4):  # no cache: each goes upstream, over the same kept connection
            got = dig("a.dot.test", server="127.0.0.1", port=r.port)
            assert got.status == "NOERROR" and got.rdata == ["10.9.0.1"]
        assert established(port) == 1
        # A certificate that does not name the server name: refused, the query never sent.
        got = dig("a.wrong.dot.test", server="127.0.0.1", port=r.port)
        assert got.status == "SERVFAIL"
        assert "is not valid for wrong.name.internal" in r.stderr()
        assert "Hostname mismatch" in r.stderr()

    with splitdns_serve(tmp_path, corefile) as r:
        with unbound_dot(tmp_path, certificates, port):
            assert dig("a.dot.test", server="127.0.0.1", port=r.port).rdata == ["10.9.0.1"]
        # The server is gone: the answer is SERVFAIL at once, not after read_timeout (2 s).
        got = dig("a.dot.test", server="127.0.0.1", port=r.port)
        assert got.status == "SERVFAIL" and got.elapsed < 2.0
        assert "connection refused" in r.stderr()
        # It comes back: the health probe and the next queries find it.
        with unbound_dot(tmp_path, certificates, port):
            poll_until("the DoT upstream to answer again", 10.0, lambda: dig(
                "a.dot.test", server="127.0.0.1", port=r.port).rdata == ["10.9.0.1"] or None)


def test_dot_needs_a_trusted_certificate(tmp_path: Path, certificates: Path) -> None:
    # Without `tls CA` the system's CAs are used, which never signed our test CA.
    port = free_port(DOT_ADDR)
    with unbound_dot(tmp_path, certificates, port), splitdns_serve(tmp_path, f""". {{
    errors
    forward . tls://{DOT_ADDR}:{port} {{
        tls_servername {SERVER_NAME}
    }}
}}
""") as r:
        assert dig("a.dot.test", server="127.0.0.1", port=r.port).status == "SERVFAIL"
        assert "certificate verify failed" in r.stderr() or "unable to get local issuer" in r.stderr()


@pytest.mark.parametrize(("forward", "want"), [
    ("forward . tls://192.0.2.1", [("192.0.2.1", 853, TlsSettings())]),
    ("forward . tls://192.0.2.1:8853 tls://[2001:db8::1] {\n tls_servername dns.example\n}",
     [("192.0.2.1", 8853, TlsSettings("dns.example")), ("2001:db8::1", 853, TlsSettings("dns.example"))]),
    ("forward . tls://192.0.2.1 192.0.2.2 {\n tls /ca.pem\n expire 30s\n}",
     [("192.0.2.1", 853, TlsSettings(ca="/ca.pem", expire=30.0)), ("192.0.2.2", 53, None)]),
    ("forward . tls://192.0.2.1 {\n tls /c.pem /k.pem\n}",
     [("192.0.2.1", 853, TlsSettings(cert="/c.pem", key="/k.pem"))]),
    ("forward . tls://192.0.2.1 {\n tls /c.pem /k.pem /ca.pem\n}",
     [("192.0.2.1", 853, TlsSettings(cert="/c.pem", key="/k.pem", ca="/ca.pem"))]),
])
def test_forward_reads_tls_upstreams_and_options_as_coredns(forward: str, want: list[object]) -> None:
    spec = config.loads(f". {{\n {forward}\n}}\n", read_files=False).blocks[0].forwards[0]
    assert [(u.host, u.port, u.tls) for u in spec.upstreams] == want


@pytest.mark.parametrize(("text", "error"), [
    ("forward . tls://dns.example", "forward: 'tls://dns.example' is not tls://IP or tls://IP:PORT"),
    ("forward . https://192.0.2.1", "forward: https:// upstreams are not supported; use plain DNS or tls://"),
    ("forward . tls://192.0.2.1 {\n tls /nonexistent/ca.pem\n}",
     "forward: cannot use the tls files (/nonexistent/ca.pem)"),
    ("forward . tls://192.0.2.1 {\n tls a b c d\n}", "tls: wrong number of arguments"),
])
def test_forward_refuses_tls_it_cannot_use(text: str, error: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(error)):
        config.loads(f". {{\n {text}\n}}\n")


def test_serving_dot_or_doh_ourselves_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    for scheme in ("tls", "https"):
        code, stderr = run_to_exit(tmp_path, f"{scheme}://.:853 {{\n forward . 127.0.0.1:5399\n}}\n")
        assert code == 2
        assert f"Corefile:1: {scheme}:// servers are not supported" in stderr
