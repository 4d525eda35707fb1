"""The command line as a user meets it: every --help wrapped to the terminal with its defaults shown,
and the kubectl plugin entry point, run as installed (through kubectl itself when it is here)."""

from __future__ import annotations

import argparse
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from splitdns import cli
from tests.support.prerequisites import need_tools, skip_or_fail


def _parsers() -> list[argparse.ArgumentParser]:
    top = cli.build_parser()
    subs = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return [top, *subs.choices.values()]


@pytest.mark.parametrize("width", [60, 100])
def test_every_help_is_wrapped_to_the_terminal(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    for parser in _parsers():
        text = parser.format_help()
        # argparse leaves 2 columns spare; a single word longer than the line may not be broken, nor
        # one group of mutually exclusive options in the usage line.
        long = [ln for ln in text.splitlines() if len(ln) > width - 2 and len(ln.split()) > 1
                and not (ln.strip().startswith("[") and ln.strip().endswith("]") and ln.count("[") == 1)]
        assert not long, f"{parser.prog}:\n" + "\n".join(long)


def test_every_help_shows_the_defaults() -> None:
    checked = 0
    for parser in _parsers():
        formatter = parser._get_formatter()
        for action in parser._actions:
            if action.default in (None, False, [], argparse.SUPPRESS) or action.help == argparse.SUPPRESS:
                continue
            if not (action.option_strings or action.nargs in ("?", "*")):
                continue
            shown = formatter._expand_help(action)
            default = f"{action.default:g}" if isinstance(action.default, float) else str(action.default)
            assert default in shown, f"{parser.prog} {action.option_strings}: {shown}"
            checked += 1
    assert checked >= 15


def test_exit_code_lists_keep_their_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    verify = next(p for p in _parsers() if p.prog.endswith(" verify"))
    text = verify.format_help()
    assert "\n  0  all good\n" in text
    # A long item wraps under its text, not under its number.
    lines = text.splitlines()
    six = lines[next(i for i, ln in enumerate(lines) if ln.startswith("  6  ")) + 1]
    assert six.startswith("     ") and not six.startswith("      ")


def test_every_command_of_the_parser_runs_something_and_nothing_else_is_listed() -> None:
    # The grammar (cli.parser) and what each command runs (cli.RUNNERS) are kept apart; a command
    # added to one only would be an internal error, or a runner no one can reach.
    subs = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert sorted(subs.choices) == sorted(cli.RUNNERS)

def _installed(script: str) -> Path:
    path = Path(sys.executable).parent / script
    if not path.exists():
        skip_or_fail(f"{script} is not installed in this environment (pip install -e . installs it)")
    return path


def test_the_kubectl_plugin_script_runs_render_and_names_itself_kubectl_splitdns(tmp_path: Path) -> None:
    plugin = _installed("kubectl-splitdns")
    done = subprocess.run([str(plugin), "render", "--cluster-wide", "--zone",
                           "svc.acme.internal=192.168.240.1"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "svc.acme.internal:53 {" in done.stdout
    usage = subprocess.run([str(plugin), "verify", "--help"], capture_output=True, text=True, timeout=60,
                           check=True).stdout
    assert usage.startswith("usage: kubectl splitdns verify")


def test_kubectl_finds_the_plugin_on_path(tmp_path: Path) -> None:
    need_tools("kubectl", hint="make deps-debian installs Debian's kubernetes-client")
    plugin = _installed("kubectl-splitdns")
    # No cluster is involved: KUBECONFIG points nowhere, and render reads none.
    env = {**os.environ, "PATH": f"{plugin.parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "KUBECONFIG": str(tmp_path / "none")}
    done = subprocess.run(["kubectl", "splitdns", "render", "--zone", "svc.acme.internal=openvpn",
                           "--cluster-dns", "10.96.0.10", "--namespace", "shop"],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "kubectl -n shop create secret generic openvpn-client" in done.stdout


def test_verify_takes_the_pod_as_kubectl_plugins_do() -> None:
    args = cli.build_parser().parse_args(["verify", "deploy/app", "-n", "shop"])
    assert (args.target, args.namespace) == ("deploy/app", "shop")
    with pytest.raises(SystemExit):
        cli.main(["verify", "deploy/app", "--kubectl", "deploy/other"])


@pytest.mark.parametrize("argv", [
    ["serve", "-dns.port", "99999"], ["serve", "-dns.port", "-1"], ["demo", "--port", "0"],
    ["explain", "x.example", "-dns.port", "70000"], ["explain", "x.example", "-dns.port", "abc"],
    ["verify", "--port", "65536"],
])
def test_a_port_out_of_range_is_a_usage_error_not_a_traceback(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # serve and demo raised OverflowError or a ConfigError traceback, verify an OverflowError from
    # sendto, and explain explained port 70000.
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"splitdns {argv[0]}: error: argument" in err and "not a port" in err


@pytest.mark.parametrize("width", [50, 60, 80])
def test_help_never_cuts_a_name_at_its_hyphen(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    # "your-openvpn-client-image" or "pod-spec" cut at a line end cannot be copied from the help.
    monkeypatch.setenv("COLUMNS", str(width))
    for parser in _parsers():
        cut = [ln for ln in parser.format_help().splitlines() if re.search(r"\w-$", ln)]
        assert not cut, f"{parser.prog}:\n" + "\n".join(cut)


def test_a_default_is_said_once_and_inside_its_sentence() -> None:
    for parser in _parsers():
        formatter = parser._get_formatter()
        for action in parser._actions:
            if not action.help or action.help == argparse.SUPPRESS:
                continue
            shown = formatter._expand_help(action)
            where = f"{parser.prog} {action.option_strings}: {shown}"
            assert ". (default" not in shown, where
            assert len(re.findall(r"\(default\b", shown)) <= 1, where


def test_every_positional_argument_says_what_it_is() -> None:
    for parser in _parsers():
        for action in parser._actions:
            if not action.option_strings and action.help != argparse.SUPPRESS and action.dest != "command":
                assert action.help, f"{parser.prog} {action.metavar or action.dest}"


@pytest.mark.parametrize(("argv", "hint"), [
    (["chek", "Corefile"], "invalid choice: chek (choose from serve, demo, check, render, explain, "
                           "openvpn-hook, wireguard-shim, openconnect-hook, verify, inject, webhook, "
                           "doctor, top); "
                           "did you mean check?"),
    (["render", "--resolver", "corends"], "invalid choice: corends (choose from splitdns, coredns); "
                                          "did you mean coredns?"),
    (["check", "--breif", "Corefile"], "splitdns check: error: unrecognized arguments: --breif "
                                       "(did you mean --brief?)"),
    (["serve", "-dnsport", "5300"], "splitdns serve: error: unrecognized arguments: -dnsport "
                                    "(did you mean -dns.port?) 5300"),
])
def test_a_mistyped_command_choice_or_flag_gets_a_did_you_mean(
        argv: list[str], hint: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    assert hint in capsys.readouterr().err


COMMANDS = "(?:serve|demo|check|render|explain|openvpn-hook|wireguard-shim|verify)"


def _documented_commands() -> list[str]:
    """Every `splitdns COMMAND ARGS` line of a code block, and every inline one, in README and docs."""
    root = Path(__file__).parents[1]
    found = []
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        text = doc.read_text().replace("\\\n", " ")
        found += [m.group(1) for m in re.finditer(rf"^\s*(?:kubectl )?(splitdns {COMMANDS} .*)$", text, re.M)]
        found += re.findall(rf"`(?:kubectl )?(splitdns {COMMANDS} [^`]*)`", text)
    commands = []
    for line in found:
        words = shlex.split(line.split(" > ")[0].split(" #")[0].replace("...", ""))
        if len(words) > 2:
            commands.append(" ".join(shlex.quote(w) for w in words))
    return sorted(set(commands))


def test_the_documented_command_lines_are_found() -> None:
    commands = _documented_commands()
    for command in ("check", "explain", "render", "verify", "serve", "openvpn-hook"):
        assert any(c.startswith(f"splitdns {command} ") for c in commands), command


@pytest.mark.parametrize("command", _documented_commands())
def test_every_documented_command_line_parses(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    # A flag renamed or dropped leaves the docs wrong; argparse would exit 2 on it.
    words = shlex.split(command)[1:]
    try:
        if words[:2] == ["verify", "leaks"]:  # its own grammar, read before the main parser's
            from splitdns.cli import leaks

            leaks.build("splitdns").parse_args(words[2:])
        else:
            cli.build_parser().parse_args(words)
    except SystemExit:
        pytest.fail(f"{command}: {capsys.readouterr().err}")


def test_serve_without_a_corefile_says_what_to_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # It said "cannot read Corefile Corefile: No such file or directory", as explain used to.
    monkeypatch.chdir(tmp_path)
    assert cli.main(["serve"]) == 2
    err = capsys.readouterr().err
    assert err == "[ERROR] no ./Corefile here: pass the Corefile to serve with -conf FILE\n"


def test_every_command_that_reads_a_corefile_takes_conf_and_corefile_alike(tmp_path: Path) -> None:
    """serve, explain, verify spoke CoreDNS's -conf; render and inject --corefile; each refused the other."""
    parser = cli.build_parser()
    for command, extra, dest in (("serve", [], "conf"), ("explain", ["x"], "conf"), ("verify", [], "conf"),
                                 ("render", [], "corefile"), ("inject", [], "corefile")):
        for flag in ("-conf", "--conf", "--corefile"):
            args, unknown = parser.parse_known_args([command, *extra, flag, "C"])
            assert (unknown, getattr(args, dest)) == ([], "C"), (command, flag)


def test_check_reads_stdin_as_inject_does(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(".:53 {\n forward . 127.0.0.1\n}\n"))
    assert cli.main(["check", "--brief", "-"]) == 2
    assert capsys.readouterr().out.startswith("<stdin>:2: SD101 error forward . sends queries to "
                                              "127.0.0.1:53")
