"""Tracing's pure parts: GenAI attribute mapping, the traces URL, the span tree a request makes
(on the SDK's in-memory exporter), the ``traceparent`` a Triton call carries (HPACK literals that
leave the h2 connection's cached header block alone), and tracing off importing no SDK."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import hpack
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode, get_current_span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.backend.transport.h2headers import RepeatingHeadersEncoder, call_headers, literal_headers
from gateway.config import Settings, default_otlp_traces_endpoint
from gateway.tracing import (
    FIRST_TOKEN,
    PREPARE,
    QUEUE,
    RequestTrace,
    Tracing,
    request_attributes,
    response_attributes,
    traces_endpoint,
)


def test_request_attributes_follow_the_genai_conventions() -> None:
    sampling = {"max_tokens": 64, "temperature": 0.2, "top_p": 0.95, "top_k": 40, "seed": 7, "stop": ["\n"]}
    name, attributes = request_attributes("chat", "llama:sql", sampling, 2)
    assert name == "chat llama:sql"
    assert attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "triton",
        "gen_ai.request.model": "llama:sql",
        "gen_ai.request.max_tokens": 64,
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.top_p": 0.95,
        "gen_ai.request.top_k": 40,
        "gen_ai.request.seed": 7,
        "gen_ai.request.stop_sequences": ["\n"],
        "gen_ai.request.choice.count": 2,
    }


@pytest.mark.parametrize(("endpoint", "operation"), [("completions", "text_completion"), ("responses", "chat")])
def test_the_operation_is_the_endpoints(endpoint: str, operation: str) -> None:
    name, attributes = request_attributes(endpoint, "m", {"stop": "END", "n": 1, "ignore_eos": True}, 1)
    assert name == f"{operation} m"
    assert attributes["gen_ai.operation.name"] == operation
    assert attributes["gen_ai.request.stop_sequences"] == ["END"]
    assert "gen_ai.request.choice.count" not in attributes  # n == 1 is the default
    assert not any("ignore_eos" in key for key in attributes)


def test_response_attributes() -> None:
    assert response_attributes("chatcmpl-1", "m", 12, 3, ["stop", None]) == {
        "gen_ai.response.id": "chatcmpl-1",
        "gen_ai.response.model": "m",
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 3,
        "gen_ai.response.finish_reasons": ["stop", ""],
    }


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("http://collector:4318", "http://collector:4318/v1/traces"),
        ("http://collector:4318/", "http://collector:4318/v1/traces"),
        ("https://otlp.example.com/v1/traces", "https://otlp.example.com/v1/traces"),
        ("http://c:4318/custom/path", "http://c:4318/custom/path"),
    ],
)
def test_traces_endpoint(given: str, url: str) -> None:
    assert traces_endpoint(given) == url


class Memory(InMemorySpanExporter):
    def spans(self, tracing: Tracing) -> list[ReadableSpan]:
        tracing.provider.force_flush()
        return list(self.get_finished_spans())


@pytest.fixture
def memory() -> Memory:
    return Memory()


@pytest.fixture
def tracing(memory: Memory) -> Iterator[Tracing]:
    """A ``Tracing`` whose spans go to memory."""
    tracing = Tracing("http://127.0.0.1:9/v1/traces", exporter=memory)
    yield tracing
    tracing.shutdown()


def client_headers(trace_id: int, span_id: int) -> list[tuple[bytes, bytes]]:
    return [(b"traceparent", f"00-{trace_id:032x}-{span_id:016x}-01".encode()), (b"tracestate", b"vendor=x")]


def test_a_request_makes_one_tree_under_the_clients_span(tracing: Tracing, memory: Memory) -> None:
    trace = tracing.start(client_headers(0xABC, 0xDEF), "POST", "/v1/chat/completions")
    assert trace.trace_id == f"{0xABC:032x}"
    started = time.perf_counter()
    trace.phase(PREPARE, started)
    trace.phase(QUEUE, started, started)
    trace.planned("chat", "m", {"max_tokens": 4}, 1, ["the prompt"])
    call = trace.call("127.0.0.1:8001", "m")
    name, value = call.metadata[0]
    context = call.span.get_span_context()
    assert name == b"traceparent" and value == f"00-{0xABC:032x}-{context.span_id:016x}-01".encode()
    call.end(None)
    trace.event(FIRST_TOKEN, time.perf_counter())
    trace.end(200)
    spans = {span.name: span for span in memory.spans(tracing)}
    server = spans["chat m"]
    assert server.kind == SpanKind.SERVER
    assert server.parent is not None and server.parent.span_id == 0xDEF and server.parent.is_remote
    assert server.context.trace_state.get("vendor") == "x"
    assert server.attributes["http.response.status_code"] == 200
    assert "gateway.prompts" not in server.attributes, "no text unless otlp_trace_content"
    for child in (PREPARE, QUEUE, "inference.GRPCInferenceService/ModelStreamInfer"):
        assert spans[child].parent.span_id == server.context.span_id  # type: ignore[union-attr]
    assert spans[QUEUE].start_time == spans[QUEUE].end_time
    assert spans["inference.GRPCInferenceService/ModelStreamInfer"].kind == SpanKind.CLIENT
    assert [event.name for event in server.events] == [FIRST_TOKEN]
    assert server.start_time <= spans[PREPARE].start_time <= spans[PREPARE].end_time <= server.end_time


def test_text_only_when_asked(tracing: Tracing, memory: Memory) -> None:
    tracing.content = True
    trace = tracing.start([], "POST", "/v1/completions")
    trace.planned("completions", "m", {}, 1, ["the prompt"])
    trace.end(200)
    (span,) = memory.spans(tracing)
    assert span.parent is None, "no traceparent: a trace of its own"
    assert span.attributes["gateway.prompts"] == ("the prompt",)


@pytest.mark.parametrize(("status", "code"), [(400, StatusCode.UNSET), (503, StatusCode.ERROR)])
def test_errors_name_their_type_and_only_5xx_fail_the_span(
    tracing: Tracing, memory: Memory, status: int, code: StatusCode
) -> None:
    trace = tracing.start([], "POST", "/v1/chat/completions")
    trace.failed("invalid_request_error" if status < 500 else "service_unavailable", status, "why")
    trace.end(status)
    (span,) = memory.spans(tracing)
    assert span.status.status_code == code
    assert span.attributes["error.type"] in ("invalid_request_error", "service_unavailable")


def test_a_call_that_failed_says_so(tracing: Tracing, memory: Memory) -> None:
    trace: RequestTrace = tracing.start([], "POST", "/v1/chat/completions")
    trace.call("t:1", "m").end(TimeoutError("late"))
    (span,) = memory.spans(tracing)
    assert span.status.status_code == StatusCode.ERROR and span.attributes["error.type"] == "TimeoutError"


def test_the_traceparent_is_what_w3c_propagation_reads(tracing: Tracing) -> None:
    call = tracing.start([], "POST", "/v1/completions").call("t:1", "m")
    carrier = {name.decode(): value.decode() for name, value in call.metadata}
    read = get_current_span(TraceContextTextMapPropagator().extract(carrier)).get_span_context()
    sent = call.span.get_span_context()
    assert (read.trace_id, read.span_id, read.trace_flags, read.is_remote) == (
        sent.trace_id,
        sent.span_id,
        sent.trace_flags,
        True,
    )


def test_literal_headers_follow_a_cached_block_without_touching_the_table() -> None:
    encoder, decoder = RepeatingHeadersEncoder(), hpack.Decoder()
    headers = call_headers(b"http", b"triton:8001", b"/inference.GRPCInferenceService/ModelStreamInfer")
    decoder.decode(encoder.encode(headers))  # the first call fills the dynamic table
    cached = encoder.encode(headers)
    long_value = b"x" * 300  # a length past the 7-bit prefix
    for extra in ([(b"traceparent", b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-01")], [(b"x-long", long_value)]):
        table = list(decoder.header_table.dynamic_entries)
        decoded = decoder.decode(cached + literal_headers(extra), raw=True)
        assert [(bytes(n), bytes(v)) for n, v in decoded] == headers + extra
        assert list(decoder.header_table.dynamic_entries) == table
        assert encoder.encode(headers) is cached, "the cached block stays valid"


def test_tracing_off_imports_no_sdk() -> None:
    code = (
        "import sys\n"
        "from gateway.app import create_app\n"
        "from gateway.config import Settings\n"
        "create_app(Settings(responses_store_enabled=False, otlp_traces_endpoint=None))\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry.sdk')], 'SDK imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize(
    ("environ", "endpoint"),
    [
        ({}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "http://c:4318"),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t/v1/traces",
            },
            "http://t/v1/traces",
        ),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ""}, None),
    ],
)
def test_the_standard_variables_turn_tracing_on(environ: dict[str, str], endpoint: str | None) -> None:
    assert default_otlp_traces_endpoint(environ) == endpoint


def test_the_setting_wins_over_the_standard_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://standard:4318")
    assert Settings().otlp_traces_endpoint == "http://standard:4318"
    monkeypatch.setenv("GATEWAY_OTLP_TRACES_ENDPOINT", "http://mine:4318")
    assert Settings().otlp_traces_endpoint == "http://mine:4318"


def test_an_untrusted_traceparent_starts_a_trace_of_its_own_linked_to_the_clients(memory: Memory) -> None:
    tracing = Tracing("http://127.0.0.1:9/v1/traces", exporter=memory, trust_context=False)
    trace = tracing.start(client_headers(0xABC, 0xDEF), "POST", "/v1/chat/completions")
    trace.end(200)
    (span,) = memory.spans(tracing)
    tracing.shutdown()
    assert span.parent is None and span.context.trace_id != 0xABC
    assert [(link.context.trace_id, link.context.span_id) for link in span.links] == [(0xABC, 0xDEF)]


@pytest.mark.parametrize("trusted", [True, False])
def test_only_a_trusted_traceparent_decides_sampling(
    memory: Memory, monkeypatch: pytest.MonkeyPatch, trusted: bool
) -> None:
    """Under a parent-based sampler that samples no root, a client's sampled flag records the
    request only when its context is trusted."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0")
    tracing = Tracing("http://127.0.0.1:9/v1/traces", exporter=memory, trust_context=trusted)
    tracing.start(client_headers(0xABC, 0xDEF), "POST", "/v1/chat/completions").end(200)
    spans = memory.spans(tracing)
    tracing.shutdown()
    assert len(spans) == (1 if trusted else 0)


def test_the_span_is_named_by_its_route_unless_planning_named_it(tracing: Tracing, memory: Memory) -> None:
    tracing.start([], "GET", "/v1/models/secret").end(404, "/v1/models/{model_id:path}")
    tracing.start([], "GET", "/v1/whatever/123").end(404)
    planned = tracing.start([], "POST", "/v1/completions")
    planned.planned("completions", "m", {}, 1, [])
    planned.end(200, "/v1/completions")
    spans = memory.spans(tracing)
    assert [span.name for span in spans] == ["GET /v1/models/{model_id:path}", "GET", "text_completion m"]
    assert spans[0].attributes["http.route"] == "/v1/models/{model_id:path}"
    assert "http.route" not in spans[1].attributes
