"""`splitdns check` tells the truth about what people run it on: the stock kubeadm CoreDNS ConfigMap,
what `render --form webhook` writes, every problem of a Corefile in one run, and plugins CoreDNS
itself dropped named as such."""

from __future__ import annotations

from pathlib import Path

import pytest

from splitdns import cli
from tests.test_check import _check_corefile

# kubeadm's CoreDNS ConfigMap as `kubeadm init` writes it, with a `hosts` block as clusters add one.
KUBEADM_COREDNS = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: coredns
  namespace: kube-system
data:
  Corefile: |
    .:53 {
        errors
        health {
           lameduck 5s
        }
        ready
        kubernetes cluster.local in-addr.arpa ip6.arpa {
           pods insecure
           fallthrough in-addr.arpa ip6.arpa
           ttl 30
        }
        hosts {
           192.0.2.10 registry.example.org
           fallthrough
        }
        prometheus :9153
        forward . /etc/resolv.conf {
           max_concurrent 1000
        }
        cache 30
        loop
        reload
        loadbalance
    }
"""


def test_the_stock_kubeadm_coredns_configmap_has_no_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "coredns.yaml"
    path.write_text(KUBEADM_COREDNS)
    code = cli.main(["check", "--brief", str(path)])
    out = capsys.readouterr().out
    assert " error " not in out and code in (0, 1), out


@pytest.mark.parametrize("extra", [[], ["--kube-version", "1.33"]])
def test_what_render_writes_for_the_webhook_checks_clean(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str]) -> None:
    """The webhook's own container runs `splitdns webhook`: not a DNS container, so no SD204/206/207;
    cert-manager's kinds are checked against their vendored CRDs, not called unknown."""
    assert cli.main(["render", "--form", "webhook", "--zone", "svc.acme.internal=openvpn",
                     "--cluster-dns", "10.96.0.10"]) == 0
    path = tmp_path / "webhook.yaml"
    path.write_text(capsys.readouterr().out)
    code = cli.main(["check", "--brief", str(path), *extra])
    out = capsys.readouterr().out
    assert (code, out) == (0, ""), out


def test_a_misspelt_cert_manager_field_is_an_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["render", "--form", "webhook", "--zone", "svc.acme.internal=openvpn",
                     "--cluster-dns", "10.96.0.10"]) == 0
    text = capsys.readouterr().out
    assert "\n  dnsNames:\n" in text
    path = tmp_path / "webhook.yaml"
    path.write_text(text.replace("\n  dnsNames:\n", "\n  dnsName:\n", 1))
    assert cli.main(["check", "--brief", str(path), "--kube-version", "1.33"]) == 2
    (line,) = capsys.readouterr().out.splitlines()
    lines = text.splitlines()
    # The error is the object's that lacks the field: the Certificate's `spec:` above the misspelt key.
    spec = max(n for n, t in enumerate(lines[:lines.index("  dnsNames:")], 1) if t == "spec:")
    assert line == (f"{path}:{spec}: SD401 error Certificate splitdns-webhook: cert-manager.io/v1 (its CRD, "
                    "as vendored): spec: Additional properties are not allowed ('dnsName' was unexpected)")


def test_a_pod_that_runs_the_resolver_by_command_is_still_a_dns_pod() -> None:
    """The rule that spares the webhook does not spare `splitdns serve` given as the command."""
    from splitdns.kube.check import pod_lint

    spec = {"containers": [{"name": "dns", "image": "registry.example.org/splitdns:1",
                            "command": ["splitdns", "serve"], "args": ["-conf", "/etc/coredns/Corefile"]},
                           {"name": "hook", "image": "registry.example.org/splitdns:1",
                            "command": ["/opt/splitdns/bin/splitdns", "webhook"]}]}
    assert [d.container["name"] for d in pod_lint.dns_containers(spec)] == ["dns"]


def test_a_forward_loop_does_not_hide_a_duplicate_zone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every problem in one run: serve refuses the duplicate zone too, so check must say so now."""
    from splitdns import config
    from splitdns.errors import ConfigError

    text = (".:53 {\n forward . 127.0.0.1\n}\nexample.org:53 {\n forward . 192.0.2.1\n}\n"
            "example.org:53 {\n forward . 192.0.2.2\n}\n")
    code, out = _check_corefile(tmp_path, text, capsys)
    corefile = tmp_path / "Corefile"
    assert code == 2
    assert f"{corefile}:2: SD101 error forward . sends" in out, out
    assert f"{corefile}:7: SD100 error cannot serve dns://example.org.:53 - it is already defined at " \
           f"{corefile}:4" in out, out
    # What serve says once the loop is gone, check said above, in the same words.
    with pytest.raises(ConfigError) as served:
        config.loads(text.replace("127.0.0.1", "192.0.2.3"), str(corefile))
    assert f"{corefile}:7: SD100 error {served.value.message}" in out


def test_each_error_is_said_once_even_when_serve_would_say_it_too(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out = _check_corefile(tmp_path, "example.org:53 {\n forward . 192.0.2.1\n}\n"
                                       "example.org:53 {\n forward . 192.0.2.2\n}\n", capsys)
    assert out.count("already defined") == 1, out


@pytest.mark.parametrize("resolver", ["splitdns", "coredns"])
def test_proxy_gets_what_replaced_it_not_a_spelling_guess(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], resolver: str) -> None:
    from splitdns import config
    from splitdns.errors import ConfigError

    text = ".:53 {\n proxy . 192.0.2.1\n}\n"
    path = tmp_path / "Corefile"
    path.write_text(text)
    assert cli.main(["check", "--brief", "--resolver", resolver, str(path)]) == 2
    out = capsys.readouterr().out
    assert "`proxy` was removed from CoreDNS in 1.7" in out and "use `forward`" in out, out
    assert "misspelt" not in out and "did you mean" not in out
    with pytest.raises(ConfigError) as served:
        config.loads(text)
    assert "`proxy` was removed from CoreDNS in 1.7" in str(served.value)
