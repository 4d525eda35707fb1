"""`check` reads a user's mistakes as the mistakes they are: typos of the cluster domain or of
another block's zone, a catch-all that forwards nothing, the cluster's own CoreDNS sending the
root into a workload's tunnel; and big or absurd inputs (a 50 MB token, 20,000 blocks) get a
short error or a linear check (the figures: bench/check_scale.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from splitdns import config
from splitdns.commands.explain import explain
from splitdns.errors import ConfigError
from splitdns.kube.check import checker
from splitdns.kube.shared.findings import Finding

BIG = 5 * 1024 * 1024


def found(tmp_path: Path, text: str, name: str = "Corefile") -> list[Finding]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return checker.check([str(path)], checker.Options())


# --- big inputs ----------------------------------------------------------------------------------

@pytest.mark.parametrize("line", [f"forward . {'a' * BIG}", f"{'b' * BIG} x",
                                  f"forward . 10.0.0.1 {{\n {'c' * BIG} 1\n }}"])
def test_an_error_never_echoes_a_huge_token_but_its_start_and_size(tmp_path: Path, line: str) -> None:
    text = f".:53 {{\n {line}\n}}\n"
    findings = found(tmp_path, text)
    assert findings and all(len(f.message) < 2000 for f in findings), [len(f.message) for f in findings]
    assert any("(cut: 5,242,88" in f.message for f in findings), [f.message[:300] for f in findings]
    with pytest.raises(ConfigError) as err:
        config.loads(text, "Corefile")
    assert len(str(err.value)) < 2000 and "(cut: 5,242,88" in str(err.value)


def test_forward_lines_covered_by_an_earlier_one_are_found_also_with_except_and_next(tmp_path: Path) -> None:
    """SD106, now by suffix lookups: `except` and `next` still make a later line reachable."""
    text = (".:53 {\n forward example.net 192.0.2.4 {\n  next NXDOMAIN\n }\n"
            " forward sub.example.net 192.0.2.6\n"  # reachable: `next` hands replies on
            " forward . 192.0.2.1 {\n  except a.example.org\n }\n"
            " forward a.example.org 192.0.2.2\n"   # excepted above: reachable
            " forward b.example.org 192.0.2.3\n"   # covered by line 6
            " forward x.a.example.org 192.0.2.5\n"  # covered by line 9
            "}\n")
    lines = sorted((f.line, f.message.split(" (line")[0]) for f in found(tmp_path, text) if f.code == "SD106")
    assert lines == [(10, "forward b.example.org. comes after forward ."),
                     (11, "forward x.a.example.org. comes after forward a.example.org.")]


# --- mistakes read as what they are --------------------------------------------------------------

SCENARIO = """.:53 {
    forward . 10.96.0.10
}

svc.acme.internal:53 {
    forward . 192.168.240.1
}

cluster.lcoal:53 {
    forward . 10.96.0.10
}

svc.acme.internl:53 {
    forward . 192.168.240.1
}
"""


def test_a_misspelt_cluster_domain_is_said_on_its_own_line_with_did_you_mean(tmp_path: Path) -> None:
    """Not "private zone ... every lookup goes into the tunnel" on the catch-all's line (SD104)."""
    got = [(f.line, f.code, f.message) for f in found(tmp_path, SCENARIO)]
    assert (9, "SD116", "zone cluster.lcoal. is one typing slip away from cluster.local., the cluster "
                        "domain: did you mean cluster.local?") in got, got
    assert not [g for g in got if g[1] == "SD104"], got


def test_a_zone_a_slip_away_from_another_blocks_zone_gets_did_you_mean(tmp_path: Path) -> None:
    got = [(f.line, f.code, f.message) for f in found(tmp_path, SCENARIO)]
    assert (13, "SD116", "zone svc.acme.internl. is one typing slip away from svc.acme.internal., the "
                         "zone of block svc.acme.internal.:53 (line 5): did you mean svc.acme.internal?") \
        in got, got


@pytest.mark.parametrize("zones", [("east.corp.example", "west.corp.example"),
                                   ("eu1.example.org", "eu2.example.org"), ("acme.example", "acne.example")])
def test_names_of_their_own_are_no_slips(tmp_path: Path, zones: tuple[str, str]) -> None:
    text = ".:53 {\n forward . 10.96.0.10\n}\n" + "".join(f"{z} {{\n forward . 192.0.2.1\n}}\n"
                                                       for z in zones)
    assert [f.message for f in found(tmp_path, text) if f.code == "SD116"] == []


def test_a_catch_all_that_forwards_only_the_cluster_domain_is_an_error_as_explain_says(
        tmp_path: Path) -> None:
    text = ".:53 {\n forward cluster.local 10.96.0.10\n}\n"
    got = [(f.line, f.code) for f in found(tmp_path, text)]
    assert got == [(2, "SD117")]
    assert explain("example.com", str(tmp_path / "Corefile"))[-1].endswith("the answer is SERVFAIL")


def test_the_clusters_coredns_forwarding_the_root_to_a_tunnel_dns_is_sd105_without_a_vpn_config(
        tmp_path: Path) -> None:
    configmap = """apiVersion: v1
kind: ConfigMap
metadata:
  name: coredns
  namespace: kube-system
data:
  Corefile: |
    .:53 {
        kubernetes cluster.local in-addr.arpa ip6.arpa
        forward . 192.168.240.1
    }
"""
    got = [(f.line, f.code) for f in found(tmp_path, configmap, "coredns.yaml")]
    assert got == [(10, "SD105")], got
    fine = configmap.replace("192.168.240.1", "/etc/resolv.conf")
    assert [f.code for f in found(tmp_path, fine, "coredns.yaml")] == []


def test_numbered_zones_are_no_slips_of_each_other(tmp_path: Path) -> None:
    blocks = [f"zone{i}.example.org {{\n forward . 192.0.2.1\n}}\n" for i in (1, 2, 12, 21, 112)]
    text = ".:53 {\n forward . 10.96.0.10\n}\n" + "".join(blocks)
    assert [f.message for f in found(tmp_path, text) if f.code == "SD116"] == []
