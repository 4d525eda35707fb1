"""Print the requirements the container image installs, one per line, from pyproject.toml.

The image only serves (`serve`, `verify`, `openvpn-hook`, `wireguard-shim`, the admission webhook):
it takes the project's dependencies less those only `render`/`check`/`explain` import, plus every
extra except the developer ones; both lists are `[tool.splitdns.image]` in pyproject.toml. Run by the
Dockerfile's build stage (plain Python 3.11, no third-party module) and by the tests.

    python tools/image_requirements.py [pyproject.toml]
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


def image_requirements(pyproject: dict[str, object]) -> list[str]:
    project = pyproject["project"]
    image = pyproject["tool"]["splitdns"]["image"]  # type: ignore[index]
    assert isinstance(project, dict) and isinstance(image, dict)
    left_out = {name_of(n) for n in image["without"]}
    skipped_extras = set(image["without-extras"])
    chosen = list(project["dependencies"])
    for extra, requirements in project.get("optional-dependencies", {}).items():
        if extra not in skipped_extras:
            chosen += requirements
    return [r for r in chosen if name_of(r) not in left_out]


def main(argv: list[str]) -> int:
    path = Path(argv[1] if len(argv) > 1 else "pyproject.toml")
    for requirement in image_requirements(tomllib.loads(path.read_text(encoding="utf-8"))):
        print(requirement)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
