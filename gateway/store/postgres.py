"""The shared store for several replicas: PostgreSQL through psycopg 3's asyncio API and its pool.

The URL goes to libpq as it is, so it takes every connection parameter libpq does, and the
``PG*`` variables and ``~/.pgpass`` work as with ``psql``. A small pool per replica (``POOL_SIZE``
connections; a replica's requests share them) checks each connection before handing it out, so
a database restart costs the next request nothing but a reconnect. No server-side prepared
statements (``prepare_threshold=None``): PgBouncer in transaction mode, a common way to share one
database among many replicas, cannot carry them before its 1.21, and these statements are too
simple for a plan cache to matter.

Replicas coordinate through advisory locks: the migration at start takes one for its transaction
(so replicas starting together migrate once), and the deletion batch tries another and is simply
skipped while another replica runs its own, so two batches never delete the same rows in
different orders (a deadlock).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from gateway.store.base import ResponseStoreError, StoreBounds, StoredResponse, prune_quietly, unavailable_on_error
from gateway.store.codec import from_row, to_row
from gateway.store.location import redact_url
from gateway.store.schema import (
    COMPONENT,
    CREATE_VERSION_TABLE,
    MIGRATIONS,
    SCHEMA_VERSION,
    TABLE,
    newer_schema_message,
)

logger = logging.getLogger(__name__)

POOL_SIZE = 4
"""Connections one replica keeps at most (one at least): a put or get holds one for one short
statement, so a few serve many concurrent requests; the database sees replicas × this many."""

POOL_TIMEOUT = 10.0
"""Seconds a request waits for a connection (the database unreachable: then 503), and the start
waits for the first one."""

MIGRATION_LOCK = int.from_bytes(b"gwresp\x00\x01", "big")
PRUNE_LOCK = int.from_bytes(b"gwresp\x00\x02", "big")

_PUT = (
    f"INSERT INTO {TABLE} (id, owner, created_at, previous_response_id, response, input_items) "
    "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET created_at = EXCLUDED.created_at, "
    "previous_response_id = EXCLUDED.previous_response_id, response = EXCLUDED.response, "
    f"input_items = EXCLUDED.input_items WHERE {TABLE}.owner = EXCLUDED.owner"
)
_GET = (
    f"SELECT created_at, previous_response_id, response, input_items FROM {TABLE} "
    "WHERE id = %s AND owner = %s AND created_at >= %s"
)
_DELETE = f"DELETE FROM {TABLE} WHERE id = %s AND owner = %s AND created_at >= %s"
_EXPIRE = f"DELETE FROM {TABLE} WHERE created_at < %s"
_EVICT = f"DELETE FROM {TABLE} WHERE id IN (SELECT id FROM {TABLE} ORDER BY created_at DESC, id DESC OFFSET %s)"


class PostgresResponseStore:
    """:class:`~gateway.store.base.ResponseStore` on a PostgreSQL database."""

    def __init__(
        self, url: str, bounds: StoreBounds, *, pool_size: int = POOL_SIZE, timeout: float = POOL_TIMEOUT
    ) -> None:
        self.url = url
        self.bounds = bounds
        self._pool_size = pool_size
        self._timeout = timeout
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] | None = None
        self._puts_since_prune = 0

    async def start(self) -> None:
        try:
            # the migration's own connection first: a refused connection raises libpq's reason
            # (the pool would only time out, logging it)
            await self._migrate()
            pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
                self.url,
                min_size=1,
                max_size=self._pool_size,
                timeout=self._timeout,
                open=False,
                check=AsyncConnectionPool.check_connection,
                kwargs=_CONNECTION_OPTIONS,
                name="gateway-responses",
            )
            self._pool = pool
            await pool.open(wait=True, timeout=self._timeout)
            await self.prune()
        except psycopg.Error as exc:
            await self.close()
            raise ResponseStoreError(
                f"cannot use the responses store at {redact_url(self.url)}: {exc}".strip()
                + " (GATEWAY_RESPONSES_STORE names it)"
            ) from exc
        except BaseException:
            await self.close()
            raise
        logger.info("responses store: PostgreSQL at %s", redact_url(self.url))

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def put(self, stored: StoredResponse) -> None:
        params = to_row(stored)
        with unavailable_on_error("save", psycopg.Error):
            async with self._connections().connection() as conn:
                cursor = await conn.execute(_PUT, params)
                if cursor.rowcount == 0:
                    logger.warning("responses store: %s belongs to another owner; not replaced", stored.id)
        self._puts_since_prune += 1
        if self._puts_since_prune >= self.bounds.prune_every:
            await prune_quietly(self.prune, psycopg.Error)

    async def get(self, response_id: str, owner: str) -> StoredResponse | None:
        params = (response_id, owner, self.bounds.oldest_alive(time.time()))
        with unavailable_on_error("read", psycopg.Error):
            async with self._connections().connection() as conn:
                cursor = await conn.execute(_GET, params)
                row = await cursor.fetchone()
        return None if row is None else from_row(response_id, owner, row)

    async def delete(self, response_id: str, owner: str) -> bool:
        params = (response_id, owner, self.bounds.oldest_alive(time.time()))
        with unavailable_on_error("delete", psycopg.Error):
            async with self._connections().connection() as conn:
                cursor = await conn.execute(_DELETE, params)
                return cursor.rowcount > 0

    async def prune(self) -> None:
        """Delete expired responses, then all but the newest ``max_responses``, unless another
        replica is doing it right now. Runs at start and every ``bounds.prune_every`` puts."""
        self._puts_since_prune = 0
        async with self._connections().connection() as conn, conn.transaction():
            cursor = await conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (PRUNE_LOCK,))
            locked = await cursor.fetchone()
            if locked is None or not locked[0]:
                return
            await conn.execute(_EXPIRE, (self.bounds.oldest_alive(time.time()),))
            await conn.execute(_EVICT, (self.bounds.max_responses,))

    async def _migrate(self) -> None:
        async with (
            await psycopg.AsyncConnection.connect(self.url, **_CONNECTION_OPTIONS) as conn,
            conn.transaction(),
        ):
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            # CREATE ... IF NOT EXISTS needs the CREATE privilege even when the table exists: look
            # first, so a role with only SELECT/INSERT/UPDATE/DELETE starts on a migrated database
            cursor = await conn.execute("SELECT to_regclass('gateway_schema') IS NOT NULL")
            exists = await cursor.fetchone()
            if exists is None or not exists[0]:
                await conn.execute(CREATE_VERSION_TABLE)
            cursor = await conn.execute("SELECT version FROM gateway_schema WHERE component = %s", (COMPONENT,))
            row = await cursor.fetchone()
            version = int(row[0]) if row is not None else 0
            if version > SCHEMA_VERSION:
                raise ResponseStoreError(newer_schema_message(version))
            if version == SCHEMA_VERSION:
                return
            for statements in MIGRATIONS[version:]:
                for statement in statements:
                    await conn.execute(statement)
            await conn.execute(
                "INSERT INTO gateway_schema (component, version) VALUES (%s, %s) "
                "ON CONFLICT (component) DO UPDATE SET version = EXCLUDED.version",
                (COMPONENT, SCHEMA_VERSION),
            )

    def _connections(self) -> AsyncConnectionPool[psycopg.AsyncConnection[Any]]:
        if self._pool is None:
            raise RuntimeError("the responses store is not started (or already closed)")
        return self._pool


_CONNECTION_OPTIONS: dict[str, Any] = {"autocommit": True, "prepare_threshold": None}
