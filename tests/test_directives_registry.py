"""The directive registry is the one place that knows each directive: what `serve` accepts,
what `check` knows CoreDNS has, the per-query order and the steps of a block all follow it."""

from __future__ import annotations

from pathlib import Path

import pytest

from splitdns import config, directives
from splitdns.core.routing import cache_key
from splitdns.core.zone import Zone
from splitdns.kube.check import checker

README = Path(__file__).parent.parent / "README.md"


def _codes(tmp_path: Path, name: str, resolver: str) -> list[str]:
    corefile = tmp_path / "Corefile"
    corefile.write_text(f". {{\n    {name}\n    forward . 192.0.2.1\n}}\n")
    found = checker.check([str(corefile)], checker.Options(resolver=resolver))
    return [f.code for f in found if f.line == 2]


@pytest.mark.parametrize("directive", directives.REGISTRY, ids=[d.name for d in directives.REGISTRY])
def test_check_knows_every_directive_and_who_has_it(tmp_path: Path,
                                                   directive: directives.Directive[object]) -> None:
    """SD110 (the chosen resolver lacks it) and SD112 (nobody knows it) follow the registry."""
    for_coredns = _codes(tmp_path, directive.name, "coredns")
    assert "SD112" not in for_coredns
    assert ("SD110" in for_coredns) == (not directive.coredns), for_coredns
    assert not {"SD110", "SD112"} & set(_codes(tmp_path, directive.name, "splitdns"))


def test_a_coredns_plugin_we_lack_is_named_so_and_a_typo_is_not(tmp_path: Path) -> None:
    assert "SD110" in _codes(tmp_path, "kubernetes cluster.local", "splitdns")
    assert "SD112" in _codes(tmp_path, "cahce", "splitdns")


def test_the_lists_derive_from_the_registry() -> None:
    assert tuple(d.name for d in directives.REGISTRY) == directives.ORDER
    assert set(directives.SUPPORTED) == set(directives.BY_NAME)
    assert not set(directives.COREDNS_ONLY) & set(directives.SUPPORTED)
    assert {d.name for d in directives.REGISTRY if d.coredns} <= directives.COREDNS_PLUGINS
    # What a block stores is what its directives parsed, under the directive's name.
    block = config.loads(". {\n cache 30\n minimal\n rewrite name a.example.org b.example.org\n"
                         " rewrite name c.example.org d.example.org\n forward . 192.0.2.1\n}\n",
                         read_files=False).blocks[0]
    assert set(block.specs) == {"cache", "minimal", "rewrite"}
    assert len(block.every(directives.REWRITE)) == 2 and block[directives.MINIMAL] is True
    assert block[directives.HOSTS] is None and block.every(directives.TEMPLATE) == ()


def test_a_blocks_steps_are_the_registrys_steps_in_its_order() -> None:
    zone = Zone(config.loads(". {\n hosts {\n  192.0.2.9 a.example.org\n }\n cache 30\n"
                                     " forward . 192.0.2.1\n}\n", read_files=False).blocks[0])
    names = [step.__name__ for step in zone.steps]
    assert names == ["_local_step", "_loop_step", "_forward_step"]  # the cache: `known`, before


def test_every_coredns_directive_we_implement_has_a_row_in_the_readme_table() -> None:
    text = README.read_text()
    cells = [line.split("|")[1] for line in text.splitlines() if line.startswith("| `")]
    rows = {code.split()[0] for cell in cells for code in cell.split("`")[1::2]}
    ours_too = {d.name for d in directives.REGISTRY if d.coredns} - {"health", "ready", "prometheus",
                                                                      "reload", "loop"}
    missing = {name for name in ours_too if name not in rows}
    assert not missing, f"README's directive table lacks {sorted(missing)}"


def test_a_reload_that_changes_a_stored_directive_starts_the_cache_afresh() -> None:
    def key(extra: str) -> tuple[object, ...]:
        text = f". {{\n cache 30\n {extra}\n forward . 192.0.2.1\n}}\n"
        return cache_key(config.loads(text, read_files=False).blocks[0])
    assert key("errors") == key("log")  # not stored: the cache stays
    assert key("") != key("minimal")  # what is stored is minimised: the old entries go


def test_a_directive_that_rewrites_replies_needs_only_its_module_and_a_registry_row(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What adding `minimal` showed, with a directive made up here: a parser and a `Reshape`
    in one row, and the core keeps every reply of the block rewritten, with no other change."""
    import dns.message

    from splitdns.directives._reshape import Reshape
    from tests.support.transcript import Transcript, answering, parse

    def seven(msg: dns.message.Message) -> None:
        for rrset in msg.answer:
            rrset.ttl = 7

    made_up = directives.Once("ttl_seven", lambda st: True, step=directives.REPLY_STEP, stored=True,
                              reshape=Reshape(lambda reply: reply.answer, seven))
    monkeypatch.setattr(directives, "REGISTRY", (*directives.REGISTRY[:-1], made_up, directives.FORWARD))
    monkeypatch.setattr(directives, "BY_NAME", {**directives.BY_NAME, "ttl_seven": made_up})
    with_it = Transcript(". {\n ttl_seven\n forward . 192.0.2.1\n}\n")
    without = Transcript(". {\n forward . 192.0.2.1\n}\n")
    q = parse("www.example.org.")
    reshaped = dns.message.from_wire(with_it.ask(q, answering(ttl=60), 100.0))
    sixty = dns.message.from_wire(without.ask(q, answering(ttl=60), 100.0))
    assert [r.ttl for r in reshaped.answer] == [7] and [r.ttl for r in sixty.answer] == [60]
