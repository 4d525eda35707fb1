"""The OpenConnect and strongSwan watchers in process: real files in a temporary directory, the
loopback interface standing in for the tun device (present and up in every namespace)."""

from __future__ import annotations

import os
from pathlib import Path

from splitdns.core import metrics
from splitdns.core.tunnel import DOWN, UP, TunnelState
from splitdns.directives.openconnect import OpenConnectSpec
from splitdns.directives.strongswan import StrongSwanSpec
from splitdns.shell import openconnect, strongswan

STATE = """\
reason={reason}
TUNDEV={tundev}
INTERNAL_IP4_DNS=192.0.2.1
CISCO_SPLIT_DNS=corp.example
"""


def write(path: Path, text: str) -> None:
    """As the hook and charon do it: a new file renamed over the old one."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_the_openconnect_watcher_follows_the_hook_s_file_and_the_device(tmp_path: Path) -> None:
    path = tmp_path / "openconnect"
    changes: list[TunnelState] = []
    watcher = openconnect.Watcher(OpenConnectSpec(str(path), domains=True), changes.append)
    assert watcher.look().status == DOWN and "no state file at" in watcher.state.reason
    write(path, STATE.format(reason="connect", tundev="lo"))
    up = watcher.look()
    assert up.up and up.pushed.servers == (("192.0.2.1", 53),) and up.pushed.domains == ("corp.example.",)
    assert up.device == "lo"  # what the zone's upstream sockets are bound to
    assert watcher.look() == up and len(changes) == 2  # nothing new: no report
    write(path, STATE.format(reason="attempt-reconnect", tundev="lo"))
    assert watcher.look().reason == "openconnect lost the gateway and is reconnecting"
    write(path, STATE.format(reason="reconnect", tundev="lo"))
    assert watcher.look().up
    write(path, STATE.format(reason="connect", tundev="splitdnsgone0"))  # the device is not there
    assert "interface splitdnsgone0 is gone or down" in watcher.look().reason
    write(path, "reason=connect\nINTERNAL_IP4_DNS=not-an-address\n")
    assert watcher.look().reason == f"{path} line 2: INTERNAL_IP4_DNS: 'not-an-address' is not an IP address"
    path.unlink()
    assert watcher.look().status == DOWN and "no state file" in watcher.state.reason
    assert [c.status for c in changes] == [DOWN, UP, DOWN, UP, DOWN, DOWN, DOWN]


def test_the_openconnect_watcher_checks_the_configured_interface_over_tundev(tmp_path: Path) -> None:
    path = tmp_path / "openconnect"
    write(path, STATE.format(reason="connect", tundev="lo"))
    watcher = openconnect.Watcher(OpenConnectSpec(str(path), interface="splitdnsgone0"), lambda s: None)
    assert "interface splitdnsgone0 is gone" in watcher.look().reason


def test_the_strongswan_watcher_follows_the_resolve_file_and_the_device(tmp_path: Path) -> None:
    path = tmp_path / "resolv.conf"
    index: dict[str, int | None] = {"lo": 7}
    watcher = strongswan.Watcher(StrongSwanSpec(str(path), "lo"), lambda s: None, index=index.get)
    assert "no file at" in watcher.look().reason
    write(path, "nameserver 192.0.2.1   # by strongSwan\n")
    up = watcher.look()
    assert up.up and up.pushed.servers == (("192.0.2.1", 53),) and up.device == "lo"
    index["lo"] = None  # charon killed: the file stays, the device goes
    assert "interface lo is gone or down" in watcher.look().reason
    index["lo"] = 9  # a new charon, no SA yet: the file is the old one's
    assert "was written before charon last started" in watcher.look().reason
    write(path, "nameserver 192.0.2.1   # by strongSwan\nnameserver 192.0.2.1   # by strongSwan\n")
    assert watcher.look().up  # the new charon's SA wrote it
    write(path, "")
    assert "lists no name server" in watcher.look().reason
    write(path, "nameserver 192.0.2.1 extra\n")
    assert watcher.look().reason == f"{path} line 1: expected `nameserver ADDRESS`"


def test_a_strongswan_file_present_at_start_is_trusted_while_its_device_runs(tmp_path: Path) -> None:
    path = tmp_path / "resolv.conf"
    write(path, "nameserver 192.0.2.1   # by strongSwan\n")
    watcher = strongswan.Watcher(StrongSwanSpec(str(path), "lo"), lambda s: None)
    assert watcher.look().up  # the real lo: present and up
    assert watcher.look().pushed.domains == ()



def test_the_metrics_reason_labels_of_the_new_kinds(tmp_path: Path) -> None:
    oc_watcher = openconnect.Watcher(OpenConnectSpec(str(tmp_path / "oc")), lambda s: None)
    ss_watcher = strongswan.Watcher(StrongSwanSpec(str(tmp_path / "rc"), "lo"), lambda s: None)
    label = lambda s: metrics.tunnel_reason(s.status, s.up, s.reason)  # noqa: E731
    assert label(oc_watcher.look()) == label(ss_watcher.look()) == "no_state"
    write(tmp_path / "oc", STATE.format(reason="attempt-reconnect", tundev="lo"))
    assert label(oc_watcher.look()) == "reconnecting"
    write(tmp_path / "oc", STATE.format(reason="connect", tundev="lo"))
    write(tmp_path / "rc", "nameserver 192.0.2.1\n")
    assert label(oc_watcher.look()) == label(ss_watcher.look()) == "connected"
