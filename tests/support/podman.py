"""Build the project's Dockerfile with podman, in a scratch directory, against a base image made
from Debian packages.

There is no registry here and no Docker engine, but Debian's packages are reachable: mmdebstrap
makes a stand-in for `python:3.11-slim-bookworm` (Debian bookworm's Python 3.11), podman imports
it, and the Dockerfile is built with `--build-arg BASE_IMAGE=` that stand-in and `--pull=never`.
Everything podman keeps (images, containers, its database, its run state) lives under one scratch
directory that `Engine.remove` deletes; the base tarball is cached between runs (see `base_tarball`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# The stand-in base: what the official image offers that the Dockerfile uses (python3 and its venv
# module, CA certificates), without documentation, manual pages and translations.
MMDEBSTRAP_ARGS = (
    "--variant=minbase", "--include=python3,python3-venv,ca-certificates",
    "--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*", "bookworm",
)  # fmt: skip
PROGRAMS = ("podman", "runc", "mmdebstrap")
# Settings this kind of sandbox needs: no CAP_SYS_RESOURCE (keep rlimits below the hard ones), crun
# refuses hybrid cgroups (runc works), no systemd (cgroupfs, file events).
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "{scratch}/tmp"
"""
STORAGE_CONF = """\
[storage]
driver = "overlay"
runroot = "{scratch}/run"
graphroot = "{scratch}/root"
"""
SCRATCH_PREFIX = "splitdns-podman-"
BLOB_CACHE = Path("/var/lib/containers")
BUILD_TIMEOUT = 600.0
BASE_TIMEOUT = 900.0


class ImageError(RuntimeError):
    """A podman or mmdebstrap step failed; the message has the command and its output's tail."""


def missing_prerequisite() -> str | None:
    if os.geteuid() != 0:
        return "building and running the image needs root (podman with runc, network namespaces)"
    missing = [p for p in PROGRAMS if shutil.which(p) is None]
    if missing:
        return f"building the image needs {', '.join(missing)} (see IMAGE_PACKAGES in the Makefile)"
    return None


def pip_config_mounts() -> list[str]:
    """`--volume` arguments that give pip inside the build this machine's pip configuration (its
    index, proxy or CA) read-only, for each file that exists: the global and per-user config files,
    $PIP_CONFIG_FILE, and the files and directories they name (cert, constraint, find-links, a
    file:// index)."""
    home = Path.home()
    candidates = [Path("/etc/pip.conf"), Path("/etc/xdg/pip/pip.conf"), home / ".config/pip/pip.conf",
                  home / ".pip/pip.conf"]
    if os.environ.get("PIP_CONFIG_FILE"):
        candidates.append(Path(os.environ["PIP_CONFIG_FILE"]))
    files: list[Path] = []
    for conf in candidates:
        if not conf.is_file():
            continue
        files.append(conf)
        for line in conf.read_text(errors="replace").splitlines():
            _, sep, values = line.partition("=")
            for value in values.split() if sep else []:
                named = Path(value.removeprefix("file://"))
                if value.startswith("file://"):
                    named = named.parent  # a file:// index links to files beside it (../../files/)
                if named.is_absolute() and named.exists():
                    files.append(named)
    if os.environ.get("PIP_CERT") and Path(os.environ["PIP_CERT"]).is_file():
        files.append(Path(os.environ["PIP_CERT"]))
    # Inside the build the user is root: the per-user files go where root's pip looks.
    targets = {f: (Path("/root") / f.relative_to(home) if f.is_relative_to(home) else f) for f in files}
    return [arg for f, target in dict.fromkeys(targets.items())
            for arg in ("--volume", f"{f.resolve()}:{target}:ro")]


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "splitdns" / "image-base"


def base_key(day: str | None = None) -> str:
    """The cache key: the mmdebstrap arguments and the day (Debian's archive moves; a day-old
    base is as good as a fresh one, an older one is made again)."""
    day = day or time.strftime("%Y-%m-%d", time.gmtime())
    return hashlib.sha256(json.dumps([MMDEBSTRAP_ARGS, day]).encode()).hexdigest()[:16]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def run(argv: list[str], *, timeout: float, env: dict[str, str] | None = None) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ImageError(f"timed out after {timeout:.0f} s: {' '.join(argv)}") from None
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-30:])
        raise ImageError(f"failed ({done.returncode}): {' '.join(argv)}\n{tail}")
    return done.stdout


@dataclass
class Timing:
    base_made: bool = False  # False: the cached tarball was used
    base_s: float = 0.0
    import_s: float = 0.0
    build_s: float = 0.0


def base_tarball(timing: Timing) -> Path:
    """The base made by mmdebstrap, from the cache if today's is there and its checksum holds.

    One run makes it at a time (a lock), the others wait and use it; older keys are removed."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    key = base_key()
    tar, checksum = cache / f"{key}.tar", cache / f"{key}.tar.sha256"
    t0 = time.monotonic()
    with (cache / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if tar.exists() and checksum.exists() and file_sha256(tar) == checksum.read_text().strip():
            timing.base_s = time.monotonic() - t0
            return tar
        partial = cache / f"{key}-partial.tar"  # mmdebstrap picks its output format by the suffix
        remove_path(partial)
        try:
            run(["mmdebstrap", "--quiet", *MMDEBSTRAP_ARGS, str(partial)], timeout=BASE_TIMEOUT)
            digest = file_sha256(partial)
            partial.rename(tar)
        finally:
            remove_path(partial)
        checksum.write_text(digest + "\n")
        for old in cache.glob("*.tar*"):
            if not old.name.startswith(key):
                remove_path(old)
    timing.base_made, timing.base_s = True, time.monotonic() - t0
    return tar


def remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


class Engine:
    """podman with its whole state in a scratch directory (created here, removed by `remove`)."""

    def __init__(self, scratch: Path | None = None) -> None:
        self.scratch = scratch or Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
        (self.scratch / "tmp").mkdir(exist_ok=True)
        (self.scratch / "owner").write_text(str(os.getpid()))
        (self.scratch / "containers.conf").write_text(CONTAINERS_CONF.format(scratch=self.scratch))
        (self.scratch / "storage.conf").write_text(STORAGE_CONF.format(scratch=self.scratch))
        self.env = {**os.environ, "CONTAINERS_CONF": str(self.scratch / "containers.conf"),
                    "CONTAINERS_STORAGE_CONF": str(self.scratch / "storage.conf")}
        # The one thing podman keeps outside the scratch directory (its blob information cache):
        # removed at the end unless it was there before.
        self.outside = [] if BLOB_CACHE.exists() else [BLOB_CACHE]

    def podman(self, *args: str, timeout: float = 60.0) -> str:
        return run(["podman", *args], timeout=timeout, env=self.env)

    def popen(self, *args: str) -> subprocess.CompletedProcess[str]:
        """A podman command whose failure the caller judges."""
        return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=60, env=self.env,
                              stdin=subprocess.DEVNULL)

    def build(self, context: Path, tag: str, timing: Timing, target: str | None = None) -> None:
        """Import the Debian-made base (once) and build `context`'s Dockerfile on it as `tag`, up to
        the stage `target` if given. Layers are kept, so a second target reuses the stages both share."""
        base = "localhost/splitdns-base:" + base_key()
        if self.popen("image", "exists", base).returncode != 0:
            tar = base_tarball(timing)
            t0 = time.monotonic()
            self.podman("import", "--quiet", str(tar), base, timeout=300)
            timing.import_s = time.monotonic() - t0
        t0 = time.monotonic()
        self.podman("build", "--quiet", "--layers=true", "--pull=never", "--network=host",
                    f"--build-arg=BASE_IMAGE={base}", *pip_config_mounts(),
                    *([f"--target={target}"] if target else []), "--tag", tag, str(context),
                    timeout=BUILD_TIMEOUT)
        timing.build_s += time.monotonic() - t0

    def inspect(self, image: str) -> dict[str, object]:
        data = json.loads(self.podman("image", "inspect", image))
        assert isinstance(data, list) and len(data) == 1
        return dict(data[0])

    def remove(self) -> None:
        """Remove every container and image, unmount what is left, delete the scratch directory."""
        with contextlib.suppress(Exception):
            self.popen("rm", "--all", "--force", "--time", "0")
        with contextlib.suppress(Exception):
            self.popen("rmi", "--all", "--force")
        for mount in reversed(mounts_under(self.scratch)):
            subprocess.run(["umount", "--lazy", mount], capture_output=True, timeout=10)
        shutil.rmtree(self.scratch, ignore_errors=True)
        for path in self.outside:
            shutil.rmtree(path, ignore_errors=True)


def mounts_under(path: Path) -> list[str]:
    prefix = str(path) + "/"
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [p for p in points if p.startswith(prefix)]


def remove_stale() -> None:
    """Remove what a killed run left (its owner process is gone): containers, mounts, files."""
    for scratch in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        try:
            owner = int((scratch / "owner").read_text())
        except (OSError, ValueError):
            continue
        if not Path(f"/proc/{owner}").exists():
            Engine(scratch).remove()


@contextlib.contextmanager
def engine() -> Iterator[Engine]:
    remove_stale()
    made = Engine()
    try:
        yield made
    finally:
        made.remove()
