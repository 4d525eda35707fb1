"""OpenConnect: the state file's parser and the tunnel state (tables), and our vpnc-script run
by a real /bin/sh with openconnect's environment (the stock vpnc-script replaced by a recorder)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from splitdns.commands import openconnect_hook
from splitdns.core import openconnect as oc
from splitdns.core.tunnel import DOWN, UP

GOOD = """\
# splitdns openconnect state: what the VPN gateway pushed
reason=connect
written_at=1700000000
TUNDEV=tun0
INTERNAL_IP4_ADDRESS=192.0.2.129
INTERNAL_IP4_DNS=192.0.2.1 192.0.2.2
INTERNAL_IP6_DNS=2001:db8::53
CISCO_DEF_DOMAIN=Corp.Example.org
CISCO_SPLIT_DNS=svc.example.org,db.example.org.
"""


def test_a_state_file_our_hook_wrote_parses_to_what_the_gateway_pushed() -> None:
    got = oc.parse(GOOD, "/run/splitdns/openconnect")
    assert got == oc.Recorded("connect", "tun0", 1700000000.0, ("192.0.2.1", "192.0.2.2", "2001:db8::53"),
                              ("corp.example.org.",), ("svc.example.org.", "db.example.org."))
    pushed = got.pushed()
    assert pushed.servers == (("192.0.2.1", 53), ("192.0.2.2", 53), ("2001:db8::53", 53))
    assert pushed.domains == ("svc.example.org.", "db.example.org.")  # split DNS wins
    assert pushed.search == ("corp.example.org.",)


@pytest.mark.parametrize(("text", "domains", "search"), [
    # No split-DNS list: the default domain is owned, as OpenVPN's DOMAIN is.
    ("reason=connect\nINTERNAL_IP4_DNS=192.0.2.1\nCISCO_DEF_DOMAIN=a.example b.example\n",
     ("a.example.", "b.example."), ("a.example.", "b.example.")),
    ("reason=reconnect\nINTERNAL_IP4_DNS=192.0.2.1\n", (), ()),
    ("reason=connect\nINTERNAL_IP4_DNS=192.0.2.1\nCISCO_SPLIT_DNS=x.example,x.example\n",
     ("x.example.",), ()),
])
def test_which_names_the_zone_owns(text: str, domains: tuple[str, ...], search: tuple[str, ...]) -> None:
    pushed = oc.parse(text, "f").pushed()
    assert (pushed.domains, pushed.search) == (domains, search)


@pytest.mark.parametrize(("text", "error"), [
    ("", "f: no reason= line"),
    ("reason=connect\njunk\n", "f line 2: expected NAME=value"),
    ("reason=pre-init\n",
     "f line 1: reason 'pre-init' is not one of connect, reconnect, attempt-reconnect"),
    ("reason=connect\nINTERNAL_IP4_DNS=192.0.2.1 dns.example\n",
     "f line 2: INTERNAL_IP4_DNS: 'dns.example' is not"),
    ("reason=connect\nINTERNAL_IP4_DNS=2001:db8::1\n",
     "f line 2: INTERNAL_IP4_DNS: 2001:db8::1 is not an IPv4"),
    ("reason=connect\nINTERNAL_IP6_DNS=192.0.2.1\n", "f line 2: INTERNAL_IP6_DNS: 192.0.2.1 is not an IPv6"),
    ("reason=connect\n\nCISCO_SPLIT_DNS=ok.example,bad_-.exa mple\n",
     "f line 3: CISCO_SPLIT_DNS: 'bad_-.exa'"),
    ("reason=connect\nTUNDEV=tun0 rm -rf\n", "f line 2: TUNDEV 'tun0 rm -rf' is not an interface name"),
    ("x=1\n" * 201, "f line 201: more than 200 lines"),
])
def test_a_state_file_our_hook_did_not_write_is_an_error_naming_file_and_line(text: str, error: str) -> None:
    with pytest.raises(oc.StateError) as caught:
        oc.parse(text, "f")
    assert str(caught.value).startswith(error)


RECORDED = oc.parse(GOOD, "f")


@pytest.mark.parametrize(("seen", "status", "reason"), [
    (oc.Seen("/s", RECORDED, interface="tun0", link=True), UP, "openconnect connected (tun0)"),
    (oc.Seen("/s", RECORDED), UP, "openconnect connected"),  # link not checked
    (oc.Seen("/s"), DOWN, "no state file at /s: openconnect is not connected"),
    (oc.Seen("/s", error="/s line 2: expected NAME=value"), DOWN, "/s line 2: expected NAME=value"),
    (oc.Seen("/s", RECORDED, interface="tun0", link=False), DOWN, "interface tun0 is gone or down"),
    (oc.Seen("/s", oc.Recorded("attempt-reconnect", "tun0", servers=("192.0.2.1",)), interface="tun0",
             link=True),
     DOWN, "openconnect lost the gateway and is reconnecting"),
])
def test_the_tunnel_state_from_one_look(seen: oc.Seen, status: str, reason: str) -> None:
    state = oc.state_of(seen)
    assert state.status == status
    assert state.reason.startswith(reason), state.reason


def test_the_state_keeps_the_servers_while_down_and_up_needs_a_server() -> None:
    reconnecting = oc.state_of(oc.Seen("/s", oc.Recorded("attempt-reconnect", servers=("192.0.2.1",))))
    assert reconnecting.pushed.servers == (("192.0.2.1", 53),) and not reconnecting.up
    no_dns = oc.state_of(oc.Seen("/s", oc.Recorded("connect", "tun0")))
    assert no_dns.status == UP and not no_dns.up
    assert no_dns.describe() == "the tunnel is up but the VPN server pushed no DNS server"


# ---- the hook, run by /bin/sh -----------------------------------------------------------------

RECORDER = """#!/bin/sh
# Stands in for the stock vpnc-script: records the DNS variables it was given.
{ echo "reason=$reason"; env | grep -E '^(INTERNAL_IP[46]_DNS|CISCO_DEF_DOMAIN|CISCO_SPLIT_DNS)=' || true
} >> "$RECORD"
exit ${EXIT_CODE:-0}
"""


def hook(tmp_path: Path, reason: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = openconnect_hook.install(str(tmp_path / "bin"))
    real = tmp_path / "stock-vpnc-script"
    real.write_text(RECORDER)
    real.chmod(0o755)
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "reason": reason,
            "SPLITDNS_OPENCONNECT_STATE": str(tmp_path / "run" / "openconnect"),
            "SPLITDNS_VPNC_SCRIPT": str(real), "RECORD": str(tmp_path / "record"),
            "TUNDEV": "tun0", "INTERNAL_IP4_ADDRESS": "192.0.2.129", "INTERNAL_IP4_DNS": "192.0.2.1",
            "INTERNAL_IP6_DNS": "2001:db8::53", "CISCO_DEF_DOMAIN": "corp.example.org",
            "CISCO_SPLIT_DNS": "svc.example.org,db.example.org", **env}
    return subprocess.run(["/bin/sh", str(script)], env=full, capture_output=True, text=True, timeout=10)


def test_the_hook_records_at_connect_and_hides_the_dns_from_the_stock_script(tmp_path: Path) -> None:
    done = hook(tmp_path, "connect")
    assert done.returncode == 0, done.stderr
    state = tmp_path / "run" / "openconnect"
    got = oc.parse(state.read_text(), str(state))
    assert (got.reason, got.tundev, got.servers) == ("connect", "tun0", ("192.0.2.1", "2001:db8::53"))
    assert got.split_domains == ("svc.example.org.", "db.example.org.")
    # The stock script ran, and without a DNS variable: it cannot touch resolv.conf.
    assert (tmp_path / "record").read_text() == "reason=connect\n"
    assert [p.name for p in state.parent.iterdir()] == ["openconnect"]  # no temporary file left


def test_the_hook_marks_reconnecting_and_removes_the_file_at_disconnect(tmp_path: Path) -> None:
    assert hook(tmp_path, "connect").returncode == 0
    state = tmp_path / "run" / "openconnect"
    assert hook(tmp_path, "attempt-reconnect").returncode == 0
    assert oc.parse(state.read_text(), "f").reason == "attempt-reconnect"
    assert hook(tmp_path, "reconnect").returncode == 0
    assert oc.parse(state.read_text(), "f").reason == "reconnect"
    assert hook(tmp_path, "disconnect").returncode == 0
    assert not state.exists()
    assert hook(tmp_path, "attempt-reconnect").returncode == 0
    assert not state.exists()  # never connected: nothing to mark
    assert (tmp_path / "record").read_text().split() == [
        "reason=connect", "reason=attempt-reconnect", "reason=reconnect", "reason=disconnect",
        "reason=attempt-reconnect"]


def test_a_newline_in_a_pushed_value_cannot_add_a_line(tmp_path: Path) -> None:
    assert hook(tmp_path, "connect", CISCO_DEF_DOMAIN="corp.example.org\nreason=disconnect").returncode == 0
    text = (tmp_path / "run" / "openconnect").read_text()
    assert "\nreason=disconnect" not in text
    with pytest.raises(oc.StateError, match=r"CISCO_DEF_DOMAIN: 'corp\.example\.orgreason=disconnect'"):
        oc.parse(text, "f")


def test_when_the_stock_script_fails_nothing_is_recorded(tmp_path: Path) -> None:
    done = hook(tmp_path, "connect", EXIT_CODE="3")
    assert done.returncode == 3
    assert not (tmp_path / "run" / "openconnect").exists()


def test_without_a_stock_vpnc_script_the_hook_says_what_to_install(tmp_path: Path) -> None:
    done = hook(tmp_path, "connect", SPLITDNS_VPNC_SCRIPT=str(tmp_path / "absent"))
    assert done.returncode == 1
    assert "install vpnc-scripts, or set SPLITDNS_VPNC_SCRIPT" in done.stderr


def test_openconnect_hook_writes_the_script_for_the_vpn_container(tmp_path: Path) -> None:
    from splitdns import cli

    assert cli.main(["openconnect-hook", str(tmp_path / "bin")]) == 0
    script = tmp_path / "bin" / "vpnc-script"
    assert script.read_text() == openconnect_hook.SCRIPT and os.access(script, os.X_OK)
    assert script.stat().st_mode & 0o005 == 0o005  # the VPN container's user may run it
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert cli.main(["openconnect-hook", str(blocked)]) == 1
