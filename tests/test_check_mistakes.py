"""`check` reads a user's mistakes as the mistakes they are: typos of the cluster domain or of
another block's zone, a catch-all that forwards nothing, the cluster's own CoreDNS sending the
root into a workload's tunnel; and big or absurd inputs (a 50 MB token, 20,000 blocks) get a
short error or a linear check (the figures: bench/check_scale.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from splitdns import config
from splitdns.errors import ConfigError
from splitdns.kube import lint
from splitdns.kube.findings import Finding

BIG = 5 * 1024 * 1024


def found(tmp_path: Path, text: str, name: str = "Corefile") -> list[Finding]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return lint.check([str(path)], lint.Options())


# --- big inputs ----------------------------------------------------------------------------------

@pytest.mark.parametrize("line", [f"forward . {'a' * BIG}", f"{'b' * BIG} x",
                                  f"forward . 10.0.0.1 {{\n {'c' * BIG} 1\n }}"])
def test_an_error_never_echoes_a_huge_token_but_its_start_and_size(tmp_path: Path, line: str) -> None:
    text = f".:53 {{\n {line}\n}}\n"
    findings = found(tmp_path, text)
    assert findings and all(len(f.message) < 2000 for f in findings), [len(f.message) for f in findings]
    assert any("(cut: 5,242,88" in f.message for f in findings), [f.message[:300] for f in findings]
    with pytest.raises(ConfigError) as err:
        config.loads(text, "Corefile")
    assert len(str(err.value)) < 2000 and "(cut: 5,242,88" in str(err.value)


def test_forward_lines_covered_by_an_earlier_one_are_found_also_with_except_and_next(tmp_path: Path) -> None:
    """SD106, now by suffix lookups: `except` and `next` still make a later line reachable."""
    text = (".:53 {\n forward example.net 192.0.2.4 {\n  next NXDOMAIN\n }\n"
            " forward sub.example.net 192.0.2.6\n"  # reachable: `next` hands replies on
            " forward . 192.0.2.1 {\n  except a.example.org\n }\n"
            " forward a.example.org 192.0.2.2\n"   # excepted above: reachable
            " forward b.example.org 192.0.2.3\n"   # covered by line 6
            " forward x.a.example.org 192.0.2.5\n"  # covered by line 9
            "}\n")
    lines = sorted((f.line, f.message.split(" (line")[0]) for f in found(tmp_path, text) if f.code == "SD106")
    assert lines == [(10, "forward b.example.org. comes after forward ."),
                     (11, "forward x.a.example.org. comes after forward a.example.org.")]
