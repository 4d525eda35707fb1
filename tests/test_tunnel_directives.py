"""The `openconnect` and `strongswan` directives' options (tables: Corefile text in, spec or error)."""

from __future__ import annotations

import pytest

from splitdns import corefile
from splitdns.directives import openconnect, strongswan
from splitdns.directives.openconnect import OpenConnectSpec
from splitdns.directives.strongswan import StrongSwanSpec
from splitdns.errors import ConfigError


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

