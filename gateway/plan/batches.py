"""The Batch API's requests: a batch's creation body and a file upload's fields, every 4xx about them.

What a batch may ask, beyond OpenAI's fields: ``max_concurrency``, the most of its lines in flight
at once (never above the gateway's ``batch_max_concurrency``), for a team that wants its batch to
leave the model to others. ``completion_window`` is OpenAI's ``24h`` or any other whole number
of hours (``1h`` to ``168h``): the batch's lines not run by then are not run, and it ends
``expired`` with those lines in its error file.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gateway.errors import InvalidRequestError
from gateway.jobs.lines import BATCH_ENDPOINTS

_WINDOW = re.compile(r"^([1-9][0-9]{0,2})h$")
MAX_WINDOW_HOURS = 168

METADATA_PAIRS = 16
METADATA_KEY_CHARS = 64
METADATA_VALUE_CHARS = 512

FILE_EXPIRY_SECONDS = (3600, 30 * 24 * 3600)
"""The range OpenAI allows for a file's ``expires_after.seconds``: an hour to 30 days."""


class ExpiresAfter(BaseModel):
    anchor: str
    seconds: int


class BatchCreateRequest(BaseModel):
    """OpenAI's ``CreateBatchRequest``; unknown fields are refused (a typo would otherwise run a
    batch the team did not mean)."""

    model_config = ConfigDict(extra="forbid")
    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None = None
    output_expires_after: ExpiresAfter | None = None
    max_concurrency: int | None = Field(default=None, ge=1)


def window_seconds(window: str) -> float:
    match = _WINDOW.match(window)
    if match is None or int(match.group(1)) > MAX_WINDOW_HOURS:
        raise InvalidRequestError(
            f"completion_window must be '24h' (or another whole number of hours up to {MAX_WINDOW_HOURS}h), "
            f"got {window!r}",
            param="completion_window",
        )
    return int(match.group(1)) * 3600.0


def check_batch(body: BatchCreateRequest) -> float:
    """Refuse what no batch can be; the seconds of its completion window."""
    if body.endpoint not in BATCH_ENDPOINTS:
        raise InvalidRequestError(
            f"endpoint must be one of {', '.join(BATCH_ENDPOINTS)}; got {body.endpoint!r}", param="endpoint"
        )
    check_metadata(body.metadata)
    if body.output_expires_after is not None:
        expiry_seconds(body.output_expires_after, "output_expires_after")
    return window_seconds(body.completion_window)


def check_metadata(metadata: dict[str, Any] | None) -> None:
    if metadata is None:
        return
    if len(metadata) > METADATA_PAIRS:
        raise InvalidRequestError(f"metadata holds at most {METADATA_PAIRS} pairs", param="metadata")
    for key, value in metadata.items():
        if len(key) > METADATA_KEY_CHARS or len(value) > METADATA_VALUE_CHARS:
            raise InvalidRequestError(
                f"metadata keys are at most {METADATA_KEY_CHARS} characters and values at most "
                f"{METADATA_VALUE_CHARS}; {key[:80]!r} is longer",
                param="metadata",
            )


def expiry_seconds(expires: ExpiresAfter, param: str) -> int:
    if expires.anchor != "created_at":
        raise InvalidRequestError(f"{param}.anchor must be 'created_at', got {expires.anchor!r}", param=param)
    low, high = FILE_EXPIRY_SECONDS
    if not low <= expires.seconds <= high:
        raise InvalidRequestError(f"{param}.seconds must be from {low} to {high}, got {expires.seconds}", param=param)
    return expires.seconds


def upload_expiry(anchor: str | None, seconds: str | None) -> int | None:
    """A multipart upload's ``expires_after[anchor]`` and ``expires_after[seconds]`` fields."""
    if anchor is None and seconds is None:
        return None
    if seconds is None or not (seconds.isascii() and seconds.isdigit()):
        raise InvalidRequestError(
            f"expires_after[seconds] must be a whole number of seconds, got {seconds!r}", param="expires_after"
        )
    return expiry_seconds(ExpiresAfter(anchor=anchor or "", seconds=int(seconds)), "expires_after")


def check_purpose(purpose: str | None) -> None:
    if purpose != "batch":
        raise InvalidRequestError(
            f"purpose must be 'batch': this gateway keeps files for the Batch API only; got {purpose!r}",
            param="purpose",
        )
