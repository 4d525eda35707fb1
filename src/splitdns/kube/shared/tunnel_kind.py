"""What a tunnel kind is to kube/ (one row of kube/tunnels/'s table), and what a kind's modules
may read of a plan, of render's options and of `check`'s inputs: protocols, so that those modules
(openvpn_pod, wireguard_pod, ...) know nothing of the modules that use them (plan, manifests,
sources). Data only.
Tests: tests/test_tunnel_kinds.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from splitdns import directives
from splitdns.kube.shared.findings import Finding

Doc = dict[str, Any]
Steps = list[str | list[str]]  # what the user does before `kubectl apply`: a line, or lines


class RouteView(Protocol):
    """A zone of the plan (kube/deploy/plan.py's Route), as a kind reads it."""

    @property
    def zone(self) -> str: ...

    @property
    def vpn(self) -> str: ...

    @property
    def tunnel(self) -> bool: ...


class PlanView(Protocol):
    """The plan (kube/deploy/plan.py's Plan), as a kind reads it."""

    @property
    def routes(self) -> Sequence[RouteView]: ...

    @property
    def namespace(self) -> str: ...

    @property
    def management(self) -> str: ...

    @property
    def vpn(self) -> str: ...

    @property
    def unsafe_sysctls(self) -> bool:
        """The pod may set the unsafe sysctls its VPN kind asks for (a stock kubelet refuses them)."""


class OptionsView(Protocol):
    """render's options (kube/deploy/manifests.py's Options), as a kind reads them."""

    @property
    def name(self) -> str: ...

    @property
    def vpn_image(self) -> str: ...

    @property
    def sidecar(self) -> str: ...


class TunnelConfig(Protocol):
    """A kind's client config as `check` read it."""

    path: str

    def behind_tunnel(self, address: str) -> bool:
        """The address is a DNS server the tunnel gives, or routed into the tunnel."""

    def server_names(self) -> list[tuple[str, int]]:
        """The VPN server's names the client resolves before its tunnel exists, with their lines."""


@dataclass(frozen=True)
class ConfigFormat:
    """How `check` recognises and reads a kind's client config, and reports its server name."""

    looks_like: Callable[[str], bool]
    parse: Callable[[str, str], TunnelConfig]
    suffixes: tuple[str, ...] = ()      # file names that are this kind's config, whatever the text
    server_code: str = ""               # the finding when a server name resolves only through the tunnel
    server_word: str = ""               # how the config calls it (`remote`, `Endpoint`)


@dataclass(frozen=True)
class Sidecar:
    """The VPN container the injection adds itself (ours, not the user's), and what it takes."""

    default_secret: str
    prepare: Callable[[Doc, bool, bool], str | None]  # (spec, injected before, wanted) -> why not
    # spec, resolver, image, vpn image, secret, sidecar, and whether the pod may set the kind's
    # unsafe sysctls (`PlanView.unsafe_sysctls`)
    add: Callable[[Doc, Doc, str, str, str, str, bool], None]
    # render's patch and component, only where the pod may set unsafe sysctls: the containers to
    # adjust; the kustomize replacement that copies them ((deployment, containers key)); None: the
    # kind asks for none.
    patched: Callable[[list[Doc]], None]
    replacement: Callable[[str, str], Doc] | None = None


def _nothing_to_say(*_: object) -> str:
    return ""


def _no_advice(*_: object) -> str | None:
    return None


def _no_lints(*_: object) -> list[Finding]:
    return []


def _no_example(*_: object) -> tuple[list[Doc], list[Doc]]:
    """render's full example brings no VPN container: the injection adds the kind's `sidecar`."""
    return [], []


@dataclass(frozen=True)
class Kind:
    """One tunnel kind in kube. `learned_from` and `upstream_text` are what the ownership record
    says of its zones; `example` is render's full example's VPN container(s) and volumes (the
    user's; none when the injection adds a `sidecar` of ours); `advice` a warning about the pod's
    own VPN container; `config` the client config `check` reads (None: the kind has none)."""

    directive: directives.Directive[directives.TunnelSpec]
    learned_from: str
    upstream_text: str
    default_image: str
    corefile: Callable[[PlanView], list[str]]             # the tunnel directive's lines in a block
    apply_steps: Callable[[PlanView], Steps]              # render's deployment: before `kubectl apply`
    example: Callable[[PlanView, OptionsView], tuple[list[Doc], list[Doc]]] = _no_example
    # render's component: before `kubectl apply` (None: as apply_steps)
    component_steps: Callable[[PlanView, OptionsView], Steps] | None = None
    ownership_note: Callable[[PlanView], str] = _nothing_to_say  # after the upstream in the record
    advice: Callable[[Doc, PlanView], str | None] = _no_advice
    config: ConfigFormat | None = None
    lints: Callable[[Any], list[Finding]] = _no_lints     # of `check`'s inputs (sources.Inputs)
    sidecar: Sidecar | None = None

    @property
    def word(self) -> str:
        assert self.directive.tunnel is not None
        return self.directive.tunnel.word

    @property
    def display(self) -> str:
        assert self.directive.tunnel is not None
        return self.directive.tunnel.display


