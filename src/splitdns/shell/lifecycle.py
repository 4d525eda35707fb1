"""A server's life in a pod: endpoints, readiness and loop probes, reload, graceful stop.

What is decided here is only when and how: the readiness rule, what proves a zone ready and
what a zone does when its tunnel changes are the core's (core/liveness.py). `/ready?zone=Z`
is live also without traffic: the check probes Z's upstreams that have been silent for
READY_HEARD_WITHIN.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import random
import signal
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import dns.rcode
import dns.rdatatype

from splitdns import config, corefile, directives
from splitdns.addresses import host_port
from splitdns.codec import wire
from splitdns.core import liveness, metrics
from splitdns.core.routing import Router
from splitdns.core.tunnel import TunnelState
from splitdns.core.zone import Zone
from splitdns.directives.openvpn import OpenVPNSpec
from splitdns.directives.wireguard import WireGuardSpec
from splitdns.errors import ConfigError
from splitdns.shell import event_loop, http, logs, openvpn, wireguard
from splitdns.shell.server import Server, spawn_into

PROBE_INTERVAL = 1.0
# /ready?zone=Z probes the zone's upstreams that have not replied for this long, so the check
# follows the upstream and not the last client's luck; a dead one reads down after
# max_fails + 1 failed probes (about 3 s with the defaults).
READY_HEARD_WITHIN = 3.0
# After SIGTERM (and the lameduck), queries still waiting upstream get this long to finish;
# then the process exits, health probes or not. The kubelet's patience is not ours to spend.
STOP_DRAIN = 0.5
LOOP_PROBE_ATTEMPTS = 30  # CoreDNS: every second for up to 30 s until one exchange succeeds

# hashlib's own SHA-512, without the OpenSSL libcrypto that importing hashlib loads (about 4 MiB
# of RSS, for digests the resolver never asks for).
if TYPE_CHECKING:
    from hashlib import sha512
else:
    try:
        from _sha512 import sha512
    except ImportError:  # a Python built without it
        from hashlib import sha512



def digest(blocks: list[corefile.ServerBlock]) -> str:
    """SHA-512 of the parsed blocks, as CoreDNS: comments and spacing do not cause a reload."""
    def statement(st: corefile.Statement) -> object:
        return [[t.text for t in st.tokens], [statement(b) for b in st.body or ()]]

    data = [[[k.text for k in b.keys], [statement(d) for d in b.directives]] for b in blocks]
    return sha512(json.dumps(data).encode()).hexdigest()


def _fingerprint(path: str, error: str) -> str:
    """A Corefile that does not parse, told apart by its bytes (when readable) and its error."""
    data = sha512(error.encode())
    with contextlib.suppress(OSError):
        data.update(Path(path).read_bytes())
    return data.hexdigest()


TunnelSpec = OpenVPNSpec | WireGuardSpec


@dataclass
class Runtime:
    server: Server
    path: str | None = None
    default_port: int = config.DEFAULT_PORT
    stopping: bool = False
    version: str = ""
    failed_version: str = ""
    process: metrics.ProcessStats = field(default_factory=metrics.ProcessStats)
    _http: list[asyncio.Server] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _reload_now: asyncio.Event = field(default_factory=asyncio.Event)
    _watchers: dict[TunnelSpec, tuple[openvpn.Watcher | wireguard.Watcher, asyncio.Task[None]]] = \
        field(default_factory=dict)

    # -- start and stop ------------------------------------------------------------------------

    async def start(self) -> None:
        await self.server.start()
        self.process.dropped_mismatched = lambda: self.server.counters.mismatched
        self.process.dropped_unparseable = lambda: self.server.counters.unparseable
        self.process.internal_errors = lambda: self.server.internal_errors
        try:
            await self._open_endpoints()
        except OSError:
            self.server.close()
            raise
        self._follow_tunnels()
        self._probe_zones()
        if self.path is not None and self.server.config.reload is not None:
            self._spawn(self._watch_corefile())

    async def run_until_signalled(self) -> int:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGUSR1, self._reload_now.set)
        await stop.wait()
        await self.stop()
        return 0

    async def stop(self) -> None:
        """Lameduck first: /ready fails at once while DNS keeps answering, then drain."""
        self.stopping = True
        health = self.server.config.health
        if health is not None and health.lameduck > 0:
            logs.info(f"lameduck: still answering for {health.lameduck:g}s")
            await asyncio.sleep(health.lameduck)
        for task in self._tasks:
            task.cancel()
        for _, task in self._watchers.values():
            task.cancel()
        await self.server.drain(STOP_DRAIN)
        self.close()

    def close(self) -> None:
        """Free every port at once, so a new process can take them right away."""
        for srv in self._http:
            srv.close()
        self._http.clear()
        self.server.close()

    # -- HTTP endpoints ----------------------------------------------------------------------

    def _scrape_handler(self) -> http.Handler:
        """/metrics. prometheus_client and our collector are imported at the first scrape, not at
        start: with the modules its exposition imports (ssl, urllib, http.server) they are about 10
        MiB of RSS, which a resolver nobody scrapes never pays; the first scrape pays the import."""
        rendered: list[Callable[[], tuple[str, bytes]]] = []

        def scrape(_: dict[str, list[str]]) -> http.Response:
            if not rendered:
                from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

                from splitdns.shell import exposition

                registry = exposition.registry(exposition.ServerCollector(
                    self._zones_for_metrics, self.process,
                    lambda: [(f"dns://:{port}", stats) for port, stats in self.server.unrouted.items()],
                    lambda: self.server.config.ready is not None, self._zone_live,
                    lambda: not liveness.problems(self.server.zones.values(), None, self.stopping)))
                rendered.append(lambda: (CONTENT_TYPE_LATEST, generate_latest(registry)))
            content_type, body = rendered[0]()
            return 200, content_type, body

        return scrape

    async def _open_endpoints(self) -> None:
        cfg = self.server.config
        routes: dict[tuple[str, int], dict[str, http.Handler]] = {}
        if cfg.health is not None:
            ep = cfg.health.endpoint
            routes.setdefault((ep.host, ep.port), {})["/health"] = self._health
        if cfg.ready is not None:
            routes.setdefault((cfg.ready.host, cfg.ready.port), {})["/ready"] = self._ready
        if cfg.prometheus:
            scrape = self._scrape_handler()
            for ep in cfg.prometheus:
                routes.setdefault((ep.host, ep.port), {})["/metrics"] = scrape
        for (host, port), table in routes.items():
            try:
                self._http.append(await http.serve(host, port, table))
            except OSError as err:
                for srv in self._http:
                    srv.close()
                reason = os.strerror(err.errno) if err.errno else err.strerror  # not asyncio's wording
                raise OSError(err.errno, f"cannot listen for HTTP on {host_port(host or '*', port)}: "
                                         f"{reason}") from None

    def _zones_for_metrics(self) -> list[tuple[str, Zone]]:
        out = []
        for block, zone in self.server.zones.items():
            host = block.bind[0] if block.explicit_bind else ""
            out.append((f"dns://{host_port(host, block.port)}", zone))
        return out

    def _health(self, _: dict[str, list[str]]) -> http.Response:
        return 200, "text/plain", b"OK"

    def _ready(self, query: dict[str, list[str]]) -> http.Response:
        zones = list(self.server.zones.values())
        wanted = None
        if "zone" in query:
            wanted = {z.rstrip(".").lower() + "." for z in query["zone"]}
            chosen = [z for z in zones if set(z.block.zones) & wanted]
            if not chosen:
                known = ", ".join(z.name for z in zones)
                return 404, "text/plain", f"no such zone; zones: {known}\n".encode()
            for zone in chosen:
                self._probe_unheard(zone)
        problems = liveness.problems(zones, wanted, self.stopping)
        if problems:
            return 503, "text/plain", ("not ready\n" + "\n".join(problems) + "\n").encode()
        return 200, "text/plain", b"OK"

    def _probe_unheard(self, zone: Zone) -> None:
        """Probe the zone's upstreams that have been silent a while, so a live check follows
        the upstream and not the last client's luck."""
        for fwd, state in liveness.unheard(zone, self.server.clock(), READY_HEARD_WITHIN):
            self.server.health_checks.check(fwd, state)

    def _zone_live(self, zone: Zone) -> bool:
        """What `/ready?zone=Z` says of the zone now (splitdns_zone_ready), probing as it does."""
        self._probe_unheard(zone)
        return liveness.live(zone)[0] and not self.stopping

    # -- readiness and loop probes -------------------------------------------------------------

    def _probe_zones(self) -> None:
        cfg = self.server.config
        names = [n for b in cfg.blocks if (r := b[directives.READY]) for n in r.probes]
        router = Router(self.server.zones.values())
        for zone in self.server.zones.values():
            if not zone.ready and cfg.ready is not None:
                self._spawn(self._until_ready(zone, liveness.probes(zone, names, router.route)))
            if zone.loops_probed:
                self.check_loops(zone)

    async def _until_ready(self, zone: Zone, probes: tuple[liveness.Probe, ...]) -> None:
        liveness.waiting(zone, probes)
        while not zone.ready:
            answers = [(p, await self.server.ask_upstreams(zone, p.name, p.qtype)) for p in probes]
            ready = liveness.probed(zone, answers)
            if ready is not None:
                logs.info(ready)
                return
            await asyncio.sleep(PROBE_INTERVAL)

    def check_loops(self, zone: Zone) -> None:
        """Probe for a forwarding loop now: at start, after a reload, when upstreams change."""
        self._spawn(self._loop_probe(zone))

    async def _loop_probe(self, zone: Zone) -> None:
        guard = zone.loop
        for _ in range(LOOP_PROBE_ATTEMPTS):
            name = guard.probe_name(os.urandom(6).hex(), os.urandom(6).hex())  # as secrets.token_hex
            key = wire.name_to_wire(name)
            detected_before = guard.probe_sent(key)
            answered = False
            try:
                done = await self.server.ask_upstreams(zone, name, dns.rdatatype.HINFO)
                answered = done.reply is not None
            finally:
                learned = guard.probe_finished(key, answered, detected_before)
            if learned:
                return
            await asyncio.sleep(PROBE_INTERVAL)

    # -- reload --------------------------------------------------------------------------------

    async def _watch_corefile(self) -> None:
        spec = self.server.config.reload
        assert spec is not None and self.path is not None
        with contextlib.suppress(ConfigError):
            self.version = digest(corefile.load(self.path))
        self.process.reload_hash = self.version
        while not self.stopping:
            delay = spec.interval + random.uniform(0, spec.jitter)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._reload_now.wait()
            self._reload_now.clear()
            await self.reload()
            spec = self.server.config.reload or spec

    async def reload(self) -> bool:
        """Re-read the Corefile; serve it if it changed and loads, else keep the old one."""
        assert self.path is not None
        version = ""
        try:
            try:
                blocks = corefile.load(self.path)
            except ConfigError as err:
                # Not parsed, so no digest of the blocks: the file's bytes and the error
                # stand for it, and it is reported once until either changes, not at every poll.
                version = "unparsed:" + _fingerprint(self.path, str(err))
                if version == self.failed_version:
                    return False
                raise
            version = digest(blocks)
            if version in (self.version, self.failed_version):
                return False
            new = config.build(blocks, self.path, self.default_port)
            event_loop.check_reload(new)
            await self.server.swap(new)
        except (ConfigError, OSError) as err:
            self.failed_version = version  # not logged again until the file changes again
            self.process.reloads_failed += 1
            logs.error(f"plugin/reload: Corefile changed but could not be loaded, still serving "
                       f"the previous one: {err}")
            return False
        self.version, self.failed_version = version, ""
        self.process.reload_hash = version
        logs.info(f"plugin/reload: Running configuration SHA512 = {version}")
        self._follow_tunnels()
        self._probe_zones()
        return True

    # -- the tunnel ----------------------------------------------------------------------------

    def _follow_tunnels(self) -> None:
        """One watcher per `openvpn` or `wireguard` spec; zones that share a spec share its state."""
        specs = {s for z in self.server.zones.values() if (s := _tunnel_of(z)) is not None}
        for spec in set(self._watchers) - specs:
            self._watchers.pop(spec)[1].cancel()
        for spec in specs:
            if spec not in self._watchers:
                on_change = functools.partial(self._tunnel_changed, spec)
                watcher = openvpn.Watcher(spec, on_change) if isinstance(spec, OpenVPNSpec) \
                    else wireguard.Watcher(spec, on_change)
                self._watchers[spec] = (watcher, asyncio.ensure_future(watcher.run()))
            self._tunnel_changed(spec, self._watchers[spec][0].state)

    def _tunnel_changed(self, spec: TunnelSpec, state: TunnelState) -> None:
        ours = set(self.server.config.listeners())
        origin = "pushed by the VPN server" if isinstance(spec, OpenVPNSpec) else \
            f"the DNS = line of WireGuard interface {spec.interface}"
        for zone in self.server.zones.values():
            if _tunnel_of(zone) != spec:
                continue
            change = liveness.follow_tunnel(zone, state, ours, origin)
            zone.stats.tunnel.seen(state.up, time.time())
            if change.learn is not None:
                self.server.learn_zones(zone, change.learn)
            if change.loop_error is not None:
                logs.error(change.loop_error)
            if change.probe_loops:
                self.check_loops(zone)

    def _spawn(self, coro: Coroutine[object, object, None]) -> None:
        spawn_into(self._tasks, coro)


def _tunnel_of(zone: Zone) -> TunnelSpec | None:
    return zone.block[directives.OPENVPN] or zone.block[directives.WIREGUARD]
