"""``create_app(settings)``: the FastAPI application, wired, and its lifespan.

There is no module-level app: tests and the CLI build one from a ``Settings``. The pieces routes
need (settings, catalog, backend, metrics, the core service, the response store) are put on
``app.state`` here as ``http.deps.Components`` and reach handlers through ``http.deps``; errors
are mapped by ``http.errors``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from gateway.backend.replicas.pool import ReplicaPool
from gateway.backend.replicas.router import Policy, Router
from gateway.backend.transport.tls import TritonTLS
from gateway.backend.triton import TritonBackend
from gateway.backend.types import Backend
from gateway.config import Settings
from gateway.core.admission import Admission, SchedulingRules
from gateway.core.service import CompletionService
from gateway.errors import GatewayError
from gateway.http.answer import REPLICA_HEADER, ROUTE_HEADER
from gateway.http.deps import PRIORITY_HEADER, Components
from gateway.http.direct import DIRECT_ROUTES, DirectRoutes
from gateway.http.errors import install_error_handlers
from gateway.http.head import HeadAsGetMiddleware
from gateway.http.inproc import InProcessLines
from gateway.http.metrics_listener import MetricsListener
from gateway.http.readiness import watch_ready
from gateway.http.rejections import RejectionCountMiddleware
from gateway.http.request_id import RequestIdMiddleware
from gateway.http.routes import (
    batches,
    chat,
    completions,
    embeddings,
    files,
    health,
    messages,
    metrics,
    models,
    responses,
    tokenize,
)
from gateway.http.security import PROBES, UPLOAD_FRAMING_BYTES, ApiKeyMiddleware, BodySizeLimitMiddleware
from gateway.http.tracing import TracingMiddleware
from gateway.images.fetch import FetchRules, ImageFetcher
from gateway.jobs.service import JobService
from gateway.keys.limits import FileLimits, LimitStore, MemoryLimits, RedisLimits
from gateway.keys.policy import KeyFileError, KeyRing
from gateway.metrics import Metrics
from gateway.models.catalog import ModelCatalog
from gateway.models.files import ModelFileSources
from gateway.reasoning.seal import ReasoningSeal
from gateway.store import open_store
from gateway.tracing import Tracing

logger = logging.getLogger(__name__)


def triton_tls(settings: Settings) -> TritonTLS | None:
    if not settings.triton_ssl:
        return None
    return TritonTLS(settings.triton_ssl_root_certs, settings.triton_ssl_client_cert, settings.triton_ssl_client_key)


def triton_replicas(settings: Settings) -> ReplicaPool:
    """The replicas ``triton_url`` names, one ``TritonBackend`` each, routed by the settings'
    policy. One ``host:port`` is a pool of one: the same requests on the same connection."""
    tls = triton_tls(settings)

    def connect(address: str) -> Backend:
        return TritonBackend(
            address,
            keepalive_ms=settings.grpc_keepalive_ms,
            keepalive_timeout_ms=settings.grpc_keepalive_timeout_ms,
            max_message_bytes=settings.grpc_max_message_bytes,
            tls=tls,
            transport=settings.triton_transport,
        )

    router = Router(Policy(settings.routing_policy), settings.routing_prefix_chars, settings.routing_load_factor)
    return ReplicaPool(
        settings.triton_endpoints,
        connect,
        router,
        resolve_interval=settings.triton_resolve_interval,
        migration_limit=settings.migration_limit,
        load_interval=settings.engine_load_interval,
    )


def image_fetcher(settings: Settings) -> ImageFetcher | None:
    """The fetcher of ``http(s)`` image URLs, when the settings allow any host."""
    if not settings.image_fetch_hosts:
        return None
    rules = FetchRules(
        hosts=tuple(settings.image_fetch_hosts),
        max_bytes=settings.image_max_bytes,
        timeout=settings.image_fetch_timeout,
        max_redirects=settings.image_fetch_max_redirects,
        allow_private=settings.image_fetch_allow_private,
        concurrency=settings.image_fetch_concurrency,
    )
    return ImageFetcher(rules)


def open_key_limits(settings: Settings, on_failure: Callable[[str], None] | None = None) -> LimitStore:
    """Where key limits are counted: Redis (every gateway), else a file every worker of this
    gateway opens, else this process's memory. ``on_failure(step)``: the store could not count."""
    fail, timeout = settings.key_limits_redis_failure, settings.key_limits_redis_timeout
    ttl = settings.key_limits_lease_ttl
    if settings.key_limits_redis_url:
        url = settings.key_limits_redis_url
        return RedisLimits(url, fail=fail, timeout=timeout, lease_ttl=ttl, on_failure=on_failure)
    if settings.key_limits_file is not None:
        path = settings.key_limits_file
        return FileLimits(path, fail=fail, timeout=timeout, lease_ttl=ttl, on_failure=on_failure)
    return MemoryLimits()


def reload_keys(ring: KeyRing, *, force: bool) -> None:
    """Read the key file again; a bad one keeps the keys already loaded, and says why."""
    try:
        if ring.reload(force=force):
            logger.info("key file %s loaded: %d keys", ring.path, len(ring))
    except (OSError, KeyFileError) as exc:
        logger.error("key file %s not loaded, the previous keys stay: %s", ring.path, exc)


def watch_key_file(ring: KeyRing, interval: float) -> asyncio.Task[None]:
    """Reload the key file on SIGHUP, and when it changed, every ``interval`` seconds (0: never)."""
    loop = asyncio.get_running_loop()
    if ring.path is not None:
        try:
            loop.add_signal_handler(signal.SIGHUP, lambda: reload_keys(ring, force=True))
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread (a test's app)
            pass

    async def poll() -> None:
        while ring.path is not None and interval > 0:
            await asyncio.sleep(interval)
            reload_keys(ring, force=False)

    return asyncio.create_task(poll())


@dataclass(frozen=True, slots=True)
class AppParts:
    """What ``create_app`` builds: the ``Components`` routes see, and what only the lifespan (to
    start and stop) and the middleware (to guard and trace) need."""

    components: Components
    ring: KeyRing
    key_limits: LimitStore | None
    tracing: Tracing | None
    metrics_listener: MetricsListener | None
    own_backend: bool
    """The backend is the Triton replicas ``create_app`` made (not one a test passed in)."""

    @property
    def keyed(self) -> bool:
        """A key file, even one without keys yet, closes the gateway."""
        return self.ring.keyed


def build_parts(settings: Settings, backend: Backend | None) -> AppParts:
    pool = triton_replicas(settings) if backend is None else None
    the_backend: Backend = backend or pool  # type: ignore[assignment]
    catalog = ModelCatalog(
        the_backend,
        settings.model_repository,
        settings.model_refresh_interval,
        sources=ModelFileSources(settings.triton_working_dir, settings.hf_hub_cache),
        overrides=settings.model_files,
        tokenizer_threads=settings.tokenizer_threads,
        token_count_cache_bytes=int(settings.token_count_cache_mb * 2**20),
    )
    rules = SchedulingRules(
        policy=settings.scheduling,
        headroom=settings.scheduling_headroom,
        shed_priority=settings.shed_priority,
        shed_share=settings.shed_share,
        band_queue_sizes=settings.band_queue_sizes,
    )
    admission = Admission(lambda model: settings.limits_for(model)[:2], settings.queue_timeout, rules)
    the_metrics = Metrics(admission, catalog.adapter_count, shared=settings.workers > 1)
    if pool is not None:
        pool.observer = the_metrics
    service = CompletionService(the_backend, admission, the_metrics, log_requests=settings.log_requests)
    seal = ReasoningSeal.from_setting(settings.reasoning_secret)
    store = open_store(settings)
    jobs = JobService(store, settings, the_metrics) if store is not None else None
    components = Components(
        settings, the_backend, catalog, the_metrics, service, store, image_fetcher(settings), seal, jobs
    )
    ring = KeyRing(settings.load_api_keys(), settings.api_key_policy_file)
    keyed = ring.keyed
    listener = (
        MetricsListener(the_metrics, settings.host, settings.metrics_port)
        if settings.metrics_enabled and settings.metrics_port is not None
        else None
    )
    if settings.api_key_policy_file is not None:
        the_metrics.start_key_limit_series()
    return AppParts(
        components,
        ring,
        open_key_limits(settings, the_metrics.key_limits_failed) if settings.api_key_policy_file is not None else None,
        open_tracing(settings, keyed),
        listener,
        own_backend=backend is None,
    )


def open_tracing(settings: Settings, keyed: bool) -> Tracing | None:
    """The tracer, when an OTLP endpoint is set. A client's trace context is continued unless the
    gateway has keys and the operator has not said to trust it (``otlp_trust_trace_context``)."""
    if not settings.otlp_traces_endpoint:
        return None
    trust = settings.otlp_trust_trace_context or not keyed
    return Tracing(settings.otlp_traces_endpoint, content=settings.otlp_trace_content, trust_context=trust)


def lifespan_of(parts: AppParts) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Start the parts in order (store, backend, the first model list, the metrics listener, the
    key file's watch) and stop them in reverse."""
    c = parts.components
    settings = c.settings

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if c.store is not None:
            await c.store.start()
        await c.backend.start()
        if parts.own_backend:
            logger.info(
                "token streams to Triton on the %s transport; replicas %s, routing policy %s",
                settings.triton_transport,
                settings.triton_url,
                settings.routing_policy,
            )
        try:
            await c.catalog.refresh()
        except GatewayError as exc:
            logger.warning("Triton not reachable at startup (%s); will keep trying", exc.message)
        live = c.metrics.shared_live
        publisher = asyncio.create_task(live.publish_forever()) if live is not None else None
        if parts.metrics_listener is not None:
            await parts.metrics_listener.start()
        watcher = watch_key_file(parts.ring, settings.api_key_reload_interval)
        readiness = asyncio.create_task(watch_ready(c, settings.ready_check_interval))
        if c.jobs is not None:
            await c.jobs.start(InProcessLines(c, parts.ring, parts.key_limits))
        try:
            yield
        finally:
            await c.background.close()  # running background responses store their end while all is up
            if c.jobs is not None:
                await c.jobs.close()  # the batch lines running here given back to the store
            watcher.cancel()
            readiness.cancel()
            if parts.metrics_listener is not None:
                await parts.metrics_listener.stop()
            if parts.key_limits is not None:
                await parts.key_limits.close()
            if publisher is not None:
                publisher.cancel()
            c.catalog.close()
            await c.backend.close()
            if c.store is not None:
                await c.store.close()
            if c.images is not None:
                await c.images.aclose()
            if parts.tracing is not None:
                parts.tracing.shutdown()

    return lifespan


def include_routes(app: FastAPI, settings: Settings) -> None:
    for module in (health, models, chat, completions, responses, messages, tokenize, embeddings, files, batches):
        app.include_router(module.router)
    if settings.metrics_enabled and settings.metrics_port is None:
        app.include_router(metrics.router)


def add_middleware(app: FastAPI, parts: AppParts) -> None:
    """Middleware runs outermost-last-added: request id → rejection count → HEAD as GET → CORS →
    API keys (when the gateway has any) → the trace's server span (tracing on) → body limit → the
    generating routes (``http.direct``) → FastAPI. Keys come before the span and the body, so a
    client without a key reaches neither the trace store nor the body parser."""
    settings = parts.components.settings
    app.add_middleware(DirectRoutes, components=parts.components)
    app.add_middleware(
        BodySizeLimitMiddleware,
        limit=settings.max_body_bytes,
        limits_by_path={"/v1/files": settings.batch_max_file_bytes + UPLOAD_FRAMING_BYTES},
    )
    if parts.tracing is not None:
        app.add_middleware(TracingMiddleware, tracing=parts.tracing, direct_paths=frozenset(DIRECT_ROUTES))
    if parts.keyed:
        open_metrics = settings.metrics_port is None and not settings.metrics_require_auth
        app.add_middleware(
            ApiKeyMiddleware,
            ring=parts.ring,
            open_paths=PROBES | {"/metrics"} if open_metrics else PROBES,
            limits=parts.key_limits,
            metrics=parts.components.metrics,
        )
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "HEAD", "POST", "DELETE", "OPTIONS"],
            allow_headers=["*"],
            expose_headers=["x-request-id", REPLICA_HEADER, ROUTE_HEADER, PRIORITY_HEADER],
            max_age=600,
        )
    app.add_middleware(HeadAsGetMiddleware)
    app.add_middleware(RejectionCountMiddleware, metrics=parts.components.metrics)
    app.add_middleware(RequestIdMiddleware)


def create_app(settings: Settings, backend: Backend | None = None) -> FastAPI:
    """Build the app. ``backend`` defaults to the Triton replicas of ``settings.triton_url``."""
    parts = build_parts(settings, backend)
    # FastAPI's own OpenTelemetry hooks stay off: the gateway traces its requests itself
    # (``gateway.tracing``, spans that see the direct routes and the h2 transport), and with them
    # on, FastAPI asks for the global tracer, meter and logger providers on every request.
    app = FastAPI(
        title="triton-openai-gateway",
        version="0.1.0",
        lifespan=lifespan_of(parts),
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.components = parts.components
    install_error_handlers(app)
    include_routes(app, settings)
    add_middleware(app, parts)
    return app
