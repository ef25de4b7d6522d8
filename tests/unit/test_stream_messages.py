"""The stream reader's shortcut gives what protobuf gives, for any message (``stream_messages``).

A fresh reader has no head, so it reads every message with protobuf: it is the reference. The
parse function here hands back exactly what it was given (descriptors, raw contents, final), so
a field read wrongly by the shortcut shows, not only a wrong chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2

from gateway.backend.contracts.tensors import Outputs
from gateway.backend.stream_messages import StreamReader


class StreamError(Exception):
    pass


def echo(outputs: Outputs, raws: Sequence[bytes], final: bool) -> Any:
    return (outputs, tuple(raws), final)


def reader() -> StreamReader:
    return StreamReader(echo, StreamError)


def outcome(read: StreamReader, message: bytes) -> Any:
    try:
        return ("ok", read(message))
    except (StreamError, DecodeError) as exc:
        return ("error", type(exc).__name__, str(exc))


def message(
    raws: Sequence[bytes],
    *,
    final: bool | None = False,
    request_id: str = "req-1",
    names: Sequence[str] = ("text_output", "finish_reason", "num_input_tokens", "num_output_tokens"),
    error: str = "",
    extra_parameter: int | None = None,
) -> bytes:
    reply = service_pb2.ModelStreamInferResponse(error_message=error)
    response = reply.infer_response
    response.model_name, response.model_version, response.id = "tiny-llm", "1", request_id
    for name in names:
        response.outputs.add(name=name, datatype="BYTES", shape=[1])
    response.raw_output_contents.extend(raws)
    if final is not None:
        response.parameters["triton_final_response"].bool_param = final
    if extra_parameter is not None:
        response.parameters["sequence"].int64_param = extra_parameter
    return reply.SerializeToString()


RAWS = [b"\x05\x00\x00\x00 word", b"\x04\x00\x00\x00None", b"\x07\x00\x00\x00", b"\x01\x00\x00\x00"]


def test_after_the_first_message_the_same_layout_is_read_by_the_shortcut() -> None:
    read = reader()
    first, second = message(RAWS), message([b"\x03\x00\x00\x00 an", *RAWS[1:]])
    assert read.raw_contents(first) is None  # nothing learned yet
    assert outcome(read, first) == outcome(reader(), first)
    assert read.raw_contents(second) == [b"\x03\x00\x00\x00 an", *RAWS[1:]]
    assert outcome(read, second) == outcome(reader(), second)


def test_long_raw_contents_take_multi_byte_lengths() -> None:
    read = reader()
    read(message(RAWS))
    for size in (127, 128, 16_383, 16_384, 2_100_000):
        raws = [b"x" * size, *RAWS[1:]]
        assert read.raw_contents(message(raws)) == raws


@pytest.mark.parametrize(
    "other",
    [
        message(RAWS, final=True),  # the final flag
        message(RAWS, final=None),  # no parameter at all
        message(RAWS, request_id="req-2"),  # another call's id
        message(RAWS[:3], names=("text_output", "finish_reason", "num_input_tokens")),  # fewer outputs
        message(RAWS, error="boom"),  # an error message before the response
        message(RAWS, extra_parameter=7),  # one more parameter
        message([*RAWS, b"more"]),  # a raw content the head does not describe
    ],
)
def test_any_other_layout_goes_through_protobuf(other: bytes) -> None:
    read = reader()
    read(message(RAWS))
    assert read.raw_contents(other) is None
    assert outcome(read, other) == outcome(reader(), other)


def test_a_message_changed_anywhere_reads_as_protobuf_reads_it() -> None:
    """Every truncation, every byte flipped, and bytes added after the raw contents (an unknown
    field, a second envelope): the learned reader agrees with protobuf each time."""
    base = message(RAWS)
    learned = reader()
    learned(base)
    changed = [base[:cut] for cut in range(len(base))]
    changed += [base[:i] + bytes([base[i] ^ 0x01]) + base[i + 1 :] for i in range(len(base))]
    changed += [base + b"\x3a\x01x", base + base, base[:1] + bytes([base[1] + 3]) + base[2:] + b"\x3a\x01x"]
    for variant in changed:
        read = reader()
        read(base)
        assert outcome(read, variant) == outcome(reader(), variant), variant


def test_a_call_stops_learning_when_every_head_differs() -> None:
    """A backend that changes its head on every response (a parameter counting them) costs the
    learning only for the first few."""
    read = reader()
    heads = [message(RAWS, extra_parameter=i) for i in range(6)]
    for index, head in enumerate(heads):
        read(head)
        assert (read.raw_contents(head) is not None) == (index < 3)
    assert read.raw_contents(heads[2]) is not None  # the last head learned stays


raw_bytes = st.binary(max_size=300)
layouts = st.fixed_dictionaries(
    {
        "names": st.lists(
            st.sampled_from(["text_output", "finish_reason", "num_output_tokens", "logprobs"]), max_size=4
        ),
        "request_id": st.sampled_from(["a", "b" * 200]),
        "final": st.sampled_from([False, True, None]),
        "error": st.sampled_from(["", "", "", "boom"]),
        "extra_parameter": st.sampled_from([None, None, 3]),
    }
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(layouts, st.lists(raw_bytes, max_size=5)), min_size=1, max_size=8))
def test_any_sequence_of_messages_reads_as_protobuf_reads_it(stream: list[tuple[dict[str, Any], list[bytes]]]) -> None:
    read = reader()
    for layout, raws in stream:
        encoded = message(raws, **layout)
        assert outcome(read, encoded) == outcome(reader(), encoded)


def test_a_learned_layout_is_read_by_the_contracts_plan_where_it_has_one() -> None:
    def plan(outputs: Outputs) -> Any:
        if outputs[0][0] != "text_output":
            return None
        return lambda raws, final: ("plan", outputs, tuple(raws), final)

    planned = StreamReader(echo, StreamError, plan)
    first, second = message(RAWS), message([b"\x03\x00\x00\x00 an", *RAWS[1:]])
    assert planned(first) == outcome(reader(), first)[1]  # protobuf's reading: no plan
    assert planned(second) == ("plan", *outcome(reader(), second)[1])
    # Without a plan for the layout, and when the raw contents do not match the descriptors.
    for layout in (message(RAWS, names=("finish_reason",) * 4), message(RAWS[:2])):
        unplanned = StreamReader(echo, StreamError, plan)
        unplanned(layout)
        assert unplanned(layout) == outcome(reader(), layout)[1]
