"""`splitdns check` and `splitdns serve` never disagree on whether a Corefile loads.

Every Corefile text of the test suite (each string literal of tests/ that parses as a Corefile
of known directives, each file of tests/data/corefiles and each Corefile of tests/data/kube)
goes through `serve`'s load path
(`corefile.load`, `config.build`) and through `check`, in the same directory and environment:
a Corefile `serve` refuses must get an error from `check`, and one `serve` loads must get no
SD100 (the code of "serve refuses this"). Other errors of `check` are lints of a Corefile that
loads (a catch-all into the tunnel, a forward line that never matches), not a disagreement.
One refusal is this machine's, not the Corefile's: a resolv.conf `serve` cannot read because
it is not here (`/etc/config/resolv.conf`, mounted into the pod); `check` cannot tell what the
pod's holds, so it says nothing of it, and the test leaves such a case out; and so is an
environment variable unset here, which the pod's environment gives (check warns, SD113).
CoreDNS's own setup cases, which come with their resolv.conf files, are held to the same rule
in test_coredns_parity.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from splitdns import config, corefile, directives
from splitdns.errors import ConfigError
from splitdns.kube.check import checker
from splitdns.kube.shared import findings
from tests.test_corefile_corpus import CORPUS, EXPECTED

TESTS = Path(__file__).parent
KNOWN = set(directives.SUPPORTED) | set(directives.COREDNS_PLUGINS)


def _looks_like_a_corefile(text: str) -> bool:
    try:
        blocks = corefile.parse(text, "Corefile", env={})
    except ConfigError:
        return False
    return bool(blocks) and all(b.directives and all(d.name in KNOWN for d in b.directives)
                                for b in blocks)


def _corefile_literals() -> dict[str, str]:
    """Each Corefile text written out in the tests, by where it first stands."""
    found: dict[str, str] = {}
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "{" in node.value \
                    and node.value not in found and _looks_like_a_corefile(node.value):
                found[node.value] = f"{path.relative_to(TESTS.parent)}:{node.lineno}"
    return found


LITERALS = _corefile_literals()


def _verdicts(path: Path) -> tuple[str | None, list[findings.Finding]]:
    """What `serve` says of the Corefile at `path` (None: it loads), and `check`'s errors."""
    try:
        config.build(corefile.load(path), str(path), config.DEFAULT_PORT)
        refused = None
    except ConfigError as err:
        refused = str(err)
        if err.message.startswith("forward: cannot read ") and "No such file" in err.message:
            return None, []  # the pod's file, absent here: see the module's docstring
        if err.message.startswith("environment variable ") and err.message.endswith(" is not set"):
            return None, []  # the pod's environment's to give
    found = checker.check([str(path)], checker.Options(resolver="splitdns"))
    return refused, [f for f in found if f.severity == findings.ERROR]


def _disagreement(refused: str | None, errors: list[findings.Finding]) -> str | None:
    if refused is not None and not errors:
        return f"serve refuses it ({refused}), check finds no error"
    if refused is None and any(f.code == "SD100" for f in errors):
        return f"serve loads it, check says it refuses: {[f.message for f in errors if f.code == 'SD100']}"
    return None


def test_the_suite_holds_enough_corefiles_to_mean_something() -> None:
    assert len(LITERALS) > 100
    assert len(list(CORPUS.glob("*.Corefile"))) == len(EXPECTED)


def test_serve_and_check_agree_on_every_corefile_written_in_the_tests(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    differ = []
    for n, (text, where) in enumerate(LITERALS.items()):
        path = tmp_path / f"{n}.Corefile"
        path.write_text(text)
        said = _disagreement(*_verdicts(path))
        if said is not None:
            differ.append(f"{where}: {said}")
    assert not differ, "\n".join(differ)


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.Corefile")), ids=lambda p: p.stem)
def test_serve_and_check_agree_on_each_corefile_of_the_corpus(
        path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in EXPECTED[path.stem].env:  # what the pod's environment gives it
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    copy = tmp_path / "Corefile"
    copy.write_text(path.read_text())
    assert _disagreement(*_verdicts(copy)) is None


KUBE_COREFILES = sorted((TESTS / "data" / "kube").rglob("Corefile*"))


@pytest.mark.parametrize("path", KUBE_COREFILES, ids=lambda p: str(p.relative_to(TESTS / "data" / "kube")))
def test_serve_and_check_agree_on_each_corefile_of_the_kube_checks(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(path.parent)
    assert _disagreement(*_verdicts(path)) is None


def test_a_forward_to_a_file_without_a_nameserver_is_refused_by_both(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The case that used to differ: `serve` refused it (as CoreDNS), `check` only warned."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "resolv.conf").write_text("search example.org\n")
    path = tmp_path / "Corefile"
    path.write_text(". {\n forward . resolv.conf\n}\n")
    refused, errors = _verdicts(path)
    assert refused is not None and "has no usable nameserver line" in refused
    assert [(f.code, f.line, f.message) for f in errors] == \
        [("SD100", 2, "forward: resolv.conf has no usable nameserver line")]
