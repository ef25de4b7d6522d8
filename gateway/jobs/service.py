"""What the Batch API's routes call: files and batches, owner-scoped, and this gateway's runner.

Every read and write names the owner (the stored responses' owner: a key's name or digest), so
another key's file or batch is simply not found. Expiry: an upload lives ``jobs_retention``
(or its own ``expires_after``), a batch and its output files ``jobs_retention`` after its
creation (or the output files their ``output_expires_after``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.errors import JobNotFoundError
from gateway.jobs.lines import parse_input_file
from gateway.jobs.records import BatchRecord, FileRecord, RequestCounts, new_id
from gateway.jobs.runner import BatchRunner, JobMetrics, LineRunner, RunnerSettings, runner_name
from gateway.jobs.store import JobStore
from gateway.store.base import ResponseStore


class JobSettings(RunnerSettings, Protocol):
    @property
    def batch_max_lines(self) -> int: ...
    @property
    def jobs_retention(self) -> float: ...


@dataclass(frozen=True, slots=True)
class NewBatch:
    """A batch's creation, checked by planning (``plan.batches``)."""

    input_file_id: str
    endpoint: str
    completion_window: str
    window_seconds: float
    metadata: dict[str, Any] | None
    max_concurrency: int | None
    output_expiry: int | None


class JobService:
    def __init__(
        self,
        database: ResponseStore,
        settings: JobSettings,
        metrics: JobMetrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = JobStore(database)
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self.runner: BatchRunner | None = None
        self.name = runner_name()
        """This process among the gateways on the store (its leases say it)."""

    async def start(self, lines: LineRunner) -> None:
        """The tables migrated, then this gateway's runner started (it leases only if
        ``batch_runner`` is on, but closes and prunes batches either way)."""
        await self.store.start()
        self.runner = BatchRunner(self.store, lines, self.settings, self.metrics, self.clock, name=self.name)
        self.runner.start()

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.close()
            self.runner = None

    # -- background responses ----------------------------------------------------------------

    async def hold_background(self, response_id: str) -> None:
        """This process runs the background response: a lease of ``batch_lease_seconds``, renewed
        (``renew_every``) while it runs, released when its end is stored. A reader elsewhere that
        finds it running with no live lease knows its process died (``background_alive``)."""
        await self.store.hold_background(response_id, self.name, self.clock() + self.settings.batch_lease_seconds)

    @property
    def renew_every(self) -> float:
        return self.settings.batch_lease_seconds / 3

    async def release_background(self, response_id: str) -> None:
        await self.store.release_background(response_id)

    async def background_alive(self, response_id: str) -> bool:
        return await self.store.background_held(response_id, self.clock())

    # -- files -------------------------------------------------------------------------------

    async def upload(self, owner: str, filename: str, content: bytes, expiry: int | None) -> FileRecord:
        """A batch input file, kept once every line of it passed ``jobs.lines``' checks."""
        parse_input_file(content, self.settings.batch_max_lines)
        now = self.clock()
        lifetime = float(expiry) if expiry is not None else self.settings.jobs_retention
        record = FileRecord(new_id("file-"), owner, "batch", filename, len(content), now, now + lifetime)
        await self.store.add_file(record, content.decode("utf-8"))
        return record

    async def file(self, file_id: str, owner: str) -> FileRecord:
        record = await self.store.get_file(file_id, owner, self.clock())
        if record is None:
            raise _no_file(file_id)
        return record

    async def content(self, file_id: str, owner: str) -> str:
        content = await self.store.file_content(file_id, owner, self.clock())
        if content is None:
            raise _no_file(file_id)
        return content

    async def files(
        self, owner: str, *, purpose: str | None, after: str | None, limit: int, order: str
    ) -> tuple[list[FileRecord], bool]:
        found = await self.store.list_files(
            owner, self.clock(), purpose=purpose, after=after, limit=limit + 1, order=order
        )
        return found[:limit], len(found) > limit

    async def delete_file(self, file_id: str, owner: str) -> None:
        if not await self.store.delete_file(file_id, owner):
            raise _no_file(file_id)

    # -- batches -----------------------------------------------------------------------------

    async def create(self, owner: str, new: NewBatch) -> BatchRecord:
        upload = await self.file(new.input_file_id, owner)
        if upload.purpose != "batch":
            raise _no_file(new.input_file_id, "is not a batch input file (purpose 'batch')")
        content = await self.content(new.input_file_id, owner)
        lines = parse_input_file(content.encode(), self.settings.batch_max_lines)
        now = self.clock()
        cap = self.settings.batch_max_concurrency
        retention = float(new.output_expiry) if new.output_expiry is not None else self.settings.jobs_retention
        record = BatchRecord(
            id=new_id("batch_"),
            owner=owner,
            endpoint=new.endpoint,
            input_file_id=new.input_file_id,
            completion_window=new.completion_window,
            status="in_progress",
            created_at=now,
            expires_at=now + new.window_seconds,
            max_concurrency=min(new.max_concurrency or cap, cap),
            metadata=new.metadata,
            times={"in_progress": now},
        )
        await self.store.create_batch(record, lines, now + max(retention, new.window_seconds))
        if self.runner is not None:
            self.runner.wake()
        return dataclasses.replace(record, counts=RequestCounts(len(lines)))

    async def batch(self, batch_id: str, owner: str) -> BatchRecord:
        record = await self.store.get_batch(batch_id, owner)
        if record is None:
            raise _no_batch(batch_id)
        return record

    async def batches(self, owner: str, *, after: str | None, limit: int) -> tuple[list[BatchRecord], bool]:
        found = await self.store.list_batches(owner, after=after, limit=limit + 1)
        return found[:limit], len(found) > limit

    async def cancel(self, batch_id: str, owner: str) -> BatchRecord:
        record = await self.store.cancel_batch(batch_id, owner, self.clock())
        if record is None:
            raise _no_batch(batch_id)
        if self.runner is not None:
            self.runner.wake()
        return record


def _no_file(file_id: str, why: str = "") -> JobNotFoundError:
    return JobNotFoundError(f"No such File object: {file_id}" + (f" ({why})" if why else ""), param="file_id")


def _no_batch(batch_id: str) -> JobNotFoundError:
    return JobNotFoundError(f"No such Batch object: {batch_id}", param="batch_id")
