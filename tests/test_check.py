"""`splitdns check`: every code has a failing and a passing fixture, the reference scenario's
files are read the way a reader would, and the output formats and exit codes are the documented ones."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from splitdns import cli
from splitdns.kube.check import checker, schema
from splitdns.kube.shared import findings

DATA = Path(__file__).parent / "data" / "kube"
CASES = DATA / "check"
LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): (?P<code>SD\d{3}) "
                  r"(?P<severity>error|warning|info) (?P<msg>.+)$")


def run_case(case: Path) -> list[findings.Finding]:
    options = json.loads((case / "options.json").read_text()) if (case / "options.json").exists() else {}
    files = sorted(str(p) for p in case.iterdir() if p.name != "options.json")
    version = schema.minor(options["kube_version"]) if "kube_version" in options else None
    opts = checker.Options(resolver=options.get("resolver", "auto"), kube_version=version)
    return checker.check(files, opts)


@pytest.mark.parametrize("code", sorted(findings.CODES))
def test_each_code_has_a_failing_and_a_passing_fixture(code: str) -> None:
    bad, good = CASES / code / "bad", CASES / code / "good"
    assert bad.is_dir() and good.is_dir(), f"{code} needs fixtures in {bad} and {good}"
    assert code in [f.code for f in run_case(bad)]
    # The passing fixture is the same setup done right: not only without this code, without anything.
    assert [f.text(False) for f in run_case(good)] == []


def test_every_fixture_directory_is_a_known_code() -> None:
    assert {d.name for d in CASES.iterdir()} == set(findings.CODES)


def test_scenario_pod_and_corefile_findings_make_sense(capsys: pytest.CaptureFixture[str]) -> None:
    scenario = DATA / "scenario"
    code = cli.main(["check", "--brief", str(scenario / "Corefile"), str(scenario / "pod.yaml"),
                     "--kube-version", "1.33"])
    out = capsys.readouterr().out.splitlines()
    pod = str(scenario / "pod.yaml")
    # The scenario's Corefile is sound (explicit catch-all to the cluster DNS, the tunnel zone on its own);
    # its pod spec has the gaps a first pod spec has: nothing probes the DNS container, nothing
    # holds the app until it answers, and under dnsPolicy None short names lose their search list.
    assert out == [
        f"{pod}:8: SD203 warning Pod app: dnsPolicy None without dnsConfig.searches: short service names "
        "stop resolving",
        f"{pod}:15: SD205 error Pod app: DNS container dns has no readinessProbe",
        f"{pod}:15: SD206 warning Pod app: DNS container dns is a classic sidecar: nothing holds the app "
        "until it answers",
    ]
    assert code == 2


def test_a_catch_all_forwarding_to_resolv_conf_is_the_self_loop_trap(tmp_path: Path) -> None:
    scenario = DATA / "scenario"
    text = (scenario / "Corefile").read_text().replace("forward . 10.100.0.10", "forward . /etc/resolv.conf")
    (tmp_path / "Corefile").write_text(text)
    (tmp_path / "pod.yaml").write_text((scenario / "pod.yaml").read_text())
    found = run_case(tmp_path)
    assert [(f.code, f.line) for f in found if f.code == "SD101"] == [("SD101", 4)]


def test_text_format_is_file_line_code_severity_message_then_why_and_fix(
        capsys: pytest.CaptureFixture[str]) -> None:
    bad = CASES / "SD103" / "bad" / "Corefile"
    assert cli.main(["check", str(bad)]) == 1  # warnings only: a stub-only server is legitimate
    lines = capsys.readouterr().out.splitlines()
    match = LINE.match(lines[0])
    assert match and match["file"] == str(bad) and match["code"] == "SD103" and match["severity"] == "warning"
    assert lines[1].startswith("    why: ") and lines[2].startswith("    fix: ")


def test_plain_corefile_errors_stay_file_line_message(capsys: pytest.CaptureFixture[str]) -> None:
    bad = CASES / "SD100" / "bad" / "Corefile"
    assert cli.main(["check", "--brief", str(bad)]) == 2
    expected = f"{bad}:4: SD100 error forward: 'vpn-dns.example.net' is neither"
    assert capsys.readouterr().out.startswith(expected)


def test_json_format(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "--format", "json", str(CASES / "SD202" / "bad" / "pod.yaml")]) == 1
    (item,) = json.loads(capsys.readouterr().out)
    assert item["code"] == "SD202" and item["severity"] == "warning" and item["line"] == 9
    assert set(item) == {"file", "line", "code", "severity", "message", "why", "fix"}


def test_exit_codes_clean_warning_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", str(CASES / "SD202" / "good" / "pod.yaml")]) == 0
    assert cli.main(["check", str(CASES / "SD202" / "bad" / "pod.yaml")]) == 1
    assert cli.main(["check", str(CASES / "SD201" / "bad" / "pod.yaml")]) == 2
    assert cli.main(["check", "--kube-version", "1.12", str(CASES / "SD201" / "bad" / "pod.yaml")]) == 2
    assert "schemas are bundled for 1.25" in capsys.readouterr().err


def test_help_documents_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["check", "--help"])
    text = capsys.readouterr().out
    assert "0  no finding" in text and "1  warnings, no error" in text and "2  at least one error" in text


def test_corefile_lines_inside_a_configmap_are_file_lines() -> None:
    found = run_case(CASES / "SD105" / "bad")
    text = (CASES / "SD105" / "bad" / "coredns-configmap.yaml").read_text().splitlines()
    (f,) = found
    assert "forward . 192.168.240.1" in text[f.line - 1]


def test_docs_table_is_the_code_table() -> None:
    rows = ["| code | severity | problem | fix |", "|---|---|---|---|"]
    for c in findings.CODES.values():
        cells = (c.code, c.severity, c.title, c.fix)
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    docs = (Path(__file__).parents[1] / "docs" / "kubernetes.md").read_text()
    assert "\n".join(rows) + "\n" in docs


def _check_corefile(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = tmp_path / "Corefile"
    path.write_text(text)
    capsys.readouterr()
    code = cli.main(["check", "--brief", str(path)])
    return code, capsys.readouterr().out


def test_check_refuses_what_serve_refuses_with_the_same_words(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One self-loop rule for both: a resolv.conf naming 127.0.0.1 makes serve exit 2, so check too."""
    from splitdns import config
    from splitdns.errors import ConfigError

    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\n")
    text = f".:53 {{\n errors\n forward . {resolv}\n}}\n"
    code, out = _check_corefile(tmp_path, text, capsys)
    with pytest.raises(ConfigError) as served:
        config.load(tmp_path / "Corefile")
    assert code == 2
    assert out.strip() == f"{tmp_path / 'Corefile'}:3: SD101 error {served.value.message}"
    assert served.value.where is not None and served.value.where.line == 3  # the forward's line


@pytest.mark.parametrize("text", [
    # Docker's embedded DNS: another loopback address, not our listener on 127.0.0.1.
    ".:53 {\n forward . 127.0.0.11\n}\n",
    # Another port on loopback: another block of the same file...
    ".:53 {\n forward . 127.0.0.1:5353\n}\n.:5353 {\n forward . 192.0.2.1\n}\n",
    # ...or another server on this machine.
    ".:53 {\n forward . 127.0.0.1:5300\n}\n",
])
def test_a_forward_to_someone_else_on_loopback_is_no_self_loop(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> None:
    from splitdns import config

    code, out = _check_corefile(tmp_path, text, capsys)
    assert (code, out) == (0, "")
    config.loads(text)  # and serve loads it


@pytest.mark.parametrize(("text", "line"), [
    (".:53 {\n errors\n forward . 127.0.0.1\n}\n", 3),
    ("svc.acme.internal:53 {\n errors\n cache 30\n forward . 127.0.0.1:53\n}\n", 4),
    (".:53 {\n bind 0.0.0.0\n forward . 127.0.0.5\n}\n", 3),  # a wildcard listener owns loopback
])
def test_a_forward_back_to_its_own_block_is_refused_at_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, line: int) -> None:
    from splitdns import config
    from splitdns.errors import ConfigError

    code, out = _check_corefile(tmp_path, text, capsys)
    assert code == 2 and f"{tmp_path / 'Corefile'}:{line}: SD101 error forward . sends" in out, out
    with pytest.raises(ConfigError) as served:
        config.loads(text)
    assert str(served.value).startswith(f"Corefile:{line}: forward . sends queries to")


def test_a_misspelt_directive_gets_the_nearest_name_and_no_advice_to_switch_resolvers(
        capsys: pytest.CaptureFixture[str]) -> None:
    bad = CASES / "SD112" / "bad" / "Corefile"
    assert cli.main(["check", str(bad)]) == 2
    out = capsys.readouterr().out
    assert f"{bad}:2: SD112 error `erors` is not a directive splitdns or CoreDNS knows; did you mean " \
           "`errors`?" in out
    fixes = [ln for ln in out.splitlines() if ln.startswith("    fix: ")]
    assert fixes and not any("--resolver" in ln or "coredns" in ln.lower() for ln in fixes), fixes


def test_serve_names_the_nearest_directive_too(tmp_path: Path) -> None:
    from splitdns import config
    from splitdns.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        config.loads(". {\n forwrd . 192.0.2.1\n}\n")
    assert "unknown directive 'forwrd' (did you mean `forward`?)" in str(caught.value)


def test_an_unset_variable_is_a_warning_in_check_and_an_error_in_serve(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from splitdns import config
    from splitdns.errors import ConfigError

    monkeypatch.delenv("SPLITDNS_EXAMPLE_CLUSTER_DNS", raising=False)
    bad = CASES / "SD113" / "bad" / "Corefile"
    assert cli.main(["check", "--brief", str(bad)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{bad}:12: SD113 warning environment variable SPLITDNS_EXAMPLE_CLUSTER_DNS is not set here: its "
        "value comes from the pod's environment when `splitdns serve` starts (unset there, serve refuses "
        "the Corefile)"]
    with pytest.raises(ConfigError, match="environment variable SPLITDNS_EXAMPLE_CLUSTER_DNS is not set"):
        config.load(bad)
    monkeypatch.setenv("SPLITDNS_EXAMPLE_CLUSTER_DNS", "10.96.0.10")
    assert cli.main(["check", str(bad)]) == 0


# Corefiles `serve` refuses to start with (config.load is what serve runs first), each a kind of
# mistake; check must call each an error, at the line serve names.
SERVE_REFUSES = {
    "port out of range": ".:99999 {\n forward . 192.0.2.1\n}\n",
    "interface for bind": ". {\n bind eth0\n forward . 192.0.2.1\n}\n",
    "negative cache TTL": ". {\n cache -5\n forward . 192.0.2.1\n}\n",
    "same zone twice": ". {\n forward . 192.0.2.1\n}\n. {\n forward . 192.0.2.2\n}\n",
    "health twice": ". {\n health :18780\n health :18781\n forward . 192.0.2.1\n}\n",
    "missing import": "import nothere\n. {\n forward . 192.0.2.1\n}\n",
    "bad network": ". {\n private_addresses 10.0.0.0/33\n forward . 192.0.2.1\n}\n",
    "pending 0": ". {\n limits {\n  pending 0\n }\n forward . 192.0.2.1\n}\n",
    "unknown policy": ". {\n forward . 192.0.2.1 {\n  policy fastest\n }\n}\n",
    "grpc upstream": ". {\n forward . grpc://192.0.2.1\n}\n",
    "misspelt directive": ". {\n erors\n forward . 192.0.2.1\n}\n",
    "unclosed block": ". {\n forward . 192.0.2.1\n",
    "bind mix on a port": "a.org:5300 {\n forward . 192.0.2.1\n}\nb.org:5300 {\n bind 127.0.0.1\n"
                          " forward . 192.0.2.1\n}\n.:5300 {\n forward . 192.0.2.1\n}\n",
    "openvpn without a source": ". {\n forward . 192.0.2.1\n}\nx.org {\n openvpn\n}\n",
}


@pytest.mark.parametrize("text", SERVE_REFUSES.values(), ids=SERVE_REFUSES.keys())
def test_what_serve_refuses_check_calls_an_error_at_the_same_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> None:
    from splitdns import config
    from splitdns.errors import ConfigError

    code, out = _check_corefile(tmp_path, text, capsys)
    with pytest.raises(ConfigError) as served:
        config.load(tmp_path / "Corefile")
    line = served.value.where.line if served.value.where is not None else 1
    assert code == 2, out
    # At serve's line; in serve's words unless check has a more precise finding for that line
    # (SD112's did-you-mean, SD109's bind mix).
    at_line = [f for f in out.splitlines() if f.startswith(f"{tmp_path / 'Corefile'}:{line}: ")]
    assert any(" error " in f for f in at_line), (served.value.message, out)
    assert "Traceback" not in out


def test_a_corefile_said_to_be_splitdns_is_checked_as_splitdns_even_with_kubernetes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Without --resolver, a Corefile with `kubernetes` is taken for the cluster's CoreDNS one. Said
    # to be splitdns's, it is what serve refuses to start with.
    path = tmp_path / "Corefile"
    path.write_text(". {\n kubernetes cluster.local\n forward . 192.0.2.1\n}\n")
    assert cli.main(["check", "--brief", str(path)]) == 0
    capsys.readouterr()
    assert cli.main(["check", "--brief", "--resolver", "splitdns", str(path)]) == 2
    out = capsys.readouterr().out
    assert f"{path}:2: SD110 error `kubernetes` is a CoreDNS plugin that splitdns does not implement" in out
