"""`splitdns explain`: which block and forward answer a name, and why, label boundary included."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from splitdns import cli
from splitdns.commands.explain import explain

SCENARIO = Path(__file__).parent / "data" / "kube" / "scenario" / "Corefile"


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "Corefile"
    path.write_text(text)
    return str(path)


def test_tunnel_name_goes_to_the_tunnel_block() -> None:
    lines = explain("db.svc.acme.internal", str(SCENARIO))
    assert lines[0] == f"db.svc.acme.internal. -> block svc.acme.internal.:53 ({SCENARIO}:6)"
    owner = f"block svc.acme.internal.:53 ({SCENARIO}:6)   <- owns it"
    assert f"    {'svc.acme.internal.':<40} {owner}" in lines
    assert f"  forward . ({SCENARIO}:9): the first `forward` of the block whose FROM covers the name" in lines
    assert "  upstreams: 192.168.240.1:53; policy random" in lines


def test_lookalike_suffix_goes_to_the_catch_all_and_says_why() -> None:
    lines = explain("svc.acme.internal.example.net", str(SCENARIO))
    assert lines[0] == f"svc.acme.internal.example.net. -> block .:53 ({SCENARIO}:1)"
    assert "  upstreams: 10.100.0.10:53; policy random" in lines
    assert ("  note: svc.acme.internal. does not own svc.acme.internal.example.net.: svc.acme.internal "
            "appears in the name but is followed by .example.net, so the name belongs to example.net., not "
            "to svc.acme.internal.") in lines


def test_not_on_a_label_boundary() -> None:
    lines = explain("notsvc.acme.internal", str(SCENARIO))
    assert lines[0].endswith("-> block .:53 (" + str(SCENARIO) + ":1)")
    assert lines[-1] == ("  note: svc.acme.internal. does not own notsvc.acme.internal.: the name ends with "
                         "the text svc.acme.internal but not on a label boundary ('not' is part of a label)")


def test_name_no_block_owns_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "svc.acme.internal:53 {\n    forward . 192.168.240.1\n}\n")
    lines = explain("example.com", path)
    assert lines[0] == "example.com. -> no block on port 53 owns it: the answer is REFUSED"
    assert "    com.                                     no block" in lines
    assert lines[-1].startswith("  there is no catch-all `.` block, so a name no zone owns is REFUSED")


def test_several_forwards_in_file_order_and_except(tmp_path: Path) -> None:
    path = write(tmp_path, """acme.internal:53 {
    forward svc.acme.internal 192.168.240.1 {
        except legacy.svc.acme.internal
    }
    forward . 10.96.0.10
}
""")
    db = explain("db.svc.acme.internal", path)
    first = "the first `forward` of the block whose FROM covers the name"
    assert f"  forward svc.acme.internal. ({path}:2): {first}" in db
    legacy = explain("x.legacy.svc.acme.internal", path)
    assert f"  forward . ({path}:5): the first `forward` of the block whose FROM covers the name" in legacy
    assert any("tried in file order" in line for line in legacy)


def test_tunnel_block_learns_upstreams_at_run_time(tmp_path: Path) -> None:
    path = write(tmp_path, ".:53 {\n    forward . 10.96.0.10\n}\nsvc.acme.internal:53 {\n"
                           "    openvpn {\n        management 127.0.0.1:7505\n    }\n}\n")
    lines = explain("db.svc.acme.internal", path)
    assert lines[-1] == ("  upstreams: the DNS servers the VPN server pushes, learned at run time "
                         f"(openvpn, {path}:5)")


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["explain", "db.svc.acme.internal", "-conf", str(SCENARIO)]) == 0
    assert capsys.readouterr().out.startswith("db.svc.acme.internal. -> block svc.acme.internal.:53")
    bad = write(tmp_path, ".:53 {\n    forward . 10.96.0.10\n")
    assert cli.main(["explain", "example.com", "-conf", bad]) == 2
    assert "missing '}'" in capsys.readouterr().err


def test_without_a_corefile_it_says_what_to_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["explain", "example.com"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("splitdns explain: ") and "-conf FILE" in err
    words = err.lower().split()
    assert not [a for a, b in itertools.pairwise(words) if a == b], err  # no "Corefile Corefile"


def test_a_configmap_is_explained_as_check_reads_it(tmp_path: Path) -> None:
    corefile = SCENARIO.read_text()
    body = "".join(f"    {line}\n" for line in corefile.splitlines())
    cm = tmp_path / "configmap.yaml"
    head = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: splitdns\ndata:\n  Corefile: |\n"
    cm.write_text(head + body)
    lines = explain("db.svc.acme.internal", str(cm))
    # The Corefile's line 6 is the ConfigMap's line 6 + 6 (the YAML above the Corefile).
    assert lines[0] == f"db.svc.acme.internal. -> block svc.acme.internal.:53 ({cm}:12)"
    assert "  upstreams: 192.168.240.1:53; policy random" in lines


def test_an_address_is_explained_by_its_reverse_name(tmp_path: Path) -> None:
    path = write(tmp_path, ".:53 {\n    forward . 10.96.0.10\n}\n"
                           "10.0.0.0/8:53 {\n    forward . 192.168.240.1\n}\n")
    lines = explain("10.0.0.1", path)
    assert lines[0] == ("10.0.0.1 is an address: its name is the reverse name 1.0.0.10.in-addr.arpa. "
                        "(what PTR asks)")
    assert lines[1] == f"1.0.0.10.in-addr.arpa. -> block 10.in-addr.arpa.:53 ({path}:4)"


def test_hosts_template_and_rewrite_are_explained_in_plugin_order(tmp_path: Path) -> None:
    path = write(tmp_path, """. {
    forward . 10.100.0.10
    template IN AAAA {
        rcode NOERROR
    }
    rewrite name suffix .short .svc.acme.internal answer auto
    hosts {
        10.0.0.1 app.corp.example
        fallthrough
    }
}
svc.acme.internal {
    forward . 192.168.240.1
}
""")
    steps = "  rewrite, template, hosts (in CoreDNS's plugin order)"
    assert f"{steps}: an A query for it is answered by the block itself (NOERROR), not forwarded" in \
        explain("app.corp.example", path)
    lines = explain("db.short", path)
    assert any(line.startswith(f"{steps}: rewrite asks for db.svc.acme.internal. instead") for line in lines)
    assert "  upstreams: 10.100.0.10:53; policy random" in lines  # still this block's forward
    assert f"{steps} pass an A query for it on" in explain("www.example.org", path)


CLUSTER_CONFIGMAP = """apiVersion: v1
kind: ConfigMap
metadata:
  name: coredns
  namespace: kube-system
data:
  Corefile: |
    .:53 {
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            fallthrough in-addr.arpa ip6.arpa
        }
        forward . /etc/resolv.conf
    }
"""


def test_the_kubernetes_plugin_of_the_clusters_coredns_answers_cluster_names(tmp_path: Path) -> None:
    path = tmp_path / "coredns.yaml"
    path.write_text(CLUSTER_CONFIGMAP)
    lines = explain("web.default.svc.cluster.local", str(path))
    assert any(ln.startswith(f"  kubernetes ({path}:9): CoreDNS's kubernetes plugin answers names of "
                             "cluster.local.") for ln in lines), lines
    assert not any("forward ." in ln for ln in lines), lines
    assert "no `fallthrough`" in lines[-1]
    reverse = explain("10.0.0.1", str(path))
    assert any("falls through" in ln for ln in reverse), reverse
    public = explain("example.com", str(path))
    assert not any("kubernetes (" in ln or "would refuse" in ln for ln in public), public
    assert any(ln.startswith(f"  forward . ({path}:12)") for ln in public), public
