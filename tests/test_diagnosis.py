"""Verdicts from observations: each rule of the verification procedure, and their order."""

from __future__ import annotations

import pytest

from splitdns.commands.verify import diagnosis as d

POD = "nameserver 127.0.0.1\noptions ndots:5\n"
KUBELET = "search default.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.100.0.10\n"
GOOD = (d.NameCheck("kubernetes.default.svc.cluster.local", "NOERROR", ("10.96.0.1",), zone="."),
        d.NameCheck("db.svc.acme.internal", "NOERROR", ("192.168.240.10",), zone="svc.acme.internal."))


def obs(phase: str = "local", resolv: str = POD, answers: bool = True,
        names: tuple[d.NameCheck, ...] = GOOD, tcp: tuple[d.TcpCheck, ...] = ()) -> d.Observation:
    return d.Observation(phase, resolv, answers, names, tcp)


def test_all_good() -> None:
    verdict = d.diagnose([obs(tcp=(d.TcpCheck("db.svc.acme.internal:5432", "192.168.240.10", "connected"),))])
    assert (verdict.code, verdict.exit_code) == (d.OK, 0)


def test_resolver_not_answering_comes_first() -> None:
    verdict = d.diagnose([obs(answers=False, resolv=KUBELET)])
    assert verdict.code == d.RESOLVER_DOWN and verdict.exit_code == 2


def test_a_pod_that_does_not_use_the_resolver() -> None:
    verdict = d.diagnose([obs(resolv=KUBELET)])
    assert verdict.code == d.POD_SPEC and "10.100.0.10" in verdict.reason


def test_worked_before_replacement_not_after_blames_the_pod_spec() -> None:
    after = obs("after replacement", resolv=KUBELET,
                names=(GOOD[0], d.NameCheck("db.svc.acme.internal", "NXDOMAIN", (), zone=".")))
    verdict = d.diagnose([obs("before replacement"), after])
    assert verdict.code == d.POD_SPEC and verdict.title == "The Corefile is right but the pod spec is not"
    assert "before replacement" in verdict.reason and "ClusterFirst" in verdict.reason


def test_tunnel_down_is_said_by_the_resolver() -> None:
    names = (GOOD[0], d.NameCheck("db.svc.acme.internal", "SERVFAIL", (),
                                  "the tunnel is down (RECONNECTING: ping-restart)", "svc.acme.internal."))
    verdict = d.diagnose([obs(names=names)])
    assert verdict.code == d.TUNNEL_DOWN and "ping-restart" in verdict.reason


@pytest.mark.parametrize(("direct", "blame"), [
    ("NOERROR", "look at the resolver"), ("NXDOMAIN", "the DNS server answers, but not with that name")])
def test_naming_problem_says_whether_the_upstream_answers_directly(direct: str, blame: str) -> None:
    names = (GOOD[0], d.NameCheck("db.svc.acme.internal", "SERVFAIL", (), "", "svc.acme.internal.",
                                  ("192.168.240.1:53",), direct))
    verdict = d.diagnose([obs(names=names)])
    assert verdict.code == d.NAMING and verdict.title == "Naming problem in zone svc.acme.internal."
    assert "192.168.240.1:53" in verdict.reason and blame in verdict.reason


@pytest.mark.parametrize("rcode", ["SERVFAIL", None])
def test_a_zone_server_that_cannot_be_reached_is_routing_not_naming(rcode: str | None) -> None:
    """Nothing cached, the resolver gets nothing from the zone's server, and neither does a direct
    query: the server does not answer and cannot be reached, which no name fixes."""
    names = (GOOD[0], d.NameCheck("db.svc.acme.internal", rcode, (), "", "svc.acme.internal.",
                                  ("192.168.240.1:53",), d.NO_ANSWER))
    verdict = d.diagnose([obs(names=names)])
    assert (verdict.code, verdict.exit_code) == (d.ROUTING, 5)
    assert verdict.title == ("The DNS server of zone svc.acme.internal. does not answer and cannot be "
                             "reached: this is routing")
    assert "192.168.240.1:53 does not answer" in verdict.reason
    assert any("MASQUERADE" in h for h in verdict.hints)
    assert not any(h.startswith("Names resolve") for h in verdict.hints)


def test_a_zone_server_host_that_refuses_is_a_service_down() -> None:
    names = (GOOD[0], d.NameCheck("db.svc.acme.internal", "SERVFAIL", (), "", "svc.acme.internal.",
                                  ("192.168.240.1:53",), d.REFUSED))
    verdict = d.diagnose([obs(names=names)])
    assert verdict.code == d.SERVICE_DOWN and "nothing listens" in verdict.title


def test_the_resolver_down_verdict_names_the_port_asked() -> None:
    verdict = d.diagnose([d.Observation("local", POD, False, GOOD, (), "127.0.0.1", 5356)])
    assert "127.0.0.1:5356" in verdict.title and "127.0.0.1:5356" in verdict.reason
    assert ":53 " not in verdict.reason and not verdict.reason.endswith(":53")


def test_names_resolve_but_tcp_times_out_is_routing() -> None:
    verdict = d.diagnose([obs(tcp=(d.TcpCheck("db.svc.acme.internal:5432", "192.168.240.10", "timeout"),))])
    assert verdict.code == d.ROUTING and verdict.exit_code == 5
    assert any("MASQUERADE" in h for h in verdict.hints) and any("hostNetwork" in h for h in verdict.hints)


def test_refused_is_not_routing() -> None:
    verdict = d.diagnose([obs(tcp=(d.TcpCheck("db.svc.acme.internal:5432", "192.168.240.10", "refused"),))])
    assert verdict.code == d.SERVICE_DOWN


def test_exit_codes_are_distinct() -> None:
    assert len(set(d.EXIT_CODES.values())) == len(d.EXIT_CODES)
