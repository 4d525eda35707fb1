"""A lenient reading of a Corefile for linting and explaining: every block, even with directives the
resolver would refuse, so one pass can report many problems instead of the first.

Keys, `forward` and `bind` are parsed by the resolver's own code (`config.build`, the directive
modules) so the linter and the server never disagree on what a line means.
Tests: tests/test_render.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from splitdns import config, corefile, directives
from splitdns.directives import bind, forward
from splitdns.errors import ConfigError, Location


@dataclass(frozen=True)
class Forward:
    spec: forward.ForwardSpec
    statement: corefile.Statement


@dataclass(frozen=True)
class Block:
    zones: tuple[str, ...]
    port: int
    where: Location
    keys: tuple[corefile.Token, ...]
    statements: tuple[corefile.Statement, ...]
    forwards: tuple[Forward, ...] = ()
    bind: tuple[str, ...] | None = None
    errors: tuple[tuple[str, ConfigError], ...] = ()  # (what failed: "keys" or a directive, error)

    def directive(self, name: str) -> corefile.Statement | None:
        return next((st for st in self.statements if st.name == name), None)

    @property
    def is_root(self) -> bool:
        return "." in self.zones

    @property
    def tunnel(self) -> bool:
        """The block takes its upstreams from the VPN (a tunnel kind's directive)."""
        return self.tunnel_statement is not None

    @property
    def tunnel_statement(self) -> corefile.Statement | None:
        """The line of the block's tunnel directive (`openvpn`, `wireguard`, ...), if it has one."""
        names = {d.name for d in directives.tunnels()}
        return next((st for st in self.statements if st.name in names), None)

    @property
    def tunnel_kind(self) -> directives.Tunnel | None:
        """The tunnel record of the block's tunnel directive, if it has one."""
        st = self.tunnel_statement
        return None if st is None else directives.BY_NAME[st.name].tunnel

    @property
    def name(self) -> str:
        return " ".join(self.zones) + f":{self.port}"

    def to_config_block(self) -> config.Block:
        """The same block as the resolver's core sees it (routing and forwards only)."""
        bound = {} if self.bind is None else {directives.BIND.name: self.bind}
        return config.Block(zones=self.zones, port=self.port, where=self.where,
                            forwards=tuple(f.spec for f in self.forwards), specs=config.Specs(bound))


@dataclass
class Model:
    path: str
    blocks: list[Block] = field(default_factory=list)
    error: ConfigError | None = None  # a syntax error: no blocks then
    unset: dict[str, Location] = field(default_factory=dict)  # {$VAR}s the pod's environment gives

    def deferred(self, where: Location | None) -> bool:
        """Whether the line holds a `{$VAR}` unset here: what it means is known only in the pod."""
        return where is not None and any(w.file == where.file and w.line == where.line
                                         for w in self._deferred_at)

    @property
    def _deferred_at(self) -> list[Location]:
        return [tok.where for b in self.blocks for tok in _tokens(b) if corefile.deferred(tok.text)]


def _tokens(block: Block) -> list[corefile.Token]:
    out = list(block.keys)
    todo = list(block.statements)
    while todo:
        st = todo.pop()
        out.extend(st.tokens)
        todo.extend(st.body or ())
    return out


def read(text: str, path: str, default_port: int = config.DEFAULT_PORT) -> Model:
    """Parse without refusing unknown directives; key and argument errors are kept per block."""
    env = corefile.PodEnvironment(os.environ)
    try:
        server_blocks = corefile.parse(text, path, env)
    except ConfigError as err:
        return Model(path, error=err)
    model = Model(path, unset=env.unset)
    for sb in server_blocks:
        model.blocks.append(_block(sb, path, default_port))
    return model


def _block(sb: corefile.ServerBlock, path: str, default_port: int) -> Block:
    errors: list[tuple[str, ConfigError]] = []
    try:
        keyed = config.build([corefile.ServerBlock(sb.keys, ())], path, default_port, read_files=False)
        # keys on several ports are several blocks to the resolver; the lints see every zone
        zones, port = tuple(z for b in keyed.blocks for z in b.zones), keyed.blocks[0].port
    except ConfigError as err:
        if not any(corefile.deferred(tok.text) for tok in sb.keys):
            errors.append(("keys", err))
        zones, port = (), default_port
    forwards: list[Forward] = []
    bound: tuple[str, ...] | None = None
    for st in sb.directives:
        try:
            if st.name == "forward":
                forwards.append(Forward(forward.parse(st, False, directives.tunnel_words()), st))
            elif st.name == "bind":
                bound = bind.parse(st)
        except ConfigError as err:
            if not any(corefile.deferred(tok.text) for tok in st.tokens):  # else the pod decides
                errors.append((st.name, err))
    return Block(zones, port, sb.where, sb.keys, sb.directives, tuple(forwards), bound, tuple(errors))
