"""`splitdns doctor`: read the cluster through lightkube and report pods that asked for the resolver and
run without it, or with settings older than the webhook's (kube/check/doctor.py judges).
Tests: tests/test_doctor.py.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from splitdns.kube.check import doctor

EXIT_OK, EXIT_FINDINGS, EXIT_CLUSTER = 0, 1, 2
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def connect(kubeconfig: str | None, context: str | None, transport: Any = None) -> tuple[Any, str]:
    """A lightkube client and the address of the API server it talks to. `transport` is for tests."""
    from lightkube import Client, KubeConfig

    if kubeconfig is not None:
        config = KubeConfig.from_file(kubeconfig)
    elif Path(SERVICE_ACCOUNT, "token").exists():
        config = KubeConfig.from_service_account(SERVICE_ACCOUNT)
    else:
        config = KubeConfig.from_env(service_account=SERVICE_ACCOUNT)
    single = config.get(context_name=context)
    if single is None:
        raise KeyError("the kubeconfig names no current context; pass --context")
    return Client(single, transport=transport), str(single.cluster.server)


def read(client: Any, webhook_namespace: str
         ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any] | None]:
    """(namespaces, pods that ask, the webhook Deployment or None)."""
    from lightkube import ApiError
    from lightkube.resources.apps_v1 import Deployment
    from lightkube.resources.core_v1 import Namespace, Pod

    from splitdns.kube.deploy import inject, webhook_manifests

    namespaces = [n.to_dict() for n in client.list(Namespace)]
    pods = [p.to_dict() for p in client.list(Pod, namespace="*", labels={inject.POD_LABEL: "true"})]
    try:
        webhook: dict[str, Any] | None = client.get(Deployment, webhook_manifests.NAME,
                                                    namespace=webhook_namespace).to_dict()
    except ApiError as err:
        if err.status.code != 404:
            raise
        webhook = None
    return namespaces, pods, webhook


def run(kubeconfig: str | None, context: str | None, webhook_namespace: str, transport: Any = None) -> int:
    from lightkube import ApiError, ConfigError

    try:
        client, server = connect(kubeconfig, context, transport)
    except (ConfigError, OSError, KeyError) as err:
        print(f"splitdns doctor: cannot load Kubernetes credentials: {err}", file=sys.stderr)
        return EXIT_CLUSTER
    try:
        namespaces, pods, webhook = read(client, webhook_namespace)
    except ApiError as err:
        print(f"splitdns doctor: the API server {server} refused: {err.status.message or err}",
              file=sys.stderr)
        return EXIT_CLUSTER
    except Exception as err:  # httpx transport errors: connection refused, TLS, timeouts
        if type(err).__module__.split(".")[0] not in ("httpx", "httpx2", "httpcore", "httpcore2", "ssl"):
            raise
        print(f"splitdns doctor: cannot reach the API server {server}: {err}", file=sys.stderr)
        return EXIT_CLUSTER
    findings = doctor.diagnose(namespaces, pods, webhook)
    sys.stdout.write(doctor.report(findings, len(pods)))
    return EXIT_FINDINGS if findings else EXIT_OK
