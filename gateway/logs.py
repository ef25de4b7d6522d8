"""Logging: the request id on every line of a request, and an optional JSON line per request.

The request id lives in a context variable set by the HTTP middleware; asyncio copies context
into the tasks a request spawns (the SSE stream task included), so every log line of that request
carries it without passing it around. Prompts and completions are never logged at info level.
"""

from __future__ import annotations

import contextvars
import logging
import sys

import orjson

from gateway.metrics import RequestRecord

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
trace_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("trace_id", default=None)
"""The request's OpenTelemetry trace id (32 hex digits), set by the HTTP edge when tracing is on:
every log line of the request names it, so a log line leads to its trace and back."""
access_logger = logging.getLogger("gateway.access")


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        trace_id = trace_id_var.get()
        record.trace = "" if trace_id is None else f" trace_id={trace_id}"
        return True


def configure_logging(level: str, worker: int | None = None) -> None:
    """``worker``: one of several workers (``--workers``); its lines say which, and its pid."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RequestIdFilter())
    who = "" if worker is None else f"worker={worker} pid=%(process)d "
    handler.setFormatter(
        logging.Formatter(f"%(asctime)s %(levelname)s {who}%(name)s [%(request_id)s%(trace)s] %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def log_request(record: RequestRecord, finished_at: float) -> None:
    """One JSON line per request: ids, model, status, tokens, timings. Never the text."""
    line = {
        "request_id": record.request_id,
        "trace_id": trace_id_var.get(),
        "endpoint": record.endpoint,
        "key": record.key,
        "model": record.model,
        "adapter": record.adapter,
        "stream": record.stream,
        "status": record.status,
        "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.completion_tokens,
        "duration_ms": round((finished_at - record.started) * 1000, 2),
        "ttft_ms": None if record.first_token is None else round((record.first_token - record.started) * 1000, 2),
        "priority": record.priority,
        "queue_ms": None if record.queue_wait is None else round(record.queue_wait * 1000, 2),
        "cancel_reason": record.cancel_reason,
        "error_type": record.error_type,
        "replica": record.placement.replica if record.placement is not None else None,
        "route": record.placement.route if record.placement is not None else None,
    }
    access_logger.info("%s", orjson.dumps(line).decode())
