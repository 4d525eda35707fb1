"""The `openconnect` and `strongswan` directives: their options (tables: Corefile text in, spec or
error), their forward words, and what explain and check say of their blocks."""

from __future__ import annotations

from pathlib import Path

import pytest

from splitdns import cli, config, corefile
from splitdns.directives import openconnect, strongswan
from splitdns.directives.openconnect import OpenConnectSpec
from splitdns.directives.strongswan import StrongSwanSpec
from splitdns.errors import ConfigError
from splitdns.kube.check import checker


def statement(text: str) -> corefile.Statement:
    return corefile.parse(f"corp.example {{\n{text}\n}}\n")[0].directives[0]


@pytest.mark.parametrize(("text", "spec"), [
    ("openconnect", OpenConnectSpec()),
    ("openconnect {\n state /run/x/oc\n interface tun0\n domains\n}",
     OpenConnectSpec("/run/x/oc", "tun0", True)),
    ("openconnect {\n bind_to_tunnel off\n}", OpenConnectSpec(bind_to_tunnel=False)),
])
def test_openconnect_options(text: str, spec: OpenConnectSpec) -> None:
    assert openconnect.parse(statement(text)) == spec


@pytest.mark.parametrize(("text", "spec"), [
    ("strongswan", StrongSwanSpec()),
    ("strongswan {\n resolve /run/x/resolv.conf\n interface ipsec1\n}",
     StrongSwanSpec("/run/x/resolv.conf", "ipsec1")),
])
def test_strongswan_options(text: str, spec: StrongSwanSpec) -> None:
    assert strongswan.parse(statement(text)) == spec


@pytest.mark.parametrize(("text", "error"), [
    ("openconnect x", "Corefile:2: openconnect: wrong number of arguments"),
    ("openconnect {\n state run/oc\n}", "Corefile:3: state: give an absolute path, not 'run/oc'"),
    ("openconnect {\n interface tun0/x\n}",
     "Corefile:3: openconnect: 'tun0/x' is not a network interface name"),
    ("openconnect {\n domain\n}",
     "Corefile:3: openconnect: unknown option 'domain' (did you mean `domains`?)"),
    ("strongswan {\n resolve\n}", "Corefile:3: resolve: wrong number of arguments; usage: resolve PATH"),
    ("strongswan {\n interface a-very-long-name0\n}", "Corefile:3: strongswan: 'a-very-long-name0' is not"),
    ("strongswan {\n file /x\n}", "Corefile:3: strongswan: unknown option 'file'"),
    ("strongswan {\n bind_to_tunnel maybe\n}", "Corefile:3: bind_to_tunnel: say on or off, not 'maybe'"),
])
def test_bad_options_are_errors_naming_file_and_line(text: str, error: str) -> None:
    parse = openconnect.parse if text.startswith("openconnect") else strongswan.parse
    with pytest.raises(ConfigError) as caught:
        parse(statement(text))
    assert str(caught.value).startswith(error), str(caught.value)



COREFILE = """\
.:53 {
    forward . 10.100.0.10
}
svc.acme.internal:53 {
    openconnect {
        domains
    }
}
corp.example:53 {
    forward . strongswan
    strongswan
}
"""


def test_explain_says_where_each_tunnel_zone_takes_its_servers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "Corefile"
    path.write_text(COREFILE)
    assert cli.main(["explain", "db.svc.acme.internal", "-conf", str(path)]) == 0
    assert "upstreams: the DNS servers the OpenConnect gateway pushes (our vpnc-script's state file), " \
           f"learned at run time (openconnect, {path}:5)" in capsys.readouterr().out
    assert cli.main(["explain", "db.corp.example", "-conf", str(path)]) == 0
    assert "the DNS servers an IKE SA received (charon's resolve plugin file)" in capsys.readouterr().out


@pytest.mark.parametrize(("directive", "name"), [("openconnect", "OpenConnect"),
                                                 ("strongswan", "strongSwan")])
def test_a_root_block_following_a_tunnel_is_named_by_its_vpn(
        tmp_path: Path, directive: str, name: str) -> None:
    path = tmp_path / "Corefile"
    path.write_text(f".:53 {{\n    {directive}\n}}\n")
    found = [f for f in checker.check([str(path)], checker.Options()) if f.code == "SD104"]
    assert len(found) == 1 and f"takes its upstreams from {name}:" in found[0].message


def test_the_tunnel_words_need_their_directive() -> None:
    with pytest.raises(ConfigError, match=r"forward \. openconnect needs an `openconnect` directive"):
        config.loads("corp.example {\n    forward . openconnect\n}\n")
    with pytest.raises(ConfigError, match=r"forward \. strongswan needs a `strongswan` directive"):
        config.loads("corp.example {\n    forward . strongswan\n}\n")
    with pytest.raises(ConfigError, match="cannot be mixed with fixed upstreams"):
        config.loads("corp.example {\n    forward . strongswan 192.0.2.1\n    strongswan\n}\n")
