"""What the pod's OpenVPN container must be started with when a zone learns its DNS servers from
it (`--zone ZONE=openvpn`): its management interface, where the resolver reads what the VPN
server pushed. Said where it can be seen, on the container's command line; a config file the
container reads may hold the same lines, which the injection cannot see, so this is advice.
Tests: tests/test_vpn_kinds_kube.py, tests/test_tunnel_kinds.py, tests/test_wireguard_check.py.
"""

from __future__ import annotations

from typing import Any

from splitdns.kube.shared.tunnel_kind import PlanView

# Each flag and why the resolver needs it (README, "The tunnel zone follows the tunnel").
NEEDED = ("--management", "--management-up-down", "--management-hold")


def advice(spec: dict[str, Any], plan: PlanView) -> str | None:
    """A sentence for the first OpenVPN container that lacks a flag the tunnel zones need, or None
    (no tunnel zone, no OpenVPN container in sight, or every flag there)."""
    tunnel = [r.zone for r in plan.routes if r.tunnel and r.vpn == plan.vpn]
    if not tunnel:
        return None
    host, _, port = plan.management.rpartition(":")
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if not isinstance(c, dict) or not _runs_openvpn(c):
                continue
            words = _words(c)
            missing = [flag for flag in NEEDED if flag not in words]
            zones = ", ".join(z.rstrip(".") for z in tunnel)
            if missing:
                return (f"container {c.get('name')} runs OpenVPN without {', '.join(missing)} on its command "
                        f"line; zone {zones} learns its DNS servers from OpenVPN's management interface, so "
                        f"start it with --management {host} {port} --management-up-down --management-hold "
                        "(or those lines in the config file it reads)")
            at = words.index("--management")
            given = words[at + 1:at + 3]
            if given and given != [host, port] and not given[0].startswith("/"):
                return (f"container {c.get('name')} runs OpenVPN with --management {' '.join(given)}, but "
                        f"the resolver reads {plan.management}: pass --openvpn-management "
                        f"{':'.join(given)}")
            return None
    return None


def _words(c: dict[str, Any]) -> list[str]:
    """The command line's words, a shell script's (`sh -c "openvpn --config ..."`) included."""
    return [word for item in (c.get("command") or []) + (c.get("args") or []) for word in str(item).split()]


def _runs_openvpn(c: dict[str, Any]) -> bool:
    return "openvpn" in str(c.get("image", "")).lower() or any(
        w.rsplit("/", 1)[-1] == "openvpn" for w in _words(c))
