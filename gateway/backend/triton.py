"""The Triton client: one gRPC ``ModelStreamInfer`` call per generation.

The token stream runs on ``grpc_stream``: our own HTTP/2 connection that the event loop reads, so a
token costs no thread hand-off (``grpc.aio`` spent 50-60 µs of CPU per message on three of them;
see that module). The unary control calls (readiness, repository index, model config) stay on
``tritonclient``'s protobuf stubs over a ``grpc.aio`` channel: they are rare and grpc.aio does
their connection management well. Each generation's request message is the one request of its
call, which is then half-closed, so the response stream ends after the model's FINAL response.
Cancelling the call (client gone, stop string hit, deadline) sends RST_STREAM, which makes the
model see ``is_cancelled()``; ``generate`` cancels in ``finally``, so leaving early always does.

Speaks the vLLM-backend tensor contract (see ``triton_models/README.md``), and the TensorRT-LLM
ensemble's (``trtllm.py``) for models that declare its inputs; knows nothing of OpenAI.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
import struct
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import orjson
from tritonclient.grpc import service_pb2, service_pb2_grpc

from gateway.backend import grpc_stream
from gateway.backend.grpc_stream import CallError, GrpcConnection, StreamCall
from gateway.backend.tensors import add_tensor, pack_bytes, split_bytes
from gateway.backend.trtllm import build_trtllm_request, is_trtllm, parse_trtllm_response
from gateway.backend.types import BackendModel, GenerationChunk, GenerationRequest
from gateway.errors import (
    BackendError,
    BackendTimeoutError,
    BackendUnavailableError,
    GatewayError,
    InvalidRequestError,
    ModelNotFoundError,
)

logger = logging.getLogger(__name__)

# Tensor names of the vLLM-backend contract.
TEXT_INPUT = "text_input"
STREAM = "stream"
SAMPLING_PARAMETERS = "sampling_parameters"
EXCLUDE_INPUT_IN_OUTPUT = "exclude_input_in_output"
RETURN_FINISH_REASON = "return_finish_reason"
RETURN_NUM_INPUT_TOKENS = "return_num_input_tokens"
RETURN_NUM_OUTPUT_TOKENS = "return_num_output_tokens"
RETURN_LOGPROBS = "return_logprobs"
TEXT_OUTPUT = "text_output"
FINISH_REASON = "finish_reason"
NUM_INPUT_TOKENS = "num_input_tokens"
NUM_OUTPUT_TOKENS = "num_output_tokens"
LOGPROBS = "logprobs"


# In-stream errors carry only a message (no status code), so known texts are classified here.
# (pattern, error type, the request field to name), first match wins.
_ERROR_PATTERNS: tuple[tuple[re.Pattern[str], type[GatewayError], str | None], ...] = (
    (re.compile(r"structured output|guided decoding", re.I), InvalidRequestError, "response_format"),
    (re.compile(r"LoRA .* is not supported"), ModelNotFoundError, "model"),
    (re.compile(r"unknown model|is not found|not ready|unavailable model", re.I), BackendUnavailableError, None),
    (re.compile(r"not supported by|invalid sampling|unknown sampling|sampling_parameters|INVALID_ARG", re.I),
     InvalidRequestError, None),
)

_STATUS_ERRORS: dict[grpc.StatusCode, type[GatewayError]] = {
    grpc.StatusCode.UNAVAILABLE: BackendUnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: BackendTimeoutError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequestError,
    grpc.StatusCode.NOT_FOUND: BackendUnavailableError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: BackendUnavailableError,
}


def classify_stream_error(message: str) -> GatewayError:
    """Map an error message sent inside the stream to a typed error."""
    for pattern, error_type, param in _ERROR_PATTERNS:
        if pattern.search(message):
            return error_type(message, param=param)
    return BackendError(message)


_STATUS_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}


def classify_rpc_error(error: grpc.aio.AioRpcError | CallError) -> GatewayError:
    """Map a gRPC status (of a grpc.aio call or of one of our streams) to a typed error."""
    if isinstance(error, CallError):
        code, details = _STATUS_BY_NUMBER.get(error.code, grpc.StatusCode.UNKNOWN), error.details
    else:
        code, details = error.code(), error.details()
    error_type = _STATUS_ERRORS.get(code, BackendError)
    details = details or code.name
    if error_type is BackendUnavailableError:
        return BackendUnavailableError(f"Triton is unavailable: {details}", headers={"Retry-After": "1"})
    if error_type is BackendTimeoutError:
        return BackendTimeoutError("the request's deadline passed before the backend finished")
    return error_type(f"Triton error: {details}")


def _bool(value: bool) -> bytes:
    return b"\x01" if value else b"\x00"


def build_infer_request(request: GenerationRequest) -> Any:
    """The one ``ModelInferRequest`` of a generation (vLLM-backend contract)."""
    infer = service_pb2.ModelInferRequest(model_name=request.model, id=request.request_id)
    add_tensor(infer, TEXT_INPUT, "BYTES", [1], pack_bytes(request.prompt.encode("utf-8")))
    add_tensor(infer, STREAM, "BOOL", [1], _bool(request.stream))
    add_tensor(infer, SAMPLING_PARAMETERS, "BYTES", [1], pack_bytes(orjson.dumps(dict(request.sampling))))
    flags = [EXCLUDE_INPUT_IN_OUTPUT, RETURN_FINISH_REASON, RETURN_NUM_INPUT_TOKENS, RETURN_NUM_OUTPUT_TOKENS]
    if request.return_logprobs:
        flags.append(RETURN_LOGPROBS)
    for flag in flags:
        add_tensor(infer, flag, "BOOL", [1], _bool(True))
    return infer


_NUMBER_FORMATS = {"UINT32": ("I", 4), "INT32": ("i", 4), "UINT64": ("Q", 8), "INT64": ("q", 8), "FP32": ("f", 4)}
_ONE_NUMBER = {datatype: (struct.Struct("<" + code).unpack, size) for datatype, (code, size) in _NUMBER_FORMATS.items()}


def _numbers(raw: bytes, datatype: str) -> tuple[int, ...] | tuple[float, ...]:
    try:
        unpack, size = _ONE_NUMBER[datatype]
    except KeyError:
        raise BackendError(f"unexpected datatype {datatype} from backend") from None
    if len(raw) == size:
        return unpack(raw)  # type: ignore[no-any-return]
    return struct.unpack(f"<{len(raw) // size}{_NUMBER_FORMATS[datatype][0]}", raw)


_FINISH_REASONS: dict[bytes, str | None] = {b"None": None, b"none": None, b"null": None, b"": None,
                                             b"stop": "stop", b"length": "length", b"abort": "abort"}
_UNFINISHED = pack_bytes(b"None")
"""The finish_reason tensor of every response but the last: one element, "None"."""


def _finish_reason(raw: bytes) -> str | None:
    try:
        return _FINISH_REASONS[raw]
    except KeyError:
        return raw.decode("utf-8", "replace")


def parse_infer_response(response: Any, final: bool) -> GenerationChunk:
    """Turn one ``ModelInferResponse`` into a chunk without numpy (hot path: once per token, so
    each protobuf field is read once and the usual one-sequence values take a shortcut)."""
    text: tuple[bytes, ...] = ()
    finish: tuple[str | None, ...] | None = None
    num_in: int | None = None
    num_out: tuple[int, ...] | None = None
    logprobs: tuple[Any, ...] | None = None
    for output, raw in zip(response.outputs, response.raw_output_contents):
        name = output.name
        if name == TEXT_OUTPUT:
            text = tuple(split_bytes(raw))
        elif name == FINISH_REASON:
            finish = (None,) if raw == _UNFINISHED else tuple(map(_finish_reason, split_bytes(raw)))
        elif name == NUM_INPUT_TOKENS:
            values = _numbers(raw, output.datatype)
            num_in = int(values[0]) if values else None
        elif name == NUM_OUTPUT_TOKENS:
            num_out = tuple(map(int, _numbers(raw, output.datatype)))
        elif name == LOGPROBS:
            logprobs = tuple(orjson.loads(r) for r in split_bytes(raw))
    return GenerationChunk(text, finish or (None,) * len(text), num_in, num_out, logprobs, final)


def _is_final(response: Any) -> bool:
    param = response.parameters.get("triton_final_response")
    return bool(param is not None and param.bool_param)


def _reader(parse: Callable[[Any, bool], GenerationChunk]) -> Callable[[bytes], GenerationChunk]:
    """One ``ModelStreamInferResponse`` message → a chunk, or the typed error it carries."""
    decode = service_pb2.ModelStreamInferResponse.FromString

    def read(message: bytes) -> GenerationChunk:
        reply = decode(message)
        if reply.error_message:
            raise classify_stream_error(reply.error_message)
        response = reply.infer_response
        return parse(response, _is_final(response))

    return read


_READ_VLLM = _reader(parse_infer_response)
_READ_TRTLLM = _reader(parse_trtllm_response)
_STREAM_INFER = b"/inference.GRPCInferenceService/ModelStreamInfer"


@dataclass(frozen=True)
class TritonTLS:
    """PEM files for TLS to Triton: ``None`` falls back to the system's roots / no client
    certificate. The same files configure the grpc.aio channel and the streaming connection."""

    root_certificates: Path | None = None
    certificate_chain: Path | None = None
    private_key: Path | None = None

    def grpc_credentials(self) -> grpc.ChannelCredentials:
        def read(path: Path | None) -> bytes | None:
            return path.read_bytes() if path is not None else None

        return grpc.ssl_channel_credentials(
            read(self.root_certificates), read(self.private_key), read(self.certificate_chain)
        )

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.root_certificates)
        if self.certificate_chain is not None:
            context.load_cert_chain(self.certificate_chain, self.private_key)
        context.set_alpn_protocols(["h2"])
        return context


class TritonBackend:
    """A ``Backend`` over Triton's gRPC API."""

    def __init__(
        self,
        url: str,
        *,
        keepalive_ms: int = 30_000,
        tls: TritonTLS | None = None,
    ) -> None:
        self.url = url
        self._options = [
            ("grpc.max_send_message_length", -1),
            ("grpc.max_receive_message_length", -1),
            ("grpc.keepalive_time_ms", keepalive_ms),
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.keepalive_permit_without_calls", 0),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.enable_retries", 0),
        ]
        self._options += [
            # Reconnect quickly once Triton is back, instead of gRPC's default backoff up to 120 s.
            ("grpc.initial_reconnect_backoff_ms", 250),
            ("grpc.min_reconnect_backoff_ms", 250),
            ("grpc.max_reconnect_backoff_ms", 2_000),
        ]
        self._tls = tls
        self._ssl = tls.ssl_context() if tls is not None else None
        self._keepalive = keepalive_ms / 1000
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None
        self._connection: GrpcConnection | None = None
        self._connecting: asyncio.Lock | None = None
        self._active: set[StreamCall[GenerationChunk]] = set()

    def abort_all(self, error: GatewayError) -> int:
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
        self._connecting = asyncio.Lock()

    async def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if self._channel is not None:
            await self._channel.close(grace=None)
            self._channel = None

    async def _stream_connection(self) -> GrpcConnection:
        """The shared streaming connection; (re)opened on demand, so a Triton restart costs the
        calls that were on the old connection and nothing after."""
        connection = self._connection
        if connection is not None and connection.usable:
            return connection
        assert self._connecting is not None
        async with self._connecting:
            connection = self._connection
            if connection is not None and connection.usable:
                return connection
            try:
                connection = await grpc_stream.connect(self.url, ssl_context=self._ssl, keepalive=self._keepalive)
            except (OSError, asyncio.TimeoutError, ssl.SSLError) as exc:
                raise BackendUnavailableError(
                    f"Triton is unavailable: cannot connect to {self.url} ({exc or type(exc).__name__})",
                    headers={"Retry-After": "1"},
                ) from exc
            self._connection = connection
            return connection

    async def server_ready(self) -> bool:
        try:
            reply = await self._stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=2.0)
        except grpc.aio.AioRpcError:
            return False
        return bool(reply.ready)

    async def model_ready(self, name: str) -> bool:
        try:
            reply = await self._stub.ModelReady(service_pb2.ModelReadyRequest(name=name), timeout=2.0)
        except grpc.aio.AioRpcError:
            return False
        return bool(reply.ready)

    async def list_models(self) -> list[BackendModel]:
        try:
            index = await self._stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True), timeout=5.0)
            models = []
            for entry in index.models:
                if entry.state != "READY":
                    continue
                reply = await self._stub.ModelConfig(
                    service_pb2.ModelConfigRequest(name=entry.name, version=entry.version), timeout=5.0
                )
                config = reply.config
                models.append(
                    BackendModel(
                        name=entry.name,
                        version=entry.version,
                        platform=config.backend or config.platform,
                        inputs=frozenset(i.name for i in config.input),
                    )
                )
        except grpc.aio.AioRpcError as exc:
            raise classify_rpc_error(exc) from exc
        return models

    async def generate(self, request: GenerationRequest) -> AsyncIterator[list[GenerationChunk]]:
        if self._stub is None:
            raise BackendUnavailableError("the Triton client is not started")
        ensemble = is_trtllm(request.inputs)
        infer = build_trtllm_request(request, request.inputs) if ensemble else build_infer_request(request)
        read = _READ_TRTLLM if ensemble else _READ_VLLM
        connection = await self._stream_connection()
        try:
            call = await connection.open(_STREAM_INFER, infer.SerializeToString(), read)
        except CallError as exc:
            raise classify_rpc_error(exc) from exc
        self._active.add(call)
        timer = None
        if request.deadline is not None:
            # An explicit cancel: the model must see is_cancelled() and free its slot, and the
            # client must get a typed error.
            timer = asyncio.get_running_loop().call_later(
                max(0.0, request.deadline - time.monotonic()),
                call.abort,
                BackendTimeoutError("the request's deadline passed before the backend finished"),
            )
        try:
            async for batch in call:
                yield batch
        except CallError as exc:
            raise classify_rpc_error(exc) from exc
        finally:
            if timer is not None:
                timer.cancel()
            self._active.discard(call)
            call.cancel()
