"""The server: its zones, its listeners and their sockets, from start through reload to stop.

What happens to a query is decided by the core (core/zone.py) and carried out by the UDP
path (udp.py: reads, hot-path hits) and TCP clients (tcp.py); every miss of either waits on a
flight `Flights` owns (flights.py), whose attempts the driver makes (misses.py).
Why the UDP path is shaped as it is, with the figures: bench/README.md, "Where splitdns's time goes".
Tests: tests/test_server_inprocess.py, tests/test_serve.py, tests/test_lifecycle_inprocess.py.
"""

from __future__ import annotations

import asyncio
import errno
import os
import random
import socket
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field

from splitdns.codec import wire
from splitdns.config import Block, Config
from splitdns.core import metrics
from splitdns.core.cache import Cache
from splitdns.core.exchange import Done
from splitdns.core.loop import LoopProbes
from splitdns.core.names import Pod, pod_of
from splitdns.core.routing import Router, cache_key
from splitdns.core.zone import Zone
from splitdns.shell import datagrams, hostsfiles, tcp, upstream
from splitdns.shell.flights import Flights
from splitdns.shell.health_checks import UpstreamHealthChecks
from splitdns.shell.listener import Listener
from splitdns.shell.misses import Misses
from splitdns.shell.udp import UdpPath

# A burst of clients at once (a herd at expiry) must queue, not drop: the kernel's default
# of about 200 KiB holds some 200 queries. The kernel caps this at net.core.rmem_max.
UDP_RECEIVE_BUFFER = 4 * 1024 * 1024


@dataclass
class Server:
    config: Config
    clock: Callable[[], float] = time.monotonic
    rng: random.Random = field(default_factory=lambda: random.Random(random.SystemRandom().getrandbits(64)))
    counters: upstream.Counters = field(default_factory=upstream.Counters)
    query_ids: Callable[[], int] = field(default_factory=upstream.QueryIds)
    listeners: list[Listener] = field(default_factory=list)
    zones: dict[Block, Zone] = field(default_factory=dict)
    unrouted: dict[int, metrics.ZoneStats] = field(default_factory=dict)  # by port (Listener)
    _hosts_watch: asyncio.Task[None] | None = None  # hostsfiles.watch, cancelled at the end
    pod: Pod | None = None  # the pod's search list and protected names (core/names.py)

    def __post_init__(self) -> None:
        Cache.wall_offset = time.time() - self.clock()  # the cache judges RRSIG times in wall time
        self.tasks: set[asyncio.Task[None]] = set()  # stream attempts: end with the queries
        self.health_check_tasks: set[asyncio.Task[None]] = set()  # end with the server
        self.loop_probes: LoopProbes = {}  # shared by every zone of the server (loop.py)
        self.health_checks = UpstreamHealthChecks(
            self.clock, self.counters, lambda coro: spawn_into(self.health_check_tasks, coro),
            self.query_ids)
        self.flights = Flights(lambda: self.config, self.clock, lambda coro: spawn_into(self.tasks, coro))
        self.misses = Misses(self.flights, self.clock, self.rng, self.counters, self.query_ids,
                             self.health_checks, lambda coro: spawn_into(self.tasks, coro))
        self.udp = UdpPath(self.clock, self.flights)
        # Each listener's read callback (bench/wakeup.py times it by calling it directly).
        self._udp_readable = self.udp.readable
        self.connections = tcp.Connections()

    @property
    def internal_errors(self) -> int:
        return self.flights.internal_errors

    @property
    def tcp_connections(self) -> int:
        return self.connections.held

    async def ask_upstreams(self, zone: Zone, name: str, qtype: int) -> Done:
        """Ask a name through the zone's upstreams, bypassing the cache (readiness, loops)."""
        return await self.flights.ask_upstreams(zone, name, qtype)

    def _zone(self, block: Block, cache: Cache | None = None) -> Zone:
        return Zone(block, cache, self.config.limits.cache_memory, self.loop_probes)

    def _know_pod(self, config: Config) -> None:
        """Tell every zone what the Corefile says of the pod (names.py decides which guards
        apply where); the domains a VPN pushes join the protected names as they come."""
        self.pod = pod_of(config.blocks)
        for zone in self.zones.values():
            zone.know_pod(self.pod)

    async def start(self) -> None:
        self.zones = {block: self._zone(block) for block in self.config.blocks}
        self._know_pod(self.config)
        hostsfiles.refresh_all(self.zones.values())
        await self._listen(self.config, {})
        self._hosts_watch = asyncio.get_running_loop().create_task(
            hostsfiles.watch(lambda: self.zones.values()))

    async def _listen(self, config: Config, keep: dict[tuple[str, int], Listener]) -> None:
        """Open a listener for each (address, port) of the config, keeping the ones in `keep`."""
        opened: list[Listener] = []
        for (host, port), blocks in config.listeners().items():
            router = Router(self.zones[b] for b in blocks)
            if (host, port) in keep:
                keep[(host, port)].route_by(router)
                opened.append(keep[(host, port)])
                continue
            listener = Listener(host, port, router, unrouted=self.unrouted.setdefault(
                port, metrics.ZoneStats()))
            try:
                await self._open(listener)
            except OSError as err:
                if host == "::1" and not any(b.explicit_bind for b in blocks) and \
                        err.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                    continue  # no IPv6 loopback here; 127.0.0.1 is enough
                for new in opened:
                    if new not in keep.values():
                        self._close_listener(new)
                # The system's words for the errno: asyncio's own ("error while attempting to bind
                # on address ('127.0.0.1', 53): ...") would show a Python tuple to the user.
                reason = os.strerror(err.errno) if err.errno else err.strerror
                raise OSError(err.errno, f"cannot listen on {listener.label}: {reason}") from None
            opened.append(listener)
        self.listeners = opened

    async def swap(self, config: Config) -> None:
        """Serve a new config. Zones whose block did not change keep their state; a changed
        zone keeps its cache when neither the cache settings nor its upstreams changed
        (resolve.cache_key). Raises OSError if a new listener cannot open, and then the old
        config stays in service."""
        old_config, old_zones = self.config, self.zones
        old_listeners = {(li.host, li.port): li for li in self.listeners}
        caches = {cache_key(b): z.cache for b, z in old_zones.items() if z.cache}
        self.zones = {b: old_zones.get(b) or Zone(b, caches.get(cache_key(b)),
                                                  config.limits.cache_memory, self.loop_probes)
                      for b in config.blocks}
        hostsfiles.refresh_all(z for b, z in self.zones.items() if b not in old_zones)
        self._know_pod(config)
        try:
            await self._listen(config, dict(old_listeners))
        except OSError:
            self.zones = old_zones
            self._know_pod(old_config)
            self.listeners = list(old_listeners.values())
            for (host, port), listener in old_listeners.items():
                blocks = old_config.listeners().get((host, port), ())
                listener.router = Router(self.zones[b] for b in blocks)
            raise
        for listener in old_listeners.values():
            if listener not in self.listeners:
                self._close_listener(listener)
        self.config = config

    async def _open(self, listener: Listener) -> None:
        family = socket.AF_INET6 if ":" in listener.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UDP_RECEIVE_BUFFER)
            sock.bind((listener.host, listener.port))
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        listener.udp = sock
        listener.batch = datagrams.open_batch(sock)
        listener.single = datagrams.OneByOne(sock, 1)
        try:
            listener.tcp = await asyncio.start_server(
                lambda r, w: tcp.serve_client(self.flights, self.connections, listener, r, w),
                listener.host, listener.port, reuse_address=True, backlog=128)
        except OSError:
            sock.close()
            listener.udp = None
            raise
        asyncio.get_running_loop().add_reader(sock.fileno(), self._udp_readable, listener)

    def learn_zones(self, zone: Zone, names: tuple[str, ...]) -> None:
        """Route names the VPN pushed (`openvpn { domains }`) to the zone, on its listeners."""
        for listener in self.listeners:
            listener.learn(zone, names)
        if self.pod is not None:
            self.pod.protected.update(wire.name_to_wire(n) for n in names)

    def _close_listener(self, listener: Listener) -> None:
        if listener.udp is not None:
            asyncio.get_running_loop().remove_reader(listener.udp.fileno())
            listener.udp.close()
            listener.udp = None
            listener.batch = listener.single = None
        if listener.tcp is not None:
            listener.tcp.close()
            listener.tcp = None

    async def drain(self, budget: float) -> None:
        """Stop accepting queries, then let those in flight finish (bounded by `budget`).
        Health probes end at once: nobody is left to use what they would find."""
        self._stop_watching()
        for listener in self.listeners:
            self._close_listener(listener)
        self.listeners.clear()
        for task in self.health_check_tasks:
            task.cancel()
        await self.flights.landed(budget)  # their attempts are callbacks, or tasks in `tasks`
        for _ in range(int(budget * 20)):
            if not self.connections.held:
                break
            await asyncio.sleep(0.05)

    def _stop_watching(self) -> None:
        if self._hosts_watch is not None:
            self._hosts_watch.cancel()
            self._hosts_watch = None

    def close(self) -> None:
        self._stop_watching()
        for listener in self.listeners:
            self._close_listener(listener)
        self.listeners.clear()
        for task in self.tasks | self.health_check_tasks:
            task.cancel()
        self.misses.close()
        self.flights.close()


def spawn_into(tasks: set[asyncio.Task[None]], coro: Coroutine[object, object, None]) -> None:
    """Run `coro` as a task that `tasks` holds until it ends: the loop keeps only a weak
    reference, and a stop must be able to wait for or cancel what is running."""
    task = asyncio.get_running_loop().create_task(coro)
    tasks.add(task)
    task.add_done_callback(tasks.discard)
