"""Real Corefiles people wrote (tests/data/corefiles, provenance in its SOURCES): each one loads as
an in-pod Corefile, or is refused only for causes this table names, each outside an in-pod
resolver's scope (the README's list) or awaiting a plugin still to come.

"Refused only for" is checked both ways: the load error names one of the file's causes, and the
same file with every named cause taken out loads. A cause marked AWAITS is a plugin or upstream
kind being implemented; once the resolver supports it, this test keeps it in the file and then
requires the file to load with it, so the table need not change for the file to be proven.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from splitdns import config, corefile, directives
from splitdns.directives import forward
from splitdns.errors import ConfigError
from splitdns.kube.check import checker

CORPUS = Path(__file__).parent / "data" / "corefiles"

# Plugins outside an in-pod resolver's scope, and why (the README repeats this list).
OUT_OF_SCOPE = {
    "kubernetes": "the cluster's own records come from the API server: the cluster DNS's job",
    "file": "authoritative zones from zone files: an authoritative server's job",
    "auto": "authoritative zones from a directory of zone files",
    "etcd": "records from an etcd backend: an authoritative backend",
    "transfer": "zone transfers: authoritative",
    "view": "per-client answers: a pod's resolver has one client, the pod",
    "acl": "per-client policy: a pod's resolver has one client, the pod",
    "any": "RFC 8482 answers to ANY: an authoritative server's concern",
    "chaos": "CH-class version/authors answers: a server's identity, not a pod's lookups",
    "whoami": "a diagnostic answering the client's own address",
    "debug": "CoreDNS's panic-recovery switch for debugging",
    "nsid": "a server identity option (RFC 5001)",
    "minimal": "trims authority/additional sections of authoritative answers",
    "local": "answers localhost names itself; a pod's /etc/hosts already does",
    "metadata": "only feeds other plugins' metadata",
}
# Plugins of custom CoreDNS builds (or removed from CoreDNS): no standard CoreDNS runs them either.
EXTERNAL = {
    "ads": "external ad-blocking plugin", "dnsredir": "external redirect plugin",
    "unbound": "external plugin embedding libunbound", "alias": "external plugin",
    "coredns-docker": "external Docker discovery plugin", "omada": "external plugin",
    "nodecache": "external plugin", "rrl": "external rate-limiting plugin",
    "sqlite": "external plugin", "alternate": "external plugin (coredns/alternate)",
    "proxy": "removed from CoreDNS in 1.7 (forward replaced it)",
}
# Being implemented now: hosts, template, rewrite, loadbalance, DNS-over-TLS upstreams (with
# tls_servername), and the narrower self-loop rule (a forward to another block's port of the
# same file is no loop).
AWAITS = {"hosts", "template", "rewrite", "loadbalance", "tls-upstream", "other-block-upstream"}
# Limits of ours that are not plugins, and Corefiles CoreDNS itself refuses.
GAPS = {
    "tls-server": "serving DNS over TLS or HTTPS ourselves (tls:// or https:// keys) is out of scope",
    "bind-interface": "bind takes addresses, not interface names (lo, eth0)",
    "hostname-upstream": "forward to a hostname would need this resolver to resolve it",
    "coredns-refuses": "CoreDNS refuses this file too",
}

LOADS: tuple[str, ...] = ()


@dataclass(frozen=True)
class Expect:
    causes: tuple[str, ...] = LOADS
    env: tuple[tuple[str, str], ...] = ()


EXPECTED: dict[str, Expect] = {
    "2ZZ__dns": Expect(("coredns-refuses",)),  # cache { http ... } is no cache option
    "4saito5__coredns-docker": Expect(("etcd",)),
    "ARPmt__vps-install": Expect(("loadbalance", "hosts")),
    "AbdulKuddusBD__dns-bd": Expect(("tls-server", "hosts", "tls-upstream")),
    "Adagior__dns-backup": Expect(("debug", "whoami")),
    # Its two `.` blocks are valid for CoreDNS only through `view`.
    "Aeyk__coredns-container": Expect(("transfer", "view", "whoami", "any", "tls-server")),
    "Alexandre-Tortoza__homelab": Expect(("template",), (("TAILSCALE_IP", "100.64.0.1"),)),
    "DnAp__DnVPN": Expect(("rewrite",)),
    "Douile__dotfiles": Expect(("bind-interface", "tls-upstream", "other-block-upstream")),
    "ESGI-Securepulse__DNS": Expect(("etcd",)),
    "EroUsr99__tailscale-dns": Expect(("template",)),
    "EverAzureRest__aci-coredns-azure-forwarder": Expect(),
    "Grindin247__family-cloud": Expect(("hosts",)),
    "Horstexplorer__coredns-docker": Expect(("debug", "coredns-docker")),
    "JamesGuthrie__dns": Expect(("file",)),
    "JasonSwindle__ecs-local-dns-cache": Expect(("loadbalance",), (
        ("DNS_HEALTH_PORT", "8080"), ("DNS_PROMETHEUS_PORT", "9153"), ("DNS_UPSTREAM", "169.254.169.253"),
        ("DNS_CACHE_TIME", "30"), ("DNS_CACHE_SUCCESS", "5000"), ("DNS_CACHE_DENIAL", "2500"),
        ("DNS_CACHE_PREFETCH", "10"))),
    "KDubicki__DNSaaS": Expect(("file",)),
    "LibFRi__coredns-docker": Expect(("ads", "hosts", "template", "dnsredir")),
    "LukeShortCloud__container-coredns-unbound": Expect(("unbound",)),
    "Luzifer__dns": Expect(("alias", "auto")),
    # `ready 80`: CoreDNS wants host:port there too.
    "MrRoundRobin__AzurePrivateLinkResolver": Expect(
        ("minimal", "nsid", "alternate", "chaos", "coredns-refuses"),
        (("LOG_CLASS", "error"), ("CACHE_TTL", "30"), ("NSID", "aplr"),
         ("ADDITIONAL_ZONES", "example.internal"), ("PUBLIC_RESOLVER", "1.1.1.1"))),
    "Muriel2Horak__oig-proxy": Expect(("hosts",)),
    "NicolaiSoeborg__CensurDNS": Expect(("debug", "bind-interface", "metadata", "rrl", "sqlite")),
    "Roimartinezr__coredns-dns-local": Expect(("file",)),
    "Sekkyo__coredns_omada": Expect(("omada",), (
        ("OMADA_URL", "https://omada.example"), ("OMADA_SITE", "home"), ("OMADA_USERNAME", "dns"),
        ("OMADA_PASSWORD", "secret"), ("OMADA_IGNORE_STARTUP_ERRORS", "false"),
        ("FALLTHROUGH_ZONES", "."), ("RECURSION_AVAILABLE", "true"), ("UPSTREAM_DNS", "1.1.1.1"))),
    "ShubhamTatvamasi__coredns": Expect(("hosts",)),
    "SimonHaas__tailscale-onion-proxy": Expect(("rewrite",)),
    "SiweiWang__docker-coreDNS": Expect(("file", "proxy")),
    "Split174__jwg-sni-proxy-split-dns": Expect(("template",)),
    "UoGSoE__docker-coredns": Expect(),
    "WolfYangFan__dn42-zones": Expect(("any", "file", "chaos", "tls-upstream", "hostname-upstream")),
    "Y3GI__Docker-network": Expect(("hosts",)),
    "aaronriekenberg__coredns-run": Expect(("file",)),
    "ad-on-is__coredock": Expect(("auto",)),
    # c.corp.example.com twice; tls_servername with plain upstreams.
    "af3556__coredns-templates": Expect(("file", "hosts", "local", "coredns-refuses", "tls-upstream")),
    "airdb__nodecache": Expect(("nodecache", "debug")),
    "akrantz01__dns": Expect(),
    "amphineko__coredns-at-home": Expect(("tls-upstream",)),
    "ankitson__homelab": Expect(("file",)),
    "anubhavg-icpl__private-dns": Expect(("hosts",)),
    "ardantus__localdns": Expect(("file",)),
    "asimbera__adblocker": Expect(("tls-server", "hosts")),
    "coredns__coredns__forward-dot": Expect(("tls-upstream",)),
    "coredns__coredns__forward-next": Expect(),
    "coredns__coredns__forward-order": Expect(),
    "coredns__coredns__log-combined": Expect(),
    "coredns__coredns__log-format": Expect(),
    "kubernetes__kubernetes__coredns": Expect(("kubernetes", "loadbalance")),
    "kubernetes__kubernetes__nodelocaldns": Expect(),
}

Statement = corefile.Statement
Block = corefile.ServerBlock


def _targets(st: Statement) -> tuple[str, ...]:
    return st.args[1:] if st.name == "forward" else ()


def _hostname(target: str) -> bool:
    host = target.split("://", 1)[-1]
    return "/" not in host and forward._address(host) is None and any(c.isalpha() for c in host)


# How each non-plugin cause shows in a file: (does this block carry it, does this statement).
BLOCK_CAUSES: dict[str, Callable[[Block], bool]] = {
    "tls-server": lambda b: any(k.text.startswith(("tls://", "https://")) for k in b.keys),
}
STATEMENT_CAUSES: dict[str, Callable[[Statement], bool]] = {
    "tls-upstream": lambda st: any(t.startswith("tls://") for t in _targets(st)) or (
        st.name == "forward" and any(o.name in ("tls", "tls_servername") for o in st.body or ())),
    "other-block-upstream": lambda st: any(t.startswith("127.0.0.1:") for t in _targets(st)),
    "hostname-upstream": lambda st: any(_hostname(t) for t in _targets(st)),
    "bind-interface": lambda st: st.name == "bind" and any(
        forward._address(a) is None and "." not in a and ":" not in a for a in st.args),
}
MESSAGES = {"tls-server": "servers are not supported", "tls-upstream": "tls",
            "other-block-upstream": "which is this server itself",
            "hostname-upstream": "hostnames are not supported", "bind-interface": "interface names",
            "coredns-refuses": ""}


def supported(cause: str) -> bool:
    """Whether the resolver now implements an awaited cause (then the file must load with it)."""
    probes = {
        "tls-upstream": "x {\n forward . tls://192.0.2.1 {\n tls_servername dns.example\n }\n}\n",
        "other-block-upstream": ".:53 {\n forward . 127.0.0.1:5301\n}\n.:5301 {\n forward . 192.0.2.1\n}\n",
    }
    if cause in probes:
        try:
            config.loads(probes[cause], read_files=False)
        except ConfigError:
            return False
        return True
    return cause in directives.SUPPORTED


def without(blocks: list[Block], causes: set[str]) -> list[Block]:
    """The file with every named cause taken out (a block, a directive, a forward line)."""
    out = []
    for block in blocks:
        if any(BLOCK_CAUSES[c](block) for c in causes if c in BLOCK_CAUSES):
            continue
        kept = tuple(st for st in block.directives if st.name not in causes and not any(
            STATEMENT_CAUSES[c](st) for c in causes if c in STATEMENT_CAUSES))
        out.append(Block(block.keys, kept))
    return out


def _fix_coredns_refusals(name: str, blocks: list[Block]) -> list[Block]:
    """What the author would have to fix for CoreDNS itself (or, for a file valid only through
    `view`, what dropping `view` requires), so the rest of the file can be checked."""
    if name == "2ZZ__dns":  # cache { http ... }: no such cache option
        return [Block(b.keys, tuple(Statement(st.tokens) if st.name == "cache" else st
                                    for st in b.directives)) for b in blocks]
    if name == "MrRoundRobin__AzurePrivateLinkResolver":  # ready 80: CoreDNS wants host:port
        return [Block(b.keys, tuple(Statement(st.tokens[:1]) if st.name == "ready" else st
                                    for st in b.directives)) for b in blocks]
    if name in ("af3556__coredns-templates", "Aeyk__coredns-container"):  # a zone served twice
        seen: set[str] = set()
        kept = []
        for b in blocks:
            keys = " ".join(k.text for k in b.keys)
            if keys not in seen:
                seen.add(keys)
                kept.append(b)
        return kept
    return blocks


def test_the_corpus_is_large_enough_and_every_file_has_a_source_and_an_expectation() -> None:
    files = sorted(p.stem for p in CORPUS.glob("*.Corefile"))
    sources = {line.split()[0].removesuffix(".Corefile") for line in
               (CORPUS / "SOURCES").read_text().splitlines() if line and not line.startswith("#")}
    assert len(files) >= 40
    assert set(files) == sources == set(EXPECTED)
    repos = {line.split()[1] for line in (CORPUS / "SOURCES").read_text().splitlines()
             if line and not line.startswith("#")}
    assert len(repos) >= 40
    known = set(OUT_OF_SCOPE) | set(EXTERNAL) | AWAITS | set(GAPS)
    for name, expect in EXPECTED.items():
        assert set(expect.causes) <= known, name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_corefile_loads_or_is_refused_only_for_its_named_causes(name: str) -> None:
    expect = EXPECTED[name]
    path = CORPUS / f"{name}.Corefile"
    env = dict(expect.env)
    pending = {c for c in expect.causes if c not in AWAITS or not supported(c)}
    blocks = corefile.load(path, env)
    if not pending:
        config.build(blocks, str(path), config.DEFAULT_PORT, read_files=False)
        return
    with pytest.raises(ConfigError) as refused:
        config.build(blocks, str(path), config.DEFAULT_PORT, read_files=False)
    named = [c for c in pending if (f"'{c}'" in refused.value.message
                                    or (c in MESSAGES and MESSAGES[c] in refused.value.message))]
    assert named, f"{name}: refused for something the table does not name: {refused.value}"
    stripped = without(_fix_coredns_refusals(name, blocks), pending)
    config.build(stripped, str(path), config.DEFAULT_PORT, read_files=False)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_check_reads_each_corefile_without_crashing_and_agrees_with_the_loader(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    expect = EXPECTED[name]
    for key, value in expect.env:
        monkeypatch.setenv(key, value)
    found = checker.check([str(CORPUS / f"{name}.Corefile")], checker.Options(resolver="splitdns"))
    refusals = [f for f in found if f.code in ("SD100", "SD110", "SD112")]
    pending = [c for c in expect.causes if c not in AWAITS or not supported(c)]
    assert bool(refusals) == bool(pending), [f.text(False) for f in refusals]


def test_awaited_causes_are_listed_for_the_lead() -> None:
    # Which files wait for which plugin: printed with -s, and checked to be a real list.
    waiting = {name: sorted(set(e.causes) & AWAITS) for name, e in EXPECTED.items()
               if set(e.causes) & AWAITS}
    print("\n".join(f"{name}: awaits {', '.join(c)}" for name, c in sorted(waiting.items())))
    assert waiting and all(waiting.values())
