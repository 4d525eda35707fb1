"""What the sidecars that hand DNS over in a shared volume (OpenConnect's, strongSwan's) do alike
to a pod spec: tell theirs from the pod's own, take out an earlier injection's, see a clash of
names, and place themselves after the resolver. Pure data; each kind's module names its parts.
Tests: tests/test_vpn_kinds_kube.py, tests/test_vpn_checks.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from splitdns.kube.shared.tunnel_kind import Doc


@dataclass(frozen=True)
class Parts:
    """A kind's names: its containers (helpers first, the VPN container last), the run volume it
    shares with the resolver (mounted at `run_dir`), and every volume it adds."""

    containers: tuple[str, ...]
    run_volume: str
    run_dir: str
    volumes: tuple[str, ...]

    def is_ours(self, container: Doc) -> bool:
        """A helper by name; the VPN container by name and the run volume it mounts."""
        name = container.get("name")
        if name in self.containers[:-1]:
            return True
        mounts = container.get("volumeMounts")
        return name == self.containers[-1] and isinstance(mounts, list) and any(
            isinstance(m, dict) and m.get("name") == self.run_volume for m in mounts)

    def remove(self, spec: Doc) -> None:
        """Take out what an earlier injection added (re-injection rebuilds it, or drops it)."""
        for key in ("initContainers", "containers"):
            items = spec.get(key)
            if not isinstance(items, list):
                continue
            spec[key] = [c for c in items if not (isinstance(c, dict) and self.is_ours(c))]
            for c in spec[key]:
                mounts = c.get("volumeMounts") if isinstance(c, dict) else None
                if isinstance(mounts, list):
                    kept = [m for m in mounts
                            if not (isinstance(m, dict) and m.get("name") == self.run_volume)]
                    c["volumeMounts"] = kept
                    if not kept:
                        del c["volumeMounts"]
            if not spec[key] and key == "initContainers":
                del spec[key]
        vols = spec.get("volumes")
        if isinstance(vols, list):
            spec["volumes"] = [v for v in vols if not (isinstance(v, dict) and v.get("name") in self.volumes)]
            if not spec["volumes"]:
                del spec["volumes"]

    def conflict(self, spec: Doc) -> str | None:
        """Why the pod cannot take the sidecar (a container or volume of that name of its own)."""
        for key in ("initContainers", "containers"):
            for c in spec.get(key) or []:
                if isinstance(c, dict) and c.get("name") in self.containers and not self.is_ours(c):
                    return f"{key} already has a container named {c.get('name')} that is not ours"
        for v in spec.get("volumes") or []:
            if isinstance(v, dict) and v.get("name") in self.volumes:
                return f"volumes already has one named {v.get('name')}"
        return None

    def prepare(self, spec: Doc, injected_before: bool, wanted: bool) -> str | None:
        """Ours from an earlier injection out; then why the pod cannot take the sidecar, if wanted."""
        if injected_before:
            self.remove(spec)
        return self.conflict(spec) if wanted else None

    def place(self, spec: Doc, resolver: Doc, helpers: Sequence[Doc], vpn: Doc, volumes: Sequence[Doc],
              sidecar: str) -> None:
        """After the resolver (already in place): the helpers (init containers), the VPN container
        (a native sidecar, or a container beside the resolver), the volumes; the resolver reads
        the run volume."""
        resolver.setdefault("volumeMounts", []).append(
            {"name": self.run_volume, "mountPath": self.run_dir, "readOnly": True})
        init = spec.setdefault("initContainers", [])
        at = next((i + 1 for i, c in enumerate(init) if c is resolver), 0)
        if sidecar == "native":
            init[at:at] = [*helpers, vpn]
        else:
            init[0:0] = list(helpers)
            containers = spec.setdefault("containers", [])
            at = next((i + 1 for i, c in enumerate(containers) if c is resolver), 0)
            containers.insert(at, vpn)
        spec["volumes"] = [*(spec.get("volumes") or []), *volumes]
