"""Read the cluster DNS address from the kube-dns Service, through the user's kubeconfig or the pod's
in-cluster credentials. The only module that talks to a cluster; lightkube is imported here only.
Tests: tests/test_render.py, tests/test_wireguard_kube.py, tests/test_start_order.py, tests/test_image.py.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from splitdns.kube.deploy.plan import ClusterDNS, PlanError

NAMESPACE, SERVICE = "kube-system", "kube-dns"
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


class ClusterReadError(PlanError):
    """The kube-dns Service could not be read: no credentials, no access, or no API server."""


def read_kube_dns(kubeconfig: str | None = None, context: str | None = None,
                  service_account: str = SERVICE_ACCOUNT, transport: Any = None) -> ClusterDNS:
    """The ClusterIP of kube-system/kube-dns. With no kubeconfig given, in-cluster credentials are
    tried first, then $KUBECONFIG, then ~/.kube/config (lightkube's order). `transport` is for tests."""
    import yaml
    from lightkube import ApiError, Client, ConfigError, KubeConfig
    from lightkube.resources.core_v1 import Service

    server = "the API server"  # its address, once the kubeconfig has said it
    try:
        if kubeconfig is not None:
            config = KubeConfig.from_file(kubeconfig)
            how = f"kubeconfig {kubeconfig}"
        elif Path(service_account, "token").exists():
            config = KubeConfig.from_service_account(service_account)
            how = "in-cluster service account"
        else:
            config = KubeConfig.from_env(service_account=service_account)
            how = "kubeconfig from $KUBECONFIG or ~/.kube/config"
        single = config.get(context_name=context)
        if single is None:
            raise ClusterReadError(f"no context {context!r} in the kubeconfig" if context
                            else "the kubeconfig names no current context; pass --context")
        if single.context_name and single.context_name != "default":
            how += f", context {single.context_name}"
        server = f"the API server {single.cluster.server}"
        client = Client(single, transport=transport)
        svc = client.get(Service, SERVICE, namespace=NAMESPACE)
    except (ConfigError, OSError) as err:
        raise ClusterReadError(f"cannot load Kubernetes credentials to read {NAMESPACE}/{SERVICE}: {err}; "
                        "give the address with --cluster-dns IP") from None
    except (yaml.YAMLError, KeyError, TypeError, AttributeError, ValueError) as err:
        # A kubeconfig that is not YAML, or YAML of another shape: say which file, not where in lightkube.
        problem = (f"YAML does not parse: {getattr(err, 'problem', None) or str(err).splitlines()[0]}"
                   if isinstance(err, yaml.YAMLError) else "no clusters, contexts and users in it")
        raise ClusterReadError(f"cannot load Kubernetes credentials to read {NAMESPACE}/{SERVICE}: "
                               f"{kubeconfig or 'the kubeconfig'} is not a kubeconfig ({problem}); give the "
                               "address with --cluster-dns IP") from None
    except ApiError as err:
        raise ClusterReadError(f"reading Service {NAMESPACE}/{SERVICE} from {server} failed: "
                               f"{err.status.message or err}; give the address with --cluster-dns IP"
                               ) from None
    except Exception as err:  # httpx transport errors: connection refused, TLS, timeouts
        if type(err).__module__.split(".")[0] not in ("httpx", "httpx2", "httpcore", "ssl"):
            raise
        raise ClusterReadError(f"cannot reach {server} ({how}) to read {NAMESPACE}/{SERVICE}: {err}; "
                               "give the address with --cluster-dns IP") from None
    ip = svc.spec.clusterIP if svc.spec is not None else None
    if not ip or ip == "None":
        raise ClusterReadError(f"Service {NAMESPACE}/{SERVICE} has no ClusterIP; "
                        "give the address with --cluster-dns IP")
    ipaddress.ip_address(ip)
    return ClusterDNS(ip, f"read from Service {NAMESPACE}/{SERVICE} ({how})")
