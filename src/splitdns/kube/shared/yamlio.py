"""YAML at the edge: manifests (plain dicts) to text, and text to dicts that remember their lines.

PyYAML is imported here, lazily by the kube commands, never by `splitdns serve`.
Tests: tests/test_monitoring_render.py, tests/test_monitoring_rules.py, tests/test_monitoring_e2e.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

Path = tuple[str | int, ...]


class _Dumper(yaml.SafeDumper):
    """Block style, keys in the order the builders wrote them, multi-line strings as `|` blocks."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        # Indent list items under their key, as kubectl and most hand-written manifests do.
        super().increase_indent(flow, False)

    def ignore_aliases(self, data: Any) -> bool:
        # Shared dicts (labels used twice) must be written out, not as &id001 anchors.
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _str)


def dump(doc: Any) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1_000_000,
                     allow_unicode=True)


def dump_all(docs: Iterable[Any], header: str = "") -> str:
    return header + "---\n".join(dump(d) for d in docs)


@dataclass
class Document:
    """One YAML document: its value, and the line (1-based) of every mapping key and list item."""

    value: Any
    first_line: int
    lines: dict[Path, int] = field(default_factory=dict)
    block_start: dict[Path, int] = field(default_factory=dict)  # literal `|` scalars: first text line

    def line(self, path: Path) -> int:
        """The line of `path`, or of its nearest ancestor that has one."""
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.first_line


def load_all(text: str) -> list[Document]:
    """Parse every document; raises yaml.YAMLError (with a problem_mark) on bad YAML."""
    docs: list[Document] = []
    for node in yaml.compose_all(text, Loader=yaml.SafeLoader):
        if node is None:
            continue
        doc = Document(None, node.start_mark.line + 1)
        doc.value = _build(node, (), doc)
        docs.append(doc)
    return docs


def _build(node: yaml.Node, path: Path, doc: Document) -> Any:
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = _scalar(key_node)
            child = (*path, str(key))
            doc.lines[child] = key_node.start_mark.line + 1
            out[str(key)] = _build(value_node, child, doc)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for i, item in enumerate(node.value):
            doc.lines[(*path, i)] = item.start_mark.line + 1
            items.append(_build(item, (*path, i), doc))
        return items
    if isinstance(node, yaml.ScalarNode) and node.style in ("|", ">"):
        doc.block_start[path] = node.start_mark.line + 2
    return _scalar(node)


def _scalar(node: yaml.Node) -> Any:
    # The safe constructor turns `"5"` into a str and `5` into an int, as the API server would.
    loader = yaml.SafeLoader("")
    return loader.construct_object(node, deep=True)
