"""The pod's DNS settings as the injection merges them: never replaced, only the nameserver is
ours; the search list the plan gives first (the one `autopath` completes), then the pod's own;
ndots the pod's annotation, else the pod's own option, else the plan's.
Tests: tests/test_inject.py, tests/test_webhook_render.py, tests/test_wireguard_kube.py, tests/test_render.py.
"""

from __future__ import annotations

from typing import Any

from splitdns.kube.deploy.plan import Plan

Doc = dict[str, Any]
MAX_SEARCHES = 32  # the API server's limit (Kubernetes >= 1.28)
NDOTS_ANNOTATION = "splitdns.dev/ndots"


class Unmergeable(ValueError):
    """The pod's DNS settings cannot take ours; the message says why."""


def merge(spec: Doc, plan: Plan, wanted_ndots: object, ndots_was_ours: bool, warnings: list[str]) -> bool:
    """Set the pod's dnsPolicy and dnsConfig (plan.namespace: the pod's). `wanted_ndots`: the
    pod's ndots annotation (None: none); `ndots_was_ours`: an earlier injection set ndots. True
    when the ndots option is the plan's (not the pod's own)."""
    conf = spec.get("dnsConfig") or {}
    if not isinstance(conf, dict):
        raise Unmergeable("spec.dnsConfig is not a mapping")
    own_servers = [str(s) for s in _list(conf.get("nameservers"), "spec.dnsConfig.nameservers")
                   if str(s) != "127.0.0.1"]
    if own_servers:
        warnings.append(f"the pod's nameservers {', '.join(own_servers)} are replaced by 127.0.0.1; "
                        "route their zones in the settings instead")
    ours = plan.searches()
    searches = ours + [str(s) for s in _list(conf.get("searches"), "spec.dnsConfig.searches")
                       if str(s) not in ours]
    if len(searches) > MAX_SEARCHES:
        raise Unmergeable(f"{len(searches)} search domains with the cluster's: more than {MAX_SEARCHES}")
    options = [dict(o) for o in _list(conf.get("options"), "spec.dnsConfig.options") if isinstance(o, dict)]
    if ndots_was_ours:  # injected before: that ndots was ours
        options = [o for o in options if o.get("name") != "ndots"]
    if wanted_ndots is not None:
        text = str(wanted_ndots)
        if not (text.isdigit() and 0 <= int(text) <= 15):
            raise Unmergeable(f"annotation {NDOTS_ANNOTATION}: {text!r} is not a number from 0 to 15")
        options = [o for o in options if o.get("name") != "ndots"]
        options.append({"name": "ndots", "value": text})
    from_plan = wanted_ndots is None and not any(o.get("name") == "ndots" for o in options)
    if from_plan:
        options.append({"name": "ndots", "value": str(plan.ndots)})
    spec["dnsPolicy"] = "None"
    spec["dnsConfig"] = {"nameservers": ["127.0.0.1"], "searches": searches, "options": options}
    return from_plan


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise Unmergeable(f"{where} is not a list")
    return value
