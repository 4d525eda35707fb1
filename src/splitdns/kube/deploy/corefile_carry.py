"""`render --corefile FILE` / `inject --corefile FILE`: the user's Corefile carried into the pod as
it is (comments, `rewrite`, `hosts`, `template`, `serve_stale`, `cache 300`, forward options...),
with only the lines the pod needs changed, each change said (`Carried.changes`).

What the pod needs, and nothing else is touched:
- the endpoints its probes and the PodMonitor reach, on every address (the kubelet comes to the
  pod IP): `health` and `ready` at the container's ports, `prometheus` at the metrics port; a
  line with another address is rewritten, a missing one is added to the catch-all block;
- no `reload` where the Corefile travels in an environment variable (no file to watch);
- with the CoreDNS image, `bind 127.0.0.1` in every block (CoreDNS listens everywhere);
- the zones the plan has and the file has not (the cluster DNS, a `--zone` for a new zone)
  appended as blocks of their own.

Refused, with what would be lost: an `import` of another file (the pod holds only this text), a
`--zone` or `--probe` for a zone the file already answers (two sources for one zone), and a line
to change that it shares with another directive.
Tests: tests/test_render.py, tests/test_wireguard_kube.py, tests/test_start_order.py, tests/test_image.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from splitdns import config, corefile, directives
from splitdns.directives import operations
from splitdns.errors import ConfigError
from splitdns.kube.deploy.plan import CorefileSource as Source
from splitdns.kube.deploy.plan import PlanError
from splitdns.kube.shared import lenient_corefile

INDENT = "    "


@dataclass(frozen=True)
class Wanted:
    health: str = ""          # the directive's own default, :8080
    ready: str = ""           # :8181
    metrics: str = ":9153"
    reload: bool = True
    bind: str | None = None   # CoreDNS: bind every block to this address
    add_endpoints: bool = True  # False: a generated catch-all block carries the missing ones
    splitdns: bool = True     # our image: the file must be one `splitdns serve` accepts


@dataclass(frozen=True)
class Carried:
    text: str                 # the carried blocks, the file's lines above them dropped
    zones: frozenset[str]     # the zones the file answers (normalised)
    changes: tuple[str, ...]  # "FILE:LINE: what changed", for stderr


@dataclass
class _Block:
    keys_line: int
    end_line: int | None      # the line of its closing brace; None: a file without braces
    parsed: lenient_corefile.Block
    indent: str = INDENT      # of its first directive, for lines added to it


_DEFAULTS = {"health": operations.HealthSpec.endpoint, "ready": operations.ReadySpec.endpoint,
             "prometheus": operations.Endpoint("127.0.0.1", 9153)}


# What the forms made from zones alone (the webhook's flags, the cluster-wide block) keep of a block.
KEPT_BY_ZONES = ("errors", "forward", *(d.name for d in directives.tunnels()), "health", "ready",
                 "prometheus", "reload", "loop", "cache")


def zones_of(source: Source) -> frozenset[str]:
    return frozenset(z for b in _model(source).blocks for z in b.zones)


def endpoints_in(source: Source) -> frozenset[str]:
    """Which of health, ready and prometheus the file has (a generated catch-all leaves them out)."""
    return frozenset(st.name for b in _model(source).blocks for st in b.statements if st.name in _DEFAULTS)


def lost_by_zones(source: Source, zones: frozenset[str] | None = None) -> list[str]:
    """What a form built from the zones and upstreams alone would drop of the blocks of `zones`
    (None: every block), as "NAME (FILE:LINE)"."""
    out = []
    for b in _model(source).blocks:
        if zones is not None and not set(b.zones) & zones:
            continue
        for st in b.statements:
            simple = st.body is None and (st.name != "cache" or st.args == ("30",)) and \
                (st.name != "forward" or st.args[:1] == (".",))
            if st.name not in KEPT_BY_ZONES or (st.name in ("cache", "forward") and not simple):
                options = " { ... }" if st.body else ""
                out.append(f"`{' '.join([st.name, *st.args])}{options}` ({st.where})")
    return out


def carry(source: Source, wanted: Wanted, extra_blocks: list[str]) -> Carried:
    """The file with the pod's changes, `extra_blocks` (Corefile text) appended."""
    try:
        return _carry(source, wanted, extra_blocks)
    except ConfigError as err:
        raise PlanError(f"{err} (splitdns serve would refuse it)") from None


def _carry(source: Source, wanted: Wanted, extra_blocks: list[str]) -> Carried:
    env = corefile.PodEnvironment(os.environ)
    blocks_read = corefile.parse(source.text, source.path, env)
    if wanted.splitdns and not env.unset:  # else the pod's environment decides (check says so)
        config.build(blocks_read, source.path, config.DEFAULT_PORT, read_files=False)
    lines = source.text.rstrip("\n").split("\n")
    by_line = _tokens_by_line(source)
    blocks = _blocks(source, _model(source))
    changes: list[str] = []
    edits: dict[int, str | None] = {}     # 1-based line -> new text (None: removed)
    added: dict[int, list[str]] = {}      # 1-based line of a closing brace -> lines before it
    for block in blocks:
        for st in block.parsed.statements:
            if st.where.file != source.path:
                raise PlanError(f"{st.where}: `{st.name}` comes from another file imported into "
                                f"{source.path}; the pod holds only {source.path}'s text: inline it")
    root = next((b for b in blocks if "." in b.parsed.zones), blocks[-1])
    for name, want in (("health", wanted.health), ("ready", wanted.ready), ("prometheus", wanted.metrics)):
        found = [st for b in blocks for st in b.parsed.statements if st.name == name]
        for st in found:
            have = operations.endpoint(st, st.args[0] if st.args else "", _DEFAULTS[name])
            wanted_here = operations.endpoint(st, want, _DEFAULTS[name])
            if have != wanted_here:
                new = " ".join([name, want or f":{wanted_here.port}"])
                edits[st.where.line] = _rewrite(lines, by_line, st, [name, *st.args], new)
                who = "the kubelet's probes come to" if name != "prometheus" else "the PodMonitor scrapes"
                changes.append(f"{st.where}: `{' '.join([name, *st.args])}` -> `{new}` ({who} the "
                               f"pod IP, port {wanted_here.port})")
        if not found and wanted.add_endpoints:
            line = f"{name} {want}".rstrip()
            added.setdefault(_end(root, lines), []).append(root.indent + line)
            who = "the kubelet's probes ask it" if name != "prometheus" else "the PodMonitor scrapes it"
            changes.append(f"{source.path}:{root.keys_line}: `{line}` added to the block "
                           f"{root.parsed.name} ({who})")
    for block in blocks:
        for st in block.parsed.statements:
            if st.name == "reload" and not wanted.reload:
                edits[st.where.line] = _rewrite(lines, by_line, st, [st.name, *st.args], None)
                changes.append(f"{st.where}: `reload` removed (the Corefile travels in the pod spec: "
                               "no file to watch)")
        if wanted.bind is not None and block.parsed.bind is None:
            added.setdefault(_end(block, lines), []).append(f"{block.indent}bind {wanted.bind}")
            changes.append(f"{source.path}:{block.keys_line}: `bind {wanted.bind}` added (CoreDNS "
                           "listens on every address, the private zone too, unless told)")
    first = blocks[0]
    if first.end_line is None and extra_blocks:  # a file of one block may omit braces; two may not
        edits[first.keys_line] = lines[first.keys_line - 1].rstrip() + " {"
        added.setdefault(len(lines) + 1, []).append("}")
        changes.append(f"{source.path}:{first.keys_line}: braces put around the block "
                       f"{first.parsed.name} (blocks for the zones it lacks follow it)")
    out: list[str] = []
    for n, text in enumerate([*lines, ""], 1):  # one line past the end: a block without braces
        out += added.get(n, [])
        if n in edits:
            if edits[n] is not None:
                out.append(str(edits[n]))
        elif n <= len(lines):
            out.append(text)
    text = "\n".join(out).strip("\n") + "\n"
    if extra_blocks:
        text += "\n" + "\n".join(extra_blocks)
    ordered = sorted(changes, key=lambda c: int(c.split(":")[1]) if c.split(":")[1].isdigit() else 0)
    return Carried(text, frozenset(z for b in blocks for z in b.parsed.zones), tuple(ordered))


def _model(source: Source) -> lenient_corefile.Model:
    model = lenient_corefile.read(source.text, source.path)
    if model.error is not None:
        raise PlanError(str(model.error))
    for block in model.blocks:
        if block.errors:
            raise PlanError(str(block.errors[0][1]))
    return model


def _tokens_by_line(source: Source) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for tok in corefile.lex(source.text, source.path, corefile.PodEnvironment({})):
        out.setdefault(tok.where.line, []).append(tok.text)
    return out


def _blocks(source: Source, model: lenient_corefile.Model) -> list[_Block]:
    """Each parsed block with the line of its closing brace, found by matching braces."""
    ends: dict[int, int] = {}  # keys line -> closing brace line
    depth, start = 0, None
    for tok in corefile.lex(source.text, source.path, corefile.PodEnvironment({})):
        if depth == 0 and start is None and tok.text not in ("{", "}"):
            start = tok.where.line
        if tok.text == "{" and not tok.quoted:
            depth += 1
        elif tok.text == "}" and not tok.quoted:
            depth -= 1
            if depth == 0 and start is not None:
                ends[start], start = tok.where.line, None
    lines = source.text.split("\n")
    out = []
    for b in model.blocks:
        first = lines[b.statements[0].where.line - 1] if b.statements else INDENT
        indent = first[:len(first) - len(first.lstrip())]  # the file's own, none included
        out.append(_Block(b.where.line, ends.get(b.where.line), b, indent))
    return out


def _end(block: _Block, lines: list[str]) -> int:
    return block.end_line if block.end_line is not None else len(lines) + 1


def _rewrite(lines: list[str], by_line: dict[int, list[str]], st: corefile.Statement,
             old: list[str], new: str | None) -> str | None:
    """The statement's line with `new` for its words (None: the line removed); refused when the
    line holds more than this statement (and its opening brace)."""
    n = st.where.line
    words = by_line.get(n, [])
    opens = words[len(old):] == ["{"]
    if words[:len(old)] != old or not (len(words) == len(old) or opens):
        raise PlanError(f"{st.where}: `{st.name}` must change for the pod, but shares its line with "
                        "more; put it on a line of its own")
    if new is None:
        if opens:
            raise PlanError(f"{st.where}: `{st.name}` must go for the pod, but has options; remove it")
        return None
    text = lines[n - 1]
    indent = text[:len(text) - len(text.lstrip())]
    return indent + new + (" {" if opens else "")
