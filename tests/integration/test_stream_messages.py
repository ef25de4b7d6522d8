"""The stream reader's shortcut on real Triton streams (``backend/stream_messages.py``).

Each call's messages are recorded as they arrive over our HTTP/2 transport, then checked two ways:
every chunk the call's reader gave equals what protobuf alone makes of the same bytes (a fresh
reader per message never has a head to compare with), and the shortcut took every response of the
call after the first but the final one, which is what makes it worth having.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from typing import Any

import pytest

from gateway.backend.contracts.vllm import build_infer_request
from gateway.backend.stream_messages import StreamReader
from gateway.backend.transport.base import STREAM_INFER_PATH
from gateway.backend.transport.h2 import H2Transport
from gateway.backend.triton import vllm_reader
from gateway.backend.types import GenerationChunk, GenerationRequest
from gateway.errors import GatewayError
from gateway.triton_launcher import TritonServer


async def _stream(
    triton: TritonServer, infer: Any, reader: StreamReader
) -> tuple[list[bytes], list[GenerationChunk], BaseException | None]:
    """One call: the messages as they came, the chunks the reader made of them, and the error
    the call ended with (None when it ended well)."""
    messages: list[bytes] = []

    def record(message: bytes) -> GenerationChunk:
        messages.append(bytes(message))
        return reader(message)

    transport = H2Transport(triton.grpc_url)
    chunks: list[GenerationChunk] = []
    error: BaseException | None = None
    try:
        call = await transport.open(STREAM_INFER_PATH, infer.SerializeToString(), record)
        try:
            async for batch in call:
                chunks.extend(batch)
        except GatewayError as exc:
            error = exc
    finally:
        await transport.close()
    return messages, chunks, error


def _read_again(messages: list[bytes], chunks: list[GenerationChunk], make: Callable[[], StreamReader]) -> int:
    """The call's chunks equal protobuf's reading of the same bytes (a fresh reader for each
    message, so none has a head); returns how many of the messages a reader fed them in order
    took by the shortcut. A message carrying an error is the call's last, and makes no chunk."""
    errors = [message for message in messages if message[:1] == b"\n"]  # field 1: error_message
    assert errors in ([], messages[-1:])
    data = messages[: len(messages) - len(errors)]
    assert [make()(message) for message in data] == chunks
    reader, shortcut = make(), 0
    for message in data:
        shortcut += reader.raw_contents(message) is not None
        reader(message)
    for message in errors:
        assert reader.raw_contents(message) is None
        with pytest.raises(GatewayError):
            reader(message)
    return shortcut


@pytest.mark.parametrize("logprobs", [False, True])
def test_a_real_model_stream_is_read_by_the_shortcut_after_its_first_response(
    triton: TritonServer, logprobs: bool
) -> None:
    sampling: dict[str, Any] = {"max_tokens": 24, "ignore_eos": True} | ({"logprobs": 2} if logprobs else {})
    request = GenerationRequest("shortcut-1", "tiny-llm", "The quick brown fox", sampling, return_logprobs=logprobs)
    messages, chunks, error = asyncio.run(_stream(triton, build_infer_request(request), vllm_reader()))
    assert error is None
    assert sum(chunk.num_output_tokens[0] for chunk in chunks if chunk.num_output_tokens) == 24
    assert all(chunk.logprobs for chunk in chunks if chunk.text) is logprobs
    assert chunks[-1].final and not any(chunk.final for chunk in chunks[:-1])
    # The first response teaches the head; the final one differs in its flag.
    assert _read_again(messages, chunks, vllm_reader) == len(messages) - 2 >= 22


def test_an_error_inside_the_stream_still_ends_the_call_with_its_typed_error(triton: TritonServer) -> None:
    """After the shortcut has taken responses, the error message (another layout) goes through
    protobuf and ends the call with the classified error, as before the shortcut."""
    script = {
        "responses": [
            {
                "text": [base64.b64encode(f"t{i} ".encode()).decode()],
                "finish_reason": ["None"],
                "num_output_tokens": [1],
            }
            for i in range(6)
        ],
        "num_input_tokens": 3,
        "error": {"message": "boom in the middle", "after": 5},
    }
    request = GenerationRequest("shortcut-3", "scripted", json.dumps(script), {"max_tokens": 16})
    messages, chunks, error = asyncio.run(_stream(triton, build_infer_request(request), vllm_reader()))
    assert isinstance(error, GatewayError) and "boom in the middle" in str(error)
    assert b"".join(chunk.text[0] for chunk in chunks) == b"t0 t1 t2 t3 t4 "
    assert len(messages) == 6
    assert _read_again(messages, chunks, vllm_reader) == 4  # responses 2-5
