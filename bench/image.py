"""The resolver image in `make bench`: built once with podman, then run from its own files.

`splitdns-image` is the resolver image's root filesystem (the Dockerfile's `resolver` target, built
as tests/test_image.py builds it, on a Debian-made base), mounted read-only, with `splitdns serve`
started in it by `chroot` as uid 65532: the image's Python, standard library, modules and bytecode,
without a container runtime between exec and the first answer (a runtime's own start-up is not the
resolver's). Beside the `splitdns` row (the development virtualenv, on uvloop), it is the A/B of
the two loops in one run: the image runs the stock asyncio loop.

The build needs the network (Debian's and Python's packages), so `prepare` runs before the
benchmark enters its network namespace; it passes the root and the sizes on in the environment,
and `finish` (same process, after the re-exec) removes what podman kept.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ENV = "SPLITDNS_BENCH_IMAGE"  # JSON: the podman scratch dir, the mounted root, the sizes
TAG = "localhost/splitdns-bench:resolver"


def prepare() -> str:
    """Build and mount the resolver image; '' when done, else why there is no image row."""
    if ENV in os.environ:
        return ""
    sys.path.insert(0, str(REPO))
    from tests.support import podman

    reason = podman.missing_prerequisite()
    if reason:
        return reason
    engine = podman.Engine()
    try:
        timing = podman.Timing()
        engine.build(REPO, TAG, timing, target="resolver")
        size = int(engine.inspect(TAG)["Size"])  # type: ignore[call-overload]
        with tempfile.TemporaryDirectory(dir=engine.scratch) as tmp:
            archive = Path(tmp) / "image.tar"
            engine.podman("image", "save", "--output", str(archive), TAG, timeout=120)
            gzipped = len(gzip.compress(archive.read_bytes(), compresslevel=6))
        root = engine.podman("image", "mount", TAG).strip()
    except podman.ImageError as err:
        engine.remove()
        return f"the resolver image did not build: {str(err).splitlines()[-1]}"
    os.environ[ENV] = json.dumps({"scratch": str(engine.scratch), "root": root, "bytes": size,
                                  "gzipped": gzipped, "build_s": round(timing.build_s, 1)})
    return ""


def built() -> dict[str, object] | None:
    raw = os.environ.get(ENV)
    return json.loads(raw) if raw else None


def root() -> str | None:
    info = built()
    return str(info["root"]) if info else None


def finish() -> None:
    """Unmount and remove the image and podman's scratch directory (after the re-exec: same PID)."""
    info = built()
    if not info:
        return
    sys.path.insert(0, str(REPO))
    from tests.support import podman

    podman.Engine(Path(str(info["scratch"]))).remove()
