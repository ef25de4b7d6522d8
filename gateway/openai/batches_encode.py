"""The Batch API's objects, OpenAI's shape: files, batches, and the lists of either."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.jobs.records import BatchRecord, FileRecord

_BATCH_TIMES = ("in_progress", "finalizing", "completed", "failed", "expired", "cancelling", "cancelled")


def file_object(record: FileRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "object": "file",
        "bytes": record.bytes,
        "created_at": int(record.created_at),
        "expires_at": None if record.expires_at is None else int(record.expires_at),
        "filename": record.filename,
        "purpose": record.purpose,
        "status": "processed",
        "status_details": None,
    }


def file_deleted(file_id: str) -> dict[str, Any]:
    return {"id": file_id, "object": "file", "deleted": True}


def batch_object(record: BatchRecord) -> dict[str, Any]:
    batch: dict[str, Any] = {
        "id": record.id,
        "object": "batch",
        "endpoint": record.endpoint,
        "errors": None,
        "input_file_id": record.input_file_id,
        "completion_window": record.completion_window,
        "status": record.status,
        "output_file_id": record.output_file_id,
        "error_file_id": record.error_file_id,
        "created_at": int(record.created_at),
        "expires_at": int(record.expires_at),
    }
    for name in _BATCH_TIMES:
        at = record.times.get(name)
        batch[f"{name}_at"] = None if at is None else int(at)
    counts = record.counts
    batch["request_counts"] = {"total": counts.total, "completed": counts.completed, "failed": counts.failed}
    batch["metadata"] = record.metadata
    return batch


def object_list(items: Sequence[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    """OpenAI's cursor page: ``after`` the ``last_id`` is the next page."""
    return {
        "object": "list",
        "data": list(items),
        "first_id": items[0]["id"] if items else None,
        "last_id": items[-1]["id"] if items else None,
        "has_more": has_more,
    }
