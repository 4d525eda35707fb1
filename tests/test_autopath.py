"""`autopath`, `k8s_schema`, the search-suffix leak guard and `filter_aaaa`, served in process
over real UDP and TCP sockets on loopback, with fake upstreams (kube-dns, the catch-all, the
tunnel's DNS) that count what they are asked: the pod's search list comes from a resolv.conf
written by the test, as the kubelet writes it from the pod's dnsConfig."""

from __future__ import annotations

import asyncio
from pathlib import Path

import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest

from splitdns import config
from splitdns.errors import ConfigError
from tests.helpers import query, reply
from tests.support.inprocess import FakeUpstream, free_port, run, scrape, serving

SEARCH = "default.svc.cluster.local svc.cluster.local cluster.local us-east-1.compute.internal"
KUBE = {"web.default.svc.cluster.local.": "10.96.0.20"}
PUBLIC = {"api.stripe.com.": "192.0.2.80", "ip-10-0-0-7.us-east-1.compute.internal.": "10.0.0.7"}
PRIVATE = {"db.svc.acme.internal.": "10.8.0.5"}


def _server(records: dict[str, str], zone: str) -> FakeUpstream:
    soa = f"{zone} 30 IN SOA ns.{zone} hostmaster.{zone} 1 7200 1800 86400 30" if zone != "." else \
        ". 30 IN SOA a.root-servers.net. nstld.verisign-grs.com. 1 1800 900 604800 30"

    def handle(q: dns.message.Message) -> dns.message.Message:
        name = q.question[0].name.to_text().lower()
        rdtype = q.question[0].rdtype
        if name in records:
            if rdtype == dns.rdatatype.A:
                return reply(q, f"{name} 60 IN A {records[name]}")
            return reply(q, authority=(soa,))
        return reply(q, rcode=dns.rcode.NXDOMAIN, authority=(soa,))
    return FakeUpstream(handle)


def _corefile(resolv: Path, kube: FakeUpstream, public: FakeUpstream, private: FakeUpstream,
              root: str = "") -> str:
    return (f"cluster.local {{\n autopath {resolv}\n k8s_schema\n cache 30\n forward . {kube.target}\n}}\n"
            f"svc.acme.internal {{\n filter_aaaa\n cache 30\n forward . {private.target}\n}}\n"
            f". {{\n cache 30\n forward . {public.target}\n{root}}}\n")


def _resolv(tmp_path: Path, search: str = SEARCH) -> Path:
    path = tmp_path / "resolv.conf"
    path.write_text(f"nameserver 127.0.0.1\nsearch {search}\noptions ndots:5\n")
    return path


Asked = dict[str, list[str]]


def _lookup(tmp_path: Path, asks: list[tuple[str, str]]) -> tuple[list[dns.message.Message | None], Asked]:
    got, asked, _ = _lookup_counted(tmp_path, asks, metrics=False)
    return got, asked


def _lookup_counted(tmp_path: Path, asks: list[tuple[str, str]], metrics: bool = True
                    ) -> tuple[list[dns.message.Message | None], Asked, dict[str, float]]:
    mport = free_port("127.0.0.1")

    async def scenario() -> tuple[list[dns.message.Message | None], Asked, dict[str, float]]:
        kube, public = _server(KUBE, "cluster.local."), _server(PUBLIC, ".")
        kube.addr, public.addr = "127.0.0.21", "127.0.0.22"
        private = _server(PRIVATE, "svc.acme.internal.")
        private.addr = "127.0.0.23"
        root = f" prometheus 127.0.0.1:{mport}\n" if metrics else ""
        async with kube, public, private, \
                serving(_corefile(_resolv(tmp_path), kube, public, private, root), runtime=metrics) as srv:
            got = [await srv.ask(query(name, rdtype, edns=0)) for name, rdtype in asks]
            scraped = await scrape(mport) if metrics else {}
            return got, {"kube": kube.names(), "public": public.names(), "private": private.names()}, scraped
    return run(scenario)


def _records(msg: dns.message.Message | None) -> list[str]:
    assert msg is not None
    return [f"{r.name} {dns.rdatatype.to_text(r.rdtype)} {rd}" for r in msg.answer for rd in r]


def test_a_short_name_found_in_the_first_domain_costs_one_query(tmp_path: Path) -> None:
    (got,), asked = _lookup(tmp_path, [("web.default.svc.cluster.local", "A")])
    assert _records(got) == ["web.default.svc.cluster.local. A 10.96.0.20"]
    assert asked == {"kube": ["web.default.svc.cluster.local."], "public": [], "private": []}


def test_a_public_name_is_answered_on_the_first_try_with_a_cname(tmp_path: Path) -> None:
    """The client's first try, api.stripe.com.default.svc.cluster.local, gets the answer of
    api.stripe.com under a CNAME; only the one try the schema allows reaches kube-dns."""
    (got,), asked = _lookup(tmp_path, [("api.stripe.com.default.svc.cluster.local", "A")])
    assert got is not None and got.rcode() == dns.rcode.NOERROR
    assert _records(got) == ["api.stripe.com.default.svc.cluster.local. CNAME api.stripe.com.",
                             "api.stripe.com. A 192.0.2.80"]
    assert got.question[0].name.to_text() == "api.stripe.com.default.svc.cluster.local."
    assert asked["kube"] == ["api.stripe.com.svc.cluster.local."]  # `com` could be a namespace
    assert asked["public"] == ["api.stripe.com.us-east-1.compute.internal.", "api.stripe.com."]


def test_a_private_name_never_leaves_its_tunnel_with_a_suffix(tmp_path: Path) -> None:
    (got,), asked = _lookup(tmp_path, [("db.svc.acme.internal.default.svc.cluster.local", "A")])
    assert _records(got) == ["db.svc.acme.internal.default.svc.cluster.local. CNAME db.svc.acme.internal.",
                             "db.svc.acme.internal. A 10.8.0.5"]
    assert asked == {"kube": [], "public": [], "private": ["db.svc.acme.internal."]}


def test_every_try_of_a_walk_the_client_makes_itself_is_answered_here(tmp_path: Path) -> None:
    """Without autopath's help (a client that walks on), the suffixed private names and the
    names the schema rules out are NXDOMAIN here with an SOA, never forwarded."""
    names = ["db.svc.acme.internal.svc.cluster.local", "db.svc.acme.internal.cluster.local",
             "db.svc.acme.internal.us-east-1.compute.internal", "x.y.z.w.v.svc.cluster.local"]
    got, asked = _lookup(tmp_path, [(n, "A") for n in names])
    for msg in got:
        assert msg is not None and msg.rcode() == dns.rcode.NXDOMAIN
        assert [r.rdtype for r in msg.authority] == [dns.rdatatype.SOA]
        assert msg.authority[0].ttl == 5
    assert got[0].authority[0].name.to_text() == "cluster.local."
    assert got[2].authority[0].name.to_text() == "us-east-1.compute.internal."
    assert asked == {"kube": [], "public": [], "private": []}


def test_names_that_could_exist_are_asked(tmp_path: Path) -> None:
    """RFC 8020: an empty non-terminal and names the schema allows go to kube-dns."""
    names = ["default.svc.cluster.local", "api.stripe.com.svc.cluster.local",
             "_https._tcp.kubernetes.default.svc.cluster.local", "10-0-0-1.default.pod.cluster.local",
             "dns-version.cluster.local"]
    _, asked = _lookup(tmp_path, [(n, "A") for n in names])
    assert asked["kube"] == [n + "." for n in names]


def test_a_and_aaaa_end_on_the_same_name(tmp_path: Path) -> None:
    got, asked = _lookup(tmp_path, [("ip-10-0-0-7.default.svc.cluster.local", "A"),
                                    ("ip-10-0-0-7.default.svc.cluster.local", "AAAA")])
    assert _records(got[0])[0] == ("ip-10-0-0-7.default.svc.cluster.local. CNAME "
                                   "ip-10-0-0-7.us-east-1.compute.internal.")
    assert got[1] is not None and got[1].rcode() == dns.rcode.NOERROR and not got[1].answer
    assert asked["public"] == ["ip-10-0-0-7.us-east-1.compute.internal."] * 2


def test_every_try_nxdomain_gives_the_first_reply(tmp_path: Path) -> None:
    (got,), _ = _lookup(tmp_path, [("nothere.default.svc.cluster.local", "A")])
    assert got is not None and got.rcode() == dns.rcode.NXDOMAIN
    assert got.question[0].name.to_text() == "nothere.default.svc.cluster.local."


def test_an_autopath_answer_is_a_cache_hit_the_second_time(tmp_path: Path) -> None:
    got, asked = _lookup(tmp_path, [("api.stripe.com.default.svc.cluster.local", "A")] * 2)
    assert _records(got[0]) == _records(got[1])
    assert asked["public"].count("api.stripe.com.") == 1


def test_filter_aaaa_answers_nodata_in_its_zone_only(tmp_path: Path) -> None:
    got, asked = _lookup(tmp_path, [("db.svc.acme.internal", "AAAA"), ("api.stripe.com", "AAAA")])
    assert got[0] is not None and got[0].rcode() == dns.rcode.NOERROR and not got[0].answer
    assert got[0].authority[0].name.to_text() == "svc.acme.internal."
    assert asked["private"] == [] and asked["public"] == ["api.stripe.com."]


def test_schema_guard_stays_off_beside_template(tmp_path: Path) -> None:
    resolv = _resolv(tmp_path)
    conf = config.loads(f"cluster.local {{\n autopath {resolv}\n k8s_schema\n"
                        " template IN A cluster.local {\n  answer \"{{ .Name }} 60 IN A 192.0.2.1\"\n"
                        "  fallthrough\n }\n forward . 127.0.0.21\n}\n")
    from splitdns.core.names import pod_of, schema_off
    why = schema_off(conf.blocks[0], pod_of(conf.blocks))
    assert why is not None and "template" in why


@pytest.mark.parametrize(("text", "error"), [
    ("autopath @kubernetes", "own pod's search list"),
    ("autopath /nonexistent/resolv.conf", "cannot read /nonexistent/resolv.conf"),
    ("autopath", "wrong number of arguments"),
])
def test_autopath_errors_name_the_line(text: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error) as info:
        config.loads(f"cluster.local {{\n {text}\n forward . 127.0.0.21\n}}\n")
    assert "Corefile:2" in str(info.value)


def test_a_resolv_conf_without_search_completes_nothing(tmp_path: Path) -> None:
    """As CoreDNS: no search list, no walk (a pod's resolver must start whatever the file says)."""
    path = tmp_path / "resolv.conf"
    path.write_text("nameserver 127.0.0.1\n")
    spec = config.loads(f"cluster.local {{\n autopath {path}\n forward . 127.0.0.21\n}}\n").blocks[0]
    from splitdns import directives
    autopath = spec[directives.AUTOPATH]
    assert autopath is not None and autopath.search == ()


def test_what_the_search_list_saved_is_counted_per_zone(tmp_path: Path) -> None:
    _, _, seen = _lookup_counted(tmp_path, [
        ("api.stripe.com.default.svc.cluster.local", "A"),          # found as the name itself: 4 tries saved
        ("db.svc.acme.internal.us-east-1.compute.internal", "A"),   # a leak, answered here
        ("a.b.c.d.e.svc.cluster.local", "A"),                       # ruled out by the schema
        ("db.svc.acme.internal", "AAAA"),                           # filtered
    ])
    assert seen['splitdns_autopath_success_total{zone="cluster.local."}'] == 1
    assert seen['splitdns_autopath_queries_saved_total{zone="cluster.local."}'] == 4
    assert seen['splitdns_search_leaks_prevented_total{zone="."}'] == 1
    assert seen['splitdns_k8s_schema_answers_total{zone="cluster.local."}'] >= 2
    assert seen['splitdns_filtered_aaaa_total{zone="svc.acme.internal."}'] == 1


def test_check_says_why_k8s_schema_stays_off(tmp_path: Path) -> None:
    from splitdns.kube.check import checker

    path = tmp_path / "Corefile"
    path.write_text("cluster.local {\n k8s_schema\n hosts {\n  10.0.0.1 a.cluster.local\n  fallthrough\n }\n"
                    " forward . 10.96.0.10\n}\n. {\n forward . 10.96.0.10\n}\n")
    found = [(f.line, f.code) for f in checker.check([str(path)], checker.Options())]
    assert found == [(1, "SD115")]


def test_a_reload_reads_the_search_list_again(tmp_path: Path) -> None:
    """The resolv.conf is read at each load: after a reload with another search list, the walk
    follows the new one (and the block's cache, which holds walks of the old one, starts afresh)."""
    async def scenario() -> tuple[list[str], list[str]]:
        kube, public = _server(KUBE, "cluster.local."), _server(PUBLIC, ".")
        kube.addr, public.addr = "127.0.0.21", "127.0.0.22"
        private = _server(PRIVATE, "svc.acme.internal.")
        private.addr = "127.0.0.23"
        resolv = _resolv(tmp_path, "default.svc.cluster.local svc.cluster.local cluster.local")
        async with kube, public, private:
            text = _corefile(resolv, kube, public, private)
            return await reloaded(text, resolv, public)

    async def reloaded(text: str, resolv: Path, public: FakeUpstream) -> tuple[list[str], list[str]]:
        async with serving(text) as srv:
            await srv.ask(query("ip-10-0-0-7.default.svc.cluster.local", edns=0))
            first = list(public.names())
            resolv.write_text(f"search {SEARCH}\n")
            await srv.server.swap(config.loads(text, default_port=srv.port))
            got = await srv.ask(query("ip-10-0-0-7.default.svc.cluster.local", edns=0))
            assert got is not None
            assert _records(got)[0].endswith("CNAME ip-10-0-0-7.us-east-1.compute.internal.")
            return first, public.names()[len(first):]
    before, after = run(scenario)
    assert before == ["ip-10-0-0-7."]
    assert after == ["ip-10-0-0-7.us-east-1.compute.internal."]


def test_a_prefetch_never_asks_upstream_for_what_is_made_here(tmp_path: Path) -> None:
    """`prefetch` refreshes popular entries near expiry from upstream; an autopath walk's answer
    and a guard's are made here: refreshing them would send a name the schema rules out to
    kube-dns and put the first try's NXDOMAIN in place of the walk's answer."""
    from tests.support.inprocess import FakeClock

    async def scenario() -> tuple[list[dns.message.Message | None], list[str]]:
        kube, public = _server(KUBE, "cluster.local."), _server(PUBLIC, ".")
        kube.addr, public.addr = "127.0.0.21", "127.0.0.22"
        private = _server(PRIVATE, "svc.acme.internal.")
        private.addr = "127.0.0.23"
        clock = FakeClock()
        async with kube, public, private:
            prefetching = "cache 30 {\n  prefetch 1 1m 90%\n }\n forward . 127.0.0.21"
            text = _corefile(_resolv(tmp_path), kube, public, private).replace(
                "cache 30\n forward . 127.0.0.21", prefetching)
            async with serving(text, clock=clock) as srv:
                got = []
                for name in ("api.stripe.com.default.svc.cluster.local", "a.b.c.d.e.svc.cluster.local"):
                    for _ in range(3):
                        got.append(await srv.ask(query(name, edns=0)))
                        clock.advance(2)
                await asyncio.sleep(0.2)  # a prefetch would be under way now
                return got, kube.names()
    got, asked = run(scenario)
    assert "api.stripe.com.default.svc.cluster.local." not in asked
    assert "a.b.c.d.e.svc.cluster.local." not in asked
    last = got[2]
    assert last is not None and last.answer[0].rdtype == dns.rdatatype.CNAME


def test_explain_says_a_name_the_schema_rules_out_is_answered_here(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from splitdns import cli

    path = tmp_path / "Corefile"
    path.write_text("cluster.local {\n k8s_schema\n forward . 10.96.0.10\n}\n")
    assert cli.main(["explain", "x.svc.acme.internal.default.svc.cluster.local", "-conf", str(path)]) == 0
    assert "answered here: NXDOMAIN" in capsys.readouterr().out
    assert cli.main(["explain", "api.stripe.com.svc.cluster.local", "-conf", str(path)]) == 0
    assert "answered here" not in capsys.readouterr().out  # it could exist: kube-dns is asked


def test_render_writes_the_names_lines_and_its_flags_take_them_out() -> None:
    from splitdns.commands import render

    def corefile(**flags: bool) -> str:
        req = render.Request(zones=["svc.acme.internal=openvpn"], cluster_dns="10.96.0.10", **flags)
        return next(iter(render.files(req).values()))

    default = corefile()
    cluster = default[default.index("cluster.local:53 {"):]
    assert "autopath /etc/resolv.conf\n" in cluster.split("}")[0] and "k8s_schema" in cluster.split("}")[0]
    assert "filter_aaaa" not in default
    assert "autopath" not in corefile(no_autopath=True) and "k8s_schema" not in corefile(no_autopath=True)
    tunnel = corefile(filter_aaaa=True)
    assert "filter_aaaa" in tunnel[tunnel.index("svc.acme.internal:53 {"):tunnel.index("cluster.local:53 {")]
    # What render writes loads (the pod's resolv.conf is read at run time; here it is left unread).
    body = default[default.index("Corefile: |") + len("Corefile: |"):default.index("---")]
    text = "\n".join(line[4:] for line in body.splitlines())
    config.loads(text, read_files=False)


def test_filter_aaaa_strips_ipv6_hints_in_its_zone_only() -> None:
    record = '1 . alpn="h2" ipv4hint=192.0.2.1 ipv6hint=2001:db8::1'

    def handle(q: dns.message.Message) -> dns.message.Message:
        name = q.question[0].name.to_text()
        out = reply(q, f"{name} 60 IN HTTPS {record}")
        out.additional.append(dns.rrset.from_text(name, 60, "IN", "AAAA", "2001:db8::1"))
        return out

    async def scenario() -> tuple[dns.message.Message | None, dns.message.Message | None]:
        async with FakeUpstream(handle) as up:
            text = (f"svc.acme.internal {{\n filter_aaaa\n cache 30\n forward . {up.target}\n}}\n"
                    f". {{\n forward . {up.target}\n}}\n")
            async with serving(text) as srv:
                return (await srv.ask(query("web.svc.acme.internal", "HTTPS", edns=0)),
                        await srv.ask(query("web.example.net", "HTTPS", edns=0)))
    tunnel, public = run(scenario)
    assert tunnel is not None and public is not None
    assert [str(rd) for rd in tunnel.answer[0]] == ['1 . alpn="h2" ipv4hint="192.0.2.1"']
    assert not any(r.rdtype == dns.rdatatype.AAAA for r in tunnel.additional)
    assert "ipv6hint" in str(public.answer[0][0])
    assert any(r.rdtype == dns.rdatatype.AAAA for r in public.additional)
