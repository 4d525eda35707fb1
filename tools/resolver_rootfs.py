"""Assemble the resolver image's root filesystem from the build stage's Debian files.

    python3 tools/resolver_rootfs.py SITE_PACKAGES ROOTFS

Run by the Dockerfile's `rootfs` stage (Debian bookworm's python3, no third-party module). ROOTFS
gets Debian's python3.11 with its standard library less what a resolver never imports (tests,
IDLE, Tk, lib2to3, distutils, sqlite, curses, the build config: see PRUNED), the shared libraries
every program and extension kept links to (found with ldd), a POSIX sh with the few coreutils the
WireGuard shim's script and `podman exec` checks use, the CA bundle (DNS over TLS), and
SITE_PACKAGES (splitdns, dnspython, prometheus_client) as Debian's dist-packages, less tests and
the parts of dnspython only other transports need. Every module is compiled to bytecode here,
checked by hash (no timestamps), so the read-only root never needs a write and imports start fast.
"""

from __future__ import annotations

import compileall
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

PYTHON = "python3.11"
STDLIB = Path(f"/usr/lib/{PYTHON}")
DIST_PACKAGES = Path("/usr/lib/python3/dist-packages")
PRUNED = {  # top-level names under the standard library a resolver never imports
    "test", "idlelib", "tkinter", "turtledemo", "turtle.py", "lib2to3", "ensurepip", "distutils",
    "pydoc_data", "pydoc.py", "venv", "sqlite3", "dbm", "curses", "unittest", "xmlrpc", "multiprocessing",
    "__pycache__", "site-packages", "dist-packages", "_pydecimal.py", "doctest.py", "mailbox.py",
    "imaplib.py", "nntplib.py", "smtplib.py", "ftplib.py", "poplib.py", "tabnanny.py", "pdb.py",
    "profile.py", "cProfile.py", "pstats.py", "trace.py", "lib-dynload",
}
DYNLOAD_PRUNED = re.compile(r"^(_tkinter|_sqlite3|_curses|_curses_panel|_dbm|_gdbm|_test\w*|xxlimited\w*|"
                            r"_ctypes_test|_xxtestfuzz|audioop|_lzma|_bz2|nis|readline|ossaudiodev)\.")
# Programs besides Python: sh for the WireGuard shim's script and `podman exec` checks; what the
# script runs (cat, mv, date, mkdir, head) and `sleep`, which a debugging container can idle on.
PROGRAMS = {"/bin/sh": "/bin/dash", "/bin/cat": "/bin/cat", "/bin/mv": "/bin/mv", "/bin/date": "/bin/date",
            "/bin/mkdir": "/bin/mkdir", "/usr/bin/head": "/usr/bin/head", "/bin/sleep": "/bin/sleep",
            "/bin/rm": "/bin/rm"}
FILES = ["/etc/ssl/certs/ca-certificates.crt"]
SITE_PRUNED = re.compile(r"(^|/)(tests?|__pycache__)(/|$)|^dns/(win32util\.py|dnssecalgs)"
                         r"|^splitdns/kube/check/crds(/|$)|^prometheus_client/(twisted|bridge)(/|$)")


def copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target, follow_symlinks=True)


def libraries(elf: Path) -> set[Path]:
    """The shared libraries `elf` loads (ldd), as the paths the loader looks them up by."""
    done = subprocess.run(["ldd", str(elf)], capture_output=True, text=True, check=False)
    found = set()
    for line in done.stdout.splitlines():
        match = re.search(r"(?:=>\s*)?(/\S+)\s+\(0x", line)
        if match:
            found.add(Path(match.group(1)))
    return found


def build(site: Path, root: Path) -> None:
    elves: list[Path] = [Path(f"/usr/bin/{PYTHON}")]
    copy(Path(f"/usr/bin/{PYTHON}"), root / f"usr/bin/{PYTHON}")
    (root / "usr/bin/python3").symlink_to(PYTHON)
    for target, source in PROGRAMS.items():
        copy(Path(source), root / target.lstrip("/"))
        elves.append(Path(source))
    for name in FILES:
        copy(Path(name), root / name.lstrip("/"))
    for entry in STDLIB.iterdir():
        if entry.name in PRUNED or entry.name.startswith("config-"):
            continue
        if entry.is_dir():
            shutil.copytree(entry, root / entry.relative_to("/"), symlinks=False,
                            ignore=shutil.ignore_patterns("__pycache__", "test", "tests", "idle_test"))
        else:
            copy(entry, root / entry.relative_to("/"))
    for ext in (STDLIB / "lib-dynload").iterdir():
        if not DYNLOAD_PRUNED.match(ext.name):
            copy(ext, root / ext.relative_to("/"))
            elves.append(ext)
    for path in sorted(site.rglob("*")):
        relative = path.relative_to(site).as_posix()
        if path.is_file() and not SITE_PRUNED.search(relative) and not relative.startswith("bin/"):
            copy(path, root / DIST_PACKAGES.relative_to("/") / relative)
            if path.suffix == ".so":
                elves.append(path)
    needed: set[Path] = set()
    for elf in elves:
        needed |= libraries(elf)
    for lib in sorted(needed):
        copy(lib, root / lib.relative_to("/"))
    launcher = root / "usr/bin/splitdns"
    # -I: neither the environment's PYTHON* variables nor the working directory reach sys.path.
    launcher.write_text(f"#!/usr/bin/{PYTHON} -I\nimport sys\n"
                        "from splitdns.cli import main\nsys.exit(main())\n")
    launcher.chmod(0o755)
    (root / "tmp").mkdir(exist_ok=True)
    (root / "tmp").chmod(0o1777)  # as Debian has it (mkdir alone meets the umask)
    (root / "etc/coredns").mkdir(parents=True, exist_ok=True)
    for tree in (root / STDLIB.relative_to("/"), root / DIST_PACKAGES.relative_to("/")):
        ok = compileall.compile_dir(tree, quiet=1, workers=0, stripdir=str(root), prependdir="/",
                                    invalidation_mode=compileall.py_compile.PycInvalidationMode.UNCHECKED_HASH)
        if not ok:
            raise SystemExit(f"compiling {tree} failed")
    os.sync()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    build(Path(sys.argv[1]), Path(sys.argv[2]))
