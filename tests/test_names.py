"""The pod's names, decided without sockets: the Kubernetes DNS schema's reading (which names
could exist under the cluster domain), the leak guard, `filter_aaaa`'s NODATA, and the tries
`autopath` makes after a client's first one (with the path A and AAAA share)."""

from __future__ import annotations

import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest

from splitdns.codec import wire
from splitdns.core import search
from splitdns.core.names import NameGuard, labels, schema_allows, under
from splitdns.core.search import AutoPath

CLUSTER = wire.name_to_wire("cluster.local")
SEARCH = ("default.svc.cluster.local.", "svc.cluster.local.", "cluster.local.")

# (name under cluster.local, whether the schema or a pod record allows it) with why.
SCHEMA = [
    ("cluster.local", True),                                   # the apex
    ("dns-version.cluster.local", True),                       # the schema's TXT record
    ("x.dns-version.cluster.local", False),
    ("svc.cluster.local", True),                               # an empty non-terminal
    ("default.svc.cluster.local", True),                       # a namespace: an empty non-terminal
    ("kubernetes.default.svc.cluster.local", True),            # a Service
    ("api.stripe.com.svc.cluster.local", True),                # host api of Service stripe in ns com
    ("web-0.nginx.default.svc.cluster.local", True),           # a headless Service's endpoint
    ("_tcp.kubernetes.default.svc.cluster.local", True),       # on the way to an SRV record
    ("_https._tcp.kubernetes.default.svc.cluster.local", True),  # the SRV record
    ("api.stripe.com.default.svc.cluster.local", False),       # 3 labels under a ns, no underscores
    ("x.svc.acme.internal.default.svc.cluster.local", False),  # 4 labels under a namespace
    ("_a._b.c.d.e.svc.cluster.local", False),                  # too deep even for SRV
    ("under_score.svc.cluster.local", False),                  # not a namespace name
    ("10-0-0-1.default.pod.cluster.local", True),              # a pod record (CoreDNS's `pods`)
    ("default.pod.cluster.local", True),
    ("a.b.default.pod.cluster.local", False),
    ("api.stripe.com.cluster.local", False),                   # `com` is neither svc nor pod
    ("db.svc.acme.internal.cluster.local", False),
]


@pytest.mark.parametrize(("name", "allowed"), SCHEMA, ids=[n for n, _ in SCHEMA])
def test_the_schema_reading(name: str, allowed: bool) -> None:
    rest = under(wire.name_to_wire(name), CLUSTER)
    assert rest is not None
    assert schema_allows(rest) is allowed


def test_under_stops_at_label_boundaries() -> None:
    assert under(wire.name_to_wire("a.xcluster.local"), CLUSTER) is None
    assert under(wire.name_to_wire("a.b.cluster.local"), CLUSTER) == [b"a", b"b"]
    assert labels(wire.name_to_wire("a.b.")) == [b"a", b"b"]


def _q(name: str, qtype: str = "A") -> wire.Query:
    msg = dns.message.make_query(name, qtype)
    parsed = wire.parse_query(msg.to_wire())
    assert parsed is not None
    return parsed


def _rcode_and_soa(out: bytes) -> tuple[int, str]:
    msg = dns.message.from_wire(out)
    return msg.rcode(), msg.authority[0].name.to_text() if msg.authority else ""


def test_a_guard_answers_leaks_and_impossible_names_and_nothing_else() -> None:
    search_list = ("default.svc.cluster.local", "svc.cluster.local", "cluster.local", "ec2.internal")
    protected = {wire.name_to_wire("svc.acme.internal"), CLUSTER}
    cluster = NameGuard(CLUSTER, [CLUSTER], map(wire.name_to_wire, search_list), protected, own=[CLUSTER])
    root = NameGuard(b"\x00", [], map(wire.name_to_wire, search_list), protected, own=[b"\x00"])
    out = root.decide(_q("db.svc.acme.internal.ec2.internal"))
    assert out is not None and _rcode_and_soa(out) == (dns.rcode.NXDOMAIN, "ec2.internal.")
    out = root.decide(_q("web.default.svc.cluster.local.ec2.internal"))  # a cluster name, suffixed
    assert out is not None and _rcode_and_soa(out) == (dns.rcode.NXDOMAIN, "ec2.internal.")
    assert root.decide(_q("api.stripe.com.ec2.internal")) is None  # could exist there
    assert root.decide(_q("db.svc.acme.internal")) is None          # the real name
    out = cluster.decide(_q("x.svc.acme.internal.default.svc.cluster.local"))
    assert out is not None and _rcode_and_soa(out) == (dns.rcode.NXDOMAIN, "cluster.local.")
    assert cluster.decide(_q("default.svc.cluster.local")) is None  # RFC 8020: an empty non-terminal
    assert root.counts == {"leak": 2, "impossible": 0, "no_ipv6": 0}
    assert cluster.counts["leak"] == 1  # a private name under a cluster search domain


def test_filter_aaaa_answers_nodata_with_the_zone_soa() -> None:
    zone = wire.name_to_wire("svc.acme.internal")
    guard = NameGuard(zone, no_ipv6=True)
    out = guard.decide(_q("db.svc.acme.internal", "AAAA"))
    assert out is not None
    msg = dns.message.from_wire(out)
    assert msg.rcode() == dns.rcode.NOERROR and not msg.answer  # NODATA, never NXDOMAIN
    assert [r.rdtype for r in msg.authority] == [dns.rdatatype.SOA] and msg.authority[0].ttl == 5
    assert guard.decide(_q("db.svc.acme.internal", "A")) is None


def test_autopath_tries_the_rest_of_the_search_list_then_the_name() -> None:
    path = AutoPath(("cluster.local.",), SEARCH)
    walk = path.tries(_q("api.stripe.com.default.svc.cluster.local"), 0.0)
    assert walk is not None
    assert [wire.wire_to_text(t.name) for t in walk.tries] == [
        "api.stripe.com.svc.cluster.local.", "api.stripe.com.cluster.local.", "api.stripe.com."]
    assert path.tries(_q("default.svc.cluster.local"), 0.0) is None  # not a name with a suffix
    assert path.tries(_q("api.stripe.com.svc.cluster.local"), 0.0) is None  # a later try


def test_a_and_aaaa_take_the_path_the_first_one_took_for_a_while() -> None:
    path = AutoPath(("cluster.local.",), SEARCH)
    first = path.tries(_q("web.default.svc.cluster.local", "A"), 10.0)
    assert first is not None and first.start == 0
    path.ended(first, _q("web.default.svc.cluster.local", "A"), 2, 10.0)
    paired = path.tries(_q("web.default.svc.cluster.local", "AAAA"), 11.0)
    assert paired is not None and paired.start == 2
    later = path.tries(_q("web.default.svc.cluster.local", "AAAA"), 10.0 + search.PATH_SECONDS + 1)
    assert later is not None and later.start == 0
    assert (path.successes, path.saved) == (1, 2)


def test_the_answer_is_a_cname_to_the_name_that_answered() -> None:
    asked = _q("Api.Stripe.com.default.svc.cluster.local")
    found = dns.message.make_response(dns.message.make_query("api.stripe.com", "A"))
    found.answer.append(dns.rrset.from_text("api.stripe.com.", 42, "IN", "A", "192.0.2.80"))
    tried = _q("api.stripe.com")
    msg = dns.message.from_wire(search.answer(asked, found.to_wire(), tried))
    assert msg.question[0].name.to_text() == "Api.Stripe.com.default.svc.cluster.local."
    assert [(r.name.to_text(), dns.rdatatype.to_text(r.rdtype), r.ttl) for r in msg.answer] == [
        ("Api.Stripe.com.default.svc.cluster.local.", "CNAME", 42), ("api.stripe.com.", "A", 42)]


def test_the_schema_guard_stays_off_for_a_cluster_domain_the_search_list_does_not_name() -> None:
    from splitdns import config
    from splitdns.core.names import Pod, guard_for, schema_off

    block = config.loads("cluster.local {\n k8s_schema\n forward . 192.0.2.1\n}\n").blocks[0]
    pod = Pod(("default.svc.corp.k8s.", "svc.corp.k8s.", "corp.k8s."))
    why = schema_off(block, pod)
    assert why is not None and "corp.k8s." in why
    guard = guard_for(block, False, pod)
    assert guard is not None and guard.clusters == ()  # the leak guard stays, the schema goes
    assert schema_off(block, Pod(SEARCH)) is None
    root = config.loads(". {\n k8s_schema\n forward . 192.0.2.1\n}\n").blocks[0]
    assert "needs the cluster domain" in (schema_off(root, None) or "")
