"""OpenAI encoding: stream chunks byte for byte (clients parse them), and whole response objects."""

from __future__ import annotations

import json

from gateway.core.assemble import ChoiceEvent, Usage
from gateway.core.toolcalls import ToolCallOut
from gateway.openai.encode import ChunkEncoder, CompletionBuilder, completion_object

FRAME = (b"<", b">\n")
HEAD = b'{"id":"x-1","object":"chat.completion.chunk","created":7,"model":"m","system_fingerprint":null,"choices":['
LEGACY_HEAD = HEAD.replace(b"chat.completion.chunk", b"text_completion")


def encoder(chat: bool = True, **options: bool) -> ChunkEncoder:
    return ChunkEncoder(chat=chat, completion_id="x-1", created=7, model="m", framing=FRAME, **options)


def test_chat_content_then_a_separate_finish_chunk() -> None:
    out = encoder().events([ChoiceEvent(0, 'he said "hi" 🙂', "stop", None)], None)
    assert out == (
        b"<"
        + HEAD
        + '{"index":0,"delta":{"content":"he said \\"hi\\" 🙂"},"logprobs":null,"finish_reason":null}]}>\n'.encode()
        + b"<"
        + HEAD
        + b'{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}>\n'
    )


def test_legacy_text_chunk_and_finish_chunk() -> None:
    out = encoder(chat=False).events([ChoiceEvent(2, "ab", None, None), ChoiceEvent(2, "", "length", None)], None)
    assert out == (
        b"<"
        + LEGACY_HEAD
        + b'{"index":2,"text":"ab","logprobs":null,"finish_reason":null}]}>\n'
        + b"<"
        + LEGACY_HEAD
        + b'{"index":2,"text":"","logprobs":null,"finish_reason":"length"}]}>\n'
    )


def test_empty_text_without_logprobs_or_finish_says_nothing() -> None:
    assert encoder().events([ChoiceEvent(0, "", None, None)], None) == b""


def test_logprobs_ride_on_the_content_chunk_even_with_empty_text() -> None:
    logprobs = {"content": [{"token": "a", "logprob": -0.5}]}
    out = encoder().events([ChoiceEvent(0, "", None, logprobs)], None)  # type: ignore[arg-type]
    payload = json.loads(out[1:-2])
    assert payload["choices"][0] == {"index": 0, "delta": {"content": ""}, "logprobs": logprobs, "finish_reason": None}


def test_role_chunks_one_per_chat_choice_and_none_for_legacy() -> None:
    out = encoder().role_chunks(2)
    assert out == b"".join(
        b"<"
        + HEAD
        + b'{"index":%d,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}>\n' % i
        for i in range(2)
    )
    assert encoder(chat=False).role_chunks(2) == b""


def test_include_usage_puts_null_usage_on_every_chunk_and_totals_on_the_last() -> None:
    enc = encoder(include_usage=True)
    chunk = enc.events([ChoiceEvent(0, "a", None, None)], Usage(3, 1))
    assert chunk.endswith(b'],"usage":null}>\n')
    assert enc.usage_chunk(Usage(3, 1)) == (
        b"<" + HEAD + b'],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}>\n'
    )


def test_continuous_usage_puts_the_running_totals_on_every_chunk() -> None:
    chunk = encoder(continuous_usage=True).events([ChoiceEvent(0, "a", None, None)], Usage(3, 1))
    assert chunk.endswith(b'],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}>\n')


def test_without_usage_options_chunks_have_no_usage_key() -> None:
    chunk = encoder().events([ChoiceEvent(0, "a", None, None)], None)
    assert b"usage" not in chunk


def test_completion_object_shapes() -> None:
    chat = completion_object(
        chat=True,
        completion_id="c",
        created=1,
        model="m",
        texts=["hi"],
        finish_reasons=["stop"],
        logprobs=None,
        usage=Usage(2, 1),
    )
    assert chat == {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hi", "refusal": None, "tool_calls": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3},
    }
    legacy = completion_object(
        chat=False,
        completion_id="c",
        created=1,
        model="m",
        texts=["a", "b"],
        finish_reasons=["stop", "length"],
        logprobs=[{"tokens": ["a"]}, {"tokens": ["b"]}],
        usage=Usage(2, 2),
    )
    assert legacy["object"] == "text_completion"
    assert legacy["choices"][1] == {"index": 1, "text": "b", "logprobs": {"tokens": ["b"]}, "finish_reason": "length"}


def test_builder_joins_each_choice_text_in_order() -> None:
    builder = CompletionBuilder(chat=True, completion_id="c", created=1, model="m", choices=2, logprobs=False)
    builder.add([ChoiceEvent(1, "x", None, None), ChoiceEvent(0, "he", None, None)])
    builder.add([ChoiceEvent(0, "llo", "stop", None), ChoiceEvent(1, "y", "length", None)])
    body = builder.build(["stop", "length"], Usage(1, 4))
    assert [c["message"]["content"] for c in body["choices"]] == ["hello", "xy"]
    assert [c["finish_reason"] for c in body["choices"]] == ["stop", "length"]
    assert body["choices"][0]["logprobs"] is None


def test_builder_joins_chat_logprobs_into_one_content_list() -> None:
    builder = CompletionBuilder(chat=True, completion_id="c", created=1, model="m", choices=1, logprobs=True)
    builder.add([ChoiceEvent(0, "a", None, {"content": [{"token": "a"}]})])  # type: ignore[arg-type]
    builder.add([ChoiceEvent(0, "b", "stop", {"content": [{"token": "b"}]})])  # type: ignore[arg-type]
    body = builder.build(["stop"], Usage(1, 2))
    assert body["choices"][0]["logprobs"] == {"content": [{"token": "a"}, {"token": "b"}]}


def test_builder_merges_legacy_logprobs_lists() -> None:
    part = {"tokens": ["a"], "token_logprobs": [-1.0], "top_logprobs": [None], "text_offset": [0]}
    builder = CompletionBuilder(chat=False, completion_id="c", created=1, model="m", choices=1, logprobs=True)
    builder.add([ChoiceEvent(0, "a", None, part)])  # type: ignore[arg-type]
    builder.add([ChoiceEvent(0, "b", "stop", {**part, "tokens": ["b"], "text_offset": [1]})])  # type: ignore[arg-type]
    merged = builder.build(["stop"], Usage(1, 2))["choices"][0]["logprobs"]
    assert merged["tokens"] == ["a", "b"] and merged["text_offset"] == [0, 1]


def test_a_call_in_pieces_streams_its_opening_then_each_arguments_piece_and_joins_whole() -> None:
    pieces = [
        ToolCallOut(0, "call_1", "f", "", closes=False),
        ToolCallOut(0, "call_1", "f", '{"a": ', opens=False, closes=False),
        ToolCallOut(0, "call_1", "f", "1}", opens=False, closes=False),
        ToolCallOut(0, "call_1", "f", "", opens=False),
    ]
    events = [ChoiceEvent(0, "", None, None, (piece,)) for piece in pieces]
    out = encoder().events(events, None)
    chunks = [json.loads(line[1:-1]) for line in out.split(b"\n") if line]
    deltas = [chunk["choices"][0]["delta"]["tool_calls"][0] for chunk in chunks]
    assert deltas == [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}},
        {"index": 0, "function": {"arguments": '{"a": '}},
        {"index": 0, "function": {"arguments": "1}"}},
    ]
    builder = CompletionBuilder(chat=True, completion_id="x-1", created=7, model="m", choices=1, logprobs=False)
    builder.add(events)
    whole = builder.build(["tool_calls"], Usage(1, 4))
    assert whole["choices"][0]["message"]["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    ]
