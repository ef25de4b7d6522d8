"""The Batch API's tables, on the store the gateway already has (SQLite or PostgreSQL).

Three tables: files (an upload's content, or a finished batch's output or error file), batches,
and one row per batch line. File contents live in the database, as text, not in a directory:
several gateways on one PostgreSQL then share them with nothing else to mount, one backup holds
everything, and a file is deleted with its rows. (Batch files are JSONL, so UTF-8 text; OpenAI's
cap is 200 MB a file, far under either database's limit for one value.)

Sharing the work: a gateway takes lines by *leasing* them (``lease_owner``, ``lease_until``) in
one statement, on PostgreSQL with ``FOR UPDATE SKIP LOCKED`` so that gateways leasing at once
take different lines without waiting on each other (SQLite has one writer at a time, which does
the same). A lease is renewed while its line runs; a gateway that dies stops renewing, and once
its leases are past, another gateway leases those lines again. A line's answer is written only
by the holder of its lease and only while the line is pending, so however many times a line ran
(a gateway that stalled past its lease and came back), one answer is kept: no line appears twice
in the output.

A batch closes (``completed``, ``cancelled``, ``expired``) in two steps: a gateway claims the
closing (``closing``, ``closing_at``: one claim wins; a claim older than a lease is taken over,
so a gateway dying mid-close loses nothing), writes the output and error files from the lines,
and then sets the final status with the files' ids. The lines' bodies and answers are emptied
then: the files hold them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from gateway.jobs.lines import InputLine
from gateway.jobs.records import BatchRecord, FileRecord, LeasedLine, RequestCounts, new_id
from gateway.store.base import ResponseStore

COMPONENT = "jobs"

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE gateway_files (
            id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            purpose TEXT NOT NULL,
            filename TEXT NOT NULL,
            bytes BIGINT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION,
            content TEXT NOT NULL
        )""",
        "CREATE INDEX gateway_files_owner ON gateway_files (owner, created_at)",
        """CREATE TABLE gateway_batches (
            id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            endpoint TEXT NOT NULL,
            input_file_id TEXT NOT NULL,
            completion_window TEXT NOT NULL,
            status TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL,
            retain_until DOUBLE PRECISION NOT NULL,
            max_concurrency INTEGER NOT NULL,
            metadata TEXT,
            times TEXT NOT NULL,
            total INTEGER NOT NULL,
            output_file_id TEXT,
            error_file_id TEXT,
            closing TEXT,
            closing_at DOUBLE PRECISION
        )""",
        "CREATE INDEX gateway_batches_owner ON gateway_batches (owner, created_at)",
        "CREATE INDEX gateway_batches_status ON gateway_batches (status, created_at)",
        """CREATE TABLE gateway_batch_lines (
            batch_id TEXT NOT NULL,
            line INTEGER NOT NULL,
            custom_id TEXT NOT NULL,
            url TEXT NOT NULL,
            body TEXT NOT NULL,
            state TEXT NOT NULL,
            lease_owner TEXT,
            lease_until DOUBLE PRECISION,
            attempts INTEGER NOT NULL,
            status_code INTEGER,
            result TEXT,
            PRIMARY KEY (batch_id, line)
        )""",
        "CREATE INDEX gateway_batch_lines_state ON gateway_batch_lines (batch_id, state, lease_until)",
    ),
    (
        # a background response's process, alive while it renews the lease
        """CREATE TABLE gateway_background (
            id TEXT PRIMARY KEY,
            runner TEXT NOT NULL,
            lease_until DOUBLE PRECISION NOT NULL
        )""",
    ),
)

INSERT_CHUNK = 200
"""Lines per INSERT when a batch is created: one statement each, so a 50,000-line batch is a few
hundred round trips, not 50,000."""

ABANDONED_CREATION = 3600.0
"""Seconds after which a batch still ``validating`` is one whose creation was cut short (a
gateway that died while writing its lines): deleted with them by ``prune``."""

_BATCH_COLUMNS = (
    "id, owner, endpoint, input_file_id, completion_window, status, created_at, expires_at, "
    "max_concurrency, metadata, times, total, output_file_id, error_file_id"
)


class JobStore:
    """The Batch API's rows, through ``database``'s connections (``ResponseStore.execute``...)."""

    def __init__(self, database: ResponseStore) -> None:
        self.db = database
        p = database.mark
        self._p = p
        pick = (
            f"SELECT line FROM gateway_batch_lines WHERE batch_id = {p} AND state = 'pending' "
            f"AND (lease_until IS NULL OR lease_until <= {p}) ORDER BY line LIMIT {p}"
        )
        set_lease = f"UPDATE gateway_batch_lines SET lease_owner = {p}, lease_until = {p}"
        returning = ", ".join(f"gateway_batch_lines.{c}" for c in ("line", "custom_id", "url", "body", "attempts"))
        returning = f"RETURNING {returning}"
        if database.dialect == "postgresql":
            # The pick in a materialized CTE: as a plain subquery of the UPDATE, PostgreSQL may
            # run it again for each row it joins, each run skipping the rows the last one locked,
            # and lease far more than LIMIT lines.
            self._lease_sql = (
                f"WITH picked AS MATERIALIZED ({pick} FOR UPDATE SKIP LOCKED) {set_lease} FROM picked "
                f"WHERE gateway_batch_lines.batch_id = {p} AND gateway_batch_lines.line = picked.line {returning}"
            )
        else:  # one writer at a time: the statement is the lock
            self._lease_sql = (
                f"WITH picked AS ({pick}) {set_lease} WHERE batch_id = {p} AND line IN (SELECT line FROM picked) "
                f"{returning}"
            )

    async def start(self) -> None:
        await self.db.migrate(COMPONENT, MIGRATIONS)

    # -- files -------------------------------------------------------------------------------

    async def add_file(self, record: FileRecord, content: str) -> None:
        p = self._p
        await self.db.execute(
            "INSERT INTO gateway_files (id, owner, purpose, filename, bytes, created_at, expires_at, content) "
            f"VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p}, {p})",
            (
                record.id,
                record.owner,
                record.purpose,
                record.filename,
                record.bytes,
                record.created_at,
                record.expires_at,
                content,
            ),
        )

    async def get_file(self, file_id: str, owner: str, now: float) -> FileRecord | None:
        p = self._p
        rows = await self.db.fetch_all(
            "SELECT id, owner, purpose, filename, bytes, created_at, expires_at FROM gateway_files "
            f"WHERE id = {p} AND owner = {p} AND (expires_at IS NULL OR expires_at > {p})",
            (file_id, owner, now),
        )
        return _file(rows[0]) if rows else None

    async def file_content(self, file_id: str, owner: str, now: float) -> str | None:
        p = self._p
        rows = await self.db.fetch_all(
            f"SELECT content FROM gateway_files WHERE id = {p} AND owner = {p} "
            f"AND (expires_at IS NULL OR expires_at > {p})",
            (file_id, owner, now),
        )
        return str(rows[0][0]) if rows else None

    async def list_files(
        self, owner: str, now: float, *, purpose: str | None, after: str | None, limit: int, order: str
    ) -> list[FileRecord]:
        """Newest first (``desc``) or oldest first, after the file ``after`` (a cursor: its id)."""
        p = self._p
        where = f"owner = {p} AND (expires_at IS NULL OR expires_at > {p})"
        params: list[object] = [owner, now]
        if purpose is not None:
            where += f" AND purpose = {p}"
            params.append(purpose)
        direction = "DESC" if order == "desc" else "ASC"
        if after is not None:
            cursor = await self.db.fetch_all(
                f"SELECT created_at FROM gateway_files WHERE id = {p} AND owner = {p}", (after, owner)
            )
            if cursor:
                compare = "<" if order == "desc" else ">"
                where += f" AND (created_at, id) {compare} ({p}, {p})"
                params += [cursor[0][0], after]
        rows = await self.db.fetch_all(
            "SELECT id, owner, purpose, filename, bytes, created_at, expires_at FROM gateway_files "
            f"WHERE {where} ORDER BY created_at {direction}, id {direction} LIMIT {p}",
            (*params, limit),
        )
        return [_file(row) for row in rows]

    async def delete_file(self, file_id: str, owner: str) -> bool:
        p = self._p
        return await self.db.execute(f"DELETE FROM gateway_files WHERE id = {p} AND owner = {p}", (file_id, owner)) > 0

    # -- batches -----------------------------------------------------------------------------

    async def create_batch(self, record: BatchRecord, lines: Sequence[InputLine], retain_until: float) -> None:
        """The batch row first, ``validating``, then its lines, then ``record.status``: runners
        lease only lines of a batch ``in_progress``, so a creation cut short leaves a batch that
        stays ``validating`` and runs nothing, and ``prune`` deletes it with its lines once it is
        older than ``ABANDONED_CREATION``."""
        p = self._p
        await self.db.execute(
            f"INSERT INTO gateway_batches ({_BATCH_COLUMNS}, retain_until) VALUES ({', '.join([p] * 15)})",
            (
                record.id,
                record.owner,
                record.endpoint,
                record.input_file_id,
                record.completion_window,
                "validating",
                record.created_at,
                record.expires_at,
                record.max_concurrency,
                None if record.metadata is None else json.dumps(record.metadata),
                json.dumps(record.times),
                len(lines),
                None,
                None,
                retain_until,
            ),
        )
        for start in range(0, len(lines), INSERT_CHUNK):
            chunk = lines[start : start + INSERT_CHUNK]
            values = ", ".join(f"({p}, {p}, {p}, {p}, {p}, 'pending', 0)" for _ in chunk)
            params: list[object] = []
            for line in chunk:
                params += [record.id, line.line, line.custom_id, line.url, line.body]
            await self.db.execute(
                "INSERT INTO gateway_batch_lines (batch_id, line, custom_id, url, body, state, attempts) "
                f"VALUES {values}",
                tuple(params),
            )
        await self.db.execute(
            f"UPDATE gateway_batches SET status = {p} WHERE id = {p} AND status = 'validating'",
            (record.status, record.id),
        )

    async def get_batch(self, batch_id: str, owner: str) -> BatchRecord | None:
        p = self._p
        rows = await self.db.fetch_all(
            f"SELECT {_BATCH_COLUMNS} FROM gateway_batches WHERE id = {p} AND owner = {p}", (batch_id, owner)
        )
        if not rows:
            return None
        counts = await self._counts([batch_id])
        return _batch(rows[0], counts.get(batch_id))

    async def list_batches(self, owner: str, *, after: str | None, limit: int) -> list[BatchRecord]:
        """Newest first, after the batch ``after`` (its id), as OpenAI lists them."""
        p = self._p
        where = f"owner = {p}"
        params: list[object] = [owner]
        if after is not None:
            cursor = await self.db.fetch_all(
                f"SELECT created_at FROM gateway_batches WHERE id = {p} AND owner = {p}", (after, owner)
            )
            if cursor:
                where += f" AND (created_at, id) < ({p}, {p})"
                params += [cursor[0][0], after]
        rows = await self.db.fetch_all(
            f"SELECT {_BATCH_COLUMNS} FROM gateway_batches WHERE {where} ORDER BY created_at DESC, id DESC LIMIT {p}",
            (*params, limit),
        )
        counts = await self._counts([row[0] for row in rows])
        return [_batch(row, counts.get(row[0])) for row in rows]

    async def cancel_batch(self, batch_id: str, owner: str, now: float) -> BatchRecord | None:
        """Mark it ``cancelling`` (a batch already closing or closed stays as it is); its runners
        stop its lines, and it closes ``cancelled`` once none runs. None: not this owner's."""
        p = self._p
        batch = await self.get_batch(batch_id, owner)
        if batch is None:
            return None
        if batch.status == "in_progress":
            times = {**batch.times, "cancelling": now}
            await self.db.execute(
                f"UPDATE gateway_batches SET status = 'cancelling', times = {p} "
                f"WHERE id = {p} AND owner = {p} AND status = 'in_progress' AND closing IS NULL",
                (json.dumps(times), batch_id, owner),
            )
            batch = await self.get_batch(batch_id, owner)
        return batch

    async def statuses(self, batch_ids: Iterable[str]) -> dict[str, tuple[str, float]]:
        """Each batch's status and ``expires_at``."""
        ids = list(batch_ids)
        if not ids:
            return {}
        marks = ", ".join([self._p] * len(ids))
        rows = await self.db.fetch_all(
            f"SELECT id, status, expires_at FROM gateway_batches WHERE id IN ({marks})", tuple(ids)
        )
        return {str(row[0]): (str(row[1]), float(row[2])) for row in rows}

    async def _counts(self, batch_ids: Sequence[str]) -> dict[str, RequestCounts]:
        if not batch_ids:
            return {}
        marks = ", ".join([self._p] * len(batch_ids))
        rows = await self.db.fetch_all(
            "SELECT b.id, b.total, l.state, count(l.line) FROM gateway_batches b "
            "LEFT JOIN gateway_batch_lines l ON l.batch_id = b.id AND l.state <> 'pending' "
            f"WHERE b.id IN ({marks}) GROUP BY b.id, b.total, l.state",
            tuple(batch_ids),
        )
        totals: dict[str, list[int]] = {}
        for batch_id, total, state, count in rows:
            entry = totals.setdefault(str(batch_id), [int(total), 0, 0])
            if state == "done":
                entry[1] += int(count)
            elif state is not None:
                entry[2] += int(count)
        return {key: RequestCounts(*value) for key, value in totals.items()}

    # -- running lines -----------------------------------------------------------------------

    async def lease(self, runner: str, now: float, lease_seconds: float, wanted: int, cap: int) -> list[LeasedLine]:
        """Up to ``wanted`` pending lines of open batches, oldest batch first, each batch held to
        its ``max_concurrency`` (and ``cap``) of live leases, all gateways together. (Two gateways
        leasing the same batch at one instant may take a few more between them than its limit;
        the next lease corrects it.)"""
        p = self._p
        open_batches = await self.db.fetch_all(
            "SELECT b.id, b.owner, b.max_concurrency, "
            "(SELECT count(*) FROM gateway_batch_lines l WHERE l.batch_id = b.id AND l.state = 'pending' "
            f"AND l.lease_owner IS NOT NULL AND l.lease_until > {p}) "
            f"FROM gateway_batches b WHERE b.status = 'in_progress' AND b.closing IS NULL AND b.expires_at > {p} "
            "ORDER BY b.created_at, b.id",
            (now, now),
        )
        leased: list[LeasedLine] = []
        for batch_id, owner, max_concurrency, live in open_batches:
            room = min(int(max_concurrency), cap) - int(live)
            take = min(room, wanted - len(leased))
            if take <= 0:
                continue
            rows = await self.db.fetch_all(
                self._lease_sql, (batch_id, now, take, runner, now + lease_seconds, batch_id)
            )
            for line, custom_id, url, body, attempts in sorted(rows):
                leased.append(LeasedLine(str(batch_id), int(line), custom_id, url, body, str(owner), int(attempts)))
            if len(leased) >= wanted:
                break
        return leased

    async def renew(self, runner: str, lines: Iterable[tuple[str, int]], until: float) -> None:
        p = self._p
        by_batch: dict[str, list[int]] = {}
        for batch_id, line in lines:
            by_batch.setdefault(batch_id, []).append(line)
        for batch_id, numbers in by_batch.items():
            marks = ", ".join([p] * len(numbers))
            await self.db.execute(
                f"UPDATE gateway_batch_lines SET lease_until = {p} WHERE batch_id = {p} AND line IN ({marks}) "
                f"AND lease_owner = {p} AND state = 'pending'",
                (until, batch_id, *numbers, runner),
            )

    async def finish_line(
        self, runner: str, leased: LeasedLine, state: str, status_code: int | None, result: str
    ) -> bool:
        """Keep this answer, if this runner still holds the line (False: another took it over,
        and its answer is the one kept)."""
        p = self._p
        return (
            await self.db.execute(
                f"UPDATE gateway_batch_lines SET state = {p}, status_code = {p}, result = {p}, lease_owner = NULL, "
                f"lease_until = NULL WHERE batch_id = {p} AND line = {p} AND lease_owner = {p} AND state = 'pending'",
                (state, status_code, result, leased.batch_id, leased.line, runner),
            )
            > 0
        )

    async def release_line(self, runner: str, leased: LeasedLine, not_before: float, *, attempted: bool) -> None:
        """Give the line back to be run again from ``not_before`` (by any gateway); ``attempted``:
        this try counts against ``batch_line_attempts``."""
        p = self._p
        await self.db.execute(
            f"UPDATE gateway_batch_lines SET lease_owner = NULL, lease_until = {p}, attempts = attempts + {p} "
            f"WHERE batch_id = {p} AND line = {p} AND lease_owner = {p} AND state = 'pending'",
            (not_before, 1 if attempted else 0, leased.batch_id, leased.line, runner),
        )

    # -- closing -----------------------------------------------------------------------------

    async def closable(self, now: float, stale: float) -> list[tuple[str, str, str]]:
        """Batches ready to close, with the status each closes in: every line answered
        (``completed``); cancelling, or past its window, with no line running (``cancelled``,
        ``expired``). A close claimed before ``stale`` counts as abandoned, and is finished in the
        status it began (its gateway may have marked the lines already: an expired batch would
        otherwise look completed)."""
        p = self._p
        rows = await self.db.fetch_all(
            "SELECT b.id, b.status, b.expires_at, b.closing, "
            "(SELECT count(*) FROM gateway_batch_lines l WHERE l.batch_id = b.id AND l.state = 'pending'), "
            "(SELECT count(*) FROM gateway_batch_lines l WHERE l.batch_id = b.id AND l.state = 'pending' "
            f"AND l.lease_owner IS NOT NULL AND l.lease_until > {p}) "
            "FROM gateway_batches b WHERE b.status IN ('in_progress', 'finalizing', 'cancelling') "
            f"AND (b.closing IS NULL OR b.closing_at < {p})",
            (now, stale),
        )
        ready: list[tuple[str, str, str]] = []
        for batch_id, status, expires_at, closing, pending, running in rows:
            if closing is not None:
                ready.append((str(batch_id), str(status), str(closing)))
            elif status == "cancelling" and not running:
                ready.append((str(batch_id), str(status), "cancelled"))
            elif status != "cancelling" and not pending:
                ready.append((str(batch_id), str(status), "completed"))
            elif status != "cancelling" and float(expires_at) <= now and not running:
                ready.append((str(batch_id), str(status), "expired"))
        return ready

    async def claim_close(self, batch_id: str, status: str, target: str, now: float, stale: float) -> bool:
        """Take the close of a batch that ``closable`` found in ``status``; False: another gateway has it."""
        p = self._p
        return (
            await self.db.execute(
                f"UPDATE gateway_batches SET closing = {p}, closing_at = {p}, status = {p} "
                f"WHERE id = {p} AND status = {p} AND (closing IS NULL OR closing_at < {p})",
                (target, now, "finalizing" if target == "completed" else status, batch_id, status, stale),
            )
            > 0
        )

    async def close_batch(self, batch_id: str, target: str, claimed_at: float, now: float) -> None:
        """After ``claim_close``: the lines never run marked, the output and error files
        written, the final status set (only by the claim's holder), the lines emptied."""
        p = self._p
        if target != "completed":
            state = "cancelled" if target == "cancelled" else "expired"
            await self.db.execute(
                f"UPDATE gateway_batch_lines SET state = {p}, lease_owner = NULL, lease_until = NULL "
                f"WHERE batch_id = {p} AND state = 'pending'",
                (state, batch_id),
            )
        rows = await self.db.fetch_all(
            f"SELECT owner, times, retain_until FROM gateway_batches WHERE id = {p} AND closing_at = {p}",
            (batch_id, claimed_at),
        )
        if not rows:
            return  # another gateway took the close over
        owner, times_text, retain_until = rows[0]
        lines = await self.db.fetch_all(
            f"SELECT line, custom_id, state, status_code, result FROM gateway_batch_lines WHERE batch_id = {p} "
            "ORDER BY line",
            (batch_id,),
        )
        output = [render_line(row) for row in lines if row[2] == "done"]
        errors = [render_line(row) for row in lines if row[2] != "done"]
        file_ids: list[str | None] = []
        for name, rendered in (("output", output), ("error", errors)):
            if not rendered:
                file_ids.append(None)
                continue
            content = "".join(rendered)
            record = FileRecord(
                new_id("file-"),
                str(owner),
                "batch_output",
                f"{batch_id}_{name}.jsonl",
                len(content.encode()),
                now,
                float(retain_until),
            )
            await self.add_file(record, content)
            file_ids.append(record.id)
        times = {**json.loads(times_text), target: now}
        if target == "completed":
            times.setdefault("finalizing", claimed_at)
        changed = await self.db.execute(
            f"UPDATE gateway_batches SET status = {p}, times = {p}, output_file_id = {p}, error_file_id = {p}, "
            f"closing = NULL WHERE id = {p} AND closing_at = {p}",
            (target, json.dumps(times), file_ids[0], file_ids[1], batch_id, claimed_at),
        )
        if changed:
            await self.db.execute(
                f"UPDATE gateway_batch_lines SET body = '', result = NULL WHERE batch_id = {p}", (batch_id,)
            )
        else:  # taken over meanwhile: the other gateway's files are the batch's
            for file_id in file_ids:
                if file_id is not None:
                    await self.delete_file(file_id, str(owner))

    # -- background responses ----------------------------------------------------------------

    async def hold_background(self, response_id: str, runner: str, until: float) -> None:
        """Say that ``runner`` runs this background response until ``until`` (taken or renewed)."""
        p = self._p
        await self.db.execute(
            f"INSERT INTO gateway_background (id, runner, lease_until) VALUES ({p}, {p}, {p}) "
            "ON CONFLICT (id) DO UPDATE SET runner = excluded.runner, lease_until = excluded.lease_until",
            (response_id, runner, until),
        )

    async def release_background(self, response_id: str) -> None:
        p = self._p
        await self.db.execute(f"DELETE FROM gateway_background WHERE id = {p}", (response_id,))

    async def background_held(self, response_id: str, now: float) -> bool:
        """Whether a live process runs it (its lease not past)."""
        p = self._p
        rows = await self.db.fetch_all(
            f"SELECT 1 FROM gateway_background WHERE id = {p} AND lease_until > {p}", (response_id, now)
        )
        return bool(rows)

    # -- housekeeping ------------------------------------------------------------------------

    async def prune(self, now: float) -> None:
        """Delete expired files, closed batches past their retention and batches whose creation
        was cut short, with their lines."""
        p = self._p
        await self.db.execute(f"DELETE FROM gateway_files WHERE expires_at IS NOT NULL AND expires_at <= {p}", (now,))
        old = await self.db.fetch_all(
            f"SELECT id FROM gateway_batches WHERE (retain_until <= {p} AND status IN ('completed', 'expired', "
            f"'cancelled')) OR (status = 'validating' AND created_at <= {p})",
            (now, now - ABANDONED_CREATION),
        )
        # a lease a day past belongs to a process long gone, whose response a read has settled
        await self.db.execute(f"DELETE FROM gateway_background WHERE lease_until <= {p}", (now - 86400.0,))
        for (batch_id,) in old:
            await self.db.execute(f"DELETE FROM gateway_batch_lines WHERE batch_id = {p}", (batch_id,))
            await self.db.execute(f"DELETE FROM gateway_batches WHERE id = {p}", (batch_id,))

    async def census(self) -> tuple[dict[str, int], dict[str, int]]:
        """Batches by status and lines by state, every owner together (the metrics' gauges)."""
        batches = await self.db.fetch_all("SELECT status, count(*) FROM gateway_batches GROUP BY status")
        lines = await self.db.fetch_all(
            "SELECT l.state, count(*) FROM gateway_batch_lines l JOIN gateway_batches b ON b.id = l.batch_id "
            "WHERE b.status IN ('in_progress', 'finalizing', 'cancelling') GROUP BY l.state"
        )
        return {str(s): int(n) for s, n in batches}, {str(s): int(n) for s, n in lines}


def render_line(row: Sequence[Any]) -> str:
    """One line of an output or error file, OpenAI's shape: the answer as ``response`` (its
    status and body), or, for a line never answered, ``error``."""
    line, custom_id, state, status_code, result = row
    head = f'{{"id":"batch_req_{_line_id(line, custom_id)}","custom_id":{json.dumps(custom_id)},'
    if state in ("done", "error") and result is not None:
        request_id = f"batch_req_{_line_id(line, custom_id)}"
        response = f'{{"status_code":{int(status_code)},"request_id":"{request_id}","body":{result}}}'
        return f'{head}"response":{response},"error":null}}\n'
    code = "batch_expired" if state == "expired" else "batch_cancelled"
    message = (
        "This line was not run before the batch's completion window ended."
        if state == "expired"
        else "This line was not run: the batch was cancelled."
    )
    return f'{head}"response":null,"error":{{"code":"{code}","message":"{message}"}}}}\n'


def _line_id(line: int, custom_id: str) -> str:
    """The same id for a line however many times its file is read."""
    return hashlib.sha256(f"{line}\x00{custom_id}".encode()).hexdigest()[:24]


def _file(row: Sequence[Any]) -> FileRecord:
    file_id, owner, purpose, filename, size, created_at, expires_at = row
    return FileRecord(
        str(file_id),
        str(owner),
        str(purpose),
        str(filename),
        int(size),
        float(created_at),
        None if expires_at is None else float(expires_at),
    )


def _batch(row: Sequence[Any], counts: RequestCounts | None) -> BatchRecord:
    (
        batch_id,
        owner,
        endpoint,
        input_file_id,
        window,
        status,
        created_at,
        expires_at,
        max_concurrency,
        metadata,
        times,
        total,
        output_file_id,
        error_file_id,
    ) = row
    return BatchRecord(
        id=str(batch_id),
        owner=str(owner),
        endpoint=str(endpoint),
        input_file_id=str(input_file_id),
        completion_window=str(window),
        status=str(status),
        created_at=float(created_at),
        expires_at=float(expires_at),
        max_concurrency=int(max_concurrency),
        metadata=None if metadata is None else json.loads(metadata),
        times={key: float(value) for key, value in json.loads(times).items()},
        counts=counts or RequestCounts(int(total)),
        output_file_id=output_file_id,
        error_file_id=error_file_id,
    )
