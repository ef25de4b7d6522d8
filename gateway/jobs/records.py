"""What the Batch API keeps: files, batches and their lines, as the store hands them back.

Plain records: ``openai.batches_encode`` turns them into OpenAI's objects, ``jobs.store`` into
rows. Statuses are OpenAI's; a file is checked when it is uploaded, so a batch is ``validating``
only while its lines are written, and never ``failed``. A line is ``pending`` until it ends
``done`` (answered 2xx: the output file), ``error`` (answered otherwise), ``cancelled`` or
``expired`` (never answered): those three go to the error file.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any


def new_id(prefix: str) -> str:
    """``file-…``, ``batch_…``, ``batch_req_…``: OpenAI's prefixes, 24 random hex digits."""
    return prefix + secrets.token_hex(12)


@dataclass(frozen=True, slots=True)
class FileRecord:
    id: str
    owner: str
    purpose: str
    filename: str
    bytes: int
    created_at: float
    expires_at: float | None


@dataclass(frozen=True, slots=True)
class RequestCounts:
    total: int = 0
    completed: int = 0
    failed: int = 0


@dataclass(frozen=True, slots=True)
class BatchRecord:
    id: str
    owner: str
    endpoint: str
    input_file_id: str
    completion_window: str
    status: str
    created_at: float
    expires_at: float
    max_concurrency: int
    metadata: dict[str, Any] | None = None
    times: dict[str, float] = field(default_factory=dict)
    """When it reached each status OpenAI timestamps: ``in_progress``, ``finalizing``,
    ``completed``, ``expired``, ``cancelling``, ``cancelled``."""
    counts: RequestCounts = field(default_factory=RequestCounts)
    output_file_id: str | None = None
    error_file_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeasedLine:
    """A line this gateway holds the lease of, to run."""

    batch_id: str
    line: int
    custom_id: str
    url: str
    body: str
    owner: str
    attempts: int
