"""The Responses encoder alone: items in the order they begin, the event sequence, the final object,
whatever the steps; every stream also fed to the openai SDK's own assembler (warnings are errors)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai._models import construct_type
from openai._types import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent

from gateway.core.assemble import ChoiceEvent, Usage
from gateway.core.toolcalls import ToolCallOut
from gateway.http.sse import event_framing
from gateway.openai.responses_encode import ResponseEncoder, input_item_list
from gateway.plan.responses import response_head
from gateway.plan.responses_request import ResponsesRequest

HEAD = response_head(ResponsesRequest(model="m", input="hi"), "resp_1", 1, True)
CALL = ToolCallOut(0, "call_1", "f", '{"a": 1}')
CALL_2 = ToolCallOut(1, "call_2", "g", "{}")
USAGE = Usage(3, 4)


def text(value: str, finish: str | None = None, calls: tuple[ToolCallOut, ...] | None = None) -> ChoiceEvent:
    return ChoiceEvent(0, value, finish, None, calls)


def parse(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for block in raw.decode().split("\n\n"):
        if block:
            name, data = block.split("\n")
            event = json.loads(data.removeprefix("data: "))
            assert name == f"event: {event['type']}"
            out.append(event)
    return out


def run(steps: list[list[ChoiceEvent]], finish: str = "stop") -> tuple[list[dict[str, Any]], dict[str, Any]]:
    encoder = ResponseEncoder(HEAD, event_framing)
    raw = encoder.opening() + b"".join(encoder.events(step) for step in steps)
    frames, response = encoder.closing(finish, USAGE)
    events = parse(raw + frames)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["response"] == response
    assert_sdk_assembles(events, response)
    return events, response


def assert_sdk_assembles(events: list[dict[str, Any]], response: dict[str, Any]) -> None:
    state: ResponseStreamState[None] = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in events:
        state.handle_event(construct_type(type_=ResponseStreamEvent, value=event))  # type: ignore[arg-type]
    if response["status"] == "completed":
        final = state._completed_response
        assert final is not None and final.id == response["id"]
        assert [(item.type, item.id) for item in final.output] == [(i["type"], i["id"]) for i in response["output"]]
        said = [i["content"][0]["text"] for i in response["output"] if i["type"] == "message"]
        assert final.output_text == "".join(said)


def test_one_message_holds_all_the_text_even_around_calls() -> None:
    events, response = run([[text("Let me ")], [text("see.", calls=(CALL,))], [text(" Done.", calls=(CALL_2,))]])
    message, first, second = response["output"]
    assert message["content"][0]["text"] == "Let me see. Done." and message["status"] == "completed"
    assert (first["call_id"], first["name"], first["arguments"]) == ("call_1", "f", '{"a": 1}')
    assert second["call_id"] == "call_2"
    types = [e["type"] for e in events]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]


def test_a_call_before_any_text_comes_first() -> None:
    _, response = run([[text("", calls=(CALL,))], [text("after")]])
    assert [item["type"] for item in response["output"]] == ["function_call", "message"]


def test_a_response_that_said_nothing_has_one_empty_message() -> None:
    events, response = run([])
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert response["output"][0]["content"][0]["text"] == ""


def test_steps_split_anywhere_give_the_same_output() -> None:
    whole = run([[text("abc", calls=(CALL,))]])[1]["output"]
    for cut in range(4):
        split = run([[text("abc"[:cut])], [text("abc"[cut:], calls=(CALL,))]])[1]["output"]
        assert [(i["type"], i.get("content"), i.get("arguments")) for i in split] == [
            (i["type"], i.get("content"), i.get("arguments")) for i in whole
        ]


def test_the_cap_is_incomplete_and_usage_is_named_as_responses_name_it() -> None:
    events, response = run([[text("ab")]], finish="length")
    assert events[-1]["type"] == "response.incomplete"
    assert response["status"] == "incomplete" and response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["output"][0]["status"] == "incomplete"
    assert response["completed_at"] is None
    assert response["usage"] == {
        "input_tokens": 3,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 4,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 7,
    }


def test_failed_and_cut_off_keep_the_text_so_far() -> None:
    encoder = ResponseEncoder(HEAD, event_framing)
    encoder.opening()
    encoder.events([text("partial")])
    error = {"message": "boom", "type": "server_error", "param": None, "code": "backend_error"}
    frames, failed = encoder.failed(error, USAGE)
    (event,) = parse(frames)
    assert event["type"] == "response.failed" and event["response"] == failed
    assert failed["status"] == "failed" and failed["error"] == error
    assert failed["output"][0]["content"][0]["text"] == "partial" and failed["output"][0]["status"] == "incomplete"
    cut = encoder.cut_off(USAGE)
    assert cut["status"] == "incomplete" and cut["incomplete_details"] == {"reason": "client_disconnected"}
    assert cut["output"][0]["content"][0]["text"] == "partial"


def test_input_items_page_in_both_orders_with_a_cursor() -> None:
    items = [{"id": f"msg_{i}"} for i in range(5)]
    page = input_item_list(items, after=None, limit=2, order="desc")
    assert [i["id"] for i in page["data"]] == ["msg_4", "msg_3"]
    assert (page["first_id"], page["last_id"], page["has_more"], page["object"]) == ("msg_4", "msg_3", True, "list")
    rest = input_item_list(items, after="msg_1", limit=20, order="asc")
    assert [i["id"] for i in rest["data"]] == ["msg_2", "msg_3", "msg_4"] and rest["has_more"] is False
    empty = input_item_list(items, after="msg_0", limit=5, order="desc")
    assert empty["data"] == [] and empty["first_id"] is None and empty["has_more"] is False


@pytest.mark.parametrize("piece", ["plain", 'quote " and \\ backslash', "emoji 🙂 東京", "new\nline"])
def test_delta_bytes_are_valid_json_for_any_text(piece: str) -> None:
    events, response = run([[text("a")], [text(piece)]])
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert deltas == ["a", piece] and response["output"][0]["content"][0]["text"] == "a" + piece


def test_a_call_whose_arguments_stream_is_one_item_with_a_delta_per_piece() -> None:
    pieces = (
        ToolCallOut(0, "call_1", "f", "", closes=False),
        ToolCallOut(0, "call_1", "f", '{"a": ', opens=False, closes=False),
    )
    rest = (
        ToolCallOut(0, "call_1", "f", "1}", opens=False, closes=False),
        ToolCallOut(0, "call_1", "f", "", opens=False),
    )
    events, response = run([[text("", calls=pieces)], [text("", calls=rest)], [text("after")]])
    (call, message) = response["output"]
    assert (call["type"], call["arguments"], call["status"]) == ("function_call", '{"a": 1}', "completed")
    assert message["content"][0]["text"] == "after"
    deltas = [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert deltas == ['{"a": ', "1}"]
    types = [e["type"] for e in events]
    assert types.index("response.function_call_arguments.done") < types.index("response.output_text.delta")
