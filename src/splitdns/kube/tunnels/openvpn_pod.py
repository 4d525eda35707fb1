"""The OpenVPN kind in a pod: the user's own OpenVPN container, which the resolver reads through
its management interface. render's full example carries one (a Secret holds the client config);
the injection adds none and only says when the pod's container lacks a flag (vpn_container).
Pure data, as `manifests`.
Tests: tests/test_vpn_kinds_kube.py, tests/test_tunnel_kinds.py, tests/test_wireguard_check.py.
"""

from __future__ import annotations

from splitdns.directives.operations import ReadySpec
from splitdns.kube.shared.tunnel_kind import Doc, OptionsView, PlanView, Steps
from splitdns.kube.tunnels import openvpn_container

DEFAULT_IMAGE = "your-openvpn-client-image"
SECRET = "openvpn-client"
INDENT = "    "


def corefile(plan: PlanView) -> list[str]:
    return ["openvpn {", f"{INDENT}management {plan.management}", "}"]


def ownership_note(plan: PlanView) -> str:
    return f" (management {plan.management})"


def container(plan: PlanView, opts: OptionsView) -> Doc:
    args = ["--config", "/etc/openvpn/client/client.conf"]
    if any(r.tunnel for r in plan.routes):
        # The resolver learns the pushed DNS from the management interface; it shares the pod's
        # network namespace, so loopback is enough and nothing else can reach it.
        host, _, port = plan.management.rpartition(":")
        # --management-hold: OpenVPN waits until the resolver attaches, so the first UP is never missed.
        args += ["--management", host, port, "--management-up-down", "--management-hold"]
    c: Doc = {"name": "vpn", "image": opts.vpn_image, "args": args}
    if opts.sidecar == "native":
        c["restartPolicy"] = "Always"
    # Started once the resolver answers every zone, the ones behind the tunnel too: the probe asks
    # the resolver's /ready (the pod shares one network namespace; a probe's port is any port of
    # the pod IP), so the app starts only when its private names resolve. Only containers before
    # it (the resolver) and itself need to run for it to pass. As the WireGuard sidecar's.
    c["startupProbe"] = {"httpGet": {"path": "/ready", "port": ReadySpec.endpoint.port},
                         "periodSeconds": 1, "failureThreshold": 120}
    c["resources"] = {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}}
    # NET_ADMIN for the tun device, addresses and routes; nothing else. A client config that
    # drops privileges (`user`/`group`) needs SETUID and SETGID added back.
    c["securityContext"] = {"capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]}}
    c["volumeMounts"] = [
        {"name": SECRET, "mountPath": "/etc/openvpn/client", "readOnly": True},
        {"name": "dev-tun", "mountPath": "/dev/net/tun"},
    ]
    return c


def example(plan: PlanView, opts: OptionsView) -> tuple[list[Doc], list[Doc]]:
    """render's full example: the vpn container and its volumes (client config, /dev/net/tun)."""
    return [container(plan, opts)], [
        {"name": SECRET, "secret": {"secretName": SECRET}},
        {"name": "dev-tun", "hostPath": {"path": "/dev/net/tun", "type": "CharDevice"}},
    ]


def apply_steps(plan: PlanView) -> Steps:
    return [[
        f"The Secret {SECRET}, holding the VPN client config as client.conf (the vpn container "
        "reads /etc/openvpn/client/client.conf):",
        f"  kubectl -n {plan.namespace} create secret generic {SECRET} --from-file=client.conf=client.ovpn"]]


def component_steps(plan: PlanView, opts: OptionsView) -> Steps:
    if not any(r.tunnel for r in plan.routes):
        return []
    host, _, port = plan.management.rpartition(":")
    return [f"The VPN container of {opts.name} runs OpenVPN with --management {host} {port} "
            "--management-up-down --management-hold (the resolver learns the pushed DNS there)."]


def advice(spec: Doc, plan: PlanView) -> str | None:
    return openvpn_container.advice(spec, plan)
