"""Our container image as the Dockerfile builds it: its default name, user and Corefile path,
which render, inject and the pod checks rely on. The Dockerfile cannot import them; a test holds
its USER, CMD, EXPOSE and VERSION to these values (tests/test_image_defaults.py)."""

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
