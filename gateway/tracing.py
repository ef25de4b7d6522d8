"""OpenTelemetry traces: a server span per generating request, its phases, and the trace context
handed on to Triton.

Off unless an OTLP endpoint is configured (``otlp_traces_endpoint``, or the standard
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``/``OTEL_EXPORTER_OTLP_ENDPOINT``); the OpenTelemetry SDK is
then imported here (the ``tracing`` extra) and nowhere else, so a gateway without it needs none
of it. Off, every hook below is one ``ContextVar.get`` returning None per request.

On, the HTTP edge starts one SERVER span per ``/v1`` request that passed authentication
(continuing the client's ``traceparent`` only where it is trusted: ``Tracing.start``), named by
its route template (``GET /v1/models/{model_id:path}``, never the raw path) and, once planning
knows the model, by OpenTelemetry's GenAI semantic conventions (``chat <model>``,
``gen_ai.request.*``, ``gen_ai.usage.*``, ``gen_ai.response.*``). The gateway's phases are
child spans made from timestamps the request already keeps (planning: prompt rendering and
counting; a wait in the admission queue) and events (the replica chosen, the first token, the
last token), so nothing runs per token. Each Triton call is a CLIENT span whose context goes to
Triton as the ``traceparent`` gRPC metadata: a Triton started with ``--trace-config
mode=opentelemetry`` puts its own spans under it.

Prompt and completion text never enter a span unless ``otlp_trace_content`` is on.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:  # the SDK is optional: imported at run time only when tracing is on
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

logger = logging.getLogger(__name__)

SERVICE_NAME = "triton-openai-gateway"

PREPARE = "gateway.prepare"
"""Child span: planning, which renders the prompt and counts its tokens when that matters."""
QUEUE = "gateway.queue"
"""Child span: the wait for an admission slot, when there was one (a free slot makes none)."""
ROUTE = "gateway.route"
"""Event on the server span: a Triton replica chosen (``gateway.replica``, ``gateway.route``);
an event, not a span, as the choice takes microseconds and a span costs tens of them."""
MIGRATE = "gateway.migrate"
"""Event on the server span: a stream whose replica failed mid-stream went on elsewhere, or could
not (``gateway.replica`` failed, ``gateway.outcome``, ``gateway.tokens`` produced before it)."""
FIRST_TOKEN = "gen_ai.first_token"
LAST_TOKEN = "gen_ai.last_token"
"""Events on the server span: the first and the last response from the backend."""

OPERATIONS = {
    "chat": "chat",
    "responses": "chat",
    "messages": "chat",
    "completions": "text_completion",
    "embeddings": "embeddings",
}
"""The gateway's endpoint label → ``gen_ai.operation.name``."""

_SAMPLING_ATTRIBUTES = (
    ("max_tokens", "gen_ai.request.max_tokens"),
    ("temperature", "gen_ai.request.temperature"),
    ("top_p", "gen_ai.request.top_p"),
    ("top_k", "gen_ai.request.top_k"),
    ("frequency_penalty", "gen_ai.request.frequency_penalty"),
    ("presence_penalty", "gen_ai.request.presence_penalty"),
    ("seed", "gen_ai.request.seed"),
)
"""vLLM ``SamplingParams`` fields (what the gateway sends Triton) → GenAI request attributes."""


def traces_endpoint(url: str) -> str:
    """The OTLP/HTTP traces URL for ``url``: a bare collector address (``http://host:4318``)
    gets OTLP's ``/v1/traces`` path, as the exporter does for ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
    parts = urlsplit(url)
    if parts.path in ("", "/"):
        return url.rstrip("/") + "/v1/traces"
    return url


def request_attributes(endpoint: str, model_id: str, sampling: Mapping[str, Any], n: int) -> tuple[str, dict[str, Any]]:
    """The server span's name and its GenAI request attributes, from what the gateway sends
    Triton (the first choice's sampling parameters: every choice's are the same but the seed)."""
    operation = OPERATIONS.get(endpoint, endpoint)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": "triton",
        "gen_ai.request.model": model_id,
    }
    for key, name in _SAMPLING_ATTRIBUTES:
        value = sampling.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            attributes[name] = value
    stop = sampling.get("stop")
    if stop:
        attributes["gen_ai.request.stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if n != 1:
        attributes["gen_ai.request.choice.count"] = n
    return f"{operation} {model_id}", attributes


def response_attributes(
    response_id: str, model: str, input_tokens: int, output_tokens: int, finish_reasons: Iterable[str | None]
) -> dict[str, Any]:
    """The server span's GenAI response and usage attributes."""
    return {
        "gen_ai.response.id": response_id,
        "gen_ai.response.model": model,
        "gen_ai.usage.input_tokens": input_tokens,
        "gen_ai.usage.output_tokens": output_tokens,
        "gen_ai.response.finish_reasons": [reason or "" for reason in finish_reasons],
    }


class RequestTrace:
    """One request's server span and the spans under it. Timestamps given as
    ``time.perf_counter()`` values (what the request's bookkeeping keeps) are turned into the
    wall-clock nanoseconds OpenTelemetry wants against the pair taken when the span started."""

    __slots__ = ("span", "context", "content", "method", "named", "_tracing", "_wall0", "_perf0")

    def __init__(self, tracing: Tracing, span: Span, context: Context, method: str = "") -> None:
        self._tracing = tracing
        self.span = span
        self.method = method
        self.named = False
        """Whether planning gave the span its GenAI name (``planned``)."""
        self.context = context
        """The context with ``span`` current: the parent of everything below."""
        self.content = tracing.content
        """Whether prompt and completion text may be recorded (``otlp_trace_content``)."""
        self._wall0 = time.time_ns()
        self._perf0 = time.perf_counter()

    @property
    def trace_id(self) -> str:
        return format(self.span.get_span_context().trace_id, "032x")

    def ns(self, perf: float) -> int:
        """Wall-clock nanoseconds of a ``time.perf_counter()`` value."""
        return self._wall0 + int((perf - self._perf0) * 1e9)

    def phase(
        self, name: str, started: float, ended: float | None = None, attributes: Mapping[str, str] | None = None
    ) -> None:
        """A finished child span from ``started`` to ``ended`` (default: now), perf_counter values."""
        end = self.ns(time.perf_counter() if ended is None else ended)
        span = self._tracing.tracer.start_span(
            name, context=self.context, start_time=self.ns(started), attributes=attributes
        )
        span.end(end_time=end)

    def event(self, name: str, at: float | None = None, attributes: Mapping[str, str] | None = None) -> None:
        """An event on the server span at ``at`` (a perf_counter value; default: now)."""
        self.span.add_event(name, attributes, timestamp=None if at is None else self.ns(at))

    def planned(
        self, endpoint: str, model_id: str, sampling: Mapping[str, Any], n: int, prompts: Sequence[str]
    ) -> None:
        """Planning is done: the span gets its GenAI name and request attributes."""
        name, attributes = request_attributes(endpoint, model_id, sampling, n)
        if self.content:
            attributes["gateway.prompts"] = list(prompts)
        self.span.update_name(name)
        self.named = True
        self.span.set_attributes(attributes)

    def call(self, address: str, model: str) -> CallSpan:
        """A CLIENT span for one Triton call, started now; its context goes to Triton."""
        from opentelemetry.trace import SpanKind

        span = self._tracing.tracer.start_span(
            "inference.GRPCInferenceService/ModelStreamInfer",
            context=self.context,
            kind=SpanKind.CLIENT,
            attributes={
                "rpc.system": "grpc",
                "rpc.service": "inference.GRPCInferenceService",
                "rpc.method": "ModelStreamInfer",
                "server.address": address,
                "gen_ai.request.model": model,
            },
        )
        return CallSpan(span)

    def failed(self, error_type: str, status_code: int, message: str) -> None:
        """The request is answered with an error: ``error.type`` says which; the span's status is
        ERROR only for a 5xx (a 4xx is the client's, as the HTTP conventions have it for servers)."""
        self.span.set_attribute("error.type", error_type)
        if status_code >= 500:
            from opentelemetry.trace import Status, StatusCode

            self.span.set_status(Status(StatusCode.ERROR, message))

    def end(self, status_code: int | None, route: str | None = None) -> None:
        """``route``: the template of the route that answered (None: none matched), which names
        the span unless planning named it: a bounded set of names, whatever paths clients send."""
        if status_code is not None:
            self.span.set_attribute("http.response.status_code", status_code)
        if route is not None:
            self.span.set_attribute("http.route", route)
            if not self.named:
                self.span.update_name(f"{self.method} {route}")
        self.span.end()


class CallSpan:
    """One Triton call's CLIENT span; ``metadata`` carries its context as W3C ``traceparent``."""

    __slots__ = ("span", "metadata")

    def __init__(self, span: Span) -> None:
        self.span = span
        context = span.get_span_context()
        flags = int(context.trace_flags) & 0xFF
        traceparent = f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"
        self.metadata: tuple[tuple[bytes, bytes], ...] = ((b"traceparent", traceparent.encode("ascii")),)

    def end(self, error: BaseException | None) -> None:
        if error is not None:
            from opentelemetry.trace import Status, StatusCode

            self.span.set_attribute("error.type", type(error).__name__)
            self.span.set_status(Status(StatusCode.ERROR, str(error)))
        self.span.end()


current_trace: contextvars.ContextVar[RequestTrace | None] = contextvars.ContextVar("request_trace", default=None)
"""The request's trace, set by the HTTP edge; asyncio copies it into the tasks a request spawns."""


class Tracing:
    """The process's tracer provider, OTLP/HTTP exporter and W3C propagator."""

    def __init__(
        self,
        endpoint: str,
        *,
        content: bool = False,
        trust_context: bool = True,
        service_name: str = SERVICE_NAME,
        exporter: SpanExporter | None = None,
    ) -> None:
        """``trust_context``: whether a client's ``traceparent`` is continued (``start``);
        ``exporter``: where spans go instead of OTLP/HTTP to ``endpoint`` (tests: in memory)."""
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
        except ImportError as exc:
            raise RuntimeError(
                "otlp_traces_endpoint is set but the OpenTelemetry SDK is not installed: "
                "pip install 'triton-openai-gateway[tracing]'"
            ) from exc
        resource = Resource.create()  # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, as the SDK reads them
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = Resource.create({"service.name": service_name})
        self.endpoint = traces_endpoint(endpoint)
        self.provider: TracerProvider = TracerProvider(resource=resource)  # OTEL_TRACES_SAMPLER applies
        self.exporter = exporter or OTLPSpanExporter(endpoint=self.endpoint)
        self.provider.add_span_processor(BatchSpanProcessor(self.exporter))
        self.tracer: Tracer = self.provider.get_tracer("gateway")
        self.propagator = TraceContextTextMapPropagator()
        self.content = content
        self.trust_context = trust_context

    def start(self, headers: Iterable[tuple[bytes, bytes]], method: str, path: str) -> RequestTrace:
        """The SERVER span of one request, named by its method until its route is known
        (``RequestTrace.end``). With ``trust_context`` it is a child of the client's
        ``traceparent`` if it sent one, so the client's sampled flag decides under a parent-based
        sampler; without, it starts a trace of its own that the gateway's sampler decides, linked
        to the client's span, so a client cannot make the gateway record (and export) its
        requests, nor choose their trace ids."""
        from opentelemetry.context import Context
        from opentelemetry.trace import Link, SpanKind, get_current_span, set_span_in_context

        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in headers
            if name in (b"traceparent", b"tracestate")
        }
        parent = self.propagator.extract(carrier) if carrier else None
        links: list[Link] = []
        if parent is not None and not self.trust_context:
            client = get_current_span(parent).get_span_context()
            links = [Link(client)] if client.is_valid else []
            parent = Context()
        span = self.tracer.start_span(
            method,
            context=parent,
            kind=SpanKind.SERVER,
            links=links,
            attributes={"http.request.method": method, "url.path": path},
        )
        return RequestTrace(self, span, set_span_in_context(span), method)

    def shutdown(self) -> None:
        """Export what is left (the batch processor's queue) and stop."""
        self.provider.shutdown()
