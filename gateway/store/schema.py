"""The store's tables, the same SQL on SQLite and PostgreSQL, their numbered migrations, and
what both stores do alike (``SqlStore``).

``gateway_schema`` records which migrations a database has had, per component, so a gateway
applies only the ones it lacks, inside one transaction that also holds a lock (SQLite's write lock,
a PostgreSQL advisory lock): replicas starting together migrate once. A database that a newer
gateway migrated further is refused at start rather than misread. A migration, once released, is
never edited: a change of schema is a new entry at the end of :data:`MIGRATIONS`.

JSON is kept as text, not PostgreSQL's ``jsonb``: ``jsonb`` reorders keys and drops duplicate
ones, and the stored response must come back exactly as the client first received it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, NamedTuple

from gateway.store.base import ResponseStoreError, StoreBounds, StoredResponse
from gateway.store.codec import from_row, to_row

logger = logging.getLogger("gateway.store")

COMPONENT = "responses"
TABLE = "gateway_responses"

CREATE_VERSION_TABLE = (
    "CREATE TABLE IF NOT EXISTS gateway_schema (component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
)

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        f"""CREATE TABLE {TABLE} (
            id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            previous_response_id TEXT,
            response TEXT NOT NULL,
            input_items TEXT NOT NULL
        )""",
        # expiry (created_at below the TTL's cutoff) and eviction (all but the newest N) both scan it
        f"CREATE INDEX {TABLE}_created_at ON {TABLE} (created_at, id)",
    ),
)

SCHEMA_VERSION = len(MIGRATIONS)


class Statements(NamedTuple):
    """The statements both stores run, in the driver's parameter style."""

    put: str
    get: str
    delete: str
    expire: str
    evict: str
    version: str
    set_version: str


def statements(p: str, no_limit: str = "") -> Statements:
    """The statements with ``p`` as the parameter mark (``?``, ``%s``); ``no_limit`` goes before
    the eviction's ``OFFSET`` (SQLite wants a LIMIT there, -1 for none; PostgreSQL wants none)."""
    return Statements(
        put=f"INSERT INTO {TABLE} (id, owner, created_at, previous_response_id, response, input_items) "
        f"VALUES ({p}, {p}, {p}, {p}, {p}, {p}) ON CONFLICT (id) DO UPDATE SET created_at = excluded.created_at, "
        "previous_response_id = excluded.previous_response_id, response = excluded.response, "
        f"input_items = excluded.input_items WHERE {TABLE}.owner = excluded.owner",
        get=f"SELECT created_at, previous_response_id, response, input_items FROM {TABLE} "
        f"WHERE id = {p} AND owner = {p} AND created_at >= {p}",
        delete=f"DELETE FROM {TABLE} WHERE id = {p} AND owner = {p} AND created_at >= {p}",
        expire=f"DELETE FROM {TABLE} WHERE created_at < {p}",
        evict=f"DELETE FROM {TABLE} WHERE id IN "
        f"(SELECT id FROM {TABLE} ORDER BY created_at DESC, id DESC {no_limit}OFFSET {p})",
        version=f"SELECT version FROM gateway_schema WHERE component = {p}",
        set_version=f"INSERT INTO gateway_schema (component, version) VALUES ({p}, {p}) "
        "ON CONFLICT (component) DO UPDATE SET version = excluded.version",
    )


Execute = Callable[[str, tuple[object, ...] | None], Awaitable[tuple[int, Any]]]
"""Runs one statement: the rows it changed, and its first row (None when it returns none)."""


class SqlStore:
    """What both stores do alike, each statement through the store's own ``_execute``: put, get
    and delete, the pruning batch every ``bounds.prune_every`` puts, the migrations."""

    sql: ClassVar[Statements]
    driver_errors: ClassVar[type[Exception]]
    dialect: str
    """``sqlite`` or ``postgresql``: which SQL another component's statements are written in."""
    mark: str
    """The driver's parameter mark (``?``, ``%s``)."""

    def __init__(self, bounds: StoreBounds) -> None:
        self.bounds = bounds
        self._puts_since_prune = 0

    async def _execute(self, sql: str, params: tuple[object, ...] | None = None) -> tuple[int, Any]:
        raise NotImplementedError

    async def prune(self) -> None:
        raise NotImplementedError

    async def put(self, stored: StoredResponse) -> None:
        changed, _ = await self._request("save", self.sql.put, to_row(stored))
        if changed == 0:
            logging.getLogger(type(self).__module__).warning(
                "responses store: %s belongs to another owner; not replaced", stored.id
            )
        self._puts_since_prune += 1
        if self._puts_since_prune >= self.bounds.prune_every:
            # a failed batch costs nothing but a warning: the put it follows succeeded, and the
            # next batch deletes what this one did not
            try:
                await self.prune()
            except self.driver_errors:
                logger.warning("responses store: deleting expired and surplus responses failed", exc_info=True)

    async def get(self, response_id: str, owner: str) -> StoredResponse | None:
        _, row = await self._request("read", self.sql.get, (response_id, owner, self.bounds.oldest_alive(time.time())))
        return None if row is None else from_row(response_id, owner, row)

    async def delete(self, response_id: str, owner: str) -> bool:
        params = (response_id, owner, self.bounds.oldest_alive(time.time()))
        changed, _ = await self._request("delete", self.sql.delete, params)
        return changed > 0

    async def _request(self, action: str, sql: str, params: tuple[object, ...]) -> tuple[int, Any]:
        """A driver's error during a request's read or write as the typed 503 the route answers,
        said once in the log (the client sees it too, so a warning, not an error with a traceback)."""
        try:
            return await self._execute(sql, params)
        except self.driver_errors as exc:
            logger.warning("responses store: could not %s a response: %s", action, exc)
            raise ResponseStoreError(f"the responses store could not {action} the response: {exc}") from exc

    async def execute(self, sql: str, params: tuple[object, ...] = ()) -> int:
        """Run one statement for another component on this store's connection (the jobs'
        tables): the rows it changed. A driver's error is a :class:`ResponseStoreError`."""
        try:
            changed, _ = await self._execute(sql, params)
        except self.driver_errors as exc:
            raise ResponseStoreError(f"the store could not run a statement: {exc}") from exc
        return changed

    async def fetch_all(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        """Every row one statement returns (a SELECT, or a write with RETURNING), as
        :meth:`execute` runs it."""
        try:
            return await self._fetch_all(sql, params)
        except self.driver_errors as exc:
            raise ResponseStoreError(f"the store could not run a statement: {exc}") from exc

    async def _fetch_all(self, sql: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    async def migrate(self, component: str, migrations: tuple[tuple[str, ...], ...]) -> None:
        """Bring ``component``'s tables to ``len(migrations)``, as the store's own are at start
        (locked, once among replicas starting together)."""
        raise NotImplementedError

    async def _apply_migrations(
        self, execute: Execute, component: str = COMPONENT, migrations: tuple[tuple[str, ...], ...] = MIGRATIONS
    ) -> None:
        """Bring ``component``'s schema to ``len(migrations)``, inside the caller's locked transaction."""
        latest = len(migrations)
        _, row = await execute(self.sql.version, (component,))
        version = int(row[0]) if row is not None else 0
        if version > latest:
            raise ResponseStoreError(
                f"the store's {component} schema is at version {version}, written by a newer gateway; this one "
                f"knows up to version {latest}: upgrade this gateway or point it at another store"
            )
        if version == latest:
            return
        for migration in migrations[version:]:
            for statement in migration:
                await execute(statement, None)
        await execute(self.sql.set_version, (component, latest))
