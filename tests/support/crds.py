"""cert-manager's Issuer and Certificate checked as `splitdns check --kube-version` checks them
(splitdns.kube.check.custom_resources: strictly, against the CRDs vendored in
src/splitdns/kube/check/crds), one line per problem, for tests that change a rendered resource and
expect the API server's refusal."""

from __future__ import annotations

from typing import Any

from splitdns.kube.check import custom_resources

# The newest schemas kubernetes-validate bundles: ObjectMeta has not changed in the versions we render for.
KUBERNETES = (1, 37)


def known() -> set[tuple[str, str]]:
    return custom_resources.known()


def errors(resource: dict[str, Any]) -> list[str]:
    """What is wrong with `resource`, one line each, where; empty when it is valid. KeyError when no
    vendored CRD defines its apiVersion and kind."""
    return [f"{'.'.join(map(str, path)) or '(top)'}: {message}"
            for path, message in custom_resources.errors(resource, KUBERNETES)]
