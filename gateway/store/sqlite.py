"""The embedded store: one SQLite file, reached through ``aiosqlite``.

aiosqlite runs the standard library's ``sqlite3`` on a thread of its own and hands results back
to the event loop, so a write that waits for the disk (or for another process's lock) never
stalls the streams. One connection, in autocommit mode: every statement here is its own
transaction, so statements that interleave from concurrent requests cannot end up in one
another's transactions (the one explicit transaction, the migration, runs in ``start`` before
anything else uses the connection).

WAL mode: readers do not block the writer nor the writer readers, also across processes (two
gateways on one machine may share the file; a network filesystem may not, see SQLite's WAL page).
``synchronous=NORMAL``, as SQLite recommends with WAL: a put survives the gateway crashing or
being killed; a power loss or kernel crash may lose the last puts before it (never corrupt the
file). The file is created readable by its owner only, as it holds conversations.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import aiosqlite

from gateway.store.base import ResponseStoreError, StoreBounds
from gateway.store.schema import COMPONENT, CREATE_VERSION_TABLE, MIGRATIONS, SqlStore, statements

logger = logging.getLogger(__name__)

BUSY_TIMEOUT = 10.0
"""Seconds a statement waits for another process's write lock before it fails."""


class SqliteResponseStore(SqlStore):
    """:class:`~gateway.store.base.ResponseStore` on a SQLite file."""

    sql = statements("?", no_limit="LIMIT -1 ")
    driver_errors = sqlite3.Error
    dialect = "sqlite"
    mark = "?"

    def __init__(self, path: Path, bounds: StoreBounds) -> None:
        super().__init__(bounds)
        self.path = path
        self._db: aiosqlite.Connection | None = None

    async def start(self) -> None:
        try:
            await asyncio.to_thread(_prepare_file, self.path)
            self._db = await aiosqlite.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None)
            mode = await self._journal_mode_wal()
            if str(mode).lower() != "wal":
                logger.warning("responses store %s: SQLite kept journal mode %s, not WAL", self.path, mode)
            await self._connection().execute("PRAGMA synchronous=NORMAL")
            await self._migrate()
            await self.prune()
        except (OSError, sqlite3.Error) as exc:
            await self.close()
            raise ResponseStoreError(
                f"cannot open the responses store at {self.path} ({exc}); set GATEWAY_RESPONSES_STORE to a "
                "writable place, or GATEWAY_RESPONSES_STORE_ENABLED=false to store nothing"
            ) from exc
        except BaseException:
            await self.close()
            raise
        logger.info("responses store: SQLite file %s", self.path.resolve())

    async def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            await db.close()

    async def prune(self) -> None:
        """Delete expired responses, then all but the newest ``max_responses``. Runs at start and
        every ``bounds.prune_every`` puts; public so that tests and tools can run it."""
        self._puts_since_prune = 0
        await self._execute(self.sql.expire, (self.bounds.oldest_alive(time.time()),))
        await self._execute(self.sql.evict, (self.bounds.max_responses,))

    async def _migrate(self) -> None:
        await self.migrate(COMPONENT, MIGRATIONS)

    async def migrate(self, component: str, migrations: tuple[tuple[str, ...], ...]) -> None:
        db = self._connection()
        # IMMEDIATE takes the write lock now: a second process starting on the same file waits
        # here (busy timeout) and then finds the schema already at its version. Nothing else uses
        # the connection meanwhile: migrations run at start, before any request.
        await db.execute("BEGIN IMMEDIATE")
        try:
            await self._execute(CREATE_VERSION_TABLE)
            await self._apply_migrations(self._execute, component, migrations)
        except BaseException:
            if db.in_transaction:
                await db.execute("ROLLBACK")
            raise
        await db.execute("COMMIT")

    async def _journal_mode_wal(self) -> Any:
        """Switch the file to WAL. SQLite answers "database is locked" at once, without its busy
        timeout, when another connection is switching the same file at that moment (two workers,
        or two replicas on one volume, starting together): retried until the busy timeout."""
        deadline = time.monotonic() + BUSY_TIMEOUT
        while True:
            try:
                _, row = await self._execute("PRAGMA journal_mode=WAL")
                return None if row is None else row[0]
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.02)

    async def _execute(self, sql: str, params: tuple[object, ...] | None = None) -> tuple[int, Any]:
        async with self._connection().execute(sql, params) as cursor:
            return cursor.rowcount, await cursor.fetchone() if cursor.description else None

    async def _fetch_all(self, sql: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        async with self._connection().execute(sql, params) as cursor:
            return [tuple(row) for row in await cursor.fetchall()]

    def _connection(self) -> aiosqlite.Connection:
        if self._db is None:
            raise RuntimeError("the responses store is not started (or already closed)")
        return self._db


def _prepare_file(path: Path) -> None:
    """Create the folder (owner only, when we create it) and the file (owner read/write only)
    before SQLite does, which would create it with the umask's wider default."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
