"""Our container image as the Dockerfile builds it: its default name, user and Corefile path,
which render, inject and the pod checks rely on. The Dockerfile cannot import them; a test holds
its USER, CMD, EXPOSE and VERSION to these values (tests/test_image_defaults.py).
Tests: tests/test_image.py, tests/test_image_defaults.py.
"""

from __future__ import annotations

from splitdns import __version__

REPOSITORY = "ghcr.io/splitdns/splitdns"
DEFAULT_IMAGE = f"{REPOSITORY}:{__version__}"
# Numeric, so the kubelet can check runAsNonRoot: the image's USER and the runAsUser render sets.
USER_ID = 65532
# CoreDNS's path: a pod spec written for CoreDNS works unchanged with our image, whose default
# arguments read the same file.
COREFILE_DIR = "/etc/coredns"
COREFILE = f"{COREFILE_DIR}/Corefile"

# The tools image (the admission webhook; check, render, inject and doctor in a CI job) is the
# resolver's repository with this suffix, at the same tag: the resolver image holds only what a
# pod's resolver runs (README.md, "The images").
TOOLS_SUFFIX = "-tools"
DEFAULT_TOOLS_IMAGE = f"{REPOSITORY}{TOOLS_SUFFIX}:{__version__}"


def tools_image(resolver_image: str) -> str:
    """The tools image beside a resolver image: REGISTRY/splitdns:TAG -> REGISTRY/splitdns-tools:TAG.
    A resolver pinned by digest names no tag the tools image shares: its version's tag is used."""
    name = resolver_image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    repository, tag = (name[:colon], name[colon + 1:]) if colon > slash else (name, "")
    if "@" in resolver_image or not tag:
        tag = __version__
    return f"{repository}{TOOLS_SUFFIX}:{tag}"
