"""`health`, `ready`, `prometheus`, `reload`, `loop`: how the server lives in a pod.

Syntax:

    health [ADDRESS] { lameduck DURATION }      GET /health, default :8080
    ready [ADDRESS] { probe NAME... }           GET /ready and /ready?zone=Z, default :8181
    prometheus [ADDRESS]                        GET /metrics, default localhost:9153
    reload [INTERVAL] [JITTER]                  default 30s 15s, at least 2s 1s
    loop                                        detect forwarding loops; never exit over one

ADDRESS is `[HOST]:PORT`; an empty host means every address, which the kubelet's probes
need (they come to the pod IP).
Tests: tests/test_operations.py, tests/test_config.py.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from splitdns.addresses import host_port
from splitdns.corefile import Statement
from splitdns.directives import _args
from splitdns.errors import ConfigError


@dataclass(frozen=True)
class Endpoint:
    host: str  # "" means every address
    port: int

    def __str__(self) -> str:
        return host_port(self.host, self.port)


@dataclass(frozen=True)
class HealthSpec:
    endpoint: Endpoint = Endpoint("", 8080)
    lameduck: float = 0.0


@dataclass(frozen=True)
class ReadySpec:
    endpoint: Endpoint = Endpoint("", 8181)
    probes: tuple[str, ...] = ()  # names to ask through the block's upstreams


@dataclass(frozen=True)
class ReloadSpec:
    interval: float = 30.0
    jitter: float = 15.0


def endpoint(st: Statement, text: str, default: Endpoint) -> Endpoint:
    if not text:
        return default
    host, sep, port_text = text.rpartition(":")
    if not sep or not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
        raise ConfigError(st.where, f"{st.name}: {text!r} is not an address like :8080 or 127.0.0.1:8080")
    host = host.strip("[]")
    if host == "localhost":
        host = "127.0.0.1"
    if host:
        try:
            host = str(ipaddress.ip_address(host))
        except ValueError:
            raise ConfigError(st.where, f"{st.name}: {host!r} is not an IP address") from None
    return Endpoint(host, int(port_text))


def parse_health(st: Statement) -> HealthSpec:
    _args.arity(st, 0, 1, "health [ADDRESS] [{ lameduck DURATION }]")
    lameduck = 0.0
    for opt in st.body or ():
        if opt.name != "lameduck":
            raise _args.unknown_option(opt, "health", ("lameduck",))
        _args.arity(opt, 1, 1, "lameduck DURATION")
        lameduck = _args.duration(opt, opt.args[0], "lameduck")
    return HealthSpec(endpoint(st, st.args[0] if st.args else "", HealthSpec.endpoint), lameduck)


def parse_ready(st: Statement) -> ReadySpec:
    _args.arity(st, 0, 1, "ready [ADDRESS] [{ probe NAME... }]")
    probes: list[str] = []
    for opt in st.body or ():
        if opt.name != "probe":
            raise _args.unknown_option(opt, "ready", ("probe",))
        _args.arity(opt, 1, None, "probe NAME...")
        probes.extend(_args.zone(opt, name, "probe") for name in opt.args)
    return ReadySpec(endpoint(st, st.args[0] if st.args else "", ReadySpec.endpoint), tuple(probes))


def parse_prometheus(st: Statement) -> Endpoint:
    _args.arity(st, 0, 1, "prometheus [ADDRESS]")
    _args.no_body(st, "prometheus [ADDRESS]")
    return endpoint(st, st.args[0] if st.args else "", Endpoint("127.0.0.1", 9153))


def parse_reload(st: Statement) -> ReloadSpec:
    _args.arity(st, 0, 2, "reload [INTERVAL] [JITTER]")
    _args.no_body(st, "reload [INTERVAL] [JITTER]")
    interval = _args.duration(st, st.args[0], "reload INTERVAL") if st.args else 30.0
    jitter = _args.duration(st, st.args[1], "reload JITTER") if len(st.args) > 1 else interval / 2
    if interval < 2 or jitter < 1:
        raise ConfigError(st.where, "reload: the interval must be at least 2s and the jitter at least 1s")
    return ReloadSpec(interval, min(jitter, interval / 2))


def parse_loop(st: Statement) -> bool:
    _args.arity(st, 0, 0, "loop")
    _args.no_body(st, "loop")
    return True
