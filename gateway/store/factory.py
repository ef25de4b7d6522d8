"""``open_store(settings)``: the store the settings name, or None when storing is off."""

from __future__ import annotations

from typing import Protocol

from gateway.store.base import ResponseStore, ResponseStoreError, StoreBounds
from gateway.store.location import SqliteLocation, parse_store_url
from gateway.store.sqlite import SqliteResponseStore


class StoreSettings(Protocol):
    """The settings the store reads (``config.Settings`` has them): a protocol, so the store, a
    leaf, imports no settings module."""

    @property
    def responses_store_enabled(self) -> bool: ...
    @property
    def responses_store(self) -> str: ...
    @property
    def responses_store_ttl(self) -> float: ...
    @property
    def responses_store_max(self) -> int: ...


def open_store(settings: StoreSettings) -> ResponseStore | None:
    """The configured store, not yet started (``await store.start()`` connects). PostgreSQL's
    driver is imported only here, so a SQLite deployment does not need the ``postgres`` extra."""
    if not settings.responses_store_enabled:
        return None
    bounds = StoreBounds(ttl=settings.responses_store_ttl, max_responses=settings.responses_store_max)
    location = parse_store_url(settings.responses_store)
    if isinstance(location, SqliteLocation):
        return SqliteResponseStore(location.path, bounds)
    try:
        from gateway.store.postgres import PostgresResponseStore
    except ImportError as exc:
        raise ResponseStoreError(
            f"a PostgreSQL responses store needs the postgres extra "
            f"(pip install 'triton-openai-gateway[postgres]'): {exc}"
        ) from exc
    return PostgresResponseStore(location.url, bounds)
