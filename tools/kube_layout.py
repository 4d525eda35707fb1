"""Lay kube/ out in its parts, and keep each kube module's docstring naming its tests.

    python tools/kube_layout.py            # move, rewrite, name the tests; then say what is left
    python tools/kube_layout.py --check    # change nothing; exit 1 if a run would change something

kube/ is four parts, each importing only from the ones below it (the contract in pyproject.toml):

    check/    `splitdns check` and `splitdns doctor`: the judgements
    deploy/   what `render`, `inject` and the webhook make
    tunnels/  per tunnel kind its modules, and the one table of kinds (its __init__.py)
    shared/   what the three speak: findings, the lenient Corefile reading, check's inputs, YAML

MAPPING says where each flat module goes. A run `git mv`s each mapped module still in kube/,
rewrites every mention of it (imports, `splitdns.kube.X` and `kube.X` in code and strings,
`src/splitdns/kube/X.py` and `kube/X.py` in text) in the tracked files, writes the parts'
`__init__.py` and the layers contract, and sets the last line of every kube module's docstring to
`Tests: tests/test_a.py, tests/test_b.py.` (as every other module of the package says it): the
test files a line there already names and that still exist, then those that import the module
(or, for a module no test imports, those of the modules that import it), as many as fit on one
line, its own-named test first. A module in kube/ that MAPPING does not place stops the run before anything
changes: add it to MAPPING. Running it again changes nothing.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import subprocess
import sys
import tokenize
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KUBE = ROOT / "src/splitdns/kube"
SELF = Path(__file__).resolve()
LINE = 110  # ruff's line-length

# Old flat module -> its place, relative to splitdns.kube. "tunnels" is the package itself: the
# table of kinds is tunnels/__init__.py, so `from splitdns.kube import tunnels` keeps its meaning.
MAPPING: dict[str, str] = {
    # The words every part speaks: what a finding is, how Corefiles and check's inputs are read
    # (leniently, to report many problems at once), YAML in and out, what a tunnel kind is to
    # kube/, and our image's defaults (read by deploy and by the pod checks alike).
    "findings": "shared.findings",
    "corefile_model": "shared.lenient_corefile",  # a lenient reading, not the Corefile's model
    "sources": "shared.sources",
    "yamlio": "shared.yamlio",
    "tunnel_kind": "shared.tunnel_kind",
    "image": "shared.image",
    # A tunnel kind: its modules, and its row in the table (tunnels/__init__.py).
    "tunnels": "tunnels",
    "openvpn_conf": "tunnels.openvpn_conf",
    "openvpn_pod": "tunnels.openvpn_pod",
    "vpn_container": "tunnels.openvpn_container",  # only ever OpenVPN's container
    "wireguard_conf": "tunnels.wireguard_conf",
    "wireguard_lint": "tunnels.wireguard_lint",
    "wireguard_pod": "tunnels.wireguard_pod",
    "openconnect_conf": "tunnels.openconnect_conf",
    "openconnect_lint": "tunnels.openconnect_lint",
    "openconnect_pod": "tunnels.openconnect_pod",
    "strongswan_conf": "tunnels.strongswan_conf",
    "strongswan_lint": "tunnels.strongswan_lint",
    "strongswan_pod": "tunnels.strongswan_pod",
    "file_sidecar": "tunnels.file_sidecar",  # what OpenConnect's and strongSwan's sidecars share
    # What render, inject and the webhook make: the plan, Corefile text, manifests, the injection
    # and the forms it is served in.
    "plan": "deploy.plan",
    "cluster": "deploy.cluster",  # reads the cluster DNS address into a plan
    "corefiles": "deploy.corefile_text",  # the Corefile text written for a plan
    "corefile_carry": "deploy.corefile_carry",
    "manifests": "deploy.manifests",
    "sizing": "deploy.sizing",
    "inject": "deploy.inject",
    "pod_dns": "deploy.pod_dns",
    "workloads": "deploy.workloads",
    "admission": "deploy.admission",
    "render": "deploy.forms",  # render's forms; `splitdns render` itself is commands/render.py
    "webhook_manifests": "deploy.webhook_manifests",
    "monitoring": "deploy.monitoring",
    "dashboard": "deploy.dashboard",
    # The judgements: `splitdns check` over Corefiles, pods and VPN configs together, each family
    # of lints, schema validation, and `splitdns doctor` over a cluster's pods.
    "lint": "check.checker",  # runs `splitdns check`; the lints are the *_lint modules
    "corefile_lint": "check.corefile_lint",
    "pod_lint": "check.pod_lint",
    "startup_lint": "check.startup_lint",
    "zone_names": "check.zone_names",
    "schema": "check.schema",
    "custom_resources": "check.custom_resources",
    "doctor": "check.doctor",
}
# Data that moves with the module reading it.
DIRECTORIES = {"crds": "check.crds"}

LAYERS = ("check", "deploy", "tunnels", "shared")  # top to bottom
PARTS = {
    "check": "The judgements: `splitdns check` (Corefiles, pod specs and VPN client configs read\n"
             "together, each family of lints, manifests against their schemas) and `splitdns doctor` (a\n"
             "cluster's pods against the webhook's injection). May read what deploy/ makes: a check\n"
             "holds pods to it.",
    "deploy": "What `splitdns render`, `splitdns inject` and the admission webhook make: the plan\n"
              "(zones, owners, upstreams), the Corefile text, the manifests, the injection, and the forms\n"
              "a user applies. Plain dicts; YAML is shared.yamlio's.",
    "shared": "What check, deploy and the tunnel kinds all speak: the findings table, the lenient reading\n"
              "of a Corefile, check's inputs, YAML in and out, what a tunnel kind is to kube/, and our\n"
              "image's defaults. Imports nothing else of kube/.",
}
KUBE_DOC = (
    "The Kubernetes side: render manifests for the in-pod resolver, and check a pod's DNS before deploy.\n"
    "\n"
    "Four parts, each importing only from those below it (pyproject.toml's contract; laid out by\n"
    "tools/kube_layout.py):\n"
    "- check/: `splitdns check` and `splitdns doctor`, the judgements;\n"
    "- deploy/: what render, inject and the webhook make;\n"
    "- tunnels/: per tunnel kind its modules, and the one table of kinds (tunnels/__init__.py);\n"
    "- shared/: the findings, the lenient Corefile reading, check's inputs, YAML, the image's defaults.\n"
    "\n"
    "Nothing here is imported by `splitdns serve`: PyYAML, kubernetes-validate and lightkube are\n"
    "imported inside these modules only, so the serving path stays light."
)
CONTRACT = f'''
[[tool.importlinter.contracts]]
name = "kube's parts flow downwards: check, deploy, tunnels, shared"
type = "layers"
containers = ["splitdns.kube"]
layers = [{", ".join(f'"{layer}"' for layer in LAYERS)}]
'''
# Lines the moves make too long, wrapped: (file after the move, text, wrapped text). One that
# matches nothing does nothing; ruff's E501, run at the end, shows any line left to wrap.
FIXUPS: list[tuple[str, str, str]] = [
    ("tests/test_check.py",
     '    return checker.check(files, checker.Options(resolver=options.get("resolver", "auto"), '
     'kube_version=version))\n',
     '    opts = checker.Options(resolver=options.get("resolver", "auto"), kube_version=version)\n'
     "    return checker.check(files, opts)\n"),
    ("tests/support/crds.py",
     "(splitdns.kube.check.custom_resources: strictly, against the CRDs vendored in "
     "src/splitdns/kube/check/crds), one\nline per problem, for tests that change a rendered resource "
     "and expect the API server's refusal.",
     "(splitdns.kube.check.custom_resources: strictly, against the CRDs vendored in\n"
     "src/splitdns/kube/check/crds), one line per problem, for tests that change a rendered resource and\n"
     "expect the API server's refusal."),
    ("tests/test_serve.py",
     'NOT_FOR_SERVING = ("splitdns.kube.deploy.admission", "splitdns.kube.deploy.manifests", '
     '"splitdns.commands.render",\n',
     'NOT_FOR_SERVING = ("splitdns.kube.deploy.admission", "splitdns.kube.deploy.manifests",\n'
     '                   "splitdns.commands.render",\n'),
    ("src/splitdns/kube/tunnels/wireguard_lint.py", "can resolve is lint.py's,",
     "can resolve is check/checker.py's,"),
]
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".ini", ".yaml", ".yml", ""}
SCANNED = ("src/", "tests/", "bench/", "tools/", "docs/", "README.md", "pyproject.toml", "Makefile",
           "Dockerfile", "DESIGN.md")
# Golden files say what the product writes, not where its code is; this tool's test holds old names.
NOT_SCANNED = ("tests/data/", "tests/test_kube_layout.py")
TESTS_LINE = re.compile(r"Tests:(.*)")  # the one we write: "Tests: tests/test_a.py, tests/test_b.py."
NAMED_TEST = re.compile(r"tests/[\w/]+\.py")


class LayoutError(Exception):
    pass


def targets() -> dict[str, str]:
    return {**MAPPING, **DIRECTORIES}


def module_path(dotted: str, package: bool = False) -> Path:
    return KUBE.joinpath(*dotted.split(".")) / "__init__.py" if package else KUBE.joinpath(
        *dotted.split(".")).with_suffix(".py")


def is_package(new: str) -> bool:
    return new in LAYERS or new in {m for m in MAPPING.values() if "." not in m}


def new_file(new: str) -> Path:
    return module_path(new, package=is_package(new))


def unmapped() -> list[str]:
    return sorted(p.stem for p in KUBE.glob("*.py") if p.name != "__init__.py" and p.stem not in MAPPING)


# -- moving -----------------------------------------------------------------------------------

def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def moves() -> list[tuple[Path, Path]]:
    found = []
    for old, new in MAPPING.items():
        source, target = KUBE / f"{old}.py", new_file(new)
        if source.exists() and target.exists() and source != target:
            raise LayoutError(f"{source.relative_to(ROOT)} and {target.relative_to(ROOT)} both exist: "
                              "merge them by hand, then run again")
        if source.exists():
            found.append((source, target))
    for old, new in DIRECTORIES.items():
        source, target = KUBE / old, KUBE.joinpath(*new.split("."))
        if source.exists() and target.exists():
            raise LayoutError(f"{source.relative_to(ROOT)} and {target.relative_to(ROOT)} both exist")
        if source.exists():
            found.append((source, target))
    return found


def package_files() -> dict[Path, str]:
    """Each part's __init__.py and the docstring it starts with (the Tests line comes later)."""
    files = {KUBE / layer / "__init__.py": PARTS[layer] for layer in PARTS}
    files[KUBE / "__init__.py"] = KUBE_DOC
    return files


# -- rewriting --------------------------------------------------------------------------------

def _dotted(old: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w.])((?:splitdns\.)?kube)\." + re.escape(old) + r"(?![\w])")


def _slashed(old: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w/.-])((?:src/)?(?:splitdns/)?kube)/" + re.escape(old) + r"(\.py)?(?![\w])")


def rewrite_references(text: str) -> str:
    """`splitdns.kube.X`, `kube.X`, `src/splitdns/kube/X.py`, `kube/X.py` -> their new places."""
    for old, new in targets().items():
        if old != new:
            text = _dotted(old).sub(rf"\1.{new}", text)
        path = new.replace(".", "/")

        def slashed(m: re.Match[str], path: str = path, new: str = new) -> str:
            if not m[2]:
                return f"{m[1]}/{path}"
            if not is_package(new):
                return f"{m[1]}/{path}.py"
            # A package: its folder in prose, its __init__.py where the string is the path itself.
            around = m.string[m.start() - 1: m.start()] + m.string[m.end(): m.end() + 1]
            whole = len(around) == 2 and around[0] in "\"'" and around[0] == around[1]
            return f"{m[1]}/{path}/__init__.py" if whole else f"{m[1]}/{path}/"

        text = _slashed(old).sub(slashed, text)
    # Where the CRDs are found, as package data.
    text = text.replace('resources.files("splitdns.kube") / "crds"',
                        'resources.files("splitdns.kube.check") / "crds"')
    return text.replace('"splitdns.kube" = ["crds/', '"splitdns.kube.check" = ["crds/')


def _from_kube_imports(tree: ast.Module) -> list[ast.ImportFrom]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "splitdns.kube"
            and n.level == 0]


def rewrite_package_imports(text: str, where: str) -> str:
    """`from splitdns.kube import a, b` -> one import per part, and the renamed names' uses renamed."""
    tree = ast.parse(text)
    nodes = _from_kube_imports(tree)
    if not nodes:
        return text
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)
              for a in n.names}
    lines = text.splitlines(keepends=True)
    renamed: dict[str, str] = {}
    for node in sorted(nodes, key=lambda n: n.lineno, reverse=True):
        groups: dict[str, list[str]] = {}
        for alias in node.names:
            new = MAPPING.get(alias.name, alias.name)
            parent, _, leaf = new.rpartition(".")
            name = leaf if alias.asname is None else f"{leaf} as {alias.asname}"
            if alias.asname is None and leaf != alias.name:
                renamed[alias.name] = leaf
            groups.setdefault("splitdns.kube" + (f".{parent}" if parent else ""), []).append(name)
        first = lines[node.lineno - 1]
        indent = first[: len(first) - len(first.lstrip())]
        statements = "".join(f"{indent}from {module} import {', '.join(sorted(names))}\n"
                             for module, names in sorted(groups.items()))
        lines[node.lineno - 1: node.end_lineno] = [statements]
    clash = sorted(new for new in renamed.values() if new in names)
    if clash:
        raise LayoutError(f"{where}: already uses the name {', '.join(clash)}: rename by hand")
    return rename_uses("".join(lines), renamed) if renamed else "".join(lines)


def rename_uses(text: str, renamed: dict[str, str]) -> str:
    """`old.attr` -> `new.attr` in code, and in comments and strings where it reads `old.attr`."""
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, int, str]] = []  # row, start col, end col, replacement
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.NAME and tok.string in renamed:
            # The module, wherever its name is used (`old.attr`, `setattr(old, ...)`); not an
            # attribute of something else (`x.old`) nor a keyword argument (`f(old=...)`).
            after = tokens[i + 1].string if i + 1 < len(tokens) else ""
            before = tokens[i - 1].string if i else ""
            if before != "." and after != "=":
                edits.append((tok.start[0], tok.start[1], tok.end[1], renamed[tok.string]))
        elif tok.type in (tokenize.COMMENT, tokenize.STRING) and tok.start[0] == tok.end[0]:
            new = _rename_in_prose(tok.string, renamed)
            if new != tok.string:
                edits.append((tok.start[0], tok.start[1], tok.end[1], new))
    for row, start, end, new in sorted(edits, reverse=True):
        line = lines[row - 1]
        lines[row - 1] = line[:start] + new + line[end:]
    text = "".join(lines)
    # Multi-line strings (docstrings) are prose: the same words rename there.
    return re.sub(r'("""|\'\'\')(.*?)\1', lambda m: m[1] + _rename_in_prose(m[2], renamed) + m[1], text,
                  flags=re.DOTALL)


def _rename_in_prose(text: str, renamed: dict[str, str]) -> str:
    for old, new in renamed.items():
        text = re.sub(r"(?<![\w./-])" + re.escape(old) + r"\.(?=[A-Za-z_])(?!py\b)", new + ".", text)
    return text


def scanned_files() -> list[Path]:
    listed = git("ls-files", "--cached", "--others", "--exclude-standard", *SCANNED).splitlines()
    return [ROOT / name for name in sorted(set(listed))
            if not name.startswith(NOT_SCANNED) and Path(name).suffix in TEXT_SUFFIXES
            and (ROOT / name).is_file() and (ROOT / name).resolve() != SELF]


def rewrite_file(path: Path) -> str:
    text = path.read_text()
    new = rewrite_references(text)
    if path.suffix == ".py":
        new = rewrite_package_imports(new, str(path.relative_to(ROOT)))
    if path == ROOT / "pyproject.toml" and 'containers = ["splitdns.kube"]' not in new:
        anchor = new.index("[[tool.importlinter.contracts]]")  # after the package's own layers
        end = new.find("\n[", new.index("layers = [", anchor))
        head, tail = (new, "") if end < 0 else (new[: end + 1], new[end + 1:])
        new = head.rstrip("\n") + "\n" + CONTRACT + ("\n" + tail if tail else "")
    return new


# -- docstrings naming their tests -------------------------------------------------------------

def kube_modules() -> dict[str, Path]:
    return {m: p for m, p in product_modules().items() if (m + ".").startswith("splitdns.kube.")}


def references(text: str, known: set[str]) -> set[str]:
    """The kube modules a file imports or names in a string (monkeypatch targets)."""
    found: set[str] = set()
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for dotted in re.findall(r"splitdns\.kube[\w.]*", node.value):
                while dotted and dotted not in known:
                    dotted = dotted.rpartition(".")[0]
                found.add(dotted)
    return found & known


def product_modules() -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / "src").rglob("*.py")):
        parts = path.relative_to(ROOT / "src").with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def tests_of_modules() -> dict[str, list[str]]:
    """For each kube module, the test files naming it (or, failing those, its importers' tests)."""
    modules = product_modules()
    known = set(modules)
    tested: dict[str, Counter[str]] = {m: Counter() for m in known}
    for test in sorted((ROOT / "tests").rglob("test_*.py")):
        if str(test.relative_to(ROOT)).startswith(NOT_SCANNED):
            continue
        text = test.read_text()
        name = str(test.relative_to(ROOT))
        for module in references(text, known):
            leaf = module.rpartition(".")[2]
            tested[module][name] += 1 + len(re.findall(rf"\b{re.escape(leaf)}\b", text))
    # A part (a package) is covered by the tests of its modules.
    direct = {m: Counter(c) for m, c in tested.items()}
    for package in sorted(known):
        if modules[package].name == "__init__.py":
            for module in sorted(known):
                if module.startswith(package + "."):
                    tested[package].update(direct[module])
    # A module no test imports is covered through the modules importing it: the nearest that are.
    importers: dict[str, set[str]] = {m: set() for m in known}
    for importer, path in modules.items():
        for module in references(path.read_text(), known) - {importer}:
            importers[module].add(importer)
    kube = kube_modules()
    for module in sorted(kube):
        frontier, seen = set(importers[module]), {module}
        while not tested[module] and frontier:
            for importer in frontier:
                tested[module].update(tested.get(importer, Counter()))
            seen |= frontier
            frontier = {i for m in frontier for i in importers.get(m, set())} - seen
    return {m: _ranked(m, tested[m], named_tests(kube[m])) for m in kube}


def _ranked(module: str, counts: Counter[str], named: list[str]) -> list[str]:
    """Those a person named first (while they exist), then the importing tests, as many as fit."""
    leaf = module.rpartition(".")[2]
    found = sorted(counts, key=lambda t: (not Path(t).stem.startswith(f"test_{leaf}"), -counts[t], t))
    order = [t for t in named if (ROOT / t).is_file()] + [t for t in found if t not in named]
    chosen: list[str] = []
    for test in order:
        if len(tests_line([*chosen, test])) > LINE:
            break
        chosen.append(test)
    return chosen


def tests_line(tests: list[str]) -> str:
    return f"Tests: {', '.join(tests)}."


def named_tests(path: Path) -> list[str]:
    """The tests the docstring's Tests line names now."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    last = doc.strip().splitlines()[-1] if doc.strip() else ""
    found = TESTS_LINE.fullmatch(last.strip())
    return NAMED_TEST.findall(found[1]) if found else []


def _is_docstring(node: ast.stmt | None) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str))


def with_tests_line(text: str, tests: list[str], where: str) -> str:
    tree = ast.parse(text)
    first = tree.body[0] if tree.body else None
    if not _is_docstring(first):
        raise LayoutError(f"{where}: no docstring")
    assert isinstance(first, ast.Expr)
    lines = text.splitlines(keepends=True)
    assert first.end_lineno is not None
    raw = "".join(lines[first.lineno - 1: first.end_lineno])
    quote = '"""' if raw.lstrip().lstrip("rRuU").startswith('"""') else "'''"
    start, end = raw.index(quote) + 3, raw.rindex(quote)
    body = raw[start:end].rstrip()
    kept = body.splitlines()
    if kept and TESTS_LINE.fullmatch(kept[-1].strip()):
        kept.pop()
    while kept and not kept[-1].strip():
        kept.pop()
    new = raw[:start] + "\n".join(kept) + f"\n{tests_line(tests)}\n" + raw[end:]
    lines[first.lineno - 1: first.end_lineno] = [new]
    return "".join(lines)


def with_docstring(text: str, doc: str) -> str:
    """A part's __init__.py: `doc` as its docstring, keeping whatever follows the docstring."""
    tree = ast.parse(text) if text.strip() else ast.Module(body=[], type_ignores=[])
    lines = text.splitlines(keepends=True)
    first = tree.body[0] if tree.body else None
    rest, tests = lines, ""
    if _is_docstring(first):
        assert isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
        rest = lines[first.end_lineno:]
        last = str(first.value.value).strip().splitlines()[-1].strip()
        tests = f"\n{last}" if TESTS_LINE.fullmatch(last) else ""  # kept until the tests are named again
    return f'"""{doc}{tests}\n"""\n' + "".join(rest)


# -- the run ----------------------------------------------------------------------------------

def run(check_only: bool) -> int:
    missing = unmapped()
    if missing:
        print("kube/ modules MAPPING does not place (add each to MAPPING in tools/kube_layout.py):",
              file=sys.stderr)
        for name in missing:
            print(f"  src/splitdns/kube/{name}.py", file=sys.stderr)
        return 1
    pending = moves()
    changed: list[str] = []
    if check_only:
        changed += [f"move {s.relative_to(ROOT)}" for s, _ in pending]
    else:
        for source, target in pending:
            target.parent.mkdir(parents=True, exist_ok=True)
            git("mv", str(source.relative_to(ROOT)), str(target.relative_to(ROOT)))
    created = []
    for path, doc in package_files().items():
        old = path.read_text() if path.exists() else ""
        new = with_docstring(old, doc)
        if new != old:
            changed.append(str(path.relative_to(ROOT)))
            created.append(str(path.relative_to(ROOT)))
            if not check_only:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(new)
    if check_only and pending:
        print("\n".join(changed))
        return 1
    touched: list[Path] = []
    for path in scanned_files():
        old = path.read_text()
        try:
            new = rewrite_file(path)
        except (SyntaxError, UnicodeDecodeError):
            continue
        if new != old:
            changed.append(str(path.relative_to(ROOT)))
            touched.append(path)
            if not check_only:
                path.write_text(new)
    for name, old, new in FIXUPS:
        path = ROOT / name
        text = path.read_text() if path.exists() else ""
        if old in text:
            changed.append(f"{name} (wrapped)")
            if not check_only:
                path.write_text(text.replace(old, new))
    if not check_only:
        py = [str(p.relative_to(ROOT)) for p in touched if p.suffix == ".py"]
        if py:  # the rewritten imports sorted as ruff's isort wants them
            ruff(["--select", "I", "--fix", "--quiet", *py])
    untested = []
    for module, tests in sorted(tests_of_modules().items()):
        path = kube_modules()[module]
        if not tests:
            untested.append(module)
            continue
        old = path.read_text()
        new = with_tests_line(old, tests, str(path.relative_to(ROOT)))
        if new != old:
            changed.append(f"Tests line of {path.relative_to(ROOT)}")
            if not check_only:
                path.write_text(new)
    if created and not check_only:
        git("add", *created)
    for line in sorted(set(changed)):
        print(("would change " if check_only else "changed ") + line)
    report_leftovers()
    if untested:
        print("no test imports these (nor anything importing them); write one:", ", ".join(untested),
              file=sys.stderr)
        return 1
    return 1 if check_only and changed else 0


def ruff(args: list[str]) -> str:
    done = subprocess.run([sys.executable, "-m", "ruff", "check", *args], cwd=ROOT, check=False,
                          capture_output=True, text=True)
    return done.stdout


def report_leftovers() -> None:
    """Bare mentions of a renamed module's file (`lint.py`) no pattern can place: read them."""
    renamed = [old for old, new in MAPPING.items() if old != new.rpartition(".")[2]]
    pattern = re.compile(r"(?<![\w/.-])(" + "|".join(map(re.escape, renamed)) + r")\.py\b")
    for path in scanned_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for m in pattern.finditer(line):
                print(f"read by hand: {path.relative_to(ROOT)}:{number}: {m[0]}: {line.strip()[:90]}")
    for path in sorted(KUBE.rglob("*.py")):
        if (n := len(path.read_text().splitlines())) > 400:  # tests/test_repository_text.py's limit
            print(f"over 400 lines, trim or split: {path.relative_to(ROOT)}: {n}")
    for line in ruff(["--select", "E501", "--output-format", "concise", "src", "tests", "bench", "tools"]
                     ).splitlines():
        if "E501" in line:
            print(f"wrap by hand (or add to FIXUPS): {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a run would")
    args = parser.parse_args()
    try:
        return run(args.check)
    except LayoutError as e:
        print(f"kube_layout: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
