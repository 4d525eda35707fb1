"""`splitdns inject`: the resolver injected into the pod templates of Kubernetes YAML, offline, the
same injection the admission webhook makes (as `istioctl kube-inject` or `linkerd inject --manual`).
Tests: tests/test_inject.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

from splitdns.commands import render

EXIT_OK, EXIT_LEFT_ALONE, EXIT_INPUT = 0, 1, 2


def run(req: render.Request, paths: list[str]) -> int:
    from splitdns.kube.deploy.plan import PlanError
    from splitdns.kube.deploy.workloads import InputError, inject_text

    try:
        chosen = render.injection_settings(req)
        for change in chosen.corefile_changes[1]:
            print(f"splitdns inject: changed for the pod: {change}", file=sys.stderr)
    except PlanError as err:
        print(f"splitdns inject: {err}", file=sys.stderr)
        return EXIT_INPUT
    private = [r for r in chosen.plan.routes if r.zone not in (".", chosen.plan.cluster_domain + ".")]
    if not private:
        print("splitdns inject: warning: no private zone given (--zone ZONE=UPSTREAM, ZONE=openvpn, or "
              "--corefile): the resolver would send every name to the cluster DNS, as the pod does "
              "without it", file=sys.stderr)
    texts: list[tuple[str, str]] = []
    for path in paths or ["-"]:
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            reason = err.strerror if isinstance(err, OSError) else "not UTF-8 text"
            print(f"splitdns inject: cannot read {path}: {reason}", file=sys.stderr)
            return EXIT_INPUT
        texts.append(("<stdin>" if path == "-" else path, text))
    out: list[str] = []
    left_alone = found = 0
    for source, text in texts:
        try:
            injected, reports = inject_text(text, chosen, req.namespace, source)
        except InputError as err:
            print(f"splitdns inject: {err}", file=sys.stderr)
            return EXIT_INPUT
        for r in reports:
            if not r.outcome.injected:
                left_alone += 1
                print(f"splitdns inject: {source}: {r.what}: not injected: {r.outcome.reason}",
                      file=sys.stderr)
            for warning in r.outcome.warnings:
                print(f"splitdns inject: {source}: {r.what}: warning: {warning}", file=sys.stderr)
        out.append(injected)
        found += len(reports)
    sys.stdout.write(_join(out))
    if not found:
        print(f"splitdns inject: no pod template in {', '.join(source for source, _ in texts)} (a Pod, "
              "Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob or a List of them): nothing "
              "was injected", file=sys.stderr)
        return EXIT_LEFT_ALONE
    return EXIT_LEFT_ALONE if left_alone else EXIT_OK


def _join(texts: list[str]) -> str:
    # Several files become one stream: a document separator between them.
    parts = [t if t.endswith("\n") or not t else t + "\n" for t in texts]
    return "---\n".join(parts) if len(parts) > 1 else "".join(parts)
