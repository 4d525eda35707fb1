"""A server's life in a pod: endpoints, readiness and loop probes, reload, graceful stop.

What is decided here is only when and how: the readiness rule, what proves a zone ready and
what a zone does when its tunnel changes are the core's (core/liveness.py). `/ready?zone=Z`
is live also without traffic: the check probes Z's upstreams that have been silent for
READY_HEARD_WITHIN.
Tests: tests/test_lifecycle_inprocess.py, tests/test_runtime.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import random
import signal
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path

import dns.rcode
import dns.rdatatype

from splitdns import config, corefile, directives
from splitdns.addresses import host_port
from splitdns.core import confinement, liveness, metrics
from splitdns.core.reloads import Reloads, digest, fingerprint
from splitdns.core.routing import Router
from splitdns.core.tunnel import TunnelState
from splitdns.core.zone import Zone
from splitdns.directives import TunnelSpec
from splitdns.errors import ConfigError
from splitdns.shell import canaries, event_loop, http, logs, tunnel_watcher, tunnels
from splitdns.shell.server import Server, spawn_into

PROBE_INTERVAL = 1.0
# /ready?zone=Z probes the zone's upstreams that have not replied for this long, so the check
# follows the upstream and not the last client's luck; a dead one reads down after
# max_fails + 1 failed probes (about 3 s with the defaults).
READY_HEARD_WITHIN = 3.0
# After SIGTERM (and the lameduck), queries still waiting upstream get this long to finish;
# then the process exits, health probes or not. The kubelet's patience is not ours to spend.
STOP_DRAIN = 0.5

# What each signal does, as CoreDNS decides it (its signal trap): TERM and INT drain and stop,
# QUIT stops at once, USR1 reloads; HUP is ignored (a closing terminal or a supervisor sends it
# outside the user's control), and so is USR2 (CoreDNS's binary upgrade, which we do not have).
# Unlike CoreDNS, each is logged, the ignored ones too: no signal is received unsaid.
STOP, QUIT, RELOAD, IGNORE = "stop", "quit", "reload", "ignore"
SIGNALS = {signal.SIGTERM: STOP, signal.SIGINT: STOP, signal.SIGQUIT: QUIT, signal.SIGUSR1: RELOAD,
           signal.SIGHUP: IGNORE, signal.SIGUSR2: IGNORE}

def _fingerprint(path: str, error: str) -> str:
    """A Corefile that does not parse, told apart by its bytes (when readable) and its error."""
    text = b""
    with contextlib.suppress(OSError):
        text = Path(path).read_bytes()
    return fingerprint(text, error)


@dataclass
class Runtime:
    server: Server
    path: str | None = None
    default_port: int = config.DEFAULT_PORT
    stopping: bool = False
    reloads: Reloads = field(default_factory=Reloads)  # whether a reload is news (core/reloads.py)
    process: metrics.ProcessStats = field(default_factory=metrics.ProcessStats)
    _http: list[asyncio.Server] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _reload_now: asyncio.Event = field(default_factory=asyncio.Event)
    _signalled: asyncio.Event | None = None  # set by SIGTERM, SIGINT or SIGQUIT (take_signals)
    _quit_now: bool = False                  # SIGQUIT: no drain
    _watchers: dict[TunnelSpec, tuple[tunnel_watcher.Watcher, asyncio.Task[None]]] = \
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
        if self.path is not None:
            with contextlib.suppress(ConfigError):
                self.reloads.version = digest(corefile.load(self.path))
            if self.server.config.reload is not None:
                self._spawn(self._watch_corefile())

    def take_signals(self) -> None:
        """From now on every signal `SIGNALS` names is logged as it arrives and acted on (before
        the banner, which tells scripts the server is up and takes signals)."""
        if self._signalled is not None:
            return
        loop = asyncio.get_running_loop()
        self._signalled = asyncio.Event()

        def received(sig: signal.Signals) -> None:
            action = SIGNALS[sig]
            logs.info(f"{sig.name}: {self._signal_line(action)}")
            if action == RELOAD and self.path is not None:
                if self.server.config.reload is not None:
                    self._reload_now.set()  # the watcher reloads, and its next poll counts from now
                else:
                    self._spawn(self._reload_quietly())
            elif action in (STOP, QUIT) and self._signalled is not None:
                self._quit_now = self._quit_now or action == QUIT
                self._signalled.set()

        for sig in SIGNALS:
            loop.add_signal_handler(sig, received, sig)

    async def run_until_signalled(self) -> int:
        """Serve until SIGTERM or SIGINT (drain, exit 0) or SIGQUIT (exit 0 at once); none of the
        signals `SIGNALS` names ends the process unsaid."""
        self.take_signals()
        assert self._signalled is not None
        loop = asyncio.get_running_loop()
        try:
            await self._signalled.wait()
            if self._quit_now:
                self.close()
            else:
                await self.stop()
        finally:
            for sig in SIGNALS:
                loop.remove_signal_handler(sig)
        return 0

    def _signal_line(self, action: str) -> str:
        if action == STOP:
            health = self.server.config.health
            lameduck = health.lameduck if health is not None else 0.0
            first = f"lameduck {lameduck:g}s (/ready fails, DNS still answers), then " if lameduck else ""
            return (f"draining: {first}up to {STOP_DRAIN:g}s for queries waiting upstream, then "
                    "exiting")
        if action == QUIT:
            return "quitting at once, without draining"
        if action == RELOAD:
            if self.path is None:
                return "no Corefile file to reload (it came from the environment); ignored"
            return f"reloading {self.path}"
        return "ignored, as CoreDNS ignores it (a terminal or a supervisor may send it); SIGUSR1 reloads"

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
        shown = liveness.proofs(zones, wanted) if wanted else []  # the tunnel canary's answer
        return 200, "text/plain", ("OK\n" + "\n".join(shown) + "\n").encode() if shown else b"OK"

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
            if not zone.ready and cfg.ready is not None and not liveness.ready_alone(zone):
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
        """Ask the probes the zone's loop guard says to ask (core/loop.py), PROBE_INTERVAL apart."""
        probing = zone.loop.probing()
        while (name := probing.next(os.urandom(6).hex(), os.urandom(6).hex())) is not None:  # token_hex
            answered = False
            try:
                done = await self.server.ask_upstreams(zone, name, dns.rdatatype.HINFO)
                answered = done.reply is not None
            finally:
                probing.finished(answered)
            if not probing.over:
                await asyncio.sleep(PROBE_INTERVAL)

    # -- reload --------------------------------------------------------------------------------

    async def _watch_corefile(self) -> None:
        spec = self.server.config.reload
        assert spec is not None and self.path is not None
        self.process.reload_hash = self.reloads.version
        while not self.stopping:
            delay = spec.interval + random.uniform(0, spec.jitter)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._reload_now.wait()
            self._reload_now.clear()
            await self.reload()
            spec = self.server.config.reload or spec

    async def _reload_quietly(self) -> None:
        """SIGUSR1 without `reload`: one reload now, as CoreDNS reloads on it either way."""
        await self.reload()

    async def reload(self) -> bool:
        """Re-read the Corefile; serve it if it changed and loads, else keep the old one."""
        assert self.path is not None
        reloads = self.reloads
        try:
            try:
                blocks = corefile.load(self.path)
            except ConfigError as err:
                # Not parsed, so no digest of the blocks: the file's bytes and the error
                # stand for it.
                if not reloads.unparsed(_fingerprint(self.path, str(err))):
                    return False
                raise
            if not reloads.changed(digest(blocks)):
                return False
            new = config.build(blocks, self.path, self.default_port)
            event_loop.check_reload(new)
            await self.server.swap(new)
        except (ConfigError, OSError) as err:
            reloads.refused()
            self.process.reloads_failed += 1
            logs.error(f"plugin/reload: Corefile changed but could not be loaded, still serving "
                       f"the previous one: {err}")
            return False
        logs.info(reloads.loaded())
        self.process.reload_hash = reloads.version
        self._follow_tunnels()
        self._probe_zones()
        return True

    # -- the tunnel ----------------------------------------------------------------------------

    def _follow_tunnels(self) -> None:
        """One watcher per tunnel spec (shell/tunnels.py); zones that share a spec share its state."""
        specs = {spec: kind for z in self.server.zones.values()
                 if (kind := z.block.tunnel) is not None and (spec := z.block.tunnel_spec) is not None}
        for spec in set(self._watchers) - set(specs):
            self._watchers.pop(spec)[1].cancel()
        for spec, kind in specs.items():
            if spec not in self._watchers:
                watcher = tunnels.watcher(kind, spec, functools.partial(self._tunnel_changed, spec))
                self._watchers[spec] = (watcher, asyncio.ensure_future(watcher.run()))
            self._tunnel_changed(spec, self._watchers[spec][0].state)

    def _tunnel_changed(self, spec: TunnelSpec, state: TunnelState) -> None:
        state = confinement.confine(state, spec)  # the interface its queries may leave by
        ours = set(self.server.config.listeners())
        for zone in self.server.zones.values():
            if zone.block.tunnel_spec != spec:
                continue
            before = zone.tunnel
            change = liveness.follow_tunnel(zone, state, ours, spec.dns_origin)
            canaries.follow(zone, before, state, self.server.ask_upstreams, self._spawn,
                            lambda z: z in self.server.zones.values())
            zone.stats.tunnel.seen(state.up, time.time())
            if change.learn is not None:
                self.server.learn_zones(zone, change.learn)
            if change.loop_error is not None:
                logs.error(change.loop_error)
            if change.probe_loops:
                self.check_loops(zone)

    def _spawn(self, coro: Coroutine[object, object, None]) -> None:
        spawn_into(self._tasks, coro)
