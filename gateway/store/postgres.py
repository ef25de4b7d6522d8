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

from gateway.store.base import ResponseStoreError, StoreBounds
from gateway.store.location import redact_url
from gateway.store.schema import COMPONENT, CREATE_VERSION_TABLE, MIGRATIONS, SqlStore, statements

logger = logging.getLogger(__name__)

POOL_SIZE = 4
"""Connections one replica keeps at most (one at least): a put or get holds one for one short
statement, so a few serve many concurrent requests; the database sees replicas × this many."""

POOL_TIMEOUT = 10.0
"""Seconds a request waits for a connection (the database unreachable: then 503), and the start
waits for the first one."""

MIGRATION_LOCK = int.from_bytes(b"gwresp\x00\x01", "big")
PRUNE_LOCK = int.from_bytes(b"gwresp\x00\x02", "big")


class PostgresResponseStore(SqlStore):
    """:class:`~gateway.store.base.ResponseStore` on a PostgreSQL database."""

    sql = statements("%s")
    driver_errors = psycopg.Error
    dialect = "postgresql"
    mark = "%s"

    def __init__(
        self, url: str, bounds: StoreBounds, *, pool_size: int = POOL_SIZE, timeout: float = POOL_TIMEOUT
    ) -> None:
        super().__init__(bounds)
        self.url = url
        self._pool_size = pool_size
        self._timeout = timeout
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] | None = None

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

    async def prune(self) -> None:
        """Delete expired responses, then all but the newest ``max_responses``, unless another
        replica is doing it right now. Runs at start and every ``bounds.prune_every`` puts."""
        self._puts_since_prune = 0
        async with self._connections().connection() as conn, conn.transaction():
            _, locked = await _run(conn, "SELECT pg_try_advisory_xact_lock(%s)", (PRUNE_LOCK,))
            if locked is None or not locked[0]:
                return
            await conn.execute(self.sql.expire, (self.bounds.oldest_alive(time.time()),))
            await conn.execute(self.sql.evict, (self.bounds.max_responses,))

    async def _migrate(self) -> None:
        await self.migrate(COMPONENT, MIGRATIONS)

    async def migrate(self, component: str, migrations: tuple[tuple[str, ...], ...]) -> None:
        async with (
            await psycopg.AsyncConnection.connect(self.url, **_CONNECTION_OPTIONS) as conn,
            conn.transaction(),
        ):
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            # CREATE ... IF NOT EXISTS needs the CREATE privilege even when the table exists: look
            # first, so a role with only SELECT/INSERT/UPDATE/DELETE starts on a migrated database
            _, exists = await _run(conn, "SELECT to_regclass('gateway_schema') IS NOT NULL", None)
            if exists is None or not exists[0]:
                await conn.execute(CREATE_VERSION_TABLE)
            await self._apply_migrations(lambda sql, params: _run(conn, sql, params), component, migrations)

    async def _execute(self, sql: str, params: tuple[object, ...] | None = None) -> tuple[int, Any]:
        async with self._connections().connection() as conn:
            return await _run(conn, sql, params)

    async def _fetch_all(self, sql: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        async with self._connections().connection() as conn:
            cursor = await conn.execute(sql, params)
            return [tuple(row) for row in await cursor.fetchall()] if cursor.description else []

    def _connections(self) -> AsyncConnectionPool[psycopg.AsyncConnection[Any]]:
        if self._pool is None:
            raise RuntimeError("the responses store is not started (or already closed)")
        return self._pool


_CONNECTION_OPTIONS: dict[str, Any] = {"autocommit": True, "prepare_threshold": None}


async def _run(conn: psycopg.AsyncConnection[Any], sql: str, params: tuple[object, ...] | None) -> tuple[int, Any]:
    cursor = await conn.execute(sql, params)
    return cursor.rowcount, await cursor.fetchone() if cursor.description else None
