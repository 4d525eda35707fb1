"""What the repository says speaks about the product: no text points at where a thing came from
(a planning note, a tracker entry) or at a file the repository does not contain; and every
module of the product stays short enough to read in one sitting."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("src", "tests", "tools", "docs", "bench", "fuzz", "results", "README.md", "Makefile", "Dockerfile",
           "pyproject.toml")
TEXT = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".conf", ".ovpn", ".json", ".sh", ""}
# Built from pieces so that this file does not match itself.
FORBIDDEN = re.compile("|".join([
    r"\bthe " + "seed" + r"\b", r"\b" + "seed" + r"'s\b", r"\b" + "seed" + r" (article|scenario|pod)\b",
    r"\b" + "research" + r"/[\w.-]+\.md\b", r"\.\./" + "shared" + r"\b",
    r"\bthe " + "issue" + r"('s)?\b", r"\b" + "issue" + r" \d+\b",
]), re.IGNORECASE)


def scanned_files() -> list[Path]:
    files: list[Path] = []
    for name in SCANNED:
        top = ROOT / name
        candidates = [top] if top.is_file() else sorted(top.rglob("*"))
        files += [p for p in candidates if p.is_file() and p.suffix in TEXT and "__pycache__" not in p.parts
                  and not any(part.endswith(".egg-info") for part in p.parts)  # built, not ours
                  and not p.name.startswith(".") and p != Path(__file__).resolve()]
    return files


def test_the_pattern_catches_what_it_is_for() -> None:
    for text in ("the " + "seed's Corefile", "see " + "research/perf-anchors.md", "The " + "issue's targets",
                 "as in " + "issue 18", "../" + "shared/DESIGN.md"):
        assert FORBIDDEN.search(text), text
    for text in ("random.Random(seed)", "seeded so that every run sends the same names",
                 "an issue with the tunnel"):
        assert not FORBIDDEN.search(text), text


def test_no_text_points_at_where_it_came_from_or_at_missing_files() -> None:
    files = scanned_files()
    assert len(files) > 100  # the tree was found
    hits = []
    for path in files:
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if FORBIDDEN.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not hits, "\n".join(hits)


MODULE_LINES = 400  # a module stays small enough to read in one sitting


def test_every_product_module_reads_in_one_sitting() -> None:
    modules = sorted((ROOT / "src").rglob("*.py"))
    assert len(modules) > 50  # the package was found
    long = [f"{p.relative_to(ROOT)}: {n} lines" for p in modules
            if (n := len(p.read_text().splitlines())) > MODULE_LINES]
    assert not long, f"over {MODULE_LINES} lines, split where the seam is natural:\n" + "\n".join(long)


# Every module names its tests (tools/kube_layout.py writes kube's lines from the tests' imports).
NAMES_ITS_TESTS_OUTSIDE: tuple[str, ...] = ()
TESTS_LINE = re.compile(r"^Tests: (.+?)\.?$", re.M)
NAMED_TEST = re.compile(r"tests/[\w/]+\.py")


def _names_its_tests(path: Path) -> bool:
    """A product module, not a package marker (an `__init__.py` of a few lines) or __main__."""
    rel = path.relative_to(ROOT / "src" / "splitdns")
    if rel.parts[0] in NAMES_ITS_TESTS_OUTSIDE or path.name == "__main__.py":
        return False
    return path.name != "__init__.py" or len(path.read_text().splitlines()) > 10


def test_every_product_module_names_where_its_tests_are_and_they_exist() -> None:
    import ast

    modules = [p for p in sorted((ROOT / "src" / "splitdns").rglob("*.py")) if _names_its_tests(p)]
    assert len(modules) > 70  # the package was found
    silent, missing = [], []
    for path in modules:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        line = TESTS_LINE.search(doc)
        named = NAMED_TEST.findall(line.group(1)) if line else []
        if not named:
            silent.append(str(path.relative_to(ROOT)))
        missing += [f"{path.relative_to(ROOT)}: {t}" for t in named if not (ROOT / t).is_file()]
    assert not silent, "no `Tests: tests/test_x.py` line in the docstring of:\n" + "\n".join(silent)
    assert not missing, "tests named that do not exist:\n" + "\n".join(missing)
