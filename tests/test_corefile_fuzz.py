"""Never a crash: Corefiles built from keys, directives, options and braces, fuzzed with hypothesis
through `splitdns check` (the linter and its verdict) and `serve`'s loader (config.load, then the
zones and routers serve builds). Whatever the input, the answer is findings or a ConfigError, never
another exception; and the command line turns a bug of ours into exit 70 and one line, not a
traceback.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from splitdns import cli, config
from splitdns.core.routing import Router
from splitdns.core.zone import Zone
from splitdns.errors import ConfigError
from splitdns.kube.check import checker
from tests.support import user_text

KEYS = [".", "example.org", "svc.acme.internal", "cluster.local", "in-addr.arpa", "10.in-addr.arpa",
        "32/27.104.21.172.in-addr.arpa", "0/25.2.0.192.in-addr.arpa", "10.0.0.0/8", "172.16.0.0/12",
        "fd00::/8", "dns://.:1053", "tls://.", "https://.", ".:0", ":53", "example.org:5353", "*.x",
        "a..b", "[::1]:53", "1.2.3.4", "(snip)", "ex\u00e9mple.org", "x" * 70, "a,b", "a,", ""]
UPSTREAMS = ["192.0.2.1", "192.0.2.2:5300", "127.0.0.1", "127.0.0.11", "127.0.0.1:1053", "[::1]:53",
             "::1", "[::1", "RESOLV", "tls://192.0.2.1", "dns://192.0.2.3", "openvpn", "a:b", "dns.google",
             "192.0.2.1:0", "192.0.2.1:99999"]
DIRECTIVES = ["errors", "health", "health :8080", "ready", "ready :8181", "reload", "reload 0s",
              "reload 10s 1s", "loop", "prometheus :9153", "prometheus", "log", "log . {combined}",
              'log . "{remote} {name}"', "log . {\n class error\n}", "log {\n class denial error\n}",
              "cache", "cache 30", "cache 0", "cache -5", "cache 30 example.org", "cache 99999999999999999",
              "bind 127.0.0.1", "bind 0.0.0.0", "bind ::1", "bind lo", "bind", "limits", "private_addresses",
              "openvpn {\n state /nonexistent/state\n}", "openvpn", "hosts {\n fallthrough\n}",
              "kubernetes cluster.local", "loadbalance", "bufsize 1232", "template IN AAAA",
              "errors {\n consolidate 5m \".*\"\n}", "import snip", "import nothing*", "import",
              "{$UNSET_SPLITDNS_FUZZ}", "nonsense directive"]
CACHE_OPTIONS = ["success 100 30 5", "success 0", "denial 1024", "prefetch 10", "prefetch 2 10m 20%",
                 "prefetch 1 1m 5%", "prefetch", "prefetch x", "serve_stale", "serve_stale 1h verify",
                 "serve_stale 1h nope", "servfail 10s", "servfail 1h", "disable success",
                 "disable denial example.org", "disable other", "keepttl", "unknown"]
FORWARD_OPTIONS = ["policy sequential", "policy nope", "max_fails 0", "health_check 5s",
                   "except example.org", "except", "force_tcp", "prefer_udp", "next NXDOMAIN",
                   "next SERVFAIL REFUSED", "next NOERROR", "next BOGUS", "next", "failover SERVFAIL",
                   "expire 0s", "max_concurrent 1000", "tls_servername dns.google",
                   "health_check 0s no_rec domain x", "read_timeout 1ms", "max_connect_attempts 0"]


def _body(lines: list[str], braces: bool, next_line: bool) -> str:
    if not braces:
        return ""
    opening = "\n{" if next_line else " {"
    return opening + "\n" + "\n".join("    " + line for line in lines) + "\n}"


@st.composite
def _forward(draw: st.DrawFn) -> str:
    origin = draw(st.sampled_from([".", "example.org", "svc.acme.internal", "a..b"]))
    targets = draw(st.lists(st.sampled_from(UPSTREAMS), min_size=1, max_size=3))
    options = draw(st.lists(st.sampled_from(FORWARD_OPTIONS), max_size=3))
    return f"forward {origin} {' '.join(targets)}" + _body(options, draw(st.booleans()), draw(st.booleans()))


@st.composite
def _directive(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["plain", "forward", "forward", "cache"]))
    if kind == "forward":
        return draw(_forward())
    if kind == "cache":
        options = draw(st.lists(st.sampled_from(CACHE_OPTIONS), max_size=3))
        head = draw(st.sampled_from(["cache", "cache 30", "cache 30 example.org", "cache example.org"]))
        return head + _body(options, draw(st.booleans()), draw(st.booleans()))
    return draw(st.sampled_from(DIRECTIVES))


@st.composite
def corefiles(draw: st.DrawFn) -> str:
    blocks = []
    for _ in range(draw(st.integers(1, 3))):
        keys = " ".join(draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=2)))
        lines = draw(st.lists(_directive(), max_size=5))
        blocks.append(keys + _body(lines, draw(st.integers(0, 9)) > 0, draw(st.booleans())))
    text = "\n".join(blocks)
    # A stray brace or a lost newline now and then: the parser's own edges.
    if draw(st.integers(0, 9)) == 0:
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(["{", "}", "\n", " ", "#", '"'])) + text[at:]
    return text


def _corefile(text: str, directory: Path) -> Path:
    resolv = directory / "resolv.conf"
    resolv.write_text("nameserver 192.0.2.53\n")
    path = directory / "Corefile"
    path.write_text(text.replace("RESOLV", str(resolv)))
    (directory / "snip").write_text("errors\n")
    return path


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corefiles(), st.sampled_from(["auto", "splitdns", "coredns"]))
def test_check_and_serve_loader_never_raise_anything_but_config_errors(text: str, resolver: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = _corefile(text, Path(tmp))
        for finding in checker.check([str(path)], checker.Options(resolver=resolver)):
            assert finding.message and "Traceback" not in finding.message
            assert "object at 0x" not in finding.message
        try:
            loaded = config.load(path, env={})
        except ConfigError as err:
            assert err.message and "object at 0x" not in err.message
            return
        # What serve builds next, short of sockets: a zone per block and a router per listener.
        zones = {block: Zone(block) for block in loaded.blocks}
        for blocks in loaded.listeners().values():
            router = Router(zones[b] for b in blocks)
            router.route(b"\x03www\x07example\x03org\x00")


def test_the_crash_found_by_fuzzing_is_a_finding_now(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # A block whose key does not parse, holding a forward: `check` indexed the block's first zone.
    path = tmp_path / "Corefile"
    path.write_text("a..b {\n    forward . 192.0.2.1\n}\n")
    assert cli.main(["check", "--brief", str(path)]) == 2
    out = capsys.readouterr().out
    assert f"{path}:1: SD100 error 'a..b' is not a valid zone name" in out


@pytest.mark.parametrize("debug", [None, "--debug", "env"])
def test_an_internal_error_exits_70_with_one_line_naming_the_input(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        debug: str | None) -> None:
    # A bug is planted on purpose (nothing else raises here any more): the linter itself fails.
    def planted_bug(*_args: object) -> list[object]:
        raise KeyError("planted")

    monkeypatch.setattr(checker, "check", planted_bug)
    monkeypatch.delenv("SPLITDNS_DEBUG", raising=False)
    if debug == "env":
        monkeypatch.setenv("SPLITDNS_DEBUG", "1")
    path = tmp_path / "Corefile"
    path.write_text(".:53 {\n    forward . 192.0.2.1\n}\n")
    argv = ["--debug"] if debug == "--debug" else []
    assert cli.main([*argv, "check", str(path)]) == cli.EXIT_INTERNAL == 70
    err = capsys.readouterr().err
    last = err.splitlines()[-1]
    assert last.startswith(f"splitdns check: internal error while reading {path}: KeyError: 'planted'")
    assert ("Traceback" in err) == (debug is not None)
    if debug is None:
        assert err.count("\n") == 1
    else:
        user_text.take()  # the traceback was asked for: its frames may show reprs, by design


def test_exit_70_is_documented_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "70  internal error" in capsys.readouterr().out
