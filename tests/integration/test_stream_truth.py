"""The stream never lies, forced through the real Triton path with the scripted test model.

The scripted model replays exactly the byte deltas, finish reasons, token counts and errors a test
asks for, so split UTF-8 characters, stop strings split across deltas, interleaved ``n>1``
sequences and mid-stream errors really cross gRPC and the gateway.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import openai
import pytest

from tests.integration.conftest import GatewayProcess

SCRIPTED = "scripted"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def script(*responses: dict[str, Any], **extra: Any) -> str:
    return json.dumps({"responses": list(responses), **extra})


def stream_text(client: openai.OpenAI, prompt: str, **kwargs: Any) -> tuple[dict[int, str], dict[int, str], list[Any]]:
    chunks = list(client.completions.create(model=SCRIPTED, prompt=prompt, stream=True, max_tokens=50, **kwargs))
    texts: dict[int, str] = {}
    finishes: dict[int, str] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    return texts, finishes, chunks


def test_utf8_character_split_across_responses_never_shows_replacement(client: openai.OpenAI) -> None:
    data = "a€🙂ü".encode()
    pieces = [data[:2], data[2:3], data[3:6], data[6:9], data[9:]]  # every multi-byte char is split
    prompt = script(*({"text": [b64(p)]} for p in pieces))
    texts, finishes, chunks = stream_text(client, prompt)
    assert texts == {0: "a€🙂ü"}
    assert all("\ufffd" not in (c.choices[0].text if c.choices else "") for c in chunks)
    assert finishes == {0: "stop"}


def test_stop_string_split_across_deltas_never_leaks(client: openai.OpenAI) -> None:
    prompt = script(
        {"utf8": ["Hello wo"]},
        {"utf8": ["rld. EN"]},
        {"utf8": ["D and more"]},
        {"utf8": [" text"], "finish_reason": ["length"]},
    )
    texts, finishes, chunks = stream_text(client, prompt, stop=["END"])
    assert texts == {0: "Hello world. "}
    assert finishes == {0: "stop"}
    for chunk in chunks:
        for choice in chunk.choices:
            assert "E" not in choice.text, "a prefix of the stop string was streamed"


def test_backend_length_is_reported_as_length(client: openai.OpenAI) -> None:
    prompt = script({"utf8": ["ab"]}, {"utf8": ["cd"], "finish_reason": ["length"]})
    _, finishes, _ = stream_text(client, prompt)
    assert finishes == {0: "length"}


def test_n_choices_interleaved_keep_their_index_and_finish(client: openai.OpenAI) -> None:
    # One backend request per choice; their responses interleave (the delays), and each choice
    # keeps its own text, finish reason and index.
    prompt = json.dumps(
        {
            "choices": [
                [
                    {"utf8": ["a1"]},
                    {"utf8": ["a2"], "delay": 0.2},
                    {"utf8": ["a3"], "finish_reason": ["stop"], "delay": 0.1},
                ],
                [{"utf8": ["b1"], "delay": 0.1}, {"utf8": [""], "finish_reason": ["length"], "delay": 0.05}],
            ]
        }
    )
    texts, finishes, chunks = stream_text(client, prompt, n=2)
    assert texts == {0: "a1a2a3", 1: "b1"}
    assert finishes == {0: "stop", 1: "length"}
    indexes = [c.choices[0].index for c in chunks if c.choices and c.choices[0].text]
    assert indexes.index(1) < len(indexes) - 1 - indexes[::-1].index(0), "the choices did not interleave"


def test_a_response_with_more_sequences_than_asked_is_an_error_not_a_guess(client: openai.OpenAI) -> None:
    # Each request asks for one sequence; a response carrying two cannot be paired with choices.
    prompt = script({"utf8": ["a", "b"], "finish_reason": ["stop", "stop"]})
    with pytest.raises(openai.APIError) as info:
        stream_text(client, prompt)
    assert "2 sequences" in info.value.message


def test_usage_counts_come_from_the_backend(client: openai.OpenAI) -> None:
    prompt = script(
        {"utf8": ["x"], "num_output_tokens": [3]}, {"utf8": ["y"], "num_output_tokens": [4]}, num_input_tokens=11
    )
    chunks = list(
        client.completions.create(
            model=SCRIPTED, prompt=prompt, stream=True, max_tokens=50, stream_options={"include_usage": True}
        )
    )
    assert chunks[-1].choices == []
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (11, 7)
    assert all(c.usage is None for c in chunks[:-1])


def test_mid_stream_error_is_one_openai_error_event_the_sdk_raises(
    client: openai.OpenAI, gateway: GatewayProcess
) -> None:
    prompt = script({"utf8": ["partial "]}, {"utf8": ["more"]}, error={"message": "engine exploded", "after": 1})
    with pytest.raises(openai.APIError) as info:
        stream_text(client, prompt)
    assert "engine exploded" in info.value.message
    raw = httpx.post(
        gateway.url + "/v1/completions", json={"model": SCRIPTED, "prompt": prompt, "stream": True}, timeout=30
    ).text
    events = [e for e in raw.split("\n\n") if e.startswith("data: ")]
    last = json.loads(events[-1][6:])
    assert set(last["error"]) == {"message", "type", "param", "code"}
    assert "[DONE]" not in raw


def test_error_before_any_response_gets_a_status_code(client: openai.OpenAI) -> None:
    prompt = script({"utf8": ["never"]}, error={"message": "refused up front", "after": 0})
    with pytest.raises(openai.InternalServerError) as info:
        stream_text(client, prompt)
    assert "refused up front" in info.value.message


def test_non_streaming_merges_the_same_way(client: openai.OpenAI) -> None:
    data = "€uro END tail".encode()
    prompt = script({"text": [b64(data[:1])]}, {"text": [b64(data[1:9])]}, {"text": [b64(data[9:])]})
    reply = client.completions.create(model=SCRIPTED, prompt=prompt, max_tokens=50, stop="END")
    assert reply.choices[0].text == "€uro " and reply.choices[0].finish_reason == "stop"
