"""A real OTLP/HTTP trace receiver for tests: an in-process HTTP server that decodes each
``ExportTraceServiceRequest`` with ``opentelemetry-proto`` and keeps its spans, as a collector
would receive them from the gateway (binary protobuf, Python's exporter) and from Triton (OTLP
JSON, opentelemetry-cpp's exporter, whose ids are hex strings as the OTLP JSON encoding says)."""

from __future__ import annotations

import base64
import gzip
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class ReceivedSpan:
    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, int, dict[str, Any]]]
    status_code: int


_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def _hex_ids_as_base64(node: Any) -> Any:
    """OTLP JSON writes ids as hex; protobuf's JSON parser reads bytes as base64."""
    if isinstance(node, dict):
        return {
            key: base64.b64encode(bytes.fromhex(value)).decode()
            if key in _ID_KEYS and isinstance(value, str)
            else _hex_ids_as_base64(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids_as_base64(item) for item in node]
    return node


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


@dataclass
class OtlpReceiver:
    """Start with ``start()``; ``url`` is the base (``/v1/traces`` is where spans are posted)."""

    spans: list[ReceivedSpan] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> OtlpReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                if self.headers.get("Content-Type", "").startswith("application/json"):
                    json_format.ParseDict(_hex_ids_as_base64(json.loads(body)), request, ignore_unknown_fields=True)
                else:
                    request.ParseFromString(body)
                receiver._add(request)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _add(self, request: ExportTraceServiceRequest) -> None:
        received = []
        for resource_spans in request.resource_spans:
            service = str(_attributes(resource_spans.resource.attributes).get("service.name", ""))
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            service=service,
                            name=span.name,
                            kind=span.kind,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            attributes=_attributes(span.attributes),
                            events=[(e.name, e.time_unix_nano, _attributes(e.attributes)) for e in span.events],
                            status_code=span.status.code,
                        )
                    )
        with self._lock:
            self.spans.extend(received)

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return [span for span in self.spans if span.trace_id == trace_id]

    def wait_for(
        self, trace_id: str, done: Callable[[list[ReceivedSpan]], bool], timeout: float = 20.0
    ) -> list[ReceivedSpan]:
        """The trace's spans once ``done`` says they are all there (or what came by ``timeout``)."""
        deadline = time.monotonic() + timeout
        spans = self.trace(trace_id)
        while not done(spans) and time.monotonic() < deadline:
            time.sleep(0.05)
            spans = self.trace(trace_id)
        return spans
