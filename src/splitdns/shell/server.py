"""The asyncio shell: listeners, the exchange loop, health probes. Decides no policy.

UDP sockets are read with `loop.add_reader` and recvmmsg in batches (datagrams.py), not
a `DatagramProtocol`: the stock transport reads 256 KiB per datagram, which costs an
mmap/munmap per query. Cache hits are answered inside the
read callback, with no task and no dnspython, and sent with one sendmmsg per batch. At a
pod's rates a wakeup finds one query, and recvfrom/sendto (C methods) cost less than the
ctypes calls: `Listener.reader` picks per wakeup. A miss is a task awaiting the exchange:
carrying it on callbacks instead was measured 8 % slower (asyncio's Task and Future are
C; closures and guards in Python are not).
"""

from __future__ import annotations

import asyncio
import errno
import operator
import random
import secrets
import socket
import struct
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field

import dns.rcode
import dns.rdatatype

from splitdns.addresses import host_port
from splitdns.codec import entries, queries, wire
from splitdns.codec.entries import Entry
from splitdns.config import Block, Config
from splitdns.core import local, metrics, resolve
from splitdns.core.local import Rewritten
from splitdns.core.memo import Remembered, Tally
from splitdns.directives import loadbalance
from splitdns.shell import datagrams, hostsfiles, logs, tcp, upstream
from splitdns.shell.health_checks import UpstreamHealthChecks

_TALLY = operator.attrgetter("tally")
# A burst of clients at once (a herd at expiry) must queue, not drop: the kernel's default
# of about 200 KiB holds some 200 queries. The kernel caps this at net.core.rmem_max.
UDP_RECEIVE_BUFFER = 4 * 1024 * 1024
# Reads further apart than this, the last of which found a single datagram, mean queries
# arrive one at a time (a pod's few hundred a second): the next is read by recvfrom. Closer
# reads, or a read that found several, mean they queue: recvmmsg. A lone hit by recvfrom
# costs about a quarter less in process (`python -m bench.wakeup`); under dnsperf at 5000
# qps, 9 % less CPU per query (bench/README.md).
QUIET_GAP = 100e-6


@dataclass
class Listener:
    host: str
    port: int
    router: resolve.Router
    udp: socket.socket | None = None
    batch: datagrams.Batch | datagrams.OneByOne | None = None
    single: datagrams.OneByOne | None = None  # the reader of lone datagrams
    tcp: asyncio.Server | None = None
    last_read: float = float("-inf")
    last_count: int = 0  # datagrams the last read found
    # Replies no zone gave (REFUSED for no zone or another class, FORMERR, NOTIMP): counted
    # too, under CoreDNS's zone label "dropped"; shared by the listeners of a port.
    unrouted: metrics.ZoneStats = field(default_factory=metrics.ZoneStats)

    def reader(self, now: float) -> datagrams.Batch | datagrams.OneByOne | None:
        """The reader for a wakeup at `now`: one datagram by recvfrom when they come one at a
        time, a batch when they queue (QUIET_GAP)."""
        quiet = self.last_count <= 1 and now - self.last_read > QUIET_GAP
        self.last_read = now
        return self.single if quiet else self.batch

    @property
    def label(self) -> str:
        return f"dns://{host_port(self.host, self.port)}"

    @property
    def family(self) -> str:
        return "2" if ":" in self.host else "1"  # CoreDNS's label values


@dataclass
class Server:
    config: Config
    clock: Callable[[], float] = time.monotonic
    rng: random.Random = field(default_factory=lambda: random.Random(secrets.randbits(64)))
    counters: upstream.Counters = field(default_factory=upstream.Counters)
    query_ids: Callable[[], int] = field(default_factory=upstream.QueryIds)
    listeners: list[Listener] = field(default_factory=list)
    zones: dict[Block, resolve.Zone] = field(default_factory=dict)
    _inflight: dict[tuple[int, bytes], asyncio.Future[tuple[resolve.Done, Entry | None]]] = \
        field(default_factory=dict)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)  # queries and refreshes
    _probe_tasks: set[asyncio.Task[None]] = field(default_factory=set)  # end with the server
    tcp_connections: int = 0  # held by tcp.serve_client
    _hosts_watch: asyncio.Task[None] | None = None  # hostsfiles.watch, cancelled at the end
    loop_probes: dict[bytes, resolve.Zone] = field(default_factory=dict)
    internal_errors: int = 0
    unrouted: dict[int, metrics.ZoneStats] = field(default_factory=dict)  # by port (Listener)

    def __post_init__(self) -> None:
        self.health_checks = UpstreamHealthChecks(
            self.clock, self.counters, lambda coro: spawn_into(self._probe_tasks, coro), self.query_ids)

    async def start(self) -> None:
        self.zones = {block: resolve.Zone(block, cache_bytes=self.config.limits.cache_memory)
                      for block in self.config.blocks}
        hostsfiles.refresh_all(self.zones.values())
        await self._listen(self.config, {})
        self._hosts_watch = asyncio.get_running_loop().create_task(
            hostsfiles.watch(lambda: self.zones.values()))

    async def _listen(self, config: Config, keep: dict[tuple[str, int], Listener]) -> None:
        """Open a listener for each (address, port) of the config, keeping the ones in `keep`."""
        opened: list[Listener] = []
        for (host, port), blocks in config.listeners().items():
            router = resolve.Router(self.zones[b] for b in blocks)
            if (host, port) in keep:
                keep[(host, port)].router = router  # swapped atomically: no query is lost
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
                raise OSError(err.errno, f"cannot listen on {listener.label}: {err.strerror}") \
                    from None
            opened.append(listener)
        self.listeners = opened

    async def swap(self, config: Config) -> None:
        """Serve a new config. Zones whose block did not change keep their state; a changed
        zone keeps its cache when neither the cache settings nor its upstreams changed
        (resolve.cache_key). Raises OSError if a new listener cannot open, and then the old
        config stays in service."""
        old_config, old_zones = self.config, self.zones
        old_listeners = {(li.host, li.port): li for li in self.listeners}
        caches = {resolve.cache_key(b): z.cache for b, z in old_zones.items() if z.cache}
        self.zones = {b: old_zones.get(b) or resolve.Zone(b, caches.get(resolve.cache_key(b)),
                                                         config.limits.cache_memory)
                      for b in config.blocks}
        hostsfiles.refresh_all(z for b, z in self.zones.items() if b not in old_zones)
        try:
            await self._listen(config, dict(old_listeners))
        except OSError:
            self.zones = old_zones
            self.listeners = list(old_listeners.values())
            for (host, port), listener in old_listeners.items():
                blocks = old_config.listeners().get((host, port), ())
                listener.router = resolve.Router(self.zones[b] for b in blocks)
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
                lambda r, w: tcp.serve_client(self, r, w, listener), listener.host, listener.port,
                reuse_address=True, backlog=128)
        except OSError:
            sock.close()
            listener.udp = None
            raise
        asyncio.get_running_loop().add_reader(sock.fileno(), self._udp_readable, listener)

    def learn_zones(self, zone: resolve.Zone, names: tuple[str, ...]) -> None:
        """Route names the VPN pushed (`openvpn { domains }`) to the zone, on its listeners."""
        for listener in self.listeners:
            if listener.router.owns(zone):
                listener.router.learn(zone, names)

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
        for task in self._probe_tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=budget)
        for _ in range(int(budget * 20)):
            if not self.tcp_connections:
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
        for task in self._tasks | self._probe_tasks:
            task.cancel()

    # -- UDP ---------------------------------------------------------------------------------

    def _udp_readable(self, listener: Listener) -> None:
        """One batch per wakeup (datagrams.BATCH): then the loop's other work gets a turn,
        also when every datagram takes the slow path (garbage, misses)."""
        now = self.clock()
        batch = listener.reader(now)
        assert batch is not None and listener.udp is not None
        try:
            count = batch.receive()
        except OSError as err:
            logs.error(f"{listener.label}: {err.strerror}; reading one datagram at a time from now on")
            listener.batch = datagrams.OneByOne(listener.udp)
            return
        listener.last_count = count
        if not count:
            return
        repeats: list[Remembered] = []  # memo hits
        rendered: list[Tally] = []  # cache hits rendered anew
        try:
            for i in batch.answer_known(listener.router.memo.find, now, repeats):
                try:
                    self._udp_datagram(listener, batch, i, rendered, now)
                except Exception as err:  # our own bug: lose this datagram, not the batch
                    self._internal_error(err)
        finally:
            batch.send()  # the replies first, the bookkeeping after
            if repeats or rendered:
                self._count_hits(repeats, rendered, listener, now)

    def _udp_datagram(self, listener: Listener, batch: datagrams.Batch | datagrams.OneByOne,
                      i: int, hits: list[Tally], now: float) -> None:
        """A datagram the memo did not know: a hit rendered anew, an error reply, or a miss."""
        data = batch.datagram(i)
        q = wire.parse_query(data)
        if q is not None and self._answer_hit(q, data, listener, batch, i, hits, now):
            return
        verdict = queries.read(data) if q is None else q
        if verdict is None:
            return
        if isinstance(verdict, bytes):
            batch.reply(i, verdict)
            self.account_unrouted(listener, "udp", data, verdict, now)
            return
        self._spawn(self._resolve_udp(verdict, listener, batch.peer(i), len(data)))

    def _answer_hit(self, q: wire.Query, data: bytes, listener: Listener,
                    batch: datagrams.Batch | datagrams.OneByOne, i: int,
                    hits: list[Tally], now: float) -> bool:
        """The hot path: a fresh cache entry answered from wire bytes. False on a miss.
        The reply is remembered (memo.py) unless the zone logs every query."""
        zone = listener.router.route(q.name)
        if zone is None:
            return False
        entry = zone.cache.get(q.key, now) if zone.cache is not None else None
        ttl: int | None = None
        held: dict[bytes, Entry] | None = None
        if entry is not None:
            ttl = entries.remaining(entry, now)
        elif zone.local is not None and q.key in zone.local.answers:  # made by the block itself
            held = zone.local.answers
            entry = held[q.key]
        else:
            return False
        out = entries.render(entry, ttl, q) if held is None else local.render(entry, q, zone.cache)
        turns = None
        if zone.turn is not None:  # loadbalance: every rotation once, then each in turn
            turns = loadbalance.rotations(out)
            out = turns[zone.next_turn(len(turns))]
        if len(out) > q.max_udp:
            out = wire.truncated(q, struct.unpack_from("!H", out, 2)[0])
            turns = None
        batch.reply(i, out)
        hits.append((zone, q.qtype, out[3] & 0xF))
        if zone.block.log is not None:
            self._log_query(zone.block, q, batch.peer(i), "udp", len(data), out, now)
        elif held is None and zone.cache is not None and zone.cache.spec.prefetch_amount:
            self._prefetch(zone, q, entry, listener.router, now)  # every hit counts: no memo
        else:
            listener.router.memo.remember(data, zone, q.key, entry, ttl, q.qtype, out, now, held, turns)
        return True

    def _prefetch(self, zone: resolve.Zone, q: wire.Query, entry: Entry,
                  router: resolve.Router, now: float) -> None:
        """A popular entry close to its expiry: ask the upstream again in the background."""
        assert zone.cache is not None
        if not zone.cache.prefetch_due(q.key, entry, now):
            return
        rewritten = None
        if zone.local is not None:  # ask upstream what a miss would ask (rewrite)
            made = zone.local.decide(q)
            if isinstance(made, bytes):
                return  # answered by the block itself now: nothing to fetch
            rewritten = made
        fwd = zone.forward_for(q.name if rewritten is None else rewritten.query.name)
        if fwd is not None:
            zone.stats.prefetches += 1
            self._spawn(self._refresh(zone, fwd, q, router, rewritten, "prefetching a popular answer"))

    def _count_hits(self, repeats: list[Remembered], rendered: list[Tally], listener: Listener,
                    start: float) -> None:
        """After the batch went out: each reply waited from the read to the send. Hits of
        one kind (zone, type, rcode) are counted at once: a batch is mostly a few hot names,
        and at a pod's rates a single one (no Counter for it: this delays the next read)."""
        elapsed = self.clock() - start
        family = listener.family
        kinds: Iterable[tuple[Tally, int]]
        if len(repeats) + len(rendered) == 1:
            kinds = (((repeats[0].tally if repeats else rendered[0]), 1),)
        else:
            hits = Counter(map(_TALLY, repeats))
            hits.update(rendered)
            kinds = hits.items()
        for (zone, qtype, rcode), times in kinds:
            stats = zone.stats
            stats.cache_hits += times
            stats.answered_alike("udp", family, qtype, rcode, elapsed, times)

    async def _resolve_udp(self, q: wire.Query, listener: Listener, addr: datagrams.Peer,
                           size: int) -> None:
        start = self.clock()
        out, zone = await self.answer(q, listener)
        if len(out) > q.max_udp:
            out = wire.truncated(q, struct.unpack_from("!H", out, 2)[0])
        if listener.udp is None:
            return  # closed by a reload or a stop while we waited upstream
        self._send_udp(listener.udp, out, addr)
        self.account(zone, q, listener, addr, "udp", size, out, start)

    @staticmethod
    def _send_udp(sock: socket.socket, data: bytes, addr: datagrams.Peer) -> None:
        # A full buffer or a vanished client: UDP promises nothing, and neither do we.
        try:  # noqa: SIM105 (contextlib.suppress costs a context manager per reply)
            sock.sendto(data, addr)
        except OSError:
            pass

    # -- resolution --------------------------------------------------------------------------

    async def answer(self, q: wire.Query, listener: Listener) -> tuple[bytes, resolve.Zone | None]:
        """The reply for a query, from cache or upstream (the full path, any transport)."""
        try:
            out, zone = await self._resolve(q, listener)
            return (zone.balanced(out) if zone is not None else out), zone
        except Exception as err:  # our own bug: the client still gets an answer, we a log line
            self._internal_error(err)
            return wire.error_reply(q, dns.rcode.SERVFAIL), None

    def _internal_error(self, err: BaseException) -> None:
        self.internal_errors += 1
        logs.error(f"internal error while resolving: {type(err).__name__}: {err}")

    async def _resolve(self, q: wire.Query, listener: Listener) -> tuple[bytes, resolve.Zone | None]:
        zone = listener.router.route(q.name)
        if zone is None:
            return wire.error_reply(q, dns.rcode.REFUSED), None
        looped = self.loop_probes.get(q.name) if q.qtype == dns.rdatatype.HINFO else None
        if looped is not None:
            return self._loop_detected(looped, q), zone
        if zone.loop_error:
            return wire.error_reply(q, dns.rcode.SERVFAIL, (resolve.EDE_NOT_READY, zone.loop_error)), zone
        now = self.clock()
        if zone.cache is not None:
            entry = zone.cache.get(q.key, now)
            if entry is not None:
                zone.stats.cache_hits += 1
                if zone.cache.spec.prefetch_amount:
                    self._prefetch(zone, q, entry, listener.router, now)
                return entries.render(entry, entries.remaining(entry, now), q), zone
            zone.stats.cache_misses += 1
        rewritten = None
        if zone.local is not None:  # rewrite, template, hosts (local.py)
            made = zone.local.decide(q)
            if isinstance(made, bytes):
                return local.render(made, q, zone.cache), zone
            rewritten = made
        fwd = zone.forward_for(q.name if rewritten is None else rewritten.query.name)
        if fwd is None:
            self._log_error(zone.block, q, dns.rcode.SERVFAIL, "no next plugin found")
            return wire.error_reply(q, dns.rcode.SERVFAIL), zone
        if fwd.spec.tunnel:
            down = zone.tunnel_down(q, now)
            if down is not None:
                return down, zone
        stale = zone.stale(q, now)
        if stale is not None and (zone.stale_first or not zone.refresh_due(q, now)):
            zone.stats.served_stale += 1
            if zone.refresh_due(q, now):
                zone.hold_refresh(q, now)
                self._spawn(self._refresh(zone, fwd, q, listener.router, rewritten))
            return stale, zone
        done, entry = await self._merged(zone, fwd, q, listener.router, rewritten)
        if done.error is not None:
            self._log_error(zone.block, q, done.rcode, done.error)
            if stale is not None:
                zone.hold_refresh(q, self.clock())  # verify mode: stale at once for a while
                zone.stats.served_stale += 1
                return stale, zone
        return zone.render(q, done, entry, self.clock()), zone

    def _loop_detected(self, zone: resolve.Zone, q: wire.Query) -> bytes:
        """Our own loop probe came back to us: the zone's upstreams lead here."""
        ups = ", ".join(str(u.upstream) for f in zone.forwards for u in f.upstreams)
        zone.loop_error = (f"forwarding loop detected for zone {zone.name}: a probe sent to {ups} "
                           "came back to this server; fix the forward target")
        zone.stats.loops_detected += 1
        logs.error(f"plugin/loop: {zone.loop_error}. Query: \"HINFO {wire.wire_to_text(q.name)}\"")
        return wire.error_reply(q, dns.rcode.SERVFAIL, (resolve.EDE_NOT_READY, zone.loop_error))

    async def ask_upstreams(self, zone: resolve.Zone, name: str, qtype: int) -> resolve.Done:
        """Ask a name through the zone's upstreams, bypassing the cache (readiness, loops)."""
        raw = wire.name_to_wire(name)
        q = wire.question_query(raw, qtype)
        fwd = zone.forward_for(raw)
        if fwd is None:
            return resolve.Done(error=f"no forward in zone {zone.name} covers {name}")
        return await self._exchange(zone, fwd, q)

    async def _refresh(self, zone: resolve.Zone, fwd: resolve.ForwardState, q: wire.Query,
                       router: resolve.Router, rewritten: Rewritten | None = None,
                       why: str = "refreshing a stale answer") -> None:
        done, _ = await self._merged(zone, fwd, q, router, rewritten)
        if done.error is not None:
            self._log_error(zone.block, q, done.rcode, f"{why}: {done.error}")

    def account(self, zone: resolve.Zone | None, q: wire.Query, listener: Listener, addr: datagrams.Peer,
                proto: str, size: int, out: bytes, start: float) -> None:
        if zone is None:
            listener.unrouted.answered(proto, listener.family, q.qtype, out, self.clock() - start)
            return
        zone.stats.answered(proto, listener.family, q.qtype, out, self.clock() - start)
        if zone.block.log is not None:
            self._log_query(zone.block, q, addr, proto, size, out, start)

    def account_unrouted(self, listener: Listener, proto: str, data: bytes, out: bytes,
                         start: float) -> None:
        """A reply the query reader gave at once (FORMERR, NOTIMP, REFUSED for a class)."""
        listener.unrouted.answered(proto, listener.family, queries.question_type(data), out,
                                   self.clock() - start)

    async def _merged(self, zone: resolve.Zone, fwd: resolve.ForwardState, q: wire.Query,
                      router: resolve.Router, rewritten: Rewritten | None = None,
                      ) -> tuple[resolve.Done, Entry | None]:
        """Identical queries in flight share one upstream exchange (CVE-2020-25686). A
        query `rewrite` changed goes upstream as rewritten, and its reply comes back under
        the client's names before anything else looks at it."""
        key = (id(zone), q.key)
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        if zone.pending >= self.config.limits.pending:
            # A dead upstream must not let one zone hold unbounded memory: refuse at once.
            return resolve.Done(rcode=dns.rcode.REFUSED, error=f"more than {zone.pending} queries "
                                "pending upstream in this zone (limits pending)"), None
        future: asyncio.Future[tuple[resolve.Done, Entry | None]] = \
            asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        fwd.inflight += 1
        zone.pending += 1
        try:
            asked = q if rewritten is None else rewritten.query
            done = await self._exchange(zone, fwd, asked)
            handed = zone.handed_on(fwd, asked.name, done)
            while handed is not None:  # `next RCODE`: the next forward line asks its upstreams
                handed.inflight += 1
                try:
                    done = await self._exchange(zone, handed, asked)
                finally:
                    handed.inflight -= 1
                handed = zone.handed_on(handed, asked.name, done)
            done = resolve.unrewrite(done, rewritten)
            done = resolve.scrub(done, zone, router)
            done, removed = zone.without_private(done)
            if removed:
                name = wire.wire_to_text(q.question[:-4])
                logs.warning(f"plugin/private_addresses: removed {', '.join(removed)} from "
                          f"the reply for {name} {_type_text(q.qtype)} (possible DNS rebinding)")
            entry = zone.store(q, done, self.clock())
            future.set_result((done, entry))
        except BaseException as err:
            future.set_exception(err)
            future.exception()  # mark retrieved: waiters may be none
            raise
        finally:
            fwd.inflight -= 1
            zone.pending -= 1
            del self._inflight[key]
        return done, entry

    async def _exchange(self, zone: resolve.Zone, fwd: resolve.ForwardState,
                        q: wire.Query) -> resolve.Done:
        exchange = resolve.Exchange(fwd, self.clock(), self.rng)
        step = exchange.start()
        while isinstance(step, resolve.Send):
            sent = wire.upstream_query(q, self.query_ids())
            began = self.clock()
            to = step.upstream.label
            try:
                reply = await upstream.ask(sent, step.upstream.upstream, step.tcp,
                                           step.timeout, self.counters)
            except upstream.UpstreamError as err:
                zone.stats.upstream[(to, "timeout" if "timeout" in str(err) else "error")].observe(
                    self.clock() - began)
                failed = step.upstream
                step = exchange.failed(step, str(err), self.clock())
                self.health_checks.watch(fwd, failed)
            else:
                rcode = metrics.RCODES.get(reply.rcode(), "other")
                zone.stats.upstream[(to, rcode)].observe(self.clock() - began)
                step = exchange.answered(step, reply, self.clock())
        return step

    # -- logging -----------------------------------------------------------------------------

    def _log_query(self, block: Block, q: wire.Query, addr: datagrams.Peer, proto: str,
                   size: int, out: bytes, start: float) -> None:
        assert block.log is not None
        rcode = out[3] & 0xF
        kind = "error" if rcode not in (0, 3) else ("denial" if rcode == 3 else "success")
        spec = block.log
        if "all" not in spec.classes and kind not in spec.classes:
            return
        if spec.names != (".",) and not any(wire.is_subdomain(q.name, n) for n in spec.wire_names):
            return
        seconds = self.clock() - start
        if spec.template is not None:
            logs.emit(logs.templated_line(q, addr, proto, size, out, seconds, spec.template))
        else:
            logs.emit(logs.query_line(q, addr, proto, size, out, seconds, spec.json))

    @staticmethod
    def _log_error(block: Block, q: wire.Query, rcode: int, error: str) -> None:
        if block.errors is None:
            return
        name = wire.wire_to_text(q.question[:-4])
        logs.emit(logs.error_line(rcode, name, _type_text(q.qtype), error,
                                  block.errors.json))

    def _spawn(self, coro: Coroutine[object, object, None]) -> None:
        spawn_into(self._tasks, coro)


    def upstream_budget(self) -> float:
        return upstream_budget(self.config)


def spawn_into(tasks: set[asyncio.Task[None]], coro: Coroutine[object, object, None]) -> None:
    """Run `coro` as a task that `tasks` holds until it ends: the loop keeps only a weak
    reference, and a stop must be able to wait for or cancel what is running."""
    task = asyncio.get_running_loop().create_task(coro)
    tasks.add(task)
    task.add_done_callback(tasks.discard)


def upstream_budget(config: Config) -> float:
    """The longest any query may wait on upstreams: the largest overall forward deadline."""
    return max((f.overall_timeout for b in config.blocks for f in b.forwards), default=5.0) + 1


def _type_text(qtype: int) -> str:
    return dns.rdatatype.to_text(dns.rdatatype.RdataType.make(qtype))
