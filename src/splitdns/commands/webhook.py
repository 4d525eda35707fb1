"""`splitdns webhook`: the mutating admission webhook that injects the resolver into new pods.

aiohttp serves it: asynchronous, so a slow client holds a coroutine, not a thread; it caps the body
size, keeps connections alive for the API server, and drains in-flight requests on shutdown. Two
listeners: HTTPS (the API server's reviews, POST /mutate) and plain HTTP for the kubelet and
Prometheus (/healthz, /readyz, /metrics).

The TLS certificate and key are re-read when their content changes (cert-manager rewrites the Secret
volume): the new pair is loaded into a new SSL context, and only a pair that loads replaces the one
new handshakes get (the listening context's SNI callback hands each handshake the current one); open
connections finish on the old one. No restart, no dropped request. A half-written pair (the key of one
certificate, the chain of another, as between a careless rotation's two writes) fails to load and the
previous one stays, whole, until the next look. Loading into the live context instead would leave it
holding the new certificate with the old key, and every handshake would fail until the key arrived.

A connection that never finishes its TLS handshake is dropped after the read timeout, not asyncio's
60 s default: a port scanner or a stuck client holds nothing for long.
Tests: tests/test_webhook.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import hashlib
import json
import signal
import ssl
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from splitdns.kube.deploy import admission

if TYPE_CHECKING:
    from aiohttp import web

    from splitdns.kube.deploy.inject import Settings

EXIT_OK, EXIT_START, EXIT_INPUT = 0, 1, 2
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


@dataclass(frozen=True)
class Options:
    cert: str
    key: str
    host: str = "0.0.0.0"
    port: int = 8443
    probe_port: int = 8080
    cert_poll: float = 10.0        # seconds between looks at the certificate files
    read_timeout: float = 10.0     # seconds a client may take to send its body
    # Seconds before a connection that sends nothing, or never finishes its headers, is closed.
    # Above the 90 s after which Go's HTTP clients (the API server) drop an idle connection
    # themselves, so we never close one under a review the API server is just sending.
    idle_timeout: float = 120.0
    max_body: int = 3 * 1024 * 1024  # the API server's own request limit is 3 MiB
    shutdown_delay: float = 5.0    # after SIGTERM: /readyz fails, reviews still served, then drain
    drain: float = 10.0            # seconds in-flight requests get to finish


def log(level: str, msg: str, **fields: Any) -> None:
    """One JSON object per line on stderr."""
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "level": level, "msg": msg,
              **fields}
    sys.stderr.write(json.dumps(record, separators=(",", ":")) + "\n")
    sys.stderr.flush()


class Certificate:
    """The server's SSL context and the files it came from, re-read when they change.

    `context` is what the listener holds for its lifetime; each handshake is handed `current`, the
    context of the last pair that loaded whole (`_handshake`)."""

    def __init__(self, cert: str, key: str) -> None:
        self.cert, self.key = cert, key
        self.fingerprint = ""
        self.refused = ""  # the fingerprint of a pair that did not load: counted and logged once
        self.error = ""
        self.reloads = 0
        self.failures = 0
        context, self.fingerprint = self._load()
        if context is None:
            raise OSError(f"cannot load the TLS certificate {cert} with key {key}: {self.error}")
        self.current = self.context = context
        self.context.sni_callback = self._handshake

    @staticmethod
    def _context() -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context

    def _read(self) -> str:
        digest = hashlib.sha256()
        for path in (self.cert, self.key):
            digest.update(Path(path).read_bytes())
        return digest.hexdigest()

    def _load(self) -> tuple[ssl.SSLContext | None, str]:
        """A new context holding the pair as the files are now (None when it does not load), and
        the files' fingerprint. Read before and after the load: a file replaced while it was being
        loaded does not count as loaded, and is tried again at the next look."""
        fingerprint = ""
        try:
            fingerprint = self._read()
            context = self._context()
            context.load_cert_chain(self.cert, self.key)
            if self._read() != fingerprint:
                raise OSError("the files changed while they were being read")
        except (OSError, ssl.SSLError) as err:
            self.error = getattr(err, "strerror", None) or str(err)
            return None, fingerprint
        return context, fingerprint

    def _handshake(self, sock: ssl.SSLObject | ssl.SSLSocket, _name: str | None,
                   _context: ssl.SSLContext) -> None:
        # Called by OpenSSL for every ClientHello, with or without a server name.
        if sock.context is not self.current:
            sock.context = self.current

    def check(self) -> bool:
        """Load the pair if it changed; False when it changed and does not load (the old one stays).
        A pair that keeps failing is tried at every look but counted once."""
        try:
            if self._read() == self.fingerprint:
                return True
        except OSError:
            pass  # a file missing for a moment: _load says so
        context, fingerprint = self._load()
        if context is None:
            if not fingerprint or fingerprint != self.refused:
                self.failures += 1
            self.refused = fingerprint
            return False
        self.current, self.fingerprint, self.refused = context, fingerprint, ""
        self.reloads += 1
        log("info", "certificate reloaded", cert=self.cert, sha256=fingerprint[:16])
        return True


class Webhook:
    def __init__(self, settings: Settings, options: Options) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.settings, self.options = settings, options
        self.certificate = Certificate(options.cert, options.key)
        self.registry = CollectorRegistry()
        self.reviews = Counter("splitdns_webhook_reviews", "Admission reviews answered, by outcome",
                               ["outcome"], registry=self.registry)
        self.latency = Histogram("splitdns_webhook_review_duration_seconds",
                                 "Time to answer one admission review (body read to reply)",
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.cert_reloads = Counter("splitdns_webhook_certificate_reloads",
                                    "Certificate reloads after the files changed", registry=self.registry)
        self.cert_failures = Counter("splitdns_webhook_certificate_load_failures",
                                     "Certificate files that changed and did not load",
                                     registry=self.registry)
        for outcome in (admission.INJECTED, admission.UNCHANGED, admission.SKIPPED, admission.REFUSED,
                        admission.BAD_REQUEST, "timeout", "too_large", "error"):
            self.reviews.labels(outcome)
        self.ready = False
        self.stop = asyncio.Event()

    # -- handlers ----------------------------------------------------------------------------------

    async def mutate(self, request: web.Request) -> web.Response:
        from aiohttp import web

        start = time.perf_counter()
        try:
            async with asyncio.timeout(self.options.read_timeout):
                body = await request.read()
        except TimeoutError:
            return self._plain(408, "timeout",
                               f"the body did not arrive within {self.options.read_timeout:g}s")
        except web.HTTPRequestEntityTooLarge:
            return self._plain(413, "too_large", f"the body is larger than {self.options.max_body} bytes")
        try:
            decision = admission.review(body, self.settings)
        except Exception as err:  # a bug of ours must cost one review, never the server
            log("error", "review failed", error=f"{type(err).__name__}: {err}")
            return self._plain(500, "error", "internal error (logged); the pod is admitted by failurePolicy")
        elapsed = time.perf_counter() - start
        self.reviews.labels(decision.outcome).inc()
        self.latency.observe(elapsed)
        log("info", "review", outcome=decision.outcome, ms=round(elapsed * 1000, 3), **decision.log)
        if isinstance(decision.body, str):
            return web.Response(status=decision.status, text=decision.body)
        return web.json_response(decision.body, status=decision.status)

    def _plain(self, status: int, outcome: str, message: str) -> web.Response:
        from aiohttp import web

        self.reviews.labels(outcome).inc()
        log("warning", "request refused", outcome=outcome, status=status, reason=message)
        return web.Response(status=status, text=f"splitdns webhook: {message}\n")

    async def healthz(self, _request: web.Request) -> web.Response:
        from aiohttp import web

        return web.Response(text="OK\n")

    async def readyz(self, _request: web.Request) -> web.Response:
        from aiohttp import web

        if self.ready:
            return web.Response(text="ready\n")
        return web.Response(status=503, text="stopping\n" if self.stop.is_set() else "starting\n")

    async def metrics(self, _request: web.Request) -> web.Response:
        from aiohttp import web
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return web.Response(body=generate_latest(self.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    # -- running -----------------------------------------------------------------------------------

    def apps(self) -> tuple[web.Application, web.Application]:
        from aiohttp import web

        reviews = web.Application(client_max_size=self.options.max_body)
        reviews.router.add_post("/mutate", self.mutate)
        reviews.router.add_get("/healthz", self.healthz)
        probes = web.Application()
        probes.router.add_get("/healthz", self.healthz)
        probes.router.add_get("/readyz", self.readyz)
        probes.router.add_get("/metrics", self.metrics)
        return reviews, probes

    async def start(self) -> list[web.AppRunner]:
        from aiohttp import web

        reviews, probes = self.apps()
        runners = [web.AppRunner(reviews, access_log=None, shutdown_timeout=self.options.drain,
                                 keepalive_timeout=self.options.idle_timeout),
                   web.AppRunner(probes, access_log=None)]
        for runner in runners:
            await runner.setup()
        try:
            await _tls_site(runners[0], self.options.host, self.options.port, self.certificate.context,
                            handshake_timeout=self.options.read_timeout).start()
            await web.TCPSite(runners[1], self.options.host, self.options.probe_port).start()
        except OSError:
            for runner in runners:
                await runner.cleanup()
            raise
        self.ready = True
        log("info", "serving", port=self.options.port, probe_port=self.options.probe_port,
            settings=self.settings.digest)
        return runners

    async def watch_certificate(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), self.options.cert_poll)
            before = (self.certificate.reloads, self.certificate.failures)
            if not self.certificate.check() and self.certificate.failures > before[1]:
                log("warning", "certificate changed but does not load; keeping the previous one",
                    error=self.certificate.error)
            self.cert_reloads.inc(self.certificate.reloads - before[0])
            self.cert_failures.inc(self.certificate.failures - before[1])

    async def serve(self) -> int:
        loop = asyncio.get_running_loop()
        # Before the ports open: once /readyz answers, no signal meets its default action.
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):  # as `serve`: never ended unsaid
            loop.add_signal_handler(sig, functools.partial(
                log, "info", "signal ignored (SIGTERM or SIGINT stops the webhook)", signal=sig.name))
        runners = await self.start()
        # As `serve` does: what start-up built (aiohttp, the schemas, the settings) lives as long as
        # the process, so a full collection need not walk it between reviews.
        gc.freeze()
        watcher = asyncio.create_task(self.watch_certificate())
        await self.stop.wait()
        # Not ready first, so the Service stops sending us reviews, then drain what is in flight.
        self.ready = False
        log("info", "stopping", delay=self.options.shutdown_delay)
        await asyncio.sleep(self.options.shutdown_delay)
        watcher.cancel()
        for runner in runners:
            await runner.cleanup()
        log("info", "stopped")
        return EXIT_OK


def _tls_site(runner: web.AppRunner, host: str, port: int, context: ssl.SSLContext,
              handshake_timeout: float) -> web.BaseSite:
    """aiohttp's TCPSite, with a bound on the TLS handshake (TCPSite leaves asyncio's 60 s):
    the connection is not aiohttp's until the handshake ends, so its own timeouts do not apply."""
    from aiohttp import web

    class TLSSite(web.BaseSite):
        @property
        def name(self) -> str:
            return f"https://{host}:{port}"

        async def start(self) -> None:
            await super().start()
            assert runner.server is not None
            self._server = await asyncio.get_running_loop().create_server(
                runner.server, host, port, ssl=context, ssl_handshake_timeout=handshake_timeout,
                backlog=self._backlog)

    return TLSSite(runner, ssl_context=context)


def run(settings: Settings, options: Options) -> int:
    from splitdns.commands.serve import run_loop

    async def main() -> int:
        try:
            webhook = Webhook(settings, options)
            return await webhook.serve()
        except OSError as err:
            log("error", "cannot start", error=str(err))
            return EXIT_START

    return run_loop(main())
