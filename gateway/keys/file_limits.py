"""The counts of every worker of one gateway (``--workers``), in one SQLite file they all open.

Each step is one ``BEGIN IMMEDIATE`` transaction (SQLite's file lock), so workers count exactly
together: the window's requests and tokens in ``key_windows``, the requests in flight as leases
in ``key_leases`` (``leases``), which a worker that dies stops renewing. WAL and no fsync: the
counts matter only while the gateway runs.

The work runs on one thread of the process, never on the event loop: a busy file (another
process holding its lock) waits there, at most ``timeout`` for the lock, and an admission that
waited in the thread's queue past ``timeout`` is not started, so a keyed request waits at most
about twice ``timeout``. A busy or broken file is the store being unavailable, as Redis being
down is (``StoreTrouble``: 503 when failing closed, uncounted when open). Charges never wait:
they add to a sum in memory that the thread writes, and keeps for the next write when it cannot.
A step costs about 40 µs of the thread's CPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from gateway.keys.counts import Admit, Failure, Step, StoreTrouble, decide, window_of
from gateway.keys.leases import LEASE_TTL, Held, Leases
from gateway.keys.policy import KeyPolicy

T = TypeVar("T")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS key_windows (name TEXT PRIMARY KEY, win INTEGER NOT NULL, "
    "requests INTEGER NOT NULL, tokens INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS key_leases (id TEXT PRIMARY KEY, name TEXT NOT NULL, expires REAL NOT NULL)",
    "CREATE INDEX IF NOT EXISTS key_leases_by_name ON key_leases (name, expires)",
)

_ADD_TOKENS = (
    "INSERT INTO key_windows VALUES (?, ?, 0, ?) ON CONFLICT (name) DO UPDATE SET "
    "requests = CASE WHEN win = excluded.win THEN requests ELSE 0 END, "
    "tokens = CASE WHEN win = excluded.win THEN tokens ELSE 0 END + excluded.tokens, win = excluded.win"
)

_Errors = (sqlite3.Error, OSError)


class _LateError(sqlite3.OperationalError):
    """An admission that waited in the thread's queue past its deadline: not started."""


class FileLimits:
    """Every worker's counts in one SQLite file (module docstring)."""

    def __init__(
        self,
        path: Path,
        *,
        fail: Failure = "open",
        timeout: float = 0.25,
        lease_ttl: float = LEASE_TTL,
        on_failure: Callable[[Step], None] | None = None,
    ) -> None:
        self._path = path
        self._timeout = timeout
        self._db: sqlite3.Connection | None = None
        """Opened, and only ever used, by the thread."""
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="key-limits")
        self._trouble = StoreTrouble(f"the key limits file {path}", fail, on_failure)
        self._leases = Leases(lease_ttl, self._renew)
        self._pending: dict[str, int] = {}
        """Tokens charged and not yet written, by key name."""
        self._pending_lock = threading.Lock()
        self._flush_queued = False

    # -- on the event loop -------------------------------------------------------------------------

    async def _run(self, work: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, work, *args)

    async def admit(self, policy: KeyPolicy, *, generating: bool = True) -> Admit:
        assert policy.name is not None
        lease = self._leases.new_id()
        deadline = time.monotonic() + self._timeout
        try:
            admit = await self._run(self._admit, deadline, policy, generating, lease)
        except _Errors as exc:
            return self._trouble.admit_failed(exc)
        if admit.lease is not None:
            self._leases.hold(policy.name, admit.lease)
        return admit

    async def release(self, policy: KeyPolicy, admit: Admit) -> None:
        if admit.lease is None:
            return
        assert policy.name is not None
        self._leases.drop(policy.name, admit.lease)
        try:
            await self._run(self._delete, [admit.lease])
        except _Errors as exc:
            self._trouble.report(
                "release", "key limits: could not release a slot of %s (%s); it expires by itself", policy.name, exc
            )

    def charge(self, policy: KeyPolicy, tokens: int) -> None:
        assert policy.name is not None
        with self._pending_lock:
            self._pending[policy.name] = self._pending.get(policy.name, 0) + tokens
            if self._flush_queued:
                return
            self._flush_queued = True
        try:
            self._thread.submit(self._flush)
        except RuntimeError:  # closed: the gateway is going down, the counts with it
            pass

    async def _renew(self, held: Held) -> None:
        try:
            await self._run(self._extend, [lease for leases in held.values() for lease in leases])
        except _Errors as exc:
            self._trouble.report("renew", "key limits: could not renew leases in %s (%s)", self._path, exc)

    async def close(self) -> None:
        await self._leases.close()
        held = [lease for leases in self._leases.held().values() for lease in leases]
        with contextlib.suppress(*_Errors):
            await self._run(self._flush)
            if held:
                await self._run(self._delete, held)
        await self._run(self._disconnect)
        self._thread.shutdown(wait=False)

    # -- on the thread -----------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            db = sqlite3.connect(self._path, isolation_level=None, timeout=self._timeout, check_same_thread=False)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=OFF")  # counts of the running gateway: nothing to keep
                for statement in _SCHEMA:
                    db.execute(statement)
            except BaseException:
                db.close()
                raise
            self._db = db
        return self._db

    def _transaction(self, work: Callable[[sqlite3.Connection], T]) -> T:
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            result = work(db)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                with contextlib.suppress(*_Errors):
                    db.execute("ROLLBACK")
            raise
        return result

    def _admit(self, deadline: float, policy: KeyPolicy, generating: bool, lease: str) -> Admit:
        if time.monotonic() > deadline:
            raise _LateError("the key limits thread is behind")
        return self._transaction(lambda db: self._count(db, policy, generating, lease))

    def _count(self, db: sqlite3.Connection, policy: KeyPolicy, generating: bool, lease: str) -> Admit:
        now = time.time()
        window, reset = window_of(now)
        name = policy.name
        found = db.execute("SELECT win, requests, tokens FROM key_windows WHERE name = ?", (name,)).fetchone()
        requests, tokens = (found[1], found[2]) if found is not None and found[0] == window else (0, 0)
        takes_slot = generating and policy.max_concurrent > 0
        concurrent = 0
        if takes_slot:
            db.execute("DELETE FROM key_leases WHERE name = ? AND expires <= ?", (name, now))
            concurrent = db.execute("SELECT COUNT(*) FROM key_leases WHERE name = ?", (name,)).fetchone()[0]
        refused = decide(policy, concurrent, requests, tokens, generating=generating)
        if refused is not None:
            return Admit(refused, requests, tokens, reset)
        requests += 1
        db.execute(
            "INSERT OR REPLACE INTO key_windows VALUES (?, ?, ?, ?)",
            (name, window, requests, tokens),
        )
        if not takes_slot:
            return Admit(None, requests, tokens, reset)
        db.execute("INSERT INTO key_leases VALUES (?, ?, ?)", (lease, name, now + self._leases.ttl))
        return Admit(None, requests, tokens, reset, lease=lease)

    def _flush(self) -> None:
        with self._pending_lock:
            pending, self._pending = self._pending, {}
            self._flush_queued = False
        if not pending:
            return
        try:
            self._transaction(lambda db: self._add_tokens(db, pending))
        except _Errors as exc:
            with self._pending_lock:
                for name, tokens in pending.items():
                    self._pending[name] = self._pending.get(name, 0) + tokens
            self._trouble.report(
                "charge", "key limits: could not charge tokens in %s (%s); kept for the next charge", self._path, exc
            )

    @staticmethod
    def _add_tokens(db: sqlite3.Connection, pending: dict[str, int]) -> None:
        window, _ = window_of(time.time())
        db.executemany(_ADD_TOKENS, [(name, window, tokens) for name, tokens in pending.items()])

    def _extend(self, leases: list[str]) -> None:
        expires = time.time() + self._leases.ttl
        self._transaction(
            lambda db: db.executemany("UPDATE key_leases SET expires = ? WHERE id = ?", [(expires, i) for i in leases])
        )

    def _delete(self, leases: list[str]) -> None:
        self._transaction(lambda db: db.executemany("DELETE FROM key_leases WHERE id = ?", [(i,) for i in leases]))

    def _disconnect(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
