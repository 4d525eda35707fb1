"""`splitdns check` on strongSwan's and OpenConnect's configs: how each is recognised and read, and
the cases of their traps the fixtures of tests/test_check.py (SD309-SD314) leave out."""

from __future__ import annotations

from pathlib import Path

import pytest

from splitdns.kube import tunnels
from splitdns.kube.check import checker
from splitdns.kube.shared import sources
from splitdns.kube.tunnels import openconnect_conf, strongswan_conf, strongswan_pod

CASES = Path(__file__).parent / "data" / "kube" / "check"
COREFILE = ".:53 {\n    forward . 10.96.0.10\n}\nsvc.acme.internal:53 {\n    openconnect\n}\n"
OCSERV = ("auth = \"plain[passwd=/etc/ocserv/ocpasswd]\"\ntcp-port = 443\nipv4-network = 192.168.99.0\n"
          "dns = 192.168.240.1\n")


def found(tmp_path: Path, **files: str) -> list[tuple[str, int, str]]:
    paths = []
    for name, text in files.items():
        (tmp_path / name.replace("_", ".")).write_text(text)
        paths.append(str(tmp_path / name.replace("_", ".")))
    return [(f.code, f.line, f.message) for f in checker.check(paths, checker.Options())]


@pytest.mark.parametrize(("path", "word"), [
    (CASES / "SD309" / "bad" / "strongswan.conf", "strongswan"),
    (CASES / "SD311" / "good" / "swanctl.conf", "strongswan"),
    (CASES / "SD313" / "good" / "ocserv.conf", "openconnect"),
    (CASES / "SD313" / "good" / "Corefile", "corefile"),
    (CASES / "SD302" / "bad" / "wg0.conf", "wireguard"),
    (CASES / "SD301" / "bad" / "client.ovpn", "openvpn"),
])
def test_each_config_is_recognised_as_its_kind(path: Path, word: str) -> None:
    assert sources.kind_of(str(path), path.read_text(), tunnels.formats()) == word


def test_settings_on_one_line_and_sections_are_read_as_strongswan_reads_them() -> None:
    conf = strongswan_conf.parse(strongswan_pod.RESOLVE_SETTINGS + "\ninclude more.conf\n", "s.conf")
    assert conf.get("charon", "plugins", "resolve", "file").value == strongswan_pod.RESOLVE_FILE  # type: ignore[union-attr]
    assert conf.get("charon", "plugins", "resolve", "resolvconf", "path").value == "/nonexistent"  # type: ignore[union-attr]
    swan = strongswan_conf.parse("connections {\n  a {\n    children {\n      c {\n"
                                 "        remote_ts = 10.1.0.0/16,dynamic, fd00::/8 # corp\n      }\n    }\n"
                                 "  }\n}\n", "swanctl.conf")
    (conn,) = swan.connections
    assert (conn.name, conn.line, conn.vips) == ("a", 2, False)
    assert [(str(n), line) for n, line in conn.remote_ts] == [("10.1.0.0/16", 5), ("fd00::/8", 5)]
    assert swan.behind_tunnel("10.1.2.3") and not swan.behind_tunnel("10.2.0.1")


def test_an_include_check_does_not_follow_is_named_in_the_finding(tmp_path: Path) -> None:
    conf = ("charon {\n    load_modular = yes\n    plugins {\n        include strongswan.d/charon/*.conf\n"
            "    }\n}\n")
    ((code, line, message),) = found(tmp_path, strongswan_conf=conf)
    assert (code, line) == ("SD309", 1)
    assert "does not follow `include strongswan.d/charon/*.conf`" in message


def test_a_resolve_plugin_turned_off_brings_no_dns_for_a_strongswan_block(tmp_path: Path) -> None:
    conf = (CASES / "SD309" / "good" / "strongswan.conf").read_text().replace(
        "        resolve {\n", "        resolve {\n            load = no\n")
    corefile = COREFILE.replace("openconnect", "strongswan")
    assert [c for c, _, _ in found(tmp_path, Corefile=corefile, strongswan_conf=conf)] == ["SD311"]
    # Without a `strongswan` block nothing reads the DNS: no finding.
    (tmp_path / "alone").mkdir()
    assert found(tmp_path / "alone", strongswan_conf=conf) == []


def test_a_full_strongswan_tunnel_is_reported_without_a_corefile(tmp_path: Path) -> None:
    swanctl = (CASES / "SD310" / "good" / "swanctl.conf").read_text().replace("192.168.240.0/24", "0.0.0.0/0")
    (code, line, message), = found(tmp_path, swanctl_conf=swanctl)
    assert (code, line) == ("SD310", 13) and "sends every address into the tunnel" in message


@pytest.mark.parametrize(("routes", "said"), [
    ("", "no `route =` line (ocserv then routes everything): a full tunnel takes the cluster DNS 10.96.0.10"),
    ("route = default\n", "route = default: a full tunnel takes"),
    ("route = default\nno-route = 10.96.0.0/255.240.0.0\n", None),
    ("route = 10.0.0.0/8\nno-route = 10.96.0.0/12\n", None),
    ("route = 10.0.0.0/8\nno-route = 10.96.0.10/32\n",
     "sends into the tunnel kubeadm's default Service range 10.96.0.0/12"),
    ("route = 192.168.240.0/24\n", None),
])
def test_gateway_routes_that_take_the_cluster_are_split_include_traps(
        tmp_path: Path, routes: str, said: str | None) -> None:
    out = [m for c, _, m in found(tmp_path, Corefile=COREFILE, ocserv_conf=OCSERV + routes) if c == "SD313"]
    assert out == [] if said is None else (len(out) == 1 and said in out[0])


def test_a_full_gateway_tunnel_without_the_cluster_in_sight_still_says_so(tmp_path: Path) -> None:
    conf = openconnect_conf.parse(OCSERV, "ocserv.conf")
    assert conf.full_tunnel and not conf.behind_tunnel("10.96.0.10") and conf.behind_tunnel("192.168.240.1")
    ((code, line, message),) = found(tmp_path, ocserv_conf=OCSERV)
    assert (code, line) == ("SD313", 1) and "give the pod's Corefile too" in message


def test_no_dns_is_reported_only_for_an_openconnect_block(tmp_path: Path) -> None:
    conf = OCSERV.replace("dns = 192.168.240.1\n", "") + "route = 192.168.240.0/24\n"
    assert [c for c, _, _ in found(tmp_path, Corefile=COREFILE, ocserv_conf=conf)] == ["SD314"]
    other = COREFILE.replace("    openconnect\n", "    forward . 192.168.240.1\n")
    assert found(tmp_path, Corefile=other, ocserv_conf=conf) == []


def test_every_unhooked_openconnect_container_of_a_pod_is_reported_at_its_line(tmp_path: Path) -> None:
    pod = (CASES / "SD312" / "bad" / "pod.yaml").read_text()
    pod = pod.replace("    - name: app\n      image: your-app-image\n",
                      "    - name: app\n      image: your-app-image\n"
                      "    - name: backup-vpn\n      image: x\n      args: [openconnect, --script, "
                      "/usr/share/vpnc-scripts/vpnc-script, vpn2.example]\n")
    out = [(line, m) for c, line, m in found(tmp_path, pod_yaml=pod) if c == "SD312"]
    lines = pod.splitlines()
    assert [lines[n - 1].strip() for n, _ in out] == ["- name: vpn", "- name: backup-vpn"]
    assert "with --script /usr/share/vpnc-scripts/vpnc-script" in out[1][1]
