"""The package's shape: no import cycles between modules. (The layers contract itself, imports
flowing downwards only, is import-linter's, run by `make lint` from pyproject.toml.)"""

from __future__ import annotations

import grimp
import pytest

pytestmark = pytest.mark.tooling


def cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in imports.get(module, ()):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(imports):
        if module not in index:
            visit(module)
    return sorted(found)


def test_the_cycle_finder_finds_a_cycle_and_only_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"b"}}) == []


def test_no_module_imports_itself_back() -> None:
    """Imports made only for type checking count too: they say what a module knows about."""
    graph = grimp.build_graph("splitdns", cache_dir=None)
    imports = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    # Packages import their own submodules (a table of parsers); that is not a cycle of knowledge.
    for module, imported in imports.items():
        imports[module] = {i for i in imported if not i.startswith(module + ".")}
    assert cycles(imports) == KNOWN_CYCLES


# Cycles the package still has, each to be broken by narrowing what the lower module knows;
# the list only shrinks (a new cycle, or one broken but still listed, fails the test).
KNOWN_CYCLES: list[list[str]] = []
