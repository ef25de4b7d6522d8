"""FastAPI dependencies: what a route handler may ask for, read from ``app.state.components``
(set by ``create_app``), and the request's context (its id and deadline) for planning.

They are ``async def`` although none awaits: FastAPI runs a plain ``def`` dependency in its
thread pool, a thread hop per dependency per request. Each dependency also costs FastAPI's
solving (~10-15 µs a request), so the completion routes take the ``Components`` whole, their one
dependency, rather than one per part. (For the requests themselves ``http.direct`` calls them
with the ``Components``, with no dependency solving at all.)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends
from starlette.requests import Request

from gateway.backend.types import Backend
from gateway.config import Settings
from gateway.core.service import CompletionService
from gateway.errors import InvalidRequestError
from gateway.http.request_id import request_id_of
from gateway.images.fetch import ImageFetcher
from gateway.jobs.background import BackgroundResponses
from gateway.jobs.service import JobService
from gateway.metrics import Metrics
from gateway.models.catalog import ModelCatalog
from gateway.plan.prepare import RequestContext
from gateway.priorities import parse_band
from gateway.reasoning.seal import ReasoningSeal
from gateway.store.base import ResponseStore

TIMEOUT_HEADER = "x-request-timeout"


@dataclass(frozen=True, slots=True)
class Components:
    """The app's long-lived parts, built once by ``create_app``."""

    settings: Settings
    backend: Backend
    catalog: ModelCatalog
    metrics: Metrics
    service: CompletionService
    store: ResponseStore | None = None
    """Stored responses (the Responses API); None when storing is turned off."""
    images: ImageFetcher | None = None
    """What fetches ``http(s)`` image URLs; None when no host is allowed (``image_fetch_hosts``)."""
    seal: ReasoningSeal = field(default_factory=lambda: ReasoningSeal.from_setting(None))
    """Seals the reasoning clients carry between turns (``reasoning_secret``)."""
    jobs: JobService | None = None
    """The Batch API's files and batches, and this gateway's batch runner; None when storing is off."""
    background: BackgroundResponses = field(default_factory=BackgroundResponses)
    """The background responses this process runs (``background: true``), and their event logs."""


async def get_components(request: Request) -> Components:
    return request.app.state.components  # type: ignore[no-any-return]


ComponentsDep = Annotated[Components, Depends(get_components)]


async def get_settings(components: ComponentsDep) -> Settings:
    return components.settings


async def get_catalog(components: ComponentsDep) -> ModelCatalog:
    return components.catalog


async def get_service(components: ComponentsDep) -> CompletionService:
    return components.service


async def get_backend(components: ComponentsDep) -> Backend:
    return components.backend


async def get_metrics(components: ComponentsDep) -> Metrics:
    return components.metrics


SettingsDep = Annotated[Settings, Depends(get_settings)]
CatalogDep = Annotated[ModelCatalog, Depends(get_catalog)]
ServiceDep = Annotated[CompletionService, Depends(get_service)]
BackendDep = Annotated[Backend, Depends(get_backend)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]


PRIORITY_HEADER = "x-gateway-priority"
"""The band a request asks for (a number, lower first, or ``critical``/``standard``/``sheddable``),
for clients that cannot add the body's ``priority``; the response's header of the same name says
the band that ran."""

SESSION_HEADER = "x-session-id"
"""Ties a request to a conversation: every request with one id goes to one Triton replica."""


def request_context(request: Request, settings: Settings) -> RequestContext:
    """The request id and the deadline: the configured ``request_timeout``, lowered (never
    raised) by an ``X-Request-Timeout: <seconds>`` header. A plain call rather than a dependency,
    to keep the completion routes at one dependency."""
    timeout = settings.request_timeout
    header, session, priority = _context_headers(request)
    if header is not None:
        try:
            asked = float(header)
        except ValueError:
            asked = -1.0
        if not asked > 0:
            raise InvalidRequestError(f"{TIMEOUT_HEADER} must be a positive number of seconds, got {header!r}")
        timeout = asked if timeout is None else min(timeout, asked)
    deadline = None if timeout is None else time.monotonic() + timeout
    band: int | None = None
    if priority is not None:
        try:
            band = parse_band(priority)
        except ValueError as exc:
            raise InvalidRequestError(f"{PRIORITY_HEADER}: {exc}", param=PRIORITY_HEADER) from None
    return RequestContext(request_id_of(request.scope), deadline, session or None, priority=band)


_TIMEOUT_NAME = TIMEOUT_HEADER.encode("latin-1")
_SESSION_NAME = SESSION_HEADER.encode("latin-1")
_PRIORITY_NAME = PRIORITY_HEADER.encode("latin-1")


def _context_headers(request: Request) -> tuple[str | None, str | None, str | None]:
    """The first ``X-Request-Timeout``, ``X-Session-Id`` and ``X-Gateway-Priority``, as
    ``request.headers.get`` reads them, in one pass over the headers (a ``get`` of an absent
    header raises and catches a ``KeyError``, and most requests carry none)."""
    timeout: str | None = None
    session: str | None = None
    priority: str | None = None
    for name, value in request.scope["headers"]:
        if name == _TIMEOUT_NAME:
            if timeout is None:
                timeout = value.decode("latin-1")
        elif name == _SESSION_NAME:
            if session is None:
                session = value.decode("latin-1")
        elif name == _PRIORITY_NAME and priority is None:
            priority = value.decode("latin-1")
    return timeout, session, priority
