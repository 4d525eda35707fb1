"""Print the requirements a container image installs, one per line, from pyproject.toml.

The resolver image (`--resolver`) takes only the dependencies `splitdns serve` imports, the ones
`[tool.splitdns.image] resolver` names (not uvloop: README.md, "The images", says why). The tools
image takes every dependency and every extra but the developer ones (`without-extras`). Run by
the Dockerfile's build stage (plain Python 3.11, no third-party module) and by the tests.

    python tools/image_requirements.py [--resolver] [pyproject.toml]
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path


def name_of(requirement: str) -> str:
    """The normalised distribution name of a requirement ("PyYAML>=6" -> "pyyaml")."""
    name = re.split(r"[<>=!~ \[;(@]", requirement, maxsplit=1)[0].strip()
    return re.sub(r"[-_.]+", "-", name).lower()


def image_requirements(pyproject: dict[str, object], resolver: bool = False) -> list[str]:
    project = pyproject["project"]
    image = pyproject["tool"]["splitdns"]["image"]  # type: ignore[index]
    assert isinstance(project, dict) and isinstance(image, dict)
    if resolver:
        wanted = {name_of(n) for n in image["resolver"]}
        return [r for r in project["dependencies"] if name_of(r) in wanted]
    skipped_extras = set(image["without-extras"])
    chosen = list(project["dependencies"])
    for extra, requirements in project.get("optional-dependencies", {}).items():
        if extra not in skipped_extras:
            chosen += requirements
    return chosen


def main(argv: list[str]) -> int:
    args = argv[1:]
    resolver = "--resolver" in args
    paths = [a for a in args if a != "--resolver"]
    path = Path(paths[0] if paths else "pyproject.toml")
    for requirement in image_requirements(tomllib.loads(path.read_text(encoding="utf-8")), resolver):
        print(requirement)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
