"""The OpenVPN kind in a pod: the user's own OpenVPN container, which the resolver reads through
its management interface. render's full example carries one (a Secret holds the client config);
the injection adds none and only says when the pod's container lacks a flag (vpn_container).
Pure data, as `manifests`.
"""

from __future__ import annotations

from splitdns.kube import vpn_container
from splitdns.kube.tunnel_kind import Doc, OptionsView, PlanView, Steps

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
    c["securityContext"] = {"capabilities": {"add": ["NET_ADMIN"]}}
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
    return vpn_container.advice(spec, plan)
