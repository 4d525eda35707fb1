"""`splitdns check`: lint Corefiles, Kubernetes YAML and VPN client configs together.

Tests: tests/test_check.py, tests/test_check_truth.py, tests/test_check_serve_agree.py.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

EXIT_CLEAN, EXIT_WARNINGS, EXIT_ERRORS = 0, 1, 2


def run(paths: Sequence[str], resolver: str = "auto", kube_version: str | None = None,
        output: str = "text", details: bool = True) -> int:
    from splitdns.kube.check import checker, schema
    from splitdns.kube.shared import findings

    version = None
    if kube_version is not None:
        try:
            version = schema.minor(kube_version)
        except schema.VersionError as err:
            print(f"splitdns check: {err}", file=sys.stderr)
            return EXIT_ERRORS
    found = checker.check(paths, checker.Options(resolver=resolver, kube_version=version))
    if output == "json":
        sys.stdout.write(findings.to_json(found))
    else:
        for f in found:
            print(f.text(details))
        errors = sum(f.severity == findings.ERROR for f in found)
        warnings = sum(f.severity == findings.WARNING for f in found)
        print(f"checked {len(paths)} file(s): {errors} error(s), {warnings} warning(s)", file=sys.stderr)
    if any(f.severity == findings.ERROR for f in found):
        return EXIT_ERRORS
    if any(f.severity == findings.WARNING for f in found):
        return EXIT_WARNINGS
    return EXIT_CLEAN
