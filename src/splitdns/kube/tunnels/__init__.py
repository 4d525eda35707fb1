"""Kubernetes's one table of tunnel kinds: per kind, its VPN container (the user's, or a sidecar
the injection adds), what the rendered Corefile says for it, its client config as `check` reads it
and the lints of that config (a row: kube/shared/tunnel_kind.py's Kind). Everything in kube/ that differs
per kind reads it from here; a new kind is its modules and one row below (README, "Adding a tunnel
kind").

The rows name the kind by its directive (the registry in `splitdns.directives`): `--zone ZONE=WORD`
and `--vpn WORD` take the directive's tunnel word, and user text its display name.
Tests: tests/test_vpn_kinds_kube.py, tests/test_tunnel_kinds.py, tests/test_wireguard_check.py.
"""

from __future__ import annotations

from splitdns import directives
from splitdns.kube.shared.tunnel_kind import ConfigFormat, Doc, Kind, Sidecar
from splitdns.kube.tunnels import (
    openconnect_conf,
    openconnect_lint,
    openconnect_pod,
    openvpn_conf,
    openvpn_pod,
    strongswan_conf,
    strongswan_lint,
    strongswan_pod,
    wireguard_conf,
    wireguard_lint,
    wireguard_pod,
)

OPENVPN = Kind(
    directives.OPENVPN, learned_from="OpenVPN", upstream_text="OpenVPN-pushed DNS",
    default_image=openvpn_pod.DEFAULT_IMAGE, corefile=openvpn_pod.corefile, example=openvpn_pod.example,
    apply_steps=openvpn_pod.apply_steps, component_steps=openvpn_pod.component_steps,
    ownership_note=openvpn_pod.ownership_note, advice=openvpn_pod.advice,
    config=ConfigFormat(openvpn_conf.looks_like, openvpn_conf.parse, (".ovpn",), "SD301", "remote"))
WIREGUARD = Kind(
    directives.WIREGUARD, learned_from="wg-quick", upstream_text="the DNS of wg-quick's DNS = line",
    default_image=wireguard_pod.DEFAULT_IMAGE, corefile=wireguard_pod.corefile,
    apply_steps=wireguard_pod.apply_steps,
    config=ConfigFormat(wireguard_conf.looks_like, wireguard_conf.parse, (), "SD304", "Endpoint"),
    lints=wireguard_lint.check,
    sidecar=Sidecar(wireguard_pod.SECRET, wireguard_pod.prepare, wireguard_pod.add, wireguard_pod.patched,
                    wireguard_pod.replacement))

OPENCONNECT = Kind(
    directives.OPENCONNECT, learned_from="openconnect",
    upstream_text="the DNS the OpenConnect gateway pushes",
    default_image=openconnect_pod.DEFAULT_IMAGE, corefile=openconnect_pod.corefile,
    apply_steps=openconnect_pod.apply_steps, advice=openconnect_pod.advice,
    config=ConfigFormat(openconnect_conf.looks_like, openconnect_conf.parse),  # the gateway's ocserv.conf
    lints=openconnect_lint.check,
    sidecar=Sidecar(openconnect_pod.SECRET, openconnect_pod.prepare, openconnect_pod.add,
                    openconnect_pod.patched))
STRONGSWAN = Kind(
    directives.STRONGSWAN, learned_from="charon", upstream_text="the DNS an IKE SA received",
    default_image=strongswan_pod.DEFAULT_IMAGE, corefile=strongswan_pod.corefile,
    apply_steps=strongswan_pod.apply_steps,
    config=ConfigFormat(strongswan_conf.looks_like, strongswan_conf.parse),  # strongswan.conf, swanctl.conf
    lints=strongswan_lint.check,
    sidecar=Sidecar(strongswan_pod.SECRET, strongswan_pod.prepare, strongswan_pod.add,
                    strongswan_pod.patched))

# By tunnel word; the first is the pod's VPN when nothing names one.
KINDS: dict[str, Kind] = {k.word: k for k in (OPENVPN, WIREGUARD, OPENCONNECT, STRONGSWAN)}


def default() -> Kind:
    return next(iter(KINDS.values()))


def of(word: str) -> Kind:
    return KINDS[word]


def words() -> tuple[str, ...]:
    return tuple(KINDS)


def listed(joiner: str = "or") -> str:
    """The words as a user reads them: `openvpn` or `wireguard`."""
    names = [f"`{w}`" for w in KINDS]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {joiner} {names[-1]}"


def formats() -> dict[str, ConfigFormat]:
    """Each kind's client config format, by its word (what `check` reads: sources.read)."""
    return {word: kind.config for word, kind in KINDS.items() if kind.config is not None}


def secret_of(kind: Kind) -> str:
    return kind.sidecar.default_secret if kind.sidecar is not None else ""


def prepare(spec: Doc, injected_before: bool, wanted: Kind | None) -> str | None:
    """Every kind's sidecar from an earlier injection out (the wanted one is added again); then
    why the pod cannot take the `wanted` kind's sidecar, or None."""
    why = None
    for kind in KINDS.values():
        if kind.sidecar is not None:
            why = kind.sidecar.prepare(spec, injected_before, kind is wanted) or why
    return why
