"""`splitdns render --form webhook`: what runs the admission webhook, as plain dicts.

The Namespace, a ServiceAccount without API access (the webhook never calls the API server, so there
is no RBAC), the Deployment (2 replicas spread over nodes, hardened like the resolver), its
PodDisruptionBudget and Service, the MutatingWebhookConfiguration, and cert-manager's CA chain: a
self-signed Issuer makes a CA, a CA Issuer signs the serving certificate, and cert-manager's
cainjector copies the CA into the webhook configuration (`cert-manager.io/inject-ca-from`). Renewing
the serving certificate keeps the CA, so the caBundle does not change under GitOps.

The injection settings travel as the webhook's arguments: changing the zones is a new render and
apply; the webhook's pods roll, and pods created after that get the new settings.
Tests: tests/test_monitoring_render.py, tests/test_wireguard_kube.py.
"""

from __future__ import annotations

from typing import Any

from splitdns.kube.deploy import inject, manifests, sizing
from splitdns.kube.shared import image

Doc = dict[str, Any]

NAME = "splitdns-webhook"
TLS_SECRET = f"{NAME}-tls"
TLS_DIR = "/etc/splitdns-webhook/tls"
HTTPS_PORT, PROBE_PORT = 8443, 8080
WEBHOOK_NAME = "inject.splitdns.dev"
SETTINGS_ANNOTATION = "splitdns.dev/settings"  # on the webhook's pods: a new value rolls them

def cpu_request(review_rate: int) -> str:
    """Each replica's CPU request for `review_rate` reviews a second (kube.deploy.sizing)."""
    return manifests.sized_cpu(
        f"--webhook-review-rate {review_rate}", review_rate, sizing.webhook_millicores(review_rate),
        "the reviews a second",
        f"{sizing.WEBHOOK_CPU_MS_PER_REVIEW:g} ms of CPU per review, and a replica answers",
        f"{sizing.most_reviews()} reviews a second is the most a replica is sized for")


def _meta(name: str, namespace: str | None = None, **extra: Any) -> Doc:
    meta: Doc = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "splitdns"}
    meta.update(extra)
    return meta


def settings_args(settings: inject.Settings) -> list[str]:
    """The webhook's flags that give it `settings`: every zone spelled out, so the webhook's pod needs
    no Corefile file and no API access to learn the cluster DNS."""
    plan = settings.plan
    args: list[str] = []
    for r in plan.routes:
        zone = r.zone.rstrip(".") or "."
        args += ["--zone", f"{zone}={','.join(r.upstreams) or r.vpn}"]
        if r.probe is not None:
            args += ["--probe", f"{zone}={r.probe}"]
    args += ["--cluster-domain", plan.cluster_domain, "--ndots", str(plan.ndots),
             "--openvpn-management", plan.management, "--sidecar", settings.sidecar,
             "--image", settings.image, "--expected-qps", str(settings.expected_qps)]
    if settings.adds_vpn:
        args += ["--vpn", plan.vpn, "--vpn-image", settings.vpn_image]
        if plan.unsafe_sysctls:
            args.append("--wireguard-src-valid-mark")
    return args


def render(settings: inject.Settings, namespace: str,
           review_rate: int = sizing.TYPICAL_REVIEW_RATE) -> dict[str, str]:
    from splitdns import __version__
    from splitdns.kube.shared import yamlio

    header = "".join(f"# {line}\n" for line in [
        f"Rendered by `splitdns render --form webhook` (splitdns {__version__}): the admission webhook that",
        "injects the resolver. Needs cert-manager. Apply with `kubectl apply -f FILE`.",
        f"Opt in: label a namespace {inject.NAMESPACE_LABEL}=enabled and the pods {inject.POD_LABEL}=true.",
        "Changing the zones: render again, apply, then restart the workloads (kubectl rollout restart):",
        "running pods keep the settings they were created with (`splitdns doctor` lists them).",
        f"Images: the webhook runs {image.tools_image(settings.image)} (the Dockerfile's tools target),",
        f"the pods it injects {settings.image} (its resolver target): push both."])
    return {"splitdns-webhook.yaml": yamlio.dump_all(all_documents(settings, namespace,
                                                                   review_rate=review_rate), header)}


def all_documents(settings: inject.Settings, namespace: str, timeout_seconds: int = 5,
                  review_rate: int = sizing.TYPICAL_REVIEW_RATE) -> list[Doc]:
    return [
        namespace_doc(namespace),
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(NAME, namespace),
         "automountServiceAccountToken": False},
        *certificates(namespace),
        deployment(settings, namespace, settings_args(settings), review_rate),
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(NAME, namespace),
         "spec": {"minAvailable": 1, "selector": {"matchLabels": _selector()}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": _meta(NAME, namespace),
         "spec": {"selector": _selector(),
                  # `probes` carries /metrics too, for `render --form monitoring`'s ServiceMonitor.
                  "ports": [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"},
                            {"name": "probes", "port": PROBE_PORT, "targetPort": "probes",
                             "protocol": "TCP"}]}},
        webhook_configuration(namespace, timeout_seconds),
    ]


def namespace_doc(namespace: str) -> Doc:
    meta = _meta(namespace)
    # The webhook's own pods run under the restricted Pod Security Standard.
    meta["labels"]["pod-security.kubernetes.io/enforce"] = "restricted"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def _selector() -> Doc:
    return {"app.kubernetes.io/name": NAME}


def certificates(namespace: str) -> list[Doc]:
    ca = f"{NAME}-ca"
    return [
        {"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
         "metadata": _meta(f"{NAME}-selfsigned", namespace), "spec": {"selfSigned": {}}},
        {"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": _meta(ca, namespace),
         "spec": {"isCA": True, "commonName": ca, "secretName": ca, "duration": "87600h",
                  "privateKey": {"algorithm": "ECDSA", "size": 256},
                  "issuerRef": {"name": f"{NAME}-selfsigned", "kind": "Issuer"}}},
        {"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": _meta(ca, namespace),
         "spec": {"ca": {"secretName": ca}}},
        {"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": _meta(NAME, namespace),
         "spec": {"secretName": TLS_SECRET, "duration": "2160h", "renewBefore": "720h",
                  "dnsNames": [f"{NAME}.{namespace}.svc", f"{NAME}.{namespace}.svc.cluster.local"],
                  "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
                  "issuerRef": {"name": ca, "kind": "Issuer"}}},
    ]


def deployment(settings: inject.Settings, namespace: str, flags: list[str],
               review_rate: int = sizing.TYPICAL_REVIEW_RATE) -> Doc:
    args = ["--tls-cert", f"{TLS_DIR}/tls.crt", "--tls-key", f"{TLS_DIR}/tls.key",
            "--port", str(HTTPS_PORT), "--probe-port", str(PROBE_PORT), "--namespace", namespace, *flags]
    base = manifests.dns_container(settings.plan, manifests.Options(image=settings.image, sidecar="classic"))
    container: Doc = {
        "name": "webhook",
        # The webhook runs from the tools image; the pods it injects get the resolver image.
        "image": image.tools_image(settings.image),
        "command": ["splitdns", "webhook"],
        "args": args,
        "ports": [{"name": "https", "containerPort": HTTPS_PORT, "protocol": "TCP"},
                  {"name": "probes", "containerPort": PROBE_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "probes"}, "periodSeconds": 2,
                           "failureThreshold": 1},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "probes"}, "periodSeconds": 10,
                          "failureThreshold": 3},
        "resources": {"requests": {"cpu": cpu_request(review_rate), "memory": "64Mi"},
                      "limits": {"memory": "192Mi"}},
        "securityContext": base["securityContext"],
        "volumeMounts": [{"name": "tls", "mountPath": TLS_DIR, "readOnly": True}],
    }
    labels = _selector()
    spec: Doc = {
        "serviceAccountName": NAME,
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        # Two replicas on two nodes: one node drained or lost never takes the webhook away.
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100,
            "podAffinityTerm": {"labelSelector": {"matchLabels": labels},
                                "topologyKey": "kubernetes.io/hostname"}}]}},
        "terminationGracePeriodSeconds": 30,
        "containers": [container],
        "volumes": [{"name": "tls", "secret": {"secretName": TLS_SECRET}}],
    }
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(NAME, namespace),
        "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
                 "template": {"metadata": {"labels": labels,
                                           "annotations": {SETTINGS_ANNOTATION: settings.digest}},
                              "spec": spec}},
    }


def webhook_configuration(namespace: str, timeout_seconds: int) -> Doc:
    excluded = sorted({*inject.ALWAYS_EXCLUDED, namespace})
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": _meta("splitdns", annotations={"cert-manager.io/inject-ca-from": f"{namespace}/{NAME}"}),
        "webhooks": [{
            "name": WEBHOOK_NAME,
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"service": {"name": NAME, "namespace": namespace, "path": "/mutate",
                                         "port": 443}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods"], "scope": "Namespaced"}],
            # Opt-in twice: the namespace, then the pod. The API server calls us for no other pod.
            "namespaceSelector": {"matchExpressions": [
                {"key": inject.NAMESPACE_LABEL, "operator": "In", "values": ["enabled"]},
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": excluded}]},
            "objectSelector": {"matchLabels": {inject.POD_LABEL: "true"}},
            # Safe because injection is all or nothing: a pod we missed keeps plain cluster DNS;
            # `splitdns doctor` lists such pods.
            "failurePolicy": "Ignore",
            "matchPolicy": "Equivalent",
            "sideEffects": "None",
            "timeoutSeconds": timeout_seconds,
            # Called again after later webhooks changed the pod, to stay the first init container.
            "reinvocationPolicy": "IfNeeded",
        }],
    }
