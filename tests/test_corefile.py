"""Corefile syntax: table tests, text in, blocks or an error with its line out."""

from __future__ import annotations

from pathlib import Path

import pytest

from splitdns import corefile
from splitdns.errors import ConfigError
from tests.lab.configs import SCENARIO_COREFILE


def shape(text: str, env: dict[str, str] | None = None) -> list[tuple[list[str], list[object]]]:
    """Blocks as plain lists: keys, then each directive as [name, args..., (body)]."""
    def statement(st: corefile.Statement) -> list[object]:
        out: list[object] = [t.text for t in st.tokens]
        if st.body is not None:
            out.append([statement(s) for s in st.body])
        return out

    return [([k.text for k in b.keys], [statement(d) for d in b.directives])
            for b in corefile.parse(text, "Corefile", env or {})]


def test_scenario_corefile_parses_into_two_blocks() -> None:
    assert shape(SCENARIO_COREFILE) == [
        ([".:53"], [["errors"], ["cache", "30"], ["forward", ".", "10.100.0.10"]]),
        (["svc.acme.internal:53"], [["errors"], ["cache", "30"], ["forward", ".", "192.168.240.1"]]),
    ]


@pytest.mark.parametrize(("text", "expected"), [
    # comments anywhere, even mid-token
    ("example.org {\n  forward . 192.0.2.1 # upstream\n}",
     [(["example.org"], [["forward", ".", "192.0.2.1"]])]),
    ("example.org {\n  errors#comment\n}", [(["example.org"], [["errors"]])]),
    # brace on the next line
    ("example.org\n{\n errors\n}", [(["example.org"], [["errors"]])]),
    # several keys, comma continuation
    ("a.example, \nb.example {\n errors\n}", [(["a.example,", "b.example"], [["errors"]])]),
    ("a.example b.example:53 {\n errors\n}", [(["a.example", "b.example:53"], [["errors"]])]),
    # a single block may omit braces
    ("example.org\nerrors\nforward . 192.0.2.1",
     [(["example.org"], [["errors"], ["forward", ".", "192.0.2.1"]])]),
    # quoted tokens, escaped quote, spanning lines
    ('example.org {\n log "a b" "say \\"hi\\""\n}', [(["example.org"], [["log", "a b", 'say "hi"']])]),
    ('example.org {\n log "two\nlines"\n}', [(["example.org"], [["log", "two\nlines"]])]),
    # nested options
    ("example.org {\n forward . 192.0.2.1 {\n  policy sequential\n  max_fails 3\n }\n}",
     [(["example.org"], [["forward", ".", "192.0.2.1", [["policy", "sequential"], ["max_fails", "3"]]]])]),
    # a block on one line
    ("example.org { errors }", [(["example.org"], [["errors"]])]),
    # CRLF line endings
    ("example.org {\r\n errors\r\n}\r\n", [(["example.org"], [["errors"]])]),
])
def test_syntax(text: str, expected: list[object]) -> None:
    assert shape(text) == expected


def test_environment_substitution_both_spellings() -> None:
    env = {"ZONE": "svc.acme.internal", "DNS": "192.0.2.53"}
    text = "{$ZONE}:53 {\n forward . {%DNS%}\n}\n"
    assert shape(text, env) == [(["svc.acme.internal:53"], [["forward", ".", "192.0.2.53"]])]


def test_snippets_are_imported_where_used() -> None:
    text = "(common) {\n errors\n cache 30\n}\nexample.org {\n import common\n forward . 192.0.2.1\n}\n"
    assert shape(text) == [(["example.org"], [["errors"], ["cache", "30"], ["forward", ".", "192.0.2.1"]])]


def test_import_file_relative_to_importing_file(tmp_path: Path) -> None:
    (tmp_path / "zones").mkdir()
    (tmp_path / "zones" / "a.conf").write_text("a.example {\n errors\n}\n")
    (tmp_path / "zones" / "b.conf").write_text("b.example {\n errors\n}\n")
    (tmp_path / "Corefile").write_text(". {\n errors\n}\nimport zones/*.conf\n")
    blocks = corefile.load(tmp_path / "Corefile", env={})
    assert [b.keys[0].text for b in blocks] == [".", "a.example", "b.example"]
    assert blocks[1].where.file.endswith("zones/a.conf") and blocks[1].where.line == 1


def test_token_locations_survive_imports(tmp_path: Path) -> None:
    (tmp_path / "common").write_text("\n\nerrors\nbogus\n")
    (tmp_path / "Corefile").write_text("example.org {\n import common\n}\n")
    blocks = corefile.load(tmp_path / "Corefile", env={})
    bogus = blocks[0].directives[1]
    assert (bogus.name, bogus.where.line, Path(bogus.where.file).name) == ("bogus", 4, "common")


@pytest.mark.parametrize(("text", "line", "message"), [
    ("example.org {\n errors\n", 1, "missing '}'"),  # where the unclosed block opened
    (". {\n errors\n}\nexample.org {\n forward . 192.0.2.1 {\n  max_fails 3\n }\n cache 30\n", 4,
     "missing '}'"),
    ("example.org {\n errors\n}\n}\n", 4, "unexpected '}'"),
    ('example.org {\n log "open\n}\n', 2, "unterminated quoted token"),
    ("example.org {\n forward . {$NOPE}\n}\n", 2, "environment variable NOPE is not set"),
    ("example.org {\n import nothing_here\n}\n", 2, "no snippet of that name"),
    ("(s) {\n import s\n}\nexample.org {\n import s\n}\n", 2, "imports itself"),
    ("(s) {\n errors\n}\n(s) {\n errors\n}\n. {\n}\n", 4, "defined twice"),
    ("", 1, "empty"),
    ("# only a comment\n", 1, "empty"),
    ("example.org {\n errors\n}\nstray\n", 4, "outside any server block"),
])
def test_errors_name_the_line(text: str, line: int, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        corefile.parse(text, "Corefile", {})
    assert caught.value.where is not None
    assert caught.value.where.line == line
    assert message in caught.value.message
    assert str(caught.value).startswith(f"Corefile:{line}: ")


def test_self_importing_file_is_a_clean_error(tmp_path: Path) -> None:
    (tmp_path / "Corefile").write_text("import Corefile\n")
    with pytest.raises(ConfigError, match="import cycle"):
        corefile.load(tmp_path / "Corefile", env={})


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read the Corefile .*missing: No such file"):
        corefile.load(tmp_path / "missing", env={})
    # Named Corefile, the path says it: no "cannot read Corefile Corefile".
    with pytest.raises(ConfigError) as err:
        corefile.load(tmp_path / "Corefile", env={})
    assert err.value.message == f"cannot read {tmp_path / 'Corefile'}: No such file or directory"
