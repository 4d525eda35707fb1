"""End to end: real C libraries walk the pod's search list through splitdns, and the stand-in
upstreams (scripted servers in the pod's namespace, each logging what it is asked) count what
each lookup cost. The pod's resolv.conf and the Corefile are what `splitdns render` writes
(`autopath /etc/resolv.conf` and `k8s_schema` in the cluster block, `filter_aaaa` in the
tunnel zone); the tunnel's state comes from `splitdns openvpn-hook` (no OpenVPN runs here:
test_openvpn_lab.py has the real tunnel). Clients: glibc's `getent ahosts`, Python's
getaddrinfo, and musl's getaddrinfo in a C client built with musl-gcc, each on names of
its own so that no client is answered from another's cache.

With ndots:5 and the search list `default.svc.cluster.local svc.cluster.local cluster.local`,
without autopath each of these lookups is up to 8 queries from the client and as many
upstream (bench/search_walk.py measures both). With it, the client sends its first try only
(A and AAAA), and the stand-ins are asked only the names that could exist: 2 queries for the
short name, the cluster FQDN and the private name (1: its AAAA is answered here), 0 for the
private name with the tunnel down; 4 where a try before the answer could exist too (the
public name's `api-X.stripe.example.svc.cluster.local`, `example` could be a namespace; the
dotted name's `job-X.default.default.svc.cluster.local`), which the schema forbids denying.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.lab.fixtures import require_lab
from tests.lab.search_walk import CLIENTS, walk_lab
from tests.support.prerequisites import skip_or_fail

pytestmark = pytest.mark.netns


def names(client: str) -> dict[str, dict[str, str]]:
    return {"kube-dns": {f"web-{client}.default.svc.cluster.local.": "10.96.0.20",
                         f"api-{client}.default.svc.cluster.local.": "10.96.0.21",
                         f"job-{client}.default.svc.cluster.local.": "10.96.0.22"},
            "catch-all": {f"api-{client}.stripe.example.": "192.0.2.80"},
            "tunnel": {f"db-{client}.svc.acme.internal.": "10.8.0.5"}}


def all_names() -> dict[str, dict[str, str]]:
    merged: dict[str, dict[str, str]] = {}
    for client in CLIENTS:
        for role, found in names(client).items():
            merged.setdefault(role, {}).update(found)
    return merged


def cost(before: dict[str, list[str]], after: dict[str, list[str]], mark: str) -> dict[str, list[str]]:
    """The queries of one lookup: those naming it (the readiness probes are not its)."""
    return {role: [q for q in after[role][len(before[role]):] if mark in q] for role in after}


def test_every_lookup_costs_what_its_name_needs_and_no_private_name_leaves(tmp_path: Path) -> None:
    require_lab()
    if shutil.which("musl-gcc") is None:
        skip_or_fail("musl-gcc is missing (musl-tools, in the Makefile's DEBIAN_PACKAGES)")
    with walk_lab(tmp_path, all_names()) as lab:
        for client in CLIENTS:
            def look(name: str, mark: str,
                     client: str = client) -> tuple[int, list[str], dict[str, list[str]]]:
                before = lab.asked()
                code, out = lab.lookup(client, name)
                return code, out, cost(before, lab.asked(), mark)

            # A short cluster name: the first try answers, two queries at kube-dns.
            code, out, seen = look(f"web-{client}", f"web-{client}.")
            assert (code, out) == (0, ["10.96.0.20", "2001:db8::20"]), client
            assert sorted(seen["kube-dns"]) == [f"web-{client}.default.svc.cluster.local. A",
                                                f"web-{client}.default.svc.cluster.local. AAAA"]
            assert seen["catch-all"] == seen["tunnel"] == []

            # A cluster FQDN (4 dots < ndots 5: searched first): every suffixed try is answered
            # here, the name itself goes to kube-dns.
            fqdn = f"api-{client}.default.svc.cluster.local"
            code, out, seen = look(fqdn, f"api-{client}.")
            assert (code, out) == (0, ["10.96.0.21", "2001:db8::21"]), client
            assert sorted(seen["kube-dns"]) == [f"{fqdn}. A", f"{fqdn}. AAAA"], client
            assert seen["catch-all"] == seen["tunnel"] == []

            # A public name: the schema allows one suffixed try (`example` could be a namespace).
            public = f"api-{client}.stripe.example"
            code, out, seen = look(public, f"api-{client}.stripe")
            assert (code, out) == (0, ["192.0.2.80", "2001:db8::80"]), client
            suffixed = {f"{public}.svc.cluster.local. A", f"{public}.svc.cluster.local. AAAA"}
            # One of the pair at least: a type whose walk begins after the other's ended starts
            # where it ended (one path for both).
            assert seen["kube-dns"] and set(seen["kube-dns"]) <= suffixed, (client, seen)
            assert sorted(seen["catch-all"]) == [f"{public}. A", f"{public}. AAAA"], client

            # A dotted name that exists only through the second search domain: the first try
            # could exist (host `default` of Service job-X?), so kube-dns is asked it, then the
            # name that answers; the client still sends its first try only.
            code, out, seen = look(f"job-{client}.default", f"job-{client}.")
            assert (code, out) == (0, ["10.96.0.22", "2001:db8::22"]), client
            tries = [f"job-{client}.default.{s}. {t}" for s in ("default.svc.cluster.local",
                                                                 "svc.cluster.local") for t in ("A", "AAAA")]
            # The first try's AAAA is not asked when the A's walk ended before the AAAA's began:
            # the AAAA then starts where the A ended (one path for both).
            assert set(tries[2:]) <= set(seen["kube-dns"]) <= set(tries), (client, seen)
            assert len(seen["kube-dns"]) == len(set(seen["kube-dns"])), (client, seen)
            assert seen["catch-all"] == seen["tunnel"] == []

            # A private name: only the tunnel's DNS hears of it, and only its A (filter_aaaa).
            private = f"db-{client}.svc.acme.internal"
            code, out, seen = look(private, f"db-{client}.")
            assert (code, out) == (0, ["10.8.0.5"]), client
            assert seen == {"kube-dns": [], "catch-all": [], "tunnel": [f"{private}. A"]}, client

        # The tunnel down: a temporary failure, at once, and still nobody else hears of it (a
        # name not asked before: what the zone's cache holds is still answered).
        lab.tunnel(up=False)
        for client in CLIENTS:
            before = lab.asked()
            code, out = lab.lookup(client, f"db-{client}.down.svc.acme.internal")
            assert code != 0, (client, out)
            if client != "getent":  # getent says only "not found" (exit 2)
                assert out == ["error: Temporary failure in name resolution"] or \
                    out[0].startswith("error: Try again"), (client, out)
            assert cost(before, lab.asked(), f"db-{client}.down") == \
                {"kube-dns": [], "catch-all": [], "tunnel": []}, client
