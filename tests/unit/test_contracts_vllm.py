"""The vLLM-backend tensor contract: the request tensors, and the per-token parse of every response
layout the backend produces. Responses are real ``ModelInferResponse`` protobufs whose raw
contents are encoded the way Triton encodes them (``tritonclient``'s serializer and numpy), not
with the gateway's own ``pack_bytes``, so an encoding mistake on either side shows."""

from __future__ import annotations

import itertools
import struct
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2
from tritonclient.utils import serialize_byte_tensor

from gateway.backend.contracts.tensors import describe_outputs, pack_bytes, split_bytes
from gateway.backend.contracts.vllm import (
    build_infer_request,
    infer_request_bytes,
    parse_vllm_outputs,
    vllm_outputs_plan,
)
from gateway.backend.types import GenerationChunk, GenerationRequest
from gateway.errors import BackendError

Output = tuple[str, str, list[int], bytes]

NUMPY_TYPES = {"UINT32": np.uint32, "INT32": np.int32, "UINT64": np.uint64, "INT64": np.int64}


def strings(*values: bytes, shape: list[int] | None = None) -> bytes:
    """A BYTES tensor's raw contents as Triton writes them."""
    array = np.array(list(values), dtype=np.object_)
    if shape is not None:
        array = array.reshape(shape)
    return serialize_byte_tensor(array).item()  # type: ignore[no-any-return]


def numbers(values: list[int], datatype: str = "UINT32", zero_d: bool = False) -> bytes:
    array = np.array(values[0] if zero_d else values, dtype=NUMPY_TYPES[datatype])
    return array.tobytes()


def text_output(*values: bytes) -> Output:
    return ("text_output", "BYTES", [len(values)], strings(*values))


def finish_reason(*values: bytes) -> Output:
    return ("finish_reason", "BYTES", [len(values)], strings(*values))


def num_input_tokens(value: int, datatype: str = "UINT32", zero_d: bool = False) -> Output:
    return ("num_input_tokens", datatype, [] if zero_d else [1], numbers([value], datatype, zero_d))


def num_output_tokens(*values: int, datatype: str = "UINT32") -> Output:
    return ("num_output_tokens", datatype, [len(values)], numbers(list(values), datatype))


def logprobs(*values: Any) -> Output:
    encoded = [v if isinstance(v, bytes) else orjson.dumps(v) for v in values]
    return ("logprobs", "BYTES", [len(values)], strings(*encoded))


def response(*outputs: Output, final: bool | None = None) -> Any:
    message = service_pb2.ModelInferResponse(model_name="tiny-llm", model_version="1", id="req-1")
    for name, datatype, shape, raw in outputs:
        tensor = message.outputs.add()
        tensor.name = name
        tensor.datatype = datatype
        tensor.shape.extend(shape)
        message.raw_output_contents.append(raw)
    if final is not None:
        message.parameters["triton_final_response"].bool_param = final
    # Parse what went over the wire, not the Python object that was built.
    return service_pb2.ModelInferResponse.FromString(message.SerializeToString())


def parse(*outputs: Output, final: bool = False) -> GenerationChunk:
    """The chunk ``parse_vllm_outputs`` makes of a response; where the layout has a faster plan,
    that plan must make the same chunk (so every test here holds it to the general reading)."""
    parsed = response(*outputs)
    described, raws = describe_outputs(parsed), parsed.raw_output_contents
    chunk = parse_vllm_outputs(described, raws, final)
    plan = vllm_outputs_plan(described)
    if plan is not None:
        assert plan(raws, final) == chunk
    return chunk


USUAL = ("text_output", "finish_reason", "num_input_tokens", "num_output_tokens")


@pytest.mark.parametrize("datatype", ["UINT32", "INT32", "UINT64", "INT64"])
def test_the_usual_layout_has_a_plan_in_every_order_and_integer_type(datatype: str) -> None:
    types = {"text_output": "BYTES", "finish_reason": "BYTES"}
    for order in itertools.permutations(USUAL):
        assert vllm_outputs_plan(tuple((name, types.get(name, datatype)) for name in order)) is not None


@pytest.mark.parametrize("final", [False, True])
@pytest.mark.parametrize(
    ("reasons", "reason"),
    [(finish_reason(b"None"), None), (finish_reason(b"stop"), "stop"), (("finish_reason", "BYTES", [0], b""), None)],
)
def test_the_usual_layout_of_one_sequence(final: bool, reasons: Output, reason: str | None) -> None:
    outputs = (text_output(b"tok"), reasons, num_input_tokens(7), num_output_tokens(1))
    assert vllm_outputs_plan(describe_outputs(response(*outputs))) is not None
    assert parse(*outputs, final=final) == GenerationChunk((b"tok",), (reason,), 7, (1,), None, final)


def test_the_generated_ids_are_read_by_the_plan_too() -> None:
    ids = ("token_ids", "INT64", [1], numbers([1234], "INT64"))
    outputs = (text_output(b"tok"), finish_reason(b"None"), num_input_tokens(7), num_output_tokens(1), ids)
    assert vllm_outputs_plan(describe_outputs(response(*outputs))) is not None
    assert parse(*outputs) == GenerationChunk((b"tok",), (None,), 7, (1,), None, False, ((1234,),))
    empty = ("token_ids", "INT64", [0], b"")
    final = (text_output(b""), finish_reason(b"length"), num_input_tokens(7), num_output_tokens(0), empty)
    assert parse(*final, final=True) == GenerationChunk((b"",), ("length",), 7, (0,), None, True, ((),))


def test_a_continuation_carries_its_replayed_ids_and_asks_for_ids() -> None:
    request = GenerationRequest("r", "m", "p", {"max_tokens": 5}, return_token_ids=True, resume_ids=(3, 2**40, 7))
    parsed = service_pb2.ModelInferRequest.FromString(infer_request_bytes(request))
    names = [tensor.name for tensor in parsed.inputs]
    assert "return_token_ids" in names
    at = names.index("resume_token_ids")
    assert parsed.inputs[at].datatype == "INT64" and list(parsed.inputs[at].shape) == [3]
    assert struct.unpack("<3q", parsed.raw_input_contents[at]) == (3, 2**40, 7)


@pytest.mark.parametrize(
    "layout",
    [
        (("text_output", "BYTES"), ("finish_reason", "BYTES"), ("num_input_tokens", "UINT32")),
        (*((name, "BYTES" if "tokens" not in name else "UINT32") for name in USUAL), ("logprobs", "BYTES")),
        (
            ("text_output", "BYTES"),
            ("finish_reason", "BYTES"),
            ("num_input_tokens", "FP32"),
            ("num_output_tokens", "UINT32"),
        ),
        (
            ("text_output", "BYTES"),
            ("text_output", "BYTES"),
            ("num_input_tokens", "UINT32"),
            ("num_output_tokens", "UINT32"),
        ),
    ],
)
def test_other_layouts_have_no_plan(layout: tuple[tuple[str, str], ...]) -> None:
    assert vllm_outputs_plan(layout) is None


# -- one sequence ---------------------------------------------------------------------------------


def test_one_sequence_streaming_step_with_every_optional_output() -> None:
    entry = {"42": {"logprob": -0.5, "rank": 1, "decoded_token": "hi"}}
    chunk = parse(
        text_output(b"hi"),
        finish_reason(b"None"),
        num_input_tokens(7),
        num_output_tokens(1),
        logprobs([entry]),
    )
    assert chunk == GenerationChunk((b"hi",), (None,), 7, (1,), ([entry],), False)


def test_text_bytes_are_kept_raw_even_when_they_end_mid_character() -> None:
    euro = "€".encode()
    chunk = parse(text_output(euro[:2]), finish_reason(b"None"))
    assert chunk.text == (euro[:2],)


def test_text_that_starts_with_its_own_length_prefix_is_not_split() -> None:
    # 8 bytes whose first four read as "4": a second element would appear if the parser were
    # fooled by the payload instead of the outer prefix.
    tricky = b"\x04\x00\x00\x00abcd"
    assert parse(text_output(tricky)).text == (tricky,)


def test_empty_text_is_one_empty_sequence() -> None:
    chunk = parse(text_output(b""), finish_reason(b"stop"), num_output_tokens(0))
    assert chunk.text == (b"",)
    assert chunk.finish_reason == ("stop",)
    assert chunk.num_output_tokens == (0,)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"None", None),
        (b"none", None),
        (b"null", None),
        (b"", None),
        (b"stop", "stop"),
        (b"length", "length"),
        (b"abort", "abort"),
        # Unknown reasons pass through as text (a newer vLLM may add some).
        (b"error", "error"),
        (b"FinishReason.STOP", "FinishReason.STOP"),
        (b"\xff", "\ufffd"),
    ],
)
def test_finish_reason_values(raw: bytes, reason: str | None) -> None:
    assert parse(text_output(b"x"), finish_reason(raw)).finish_reason == (reason,)


@pytest.mark.parametrize("datatype", ["UINT32", "INT32", "UINT64", "INT64"])
@pytest.mark.parametrize("zero_d", [True, False])
def test_num_input_tokens_in_every_integer_type_and_shape(datatype: str, zero_d: bool) -> None:
    chunk = parse(text_output(b"x"), num_input_tokens(1234, datatype, zero_d))
    assert chunk.num_input_tokens == 1234
    assert type(chunk.num_input_tokens) is int


def test_num_input_tokens_above_two_to_the_31() -> None:
    assert parse(text_output(b"x"), num_input_tokens(3_000_000_000, "UINT32")).num_input_tokens == 3_000_000_000
    assert parse(text_output(b"x"), num_input_tokens(2**40, "UINT64")).num_input_tokens == 2**40


def test_num_input_tokens_as_fp32_is_an_int() -> None:
    raw = np.array([12.0], dtype=np.float32).tobytes()
    chunk = parse(text_output(b"x"), ("num_input_tokens", "FP32", [1], raw))
    assert chunk.num_input_tokens == 12
    assert type(chunk.num_input_tokens) is int


def test_empty_num_input_tokens_is_unknown() -> None:
    assert parse(text_output(b"x"), ("num_input_tokens", "UINT32", [0], b"")).num_input_tokens is None


@pytest.mark.parametrize("name", ["num_input_tokens", "num_output_tokens"])
def test_a_count_in_an_unexpected_datatype_is_a_backend_error(name: str) -> None:
    with pytest.raises(BackendError, match="FP64"):
        parse(text_output(b"x"), (name, "FP64", [1], np.array([1.0]).tobytes()))


def test_null_logprobs_are_none() -> None:
    assert parse(text_output(b"x"), logprobs(b"null")).logprobs == (None,)


def test_logprobs_of_a_step_with_several_tokens() -> None:
    entries = [{"1": {"logprob": -0.1, "rank": 1, "decoded_token": "a"}}, {"2": {"logprob": -2.5, "rank": 3}}]
    assert parse(text_output(b"ab"), logprobs(entries)).logprobs == (entries,)


# -- n > 1 ----------------------------------------------------------------------------------------


def test_several_sequences_each_get_their_own_values() -> None:
    chunk = parse(
        text_output(b"a", b"", b"ccc"),
        finish_reason(b"None", b"stop", b"length"),
        num_input_tokens(5),
        num_output_tokens(1, 0, 2),
        logprobs([{"1": {"logprob": -1.0}}], b"null", [{"3": {"logprob": -3.0}}, {"4": {"logprob": -4.0}}]),
    )
    assert chunk.text == (b"a", b"", b"ccc")
    assert chunk.finish_reason == (None, "stop", "length")
    assert chunk.num_input_tokens == 5
    assert chunk.num_output_tokens == (1, 0, 2)
    assert chunk.logprobs == ([{"1": {"logprob": -1.0}}], None, [{"3": {"logprob": -3.0}}, {"4": {"logprob": -4.0}}])


def test_several_sequences_without_a_finish_reason_are_all_unfinished() -> None:
    assert parse(text_output(b"a", b"b")).finish_reason == (None, None)


def test_several_sequences_all_still_running() -> None:
    assert parse(text_output(b"a", b"b"), finish_reason(b"None", b"None")).finish_reason == (None, None)


@pytest.mark.parametrize("datatype", ["UINT32", "INT32", "UINT64", "INT64"])
def test_num_output_tokens_per_sequence_in_every_integer_type(datatype: str) -> None:
    chunk = parse(text_output(b"a", b"b"), num_output_tokens(3, 4, datatype=datatype))
    assert chunk.num_output_tokens == (3, 4)
    assert all(type(v) is int for v in chunk.num_output_tokens)


def test_a_single_number_output_tokens_tensor() -> None:
    assert parse(text_output(b"a"), num_output_tokens(9)).num_output_tokens == (9,)


# -- layouts --------------------------------------------------------------------------------------


def test_only_text_output_leaves_every_optional_value_unknown() -> None:
    chunk = parse(text_output(b"a", b"b"), final=True)
    assert chunk == GenerationChunk((b"a", b"b"), (None, None), None, None, None, True)


def test_an_output_the_gateway_does_not_know_is_ignored() -> None:
    cumulative = ("cumulative_logprob", "FP32", [1], np.array([-1.5], dtype=np.float32).tobytes())
    chunk = parse(text_output(b"a"), cumulative, finish_reason(b"stop"))
    assert chunk == GenerationChunk((b"a",), ("stop",), None, None, None, False)


def test_a_response_without_outputs_is_an_empty_chunk() -> None:
    # What a FINAL flag without data looks like (e.g. after a cancellation).
    assert parse(final=True) == GenerationChunk((), (), None, None, None, True)


def test_every_order_of_the_outputs_parses_the_same() -> None:
    outputs = [
        text_output(b"x", b"yz"),
        finish_reason(b"length", b"None"),
        num_input_tokens(11, zero_d=True),
        num_output_tokens(1, 2),
        logprobs(b"null", [{"5": {"logprob": -0.25}}]),
    ]
    expected = GenerationChunk((b"x", b"yz"), ("length", None), 11, (1, 2), (None, [{"5": {"logprob": -0.25}}]))
    for order in itertools.permutations(outputs):
        assert parse(*order) == expected, [o[0] for o in order]


def test_the_final_argument_is_carried_as_given() -> None:
    assert parse(text_output(b"a"), final=True).final is True
    assert parse(text_output(b"a"), final=False).final is False


@settings(max_examples=150)
@given(
    st.lists(
        st.tuples(
            st.binary(max_size=12),
            st.sampled_from([b"None", b"stop", b"length", b"abort"]),
            st.integers(0, 5),
            st.one_of(st.none(), st.lists(st.dictionaries(st.text("0123456789", min_size=1), st.floats(-50, 0)))),
        ),
        min_size=1,
        max_size=5,
    ),
    st.integers(0, 2**31 - 1),
    st.sampled_from(["UINT32", "INT32", "UINT64", "INT64"]),
    st.booleans(),
    st.permutations(range(5)),
    st.sets(st.sampled_from(["finish_reason", "num_input_tokens", "num_output_tokens", "logprobs"])),
    st.booleans(),
)
def test_any_response_the_backend_can_send_parses_to_its_values(
    sequences: list[tuple[bytes, bytes, int, Any]],
    prompt_tokens: int,
    datatype: str,
    zero_d: bool,
    order: list[int],
    present: set[str],
    final: bool,
) -> None:
    texts, reasons, counts, entries = zip(*sequences, strict=True)
    all_outputs = [
        text_output(*texts),
        finish_reason(*reasons),
        num_input_tokens(prompt_tokens, datatype, zero_d),
        num_output_tokens(*counts, datatype=datatype),
        logprobs(*[b"null" if e is None else e for e in entries]),
    ]
    outputs = [all_outputs[i] for i in order if i == 0 or all_outputs[i][0] in present]
    chunk = parse(*outputs, final=final)
    assert chunk.final is final
    n = len(sequences)
    assert chunk.text == texts
    if "finish_reason" in present:
        assert chunk.finish_reason == tuple(None if r == b"None" else r.decode() for r in reasons)
    else:
        assert chunk.finish_reason == (None,) * n
    assert chunk.num_input_tokens == (prompt_tokens if "num_input_tokens" in present else None)
    assert chunk.num_output_tokens == (counts if "num_output_tokens" in present else None)
    assert chunk.logprobs == (entries if "logprobs" in present else None)


# -- the request ----------------------------------------------------------------------------------


def request_tensors(**kwargs: Any) -> tuple[Any, dict[str, tuple[str, list[int], bytes]]]:
    fields: dict[str, Any] = {"request_id": "rid-1", "model": "tiny-llm", "prompt": "hello", "sampling": {}}
    fields.update(kwargs)
    infer = build_infer_request(GenerationRequest(**fields))
    pairs = zip(infer.inputs, infer.raw_input_contents, strict=True)
    sent = {t.name: (t.datatype, list(t.shape), raw) for t, raw in pairs}
    assert len(sent) == len(infer.inputs), "a tensor is sent twice"
    return infer, sent


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=300)
@given(
    model=st.text(max_size=40),
    request_id=st.text(max_size=200),
    prompt=st.text() | st.text(min_size=150, max_size=300).map(lambda t: t * 60),  # lengths past 2, 3 varint bytes
    sampling=st.dictionaries(st.text(max_size=12), json_values, max_size=6),
    stream=st.booleans(),
    logprobs=st.booleans(),
    token_ids=st.booleans(),
    # no priority (the usual), the few levels models declare, and any uint64 (varints of 1-10 bytes)
    priority=st.just(0) | st.integers(1, 10) | st.integers(1, 2**64 - 1),
)
def test_the_request_bytes_are_protobufs_own(
    model: str,
    request_id: str,
    prompt: str,
    sampling: dict[str, Any],
    stream: bool,
    logprobs: bool,
    token_ids: bool,
    priority: int,
) -> None:
    request = GenerationRequest(
        request_id,
        model,
        prompt,
        sampling,
        stream=stream,
        return_logprobs=logprobs,
        return_token_ids=token_ids,
        priority=priority,
    )
    assert infer_request_bytes(request) == build_infer_request(request).SerializeToString()


@pytest.mark.parametrize("priority", [1, 2, 3, 8, 9, 127, 128, 2**64 - 1])
def test_a_priority_is_the_request_s_priority_parameter(priority: int) -> None:
    request = GenerationRequest("r", "m", "p", {"max_tokens": 1}, priority=priority)
    parsed = service_pb2.ModelInferRequest.FromString(infer_request_bytes(request))
    assert dict(parsed.parameters) == {"priority": service_pb2.InferParameter(uint64_param=priority)}
    assert infer_request_bytes(request) == build_infer_request(request).SerializeToString()


def test_no_priority_sends_no_parameter() -> None:
    request = GenerationRequest("r", "m", "p", {"max_tokens": 1})
    assert not service_pb2.ModelInferRequest.FromString(infer_request_bytes(request)).parameters
    assert not build_infer_request(request).parameters


@pytest.mark.parametrize("size", [0, 123, 124, 16379, 16380, 2**21 - 4, 2**21])
def test_the_request_bytes_are_protobufs_own_at_every_length_prefix_size(size: int) -> None:
    request = GenerationRequest("r" * (size % 300), "m", "p" * size, {"max_tokens": 1, "stop": ["s" * (size % 200)]})
    assert infer_request_bytes(request) == build_infer_request(request).SerializeToString()


def test_request_carries_model_id_and_every_tensor_of_the_contract() -> None:
    infer, sent = request_tensors(sampling={"max_tokens": 5, "temperature": 0.0, "ignore_eos": False, "stop": ["x"]})
    assert infer.model_name == "tiny-llm"
    assert infer.id == "rid-1"
    assert sent["text_input"] == ("BYTES", [1], strings(b"hello"))
    assert sent["stream"] == ("BOOL", [1], b"\x01")
    for flag in (
        "exclude_input_in_output",
        "return_finish_reason",
        "return_num_input_tokens",
        "return_num_output_tokens",
    ):
        assert sent[flag] == ("BOOL", [1], b"\x01"), flag
    assert "return_logprobs" not in sent
    datatype, shape, raw = sent["sampling_parameters"]
    assert (datatype, shape) == ("BYTES", [1])
    (params,) = split_bytes(raw)
    # Real JSON types: the backend coerces strings with bool("false") == True.
    assert orjson.loads(params) == {"max_tokens": 5, "temperature": 0.0, "ignore_eos": False, "stop": ["x"]}
    assert b'"ignore_eos":false' in params


def test_request_not_streaming_says_so() -> None:
    _, sent = request_tensors(stream=False)
    assert sent["stream"] == ("BOOL", [1], b"\x00")
    assert sent["exclude_input_in_output"] == ("BOOL", [1], b"\x01")


def test_request_with_logprobs_asks_for_them() -> None:
    _, sent = request_tensors(return_logprobs=True, sampling={"logprobs": 2})
    assert sent["return_logprobs"] == ("BOOL", [1], b"\x01")


def test_request_prompt_is_utf8() -> None:
    _, sent = request_tensors(prompt="héllo €")
    assert split_bytes(sent["text_input"][2]) == ("héllo €".encode(),)


# -- tensors.py -----------------------------------------------------------------------------------


@given(st.lists(st.binary(max_size=40), max_size=6))
def test_split_bytes_reads_what_triton_writes(values: list[bytes]) -> None:
    raw = strings(*values) if values else b""
    assert split_bytes(raw) == tuple(values)
    assert b"".join(pack_bytes(v) for v in values) == raw


def test_pack_bytes_is_a_little_endian_length_then_the_bytes() -> None:
    assert pack_bytes(b"") == b"\x00\x00\x00\x00"
    assert pack_bytes(b"x" * 258) == b"\x02\x01\x00\x00" + b"x" * 258
