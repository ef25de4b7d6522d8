"""The vLLM-backend tensor contract (``triton_models/README.md`` has the table): a
``GenerationRequest`` → one ``ModelInferRequest`` (its bytes laid out here,
``infer_request_bytes``), and each response's outputs → a ``GenerationChunk``. The response parse
runs once per token, on output descriptors and raw contents (``stream_messages`` reads most
messages without protobuf), and skips numpy. Knows nothing of OpenAI or of how the messages
travel.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import orjson
from tritonclient.grpc import service_pb2

from gateway.backend.contracts.continuation import (
    RESUME_TOKEN_IDS,
    RETURN_TOKEN_IDS,
    TOKEN_IDS,
    Continuation,
    by_replay,
    by_text,
    constrained,
    replays,
)
from gateway.backend.contracts.interface import add_priority
from gateway.backend.contracts.tensors import (
    ONE_NUMBER,
    Outputs,
    ReadRaws,
    add_tensor,
    pack_bytes,
    split_bytes,
    unpack_numbers,
)
from gateway.backend.types import Embedding, EmbeddingRequest, GenerationChunk, GenerationRequest, Produced
from gateway.errors import BackendError

# Tensor names of the vLLM-backend contract.
TEXT_INPUT = "text_input"
STREAM = "stream"
SAMPLING_PARAMETERS = "sampling_parameters"
EXCLUDE_INPUT_IN_OUTPUT = "exclude_input_in_output"
RETURN_FINISH_REASON = "return_finish_reason"
RETURN_NUM_INPUT_TOKENS = "return_num_input_tokens"
RETURN_NUM_OUTPUT_TOKENS = "return_num_output_tokens"
RETURN_LOGPROBS = "return_logprobs"
IMAGE = "image"
TEXT_OUTPUT = "text_output"
FINISH_REASON = "finish_reason"
NUM_INPUT_TOKENS = "num_input_tokens"
NUM_OUTPUT_TOKENS = "num_output_tokens"
LOGPROBS = "logprobs"
EMBEDDING_REQUEST = "embedding_request"


def _bool(value: bool) -> bytes:
    return b"\x01" if value else b"\x00"


def build_infer_request(request: GenerationRequest) -> Any:
    """The one ``ModelInferRequest`` of a generation (vLLM-backend contract)."""
    infer = service_pb2.ModelInferRequest(model_name=request.model, id=request.request_id)
    add_priority(infer, request.priority)
    add_tensor(infer, TEXT_INPUT, "BYTES", [1], pack_bytes(request.prompt.encode("utf-8")))
    add_tensor(infer, STREAM, "BOOL", [1], _bool(request.stream))
    add_tensor(infer, SAMPLING_PARAMETERS, "BYTES", [1], pack_bytes(orjson.dumps(dict(request.sampling))))
    flags = [EXCLUDE_INPUT_IN_OUTPUT, RETURN_FINISH_REASON, RETURN_NUM_INPUT_TOKENS, RETURN_NUM_OUTPUT_TOKENS]
    if request.return_logprobs:
        flags.append(RETURN_LOGPROBS)
    if request.return_token_ids:
        flags.append(RETURN_TOKEN_IDS)
    for flag in flags:
        add_tensor(infer, flag, "BOOL", [1], _bool(True))
    if request.resume_ids:
        ids = struct.pack(f"<{len(request.resume_ids)}q", *request.resume_ids)
        add_tensor(infer, RESUME_TOKEN_IDS, "INT64", [len(request.resume_ids)], ids)
    if request.images:
        # The backend's own shape: BYTES [-1], one base64 file per element (``utils/request.py``
        # decodes each with ``b64decode`` and opens it with Pillow).
        images = b"".join(pack_bytes(image.encode("ascii")) for image in request.images)
        add_tensor(infer, IMAGE, "BYTES", [len(request.images)], images)
    return infer


_BYTE = [bytes((i,)) for i in range(0x80)]
_MODEL_NAME, _ID, _PARAMETERS, _INPUTS, _RAW_CONTENTS = b"\x0a", b"\x1a", b"\x22", b"\x2a", b"\x3a"
"""``ModelInferRequest``'s field tags (fields 1, 3, 4, 5 and 7, length-delimited)."""


def _varint(value: int) -> bytes:
    if value < 0x80:
        return _BYTE[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_delimited(tag: bytes, value: bytes) -> bytes:
    return tag + _varint(len(value)) + value


def _priority_entry(priority: int) -> bytes:
    """The ``parameters`` map's entry ``"priority"``: a map entry is a message of its key (field 1)
    and its value (field 2), here an ``InferParameter`` holding ``uint64_param`` (field 5, a
    varint)."""
    value = b"\x28" + _varint(priority)
    return _length_delimited(_PARAMETERS, b"\x0a\x08priority" + _length_delimited(b"\x12", value))


_PRIORITY_ENTRIES = {level: _priority_entry(level) for level in range(1, 9)}
"""The entries of the levels models declare (a few): made once, not per request."""


def _input_descriptors(return_logprobs: bool, return_token_ids: bool) -> tuple[bytes, bytes]:
    """The part of the request every generation shares: its inputs' descriptors (field 5: name,
    datatype, shape [1]), and the raw contents of its flags, all true (after the prompt, the
    stream flag and the sampling parameters)."""
    template = build_infer_request(
        GenerationRequest("", "", "", {}, return_logprobs=return_logprobs, return_token_ids=return_token_ids)
    )
    descriptors = b"".join(_length_delimited(_INPUTS, tensor.SerializeToString()) for tensor in template.inputs)
    flags = len(template.inputs) - 3
    return descriptors, _length_delimited(_RAW_CONTENTS, _bool(True)) * flags


_DESCRIPTORS = {(lp, ids): _input_descriptors(lp, ids) for lp in (False, True) for ids in (False, True)}


def infer_request_bytes(request: GenerationRequest) -> bytes:
    """``build_infer_request(request).SerializeToString()``, without protobuf.

    Building the message through protobuf's Python API took ~30 µs of the path to Triton (an
    object per input, a field set per attribute, then the encoder walking them back). Every
    generation's message differs only in its model name, its id, the prompt, the stream flag and
    the sampling parameters; the rest (the inputs' descriptors, the flags) is made once by
    protobuf itself. The pieces are laid out in field-number order with proto3's rules (an empty
    string left out, every element of a repeated field written), which is how protobuf
    serializes this message: a property test holds the bytes to ``SerializeToString``'s. A request
    with images is rare and large (their encoding dominates): protobuf builds it, as it does a
    continuation's (rare, and its replayed ids are one more tensor). A priority
    (field 4, between the id and the inputs) is the one map entry the gateway sends; a request
    without one, the usual, costs one test for it."""
    if request.images or request.resume_ids:
        return bytes(build_infer_request(request).SerializeToString())
    descriptors, flags = _DESCRIPTORS[request.return_logprobs, request.return_token_ids]
    model = request.model.encode("utf-8")
    request_id = request.request_id.encode("utf-8")
    priority = request.priority
    return b"".join(
        (
            _length_delimited(_MODEL_NAME, model) if model else b"",
            _length_delimited(_ID, request_id) if request_id else b"",
            (_PRIORITY_ENTRIES.get(priority) or _priority_entry(priority)) if priority else b"",
            descriptors,
            _length_delimited(_RAW_CONTENTS, pack_bytes(request.prompt.encode("utf-8"))),
            _length_delimited(_RAW_CONTENTS, _bool(request.stream)),
            _length_delimited(_RAW_CONTENTS, pack_bytes(orjson.dumps(dict(request.sampling)))),
            flags,
        )
    )


_FINISH_REASONS: dict[bytes, str | None] = {
    b"None": None,
    b"none": None,
    b"null": None,
    b"": None,
    b"stop": "stop",
    b"length": "length",
    b"abort": "abort",
}
_UNFINISHED = pack_bytes(b"None")
_unpack_uint32 = struct.Struct("<I").unpack_from
_new_tuple = tuple.__new__
"""The finish_reason tensor of every response but the last: one element, "None"."""


def _finish_reason(raw: bytes) -> str | None:
    try:
        return _FINISH_REASONS[raw]
    except KeyError:
        return raw.decode("utf-8", "replace")


def parse_vllm_outputs(outputs: Outputs, raws: Sequence[bytes], final: bool) -> GenerationChunk:
    """One response's outputs → a chunk, without numpy (hot path: once per token, so the usual
    one-sequence values take a shortcut)."""
    text: tuple[bytes, ...] = ()
    finish: tuple[str | None, ...] | None = None
    num_in: int | None = None
    num_out: tuple[int, ...] | None = None
    logprobs: tuple[Any, ...] | None = None
    token_ids: tuple[tuple[int, ...], ...] | None = None
    for (name, datatype), raw in zip(outputs, raws, strict=False):
        if name == TEXT_OUTPUT:
            text = split_bytes(raw)
        elif name == FINISH_REASON:
            finish = (None,) if raw == _UNFINISHED else tuple(map(_finish_reason, split_bytes(raw)))
        elif name == NUM_INPUT_TOKENS:
            values = unpack_numbers(raw, datatype)
            num_in = int(values[0]) if values else None
        elif name == NUM_OUTPUT_TOKENS:
            num_out = tuple(map(int, unpack_numbers(raw, datatype)))
        elif name == LOGPROBS:
            logprobs = tuple(orjson.loads(r) for r in split_bytes(raw))
        elif name == TOKEN_IDS:
            token_ids = (tuple(map(int, unpack_numbers(raw, datatype))),)
    return GenerationChunk(text, finish or (None,) * len(text), num_in, num_out, logprobs, final, token_ids)


_USUAL = frozenset({TEXT_OUTPUT, FINISH_REASON, NUM_INPUT_TOKENS, NUM_OUTPUT_TOKENS})
_COUNT_TYPES = frozenset({"UINT32", "INT32", "UINT64", "INT64"})


def vllm_outputs_plan(outputs: Outputs) -> ReadRaws | None:
    """A faster reading of the usual layout (text, finish reason and both token counts as
    integers, each once, and the generated ids where they were asked for, nothing else) than
    ``parse_vllm_outputs``' walk over the names: each output is taken from its place. Gives what
    ``parse_vllm_outputs`` gives; a response whose counts are not one number each (several
    sequences) goes to it. None for any other layout."""
    places = {name: index for index, (name, _) in enumerate(outputs)}
    names = places.keys() - {TOKEN_IDS}
    if len(outputs) != len(names) + (TOKEN_IDS in places) or names != _USUAL:
        return None
    text_at, finish_at, in_at, out_at = (
        places[name] for name in (TEXT_OUTPUT, FINISH_REASON, NUM_INPUT_TOKENS, NUM_OUTPUT_TOKENS)
    )
    in_type, out_type = outputs[in_at][1], outputs[out_at][1]
    if in_type not in _COUNT_TYPES or out_type not in _COUNT_TYPES:
        return None
    unpack_in, in_size = ONE_NUMBER[in_type]
    unpack_out, out_size = ONE_NUMBER[out_type]
    ids_at = places.get(TOKEN_IDS)
    if ids_at is not None and outputs[ids_at][1] not in _COUNT_TYPES:
        return None
    unpack_id, id_size = ONE_NUMBER[outputs[ids_at][1] if ids_at is not None else "INT64"]

    def read(raws: Sequence[bytes], final: bool) -> GenerationChunk:
        counted_in, counted_out = raws[in_at], raws[out_at]
        if len(counted_in) != in_size or len(counted_out) != out_size:
            return parse_vllm_outputs(outputs, raws, final)
        raw = raws[text_at]
        if len(raw) >= 4 and _unpack_uint32(raw)[0] == len(raw) - 4:
            text: tuple[bytes, ...] = (raw[4:],)  # ``split_bytes``' one sequence, inline: per token
        else:
            text = split_bytes(raw)
        raw = raws[finish_at]
        finish = (None,) if raw == _UNFINISHED else tuple(map(_finish_reason, split_bytes(raw)))
        ids = None
        if ids_at is not None:  # a stream's one new id, or none (the final response), inline: per token
            raw = raws[ids_at]
            ids = ((unpack_id(raw)[0],),) if len(raw) == id_size else (unpack_numbers(raw, outputs[ids_at][1]),)
        # ``tuple.__new__`` with every field: the NamedTuple's own ``__new__`` is a Python frame
        return _new_tuple(
            GenerationChunk,
            (
                text,
                finish or (None,) * len(text),
                unpack_in(counted_in)[0],
                unpack_out(counted_out),
                None,
                final,
                ids,
                None,
            ),
        )

    return read


def build_embedding_request(request: EmbeddingRequest) -> Any:
    """The one ``ModelInferRequest`` of an embedding: ``embedding_request`` is a JSON object
    ``{"input": text or token ids, "pooling_params": {"dimensions": [d]}}`` (the backend reads
    ``dimensions[0]``, and nothing else of ``pooling_params``). The backend declares
    ``text_input`` required even for embeddings, so an empty one goes along where the model
    declares it; it is not read."""
    infer = service_pb2.ModelInferRequest(model_name=request.model, id=request.request_id)
    body: dict[str, Any] = {"input": request.input if isinstance(request.input, str) else list(request.input)}
    if request.dimensions is not None:
        body["pooling_params"] = {"dimensions": [request.dimensions]}
    if TEXT_INPUT in request.inputs:
        add_tensor(infer, TEXT_INPUT, "BYTES", [1], pack_bytes(b""))
    add_tensor(infer, EMBEDDING_REQUEST, "BYTES", [1], pack_bytes(orjson.dumps(body)))
    add_tensor(infer, RETURN_NUM_INPUT_TOKENS, "BOOL", [1], _bool(True))
    return infer


def read_embedding(chunks: Sequence[GenerationChunk]) -> Embedding:
    """The vector of an embedding call's responses: ``text_output`` of the final one holds a JSON
    list of floats, ``num_input_tokens`` the tokens read."""
    if not chunks or len(chunks[-1].text) != 1:
        raise BackendError("the backend answered an embedding request without one text_output")
    last = chunks[-1]
    try:
        vector = orjson.loads(last.text[0])
    except orjson.JSONDecodeError:
        raise BackendError("the backend's embedding is not JSON") from None
    if not isinstance(vector, list) or not all(isinstance(x, int | float) for x in vector):
        raise BackendError("the backend's embedding is not a list of numbers")
    return Embedding(vector, last.num_input_tokens)


class VllmContract:
    """The vLLM backend's contract as a ``Contract``: stateless, one request layout."""

    layout = "vllm"
    reports_prompt_tokens = True
    reports_completion_tokens = True

    def encode(self, request: GenerationRequest, *, lora_weights: bool = False) -> bytes:
        return infer_request_bytes(request)

    def parser(self, request: GenerationRequest) -> Any:
        return parse_vllm_outputs

    def plan(self, outputs: Outputs) -> ReadRaws | None:
        return vllm_outputs_plan(outputs)

    def uses_lora_task(self, request: GenerationRequest) -> int | None:
        return None

    def stop_message(self, request: GenerationRequest) -> tuple[str, bytes] | None:
        return None

    def migratable(self, request: GenerationRequest) -> GenerationRequest | None:
        if replays(request):
            return replace(request, return_token_ids=True)
        return None if constrained(request) else request

    def continuation(self, request: GenerationRequest, produced: Produced) -> Continuation | None:
        return by_replay(request, produced) if request.return_token_ids else by_text(request, produced)


VLLM = VllmContract()
"""The one instance: the contract of every request that names none."""
