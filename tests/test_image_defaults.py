"""The image's defaults are written once, in splitdns.kube.shared.image (and the version in
splitdns.__version__, which pyproject.toml reads): the Dockerfile and the docs' copy-paste examples
cannot import them, so this holds them to them without building anything (tests/test_image.py builds
and runs the image)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from splitdns import __version__
from splitdns.kube.deploy import manifests
from splitdns.kube.shared import image

ROOT = Path(__file__).parents[1]


def instructions(name: str) -> list[str]:
    """The arguments of each Dockerfile instruction `name`, in order (no line continuations in these)."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    return [m.group(1).strip() for m in re.finditer(rf"^{name}\s+(.*)$", text, re.MULTILINE)]


def test_the_dockerfile_builds_the_image_render_and_inject_describe() -> None:
    # Two images (the tools one, then the resolver one, which a plain `docker build .` gives): the
    # same user, the same version; the resolver's arguments and ports are the pod's.
    assert set(instructions("USER")) == {f"{image.USER_ID}:{image.USER_ID}"}
    assert json.loads(instructions("CMD")[-1]) == ["-conf", image.COREFILE]
    assert instructions("ARG").count(f"VERSION={__version__}") == 2
    assert re.findall(r"^FROM .* AS (\w+)$", (ROOT / "Dockerfile").read_text(), re.M)[-1] == "resolver"
    exposed = set(instructions("EXPOSE")[-1].split())
    assert {f"{manifests.HEALTH_PORT}/tcp", f"{manifests.READY_PORT}/tcp", "53/udp", "53/tcp"} <= exposed


def test_the_version_is_written_once() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "splitdns.__version__"}


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# An image reference whose last path part is splitdns: REGISTRY/splitdns:0.1.0, ghcr.io/.../splitdns:TAG.
IMAGE_REFERENCE = re.compile(r"(?<![\w./-])((?:[\w.-]+/)+splitdns):([\w.-]*\w)")
# The places the docs name the image's user: the Dockerfile's USER, the pod's runAsUser/runAsGroup,
# "Non-root (UID)", "uid UID".
USER_MENTION = re.compile(r"\bUSER (\d+):(\d+)|\brunAs(?:User|Group):?\s+(\d+)|[Nn]on-root \((\d+)\)"
                          r"|\b(?:uid|UID) (\d+)")


def test_the_docs_show_the_image_name_and_version_splitdns_has() -> None:
    # Copy-paste examples carry the real version (a VERSION placeholder only where the text says
    # what it stands for); this keeps them from going stale when __version__ moves.
    found = [(doc.name, repository, tag) for doc in DOCS
             for repository, tag in IMAGE_REFERENCE.findall(doc.read_text(encoding="utf-8"))]
    assert any(doc == "README.md" for doc, _, _ in found), "no image reference found in README.md"
    wrong = [f for f in found if f[2] not in (__version__, "VERSION")
             or ("." in f[1].split("/")[0] and f[1] != image.REPOSITORY)]
    assert not wrong, f"splitdns is {image.DEFAULT_IMAGE}, the docs say: {wrong}"


def test_the_docs_name_the_user_the_image_runs_as() -> None:
    found = [(doc.name, int(uid)) for doc in DOCS
             for match in USER_MENTION.findall(doc.read_text(encoding="utf-8")) for uid in match if uid]
    assert found, "the docs no longer name the image's user where this test looks"
    wrong = [f for f in found if f[1] != image.USER_ID]
    assert not wrong, f"the image runs as {image.USER_ID}, the docs say: {wrong}"


@pytest.mark.parametrize(("resolver", "tools"), [
    (image.DEFAULT_IMAGE, image.DEFAULT_TOOLS_IMAGE),
    ("registry.example.com:5000/mirror/splitdns:dev", "registry.example.com:5000/mirror/splitdns-tools:dev"),
    ("splitdns", f"splitdns-tools:{__version__}"),
    # A digest is the resolver image's own: the tools image goes by the version's tag.
    ("registry.example.com/splitdns@sha256:" + "0" * 64,
     f"registry.example.com/splitdns-tools:{__version__}"),
])
def test_the_tools_image_is_named_beside_the_resolver_image(resolver: str, tools: str) -> None:
    assert image.tools_image(resolver) == tools
