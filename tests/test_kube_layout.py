"""tools/kube_layout.py, the maintainer's tool that lays kube/ out in its parts: its rewrites on
small texts, and that it places every kube module there is."""

from __future__ import annotations

import pytest
from tools import kube_layout
from tools.kube_layout import rewrite_package_imports, rewrite_references, with_tests_line

pytestmark = pytest.mark.tooling


def test_every_kube_module_has_its_place() -> None:
    """A module added to kube/ without a row in MAPPING stops the tool: say where it goes."""
    assert kube_layout.unmapped() == []


def test_dotted_and_slashed_mentions_move_and_stay_moved() -> None:
    text = ('monkeypatch.setattr("splitdns.kube.cluster.read", f)  # kube.sizing\n'
            "see src/splitdns/kube/render.py and kube/tunnels.py;\n"
            "lightkube.resources; tests/data/kube/inject/\n")
    moved = rewrite_references(text)
    assert moved == ('monkeypatch.setattr("splitdns.kube.deploy.cluster.read", f)  # kube.deploy.sizing\n'
                     "see src/splitdns/kube/deploy/forms.py and kube/tunnels/;\n"
                     "lightkube.resources; tests/data/kube/inject/\n")
    assert rewrite_references(moved) == moved
    assert rewrite_references('TABLES = ("kube/tunnels.py",)') == 'TABLES = ("kube/tunnels/__init__.py",)'


def test_imports_from_the_package_split_by_part_and_renamed_uses_follow() -> None:
    text = ("def run() -> None:\n"
            "    from splitdns.kube import findings, lint, tunnels\n"
            "    found = lint.check([], lint.Options())  # lint.check's findings\n"
            "    setattr(lint, 'x', tunnels.KINDS)\n"
            "    print(findings, 'lint.py', x.lint)\n")
    moved = rewrite_package_imports(text, "t.py")
    assert moved == ("def run() -> None:\n"
                     "    from splitdns.kube import tunnels\n"
                     "    from splitdns.kube.check import checker\n"
                     "    from splitdns.kube.shared import findings\n"
                     "    found = checker.check([], checker.Options())  # checker.check's findings\n"
                     "    setattr(checker, 'x', tunnels.KINDS)\n"
                     "    print(findings, 'lint.py', x.lint)\n")
    assert rewrite_package_imports(moved, "t.py") == moved


def test_a_renamed_module_whose_new_name_is_taken_is_left_to_a_person() -> None:
    with pytest.raises(kube_layout.LayoutError, match="already uses the name checker"):
        rewrite_package_imports("from splitdns.kube import lint\nchecker = lint.check\n", "t.py")


@pytest.mark.parametrize("docstring", ['"""One line."""\n', '"""One line.\n"""\n',
                                       '"""One line.\n\nMore.\nTests: tests/test_old.py.\n"""\n'])
def test_the_tests_line_is_the_docstrings_last_and_written_once(docstring: str) -> None:
    text = docstring + "\nX = 1\n"
    named = with_tests_line(text, ["tests/test_a.py", "tests/test_b.py"], "m.py")
    assert named.split('"""')[1].rstrip().splitlines()[-1] == "Tests: tests/test_a.py, tests/test_b.py."
    assert named.count("Tests:") == 1 and named.endswith('"""\n\nX = 1\n')
    assert with_tests_line(named, ["tests/test_a.py", "tests/test_b.py"], "m.py") == named
