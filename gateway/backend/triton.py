"""The Triton client: one gRPC ``ModelStreamInfer`` call per generation.

The token stream runs on a ``StreamTransport`` (``transport/``): by default our own HTTP/2
connection read by the event loop (``transport/h2.py``), so a token costs no thread hand-off.
The unary control calls (readiness, repository index, model config) use ``tritonclient``'s
protobuf stubs over a ``grpc.aio`` channel: they are rare and grpc.aio manages their connection
well. Each generation's request message is the one request of its call, which is then
half-closed, so the response stream ends after the model's FINAL response. Cancelling the call
(client gone, stop string hit, deadline) makes the model see ``is_cancelled()``; closing the
generation's stream (``TritonStream.aclose``) does, so leaving early always does. A call whose
final response came is left to end with Triton's trailers, and reset only if they do not come
within ``TRAILERS_GRACE``.

Speaks whichever contract a request carries (``contracts/``: the vLLM backend's, or one of the
TensorRT-LLM layouts', chosen from the model's declared interface, which ``list_models`` reads),
and does the two things a TensorRT-LLM call needs beyond its tensors: a LoRA adapter's weights
sent once per Triton and again when the engine lost them, and a ``stop`` request for a stream
left early where cancelling the call does not reach the model (an ensemble's step). Knows nothing
of OpenAI.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Literal

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from gateway.backend.contracts.base import Contract
from gateway.backend.contracts.interface import read_interface
from gateway.backend.contracts.vllm import (
    VLLM,
    build_embedding_request,
    parse_vllm_outputs,
    read_embedding,
    vllm_outputs_plan,
)
from gateway.backend.error_table import classify_rpc_error, classify_stream_error
from gateway.backend.handoff import HandOffStream
from gateway.backend.stream_messages import StreamReader
from gateway.backend.transport.aio import AioTransport
from gateway.backend.transport.base import (
    STREAM_INFER_PATH,
    CallError,
    Metadata,
    StreamCall,
    StreamTransport,
)
from gateway.backend.transport.h2 import H2Transport, Keepalive
from gateway.backend.transport.h2conn import DEFAULT_MAX_MESSAGE_BYTES
from gateway.backend.transport.tls import TritonTLS
from gateway.backend.types import BackendModel, Embedding, EmbeddingRequest, GenerationChunk, GenerationRequest
from gateway.errors import BackendTimeoutError, BackendUnavailableError, GatewayError
from gateway.tracing import CallSpan, current_trace

logger = logging.getLogger(__name__)


def vllm_reader() -> StreamReader:
    """A reader for one call's messages under the vLLM-backend contract (``contract_reader`` of
    ``VLLM``, for calls that carry no ``GenerationRequest``: embeddings)."""
    return StreamReader(parse_vllm_outputs, classify_stream_error, vllm_outputs_plan)


def contract_reader(contract: Contract, request: GenerationRequest) -> StreamReader:
    """A reader for one call's messages under ``contract`` (the vLLM contract's is ``vllm_reader``)."""
    return StreamReader(contract.parser(request), classify_stream_error, contract.plan)


_EMPTY = GenerationChunk((), ())
"""What a stop request's answer reads as: nothing (it is an empty FINAL response)."""

LORA_NOT_CACHED = "not found in cache"
"""What TensorRT-LLM's error says when a LoRA task id came without weights the engine has lost
("LoRA task <id> not found in cache. Please send LoRA weights with request")."""


TRAILERS_GRACE = 1.0
"""Seconds a call whose final response came is left to end with Triton's trailers before it is
reset."""


class TritonBackend:
    """A ``Backend`` over Triton's gRPC API: generations on a ``StreamTransport``, control calls
    on a ``grpc.aio`` channel."""

    def __init__(
        self,
        url: str,
        *,
        keepalive_ms: int = 30_000,
        keepalive_timeout_ms: int = 10_000,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        tls: TritonTLS | None = None,
        transport: StreamTransport | Literal["h2", "aio"] = "h2",
    ) -> None:
        self.url = url
        # One keepalive policy for both channels: grpc.aio doubles its interval by itself on a
        # GOAWAY "too_many_pings", and so does the h2 transport (``Keepalive.back_off``).
        self._options = [
            ("grpc.max_send_message_length", -1),
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.keepalive_time_ms", keepalive_ms),
            ("grpc.keepalive_timeout_ms", keepalive_timeout_ms),
            # gRPC holds its keepalive PING back while a PING of its own (flow-control tuning) is
            # unanswered, and that one times out after a minute by default: a silent server would
            # hold the calls that long, where the h2 transport fails them at the keepalive timeout.
            ("grpc.http2.ping_timeout_ms", keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", 0),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.enable_retries", 0),
            # Reconnect quickly once Triton is back, instead of gRPC's default backoff up to 120 s.
            ("grpc.initial_reconnect_backoff_ms", 250),
            ("grpc.min_reconnect_backoff_ms", 250),
            ("grpc.max_reconnect_backoff_ms", 2_000),
        ]
        self._tls = tls
        self._transport: StreamTransport
        if transport == "h2":
            self._transport = H2Transport(
                url,
                ssl_context=tls.ssl_context() if tls is not None else None,
                keepalive=Keepalive(keepalive_ms / 1000, keepalive_timeout_ms / 1000),
                max_message_bytes=max_message_bytes,
            )
        elif transport == "aio":  # on the control calls' channel: one connection, keepalive and trust store
            self._transport = AioTransport(lambda: self._channel)
        else:
            self._transport = transport
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None
        self._active: set[StreamCall[GenerationChunk]] = set()
        self._stopping: set[asyncio.Task[None]] = set()
        self._lora_sent: set[tuple[str, int]] = set()
        """(model, LoRA task id) this Triton has been sent the weights of: later requests send
        the id alone, until the engine says it lost them."""

    def abort_all(self, error: Exception) -> int:
        """Cancel every open call; each raises ``error`` to its consumer. For shutdown."""
        calls = list(self._active)
        for call in calls:
            call.abort(error)
        return len(calls)

    async def start(self) -> None:
        if self._tls is not None:
            self._channel = grpc.aio.secure_channel(self.url, self._tls.grpc_credentials(), options=self._options)
        else:
            self._channel = grpc.aio.insecure_channel(self.url, options=self._options)
        self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)

    async def close(self) -> None:
        await self._transport.close()
        if self._channel is not None:
            await self._channel.close(grace=None)
            self._channel = None

    async def server_ready(self) -> bool:
        try:
            reply = await self._stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=2.0)
        except grpc.aio.AioRpcError:
            return False
        self._transport.reachable()
        return bool(reply.ready)

    async def list_models(self) -> list[BackendModel]:
        try:
            index = await self._stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True), timeout=5.0)
            configs: dict[str, Any] = {}
            versions: dict[str, str] = {}
            for entry in index.models:
                if entry.state != "READY":
                    continue
                reply = await self._stub.ModelConfig(
                    service_pb2.ModelConfigRequest(name=entry.name, version=entry.version), timeout=5.0
                )
                configs[entry.name] = reply.config
                versions[entry.name] = entry.version
        except grpc.aio.AioRpcError as exc:
            raise classify_rpc_error(exc) from exc
        models = []
        for name, config in configs.items():
            interface = read_interface(config, configs)
            models.append(
                BackendModel(
                    name=name,
                    version=versions[name],
                    platform=interface.platform,
                    inputs=frozenset(interface.inputs),
                    interface=interface,
                )
            )
        return models

    def send_stop(self, model: str, message: bytes) -> None:
        """Send a model's own stop request (``Contract.stop_message``) in the background, read to
        its end; a failure is logged, never raised (the request it stops is already over for the
        client)."""
        task = asyncio.get_running_loop().create_task(self._stop(model, message))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def _stop(self, model: str, message: bytes) -> None:
        reader = StreamReader(lambda outputs, raws, final: _EMPTY, classify_stream_error)
        try:
            call = await self._transport.open(STREAM_INFER_PATH, message, reader, time.monotonic() + 10.0)
            try:
                async with asyncio.timeout(10.0):
                    async for _ in call:
                        if reader.final:
                            break
            finally:
                call.cancel()
        except (CallError, GatewayError, TimeoutError) as exc:
            logger.warning("stopping a request on %s failed: %s", model, exc)

    def generate(self, request: GenerationRequest) -> TritonStream:
        return TritonStream(self, request)

    async def embed(self, request: EmbeddingRequest) -> Embedding:
        """One ``ModelStreamInfer`` call, read to its end. Retried once when Triton provably never
        started it, as a generation is; reset if the awaiting task is cancelled (the client
        left, or another input of its request failed) or the deadline passes."""
        if self._stub is None:
            raise BackendUnavailableError("the Triton client is not started")
        message = build_embedding_request(request).SerializeToString()
        for attempt in (0, 1):
            chunks: list[GenerationChunk] = []
            reader = vllm_reader()
            try:
                call = await self._transport.open(STREAM_INFER_PATH, message, reader, request.deadline)
            except CallError as exc:
                raise classify_rpc_error(exc) from exc
            self._active.add(call)
            try:
                remaining = None if request.deadline is None else max(0.0, request.deadline - time.monotonic())
                async with asyncio.timeout(remaining):
                    async for batch in call:
                        chunks.extend(batch)
                        if reader.final:  # the vector is in: Triton's trailers need not be waited for
                            break
            except CallError as exc:
                if exc.retryable and attempt == 0 and not chunks:
                    logger.info("retrying an embedding Triton did not start: %s", exc.details)
                    continue
                raise classify_rpc_error(exc) from exc
            except TimeoutError:
                raise BackendTimeoutError("the request's deadline passed before the backend finished") from None
            finally:
                self._active.discard(call)
                if reader.final:  # as a generation's: left to end with its trailers, reset if they do not come
                    asyncio.get_running_loop().call_later(TRAILERS_GRACE, call.cancel)
                else:
                    call.cancel()
            return read_embedding(chunks)
        raise AssertionError("unreachable")  # pragma: no cover


class TritonStream(HandOffStream):
    """One generation on Triton: ``TritonBackend.generate``'s stream of batches.

    A ``HandOffStream`` rather than an async generator, because every token passes through it.
    Its first step opens the call and reads the first batch, and opens it once more if Triton
    provably never started the first (a refused stream, or one above a GOAWAY's last stream id).
    After that, ``__anext__`` hands out the call's own: the call raises the backend's typed
    errors itself (``map_error``), so no step of ours runs per token.

    ``aclose`` ends the call. If the model's final response has been read, the call is left to end
    with Triton's trailers, which often come a read later than that response (37 calls in 100 at
    16 tokens): a reset then would cost a write and a cancellation in Triton for work that is over,
    so it is sent only if they have not come within ``TRAILERS_GRACE`` (a no-op once the call has
    ended). Otherwise the call is reset at once, and the model sees ``is_cancelled()``.
    """

    __slots__ = ("error", "_backend", "_request", "_call", "_reader", "_timer", "_span")

    def __init__(self, backend: TritonBackend, request: GenerationRequest) -> None:
        super().__init__()
        self.error: BaseException | None = None
        self._backend = backend
        self._request = request
        self._call: StreamCall[GenerationChunk] | None = None
        self._reader: StreamReader | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._span: CallSpan | None = None
        """The call's CLIENT span when the request is traced; its context goes to Triton."""

    async def _start(self) -> list[GenerationChunk]:
        backend, request = self._backend, self._request
        if backend._stub is None:
            raise self._failed(BackendUnavailableError("the Triton client is not started"))
        contract: Contract = request.contract or VLLM
        task = contract.uses_lora_task(request)
        weights = task is not None and (request.model, task) not in backend._lora_sent
        message = contract.encode(request, lora_weights=weights)
        retried = False
        trace = current_trace.get()
        while True:
            reader = contract_reader(contract, request)
            metadata: Metadata = ()
            if trace is not None:
                span = self._span = trace.call(backend.url, request.model)
                metadata = span.metadata
            try:
                call = await backend._transport.open(STREAM_INFER_PATH, message, reader, request.deadline, metadata)
            except CallError as exc:
                raise self._failed(exc) from exc
            self._opened(call, reader)
            try:
                batch = await call.__anext__()
            except CallError as exc:
                # Once, and only for a call Triton provably never started: the transport opens
                # it on another connection.
                if exc.retryable and not retried:
                    retried = True
                    self._end(exc, retrying=True)
                    logger.info("retrying a generation Triton did not start: %s", exc.details)
                    continue
                raise self._failed(exc) from exc
            except GatewayError as exc:
                if task is not None and not weights and LORA_NOT_CACHED in exc.message:
                    # The engine evicted the adapter (its cache holds a few): once more, with it.
                    self._end(exc, retrying=True)
                    backend._lora_sent.discard((request.model, task))
                    weights = True
                    message = contract.encode(request, lora_weights=True)
                    logger.info("LoRA task %s of %s was not in the engine's cache: sent again", task, request.model)
                    continue
                self.error = exc
                raise
            if task is not None:
                backend._lora_sent.add((request.model, task))
            call.map_error = self._failed
            self._hand_off(call.__anext__)
            return batch

    def _failed(self, error: BaseException) -> BaseException:
        """The error the consumer gets (a gRPC status becomes a typed one), kept as ``error``."""
        if isinstance(error, CallError):
            typed = classify_rpc_error(error)
            typed.__cause__ = error
            error = typed
        self.error = error
        return error

    def _opened(self, call: StreamCall[GenerationChunk], reader: StreamReader) -> None:
        self._call, self._reader = call, reader
        self._backend._active.add(call)
        deadline = self._request.deadline
        if deadline is not None:
            # An explicit cancel: the model must see is_cancelled() and free its slot, and the
            # client must get a typed error.
            self._timer = asyncio.get_running_loop().call_later(
                max(0.0, deadline - time.monotonic()),
                call.abort,
                BackendTimeoutError("the request's deadline passed before the backend finished"),
            )

    def _end(self, error: BaseException | None = None, *, retrying: bool = False) -> None:
        """``retrying``: the request is sent again under the same id, so the model must not be
        told to stop it."""
        span = self._span
        if span is not None:
            self._span = None
            span.end(error or self.error)
        call, reader = self._call, self._reader
        if call is None or reader is None:
            return
        self._call = self._reader = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._backend._active.discard(call)
        if reader.final:
            asyncio.get_running_loop().call_later(TRAILERS_GRACE, call.cancel)
        else:
            call.cancel()
            # A request that ended in an error is over in the model; one still running is stopped
            # where cancelling its call does not reach the model (an ensemble's step).
            stop = None if retrying or self.error is not None else self._stop_message()
            if stop is not None:
                self._backend.send_stop(*stop)

    def _stop_message(self) -> tuple[str, bytes] | None:
        return (self._request.contract or VLLM).stop_message(self._request)

    async def aclose(self) -> None:
        self._stop()
        self._end()
