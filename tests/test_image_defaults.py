"""The image's defaults are written once, in splitdns.kube.image (and the version in
splitdns.__version__, which pyproject.toml reads): the Dockerfile cannot import them, so this
holds it to them without building anything (tests/test_image.py builds and runs the image)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from splitdns import __version__
from splitdns.kube import image, manifests

ROOT = Path(__file__).parents[1]


def instructions(name: str) -> list[str]:
    """The arguments of each Dockerfile instruction `name`, in order (no line continuations in these)."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    return [m.group(1).strip() for m in re.finditer(rf"^{name}\s+(.*)$", text, re.MULTILINE)]


def test_the_dockerfile_builds_the_image_render_and_inject_describe() -> None:
    assert instructions("USER") == [f"{image.USER_ID}:{image.USER_ID}"]
    assert [json.loads(cmd) for cmd in instructions("CMD")] == [["-conf", image.COREFILE]]
    assert instructions("ARG").count(f"VERSION={__version__}") == 1
    exposed = set(instructions("EXPOSE")[0].split())
    assert {f"{manifests.HEALTH_PORT}/tcp", f"{manifests.READY_PORT}/tcp", "53/udp", "53/tcp"} <= exposed


def test_the_version_is_written_once() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "splitdns.__version__"}
