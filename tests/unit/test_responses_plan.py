"""Planning a Responses request: input items, the chat messages they become, tools, formats, and
the fields refused by name. Pure (the store is a dict here)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import InvalidRequestError
from gateway.plan.responses import (
    chat_response_format,
    chat_tool_choice,
    check_supported,
    for_model,
    response_head,
    responses_param,
    responses_tools,
    to_chat_request,
)
from gateway.plan.responses_input import (
    history_items,
    load_chain,
    normalize_input,
    resolve_references,
    response_of_item,
    to_chat_messages,
)
from gateway.plan.responses_request import ResponsesRequest
from gateway.reasoning.seal import ReasoningSeal
from gateway.store.base import StoredResponse

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def request(**fields: Any) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "m", "input": "hi", **fields})


RESPONSE = "resp_" + "ab" * 16


def test_a_string_input_is_one_user_message_with_an_id_naming_its_response() -> None:
    (item,) = normalize_input("hello", RESPONSE)
    assert item["id"] == "msg_" + "ab" * 16 + "_in0"
    assert response_of_item(item["id"]) == RESPONSE
    assert item == {
        "id": item["id"],
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "hello"}],
        "status": "completed",
    }


def test_items_are_normalized_and_keep_given_ids() -> None:
    items = normalize_input(
        [
            {"role": "assistant", "content": "Hi!", "id": "msg_given"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]},
            {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": [{"type": "input_text", "text": "ok"}]},
        ],
        RESPONSE,
    )
    assert items[0]["id"] == "msg_given"
    assert items[0]["content"] == [{"type": "output_text", "text": "Hi!", "annotations": []}]
    assert items[2]["id"].startswith("fc_") and items[2]["status"] == "completed"
    assert items[3]["id"].startswith("fco_") and items[3]["output"] == "ok"


@pytest.mark.parametrize(
    ("value", "param"),
    [
        ([], "input"),
        ([{"role": "tool", "content": "x"}], "input.0.role"),
        ([{"role": "user", "content": 3}], "input.0.content"),
        ([{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}], "input.0.content.0.type"),
        ([{"role": "user", "content": [{"type": "input_text"}]}], "input.0.content.0.text"),
        ([{"type": "function_call", "call_id": "c", "name": "f"}], "input.0.arguments"),
        ([{"type": "function_call_output", "call_id": "c"}], "input.0.output"),
        ([{"type": "item_reference"}], "input.0.id"),
        ([{"role": "user", "content": "ok"}, {"type": "web_search_call"}], "input.1.type"),
    ],
)
def test_bad_items_name_the_exact_field(value: Any, param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        normalize_input(value, RESPONSE)
    assert info.value.param == param


def test_calls_join_the_assistant_message_before_them_and_outputs_are_tool_messages() -> None:
    items = normalize_input(
        [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": "Checking."},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": 1}'},
            {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "one"},
            {"type": "function_call_output", "call_id": "c2", "output": "two"},
            {"type": "function_call", "call_id": "c3", "name": "f", "arguments": "{}"},
        ],
        RESPONSE,
    )
    messages, sources = to_chat_messages(items)
    assert messages == [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
                {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c3", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
    ]
    assert sources == [0, 1, 4, 5, 6]


def test_text_parts_join_with_newlines_as_chat_joins_them() -> None:
    items = normalize_input(
        [{"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "text", "text": "b"}]}], RESPONSE
    )
    assert to_chat_messages(items)[0] == [{"role": "user", "content": "a\nb"}]


class DictStore:
    def __init__(self, *stored: StoredResponse) -> None:
        self.stored = {s.id: s for s in stored}

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def put(self, stored: StoredResponse) -> None:
        self.stored[stored.id] = stored

    async def get(self, response_id: str, owner: str) -> StoredResponse | None:
        found = self.stored.get(response_id)
        return found if found is not None and found.owner == owner else None

    async def delete(self, response_id: str, owner: str) -> bool:
        return self.stored.pop(response_id, None) is not None


def stored(response_id: str, previous: str | None, said: str, owner: str = "") -> StoredResponse:
    output = [
        {
            "id": f"msg_{said}",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": said}],
        }
    ]
    return StoredResponse(
        id=response_id,
        owner=owner,
        created_at=0.0,
        response={"id": response_id, "output": output},
        input_items=normalize_input(f"asked {said}", RESPONSE),
        previous_response_id=previous,
    )


async def test_history_is_the_chain_oldest_first_inputs_then_outputs() -> None:
    store = DictStore(stored("r1", None, "one"), stored("r2", "r1", "two"))
    items = history_items(await load_chain(store, "r2", "", max_depth=10))
    texts = [item["content"][0]["text"] for item in items]
    assert texts == ["asked one", "one", "asked two", "two"]
    assert history_items(await load_chain(store, None, "", max_depth=10)) == []


async def test_a_missing_link_another_owner_or_a_too_long_chain_is_a_400() -> None:
    store = DictStore(stored("r2", "r1", "two"), stored("r3", None, "three", owner="alice"))
    with pytest.raises(InvalidRequestError) as info:
        history_items(await load_chain(store, "r2", "", max_depth=10))
    assert info.value.code == "previous_response_not_found" and "'r1'" in info.value.message
    assert "earlier in the conversation of 'r2'" in info.value.message
    with pytest.raises(InvalidRequestError):
        history_items(await load_chain(store, "r3", "bob", max_depth=10))
    assert len(history_items(await load_chain(store, "r3", "alice", max_depth=10))) == 2
    long = DictStore(*(stored(f"r{i}", f"r{i - 1}" if i else None, str(i)) for i in range(5)))
    with pytest.raises(InvalidRequestError) as info:
        history_items(await load_chain(long, "r4", "", max_depth=3))
    assert info.value.param == "previous_response_id" and "more than 3" in info.value.message
    with pytest.raises(InvalidRequestError) as info:
        history_items(await load_chain(None, "r4", "", max_depth=3))
    assert "turned off" in info.value.message


def test_flat_function_tools_become_chats_nested_ones() -> None:
    tool = {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}, "strict": True}
    assert responses_tools([tool]).chat == [
        {
            "type": "function",
            "function": {"name": "f", "description": "d", "parameters": {"type": "object"}, "strict": True},
        }
    ]
    with pytest.raises(InvalidRequestError) as info:
        responses_tools([tool, {"type": "custom", "name": "patch"}])
    assert info.value.param == "tools.1.type" and "custom" in info.value.message


def test_built_in_tools_are_left_out_unless_tool_choice_asks_for_one() -> None:
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}}
    offered = responses_tools([tool, {"type": "web_search", "external_web_access": False}, {"type": "file_search"}])
    assert [t["function"]["name"] for t in offered.chat] == ["f"]
    assert offered.ignored == ("web_search", "file_search")
    with pytest.raises(InvalidRequestError) as info:
        responses_tools([tool, {"type": "web_search"}], {"type": "web_search"})
    assert info.value.param == "tool_choice.type"


def test_a_namespaces_functions_are_offered_under_their_names_and_answered_with_the_namespace() -> None:
    member = {"type": "function", "name": "close_agent", "parameters": {"type": "object"}}
    clash = {"type": "function", "name": "spawn", "parameters": {"type": "object"}}
    namespace = {"type": "namespace", "name": "agents", "description": "d", "tools": [member, clash]}
    offered = responses_tools([clash, namespace])
    assert [t["function"]["name"] for t in offered.chat] == ["spawn", "close_agent", "agents__spawn"]
    assert offered.namespaced == {"close_agent": ("agents", "close_agent"), "agents__spawn": ("agents", "spawn")}
    assert offered.model_name("agents", "spawn") == "agents__spawn"
    assert offered.model_name("other", "x") == "x"
    with pytest.raises(InvalidRequestError) as info:
        responses_tools([{"type": "namespace", "name": "n", "tools": [{"type": "custom", "name": "c"}]}])
    assert info.value.param == "tools.0.tools.0.type"


def test_sealed_reasoning_reaches_the_model_and_a_foreign_blob_falls_back_to_the_items_text() -> None:
    seal = ReasoningSeal(["k"])
    offered = responses_tools([])
    sealed = {"type": "reasoning", "content": [{"type": "reasoning_text", "text": ""}], "encrypted_content": ""}
    good = {**sealed, "encrypted_content": seal.seal("I thought", "m")}
    other_model = {**sealed, "encrypted_content": seal.seal("I thought", "n")}
    foreign = {**sealed, "content": [{"type": "reasoning_text", "text": "plain"}], "encrypted_content": "x" * 40}
    out = for_model([good, other_model, foreign], offered, seal, "m")
    assert [item["content"][0]["text"] for item in out] == ["I thought", "", "plain"]


@pytest.mark.parametrize(
    ("given", "chat"),
    [
        (None, None),
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        ({"type": "function", "name": "f"}, {"type": "function", "function": {"name": "f"}}),
        ({"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}),
    ],
)
def test_tool_choice_maps_to_chats(given: Any, chat: Any) -> None:
    assert chat_tool_choice(given) == chat


@pytest.mark.parametrize(
    ("given", "param"),
    [
        ({"type": "allowed_tools", "tools": []}, "tool_choice"),
        ({"type": "function"}, "tool_choice.name"),
        ("any", "tool_choice"),
    ],
)
def test_other_tool_choices_are_refused(given: Any, param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        chat_tool_choice(given)
    assert info.value.param == param


def test_text_format_becomes_response_format() -> None:
    def fmt(value: dict[str, Any]) -> Any:
        return chat_response_format(request(text={"format": value}).text)

    assert fmt({"type": "text"}) is None and chat_response_format(None) is None
    assert fmt({"type": "json_object"}) == {"type": "json_object"}
    assert fmt({"type": "json_schema", "name": "p", "schema": {"type": "object"}, "strict": True}) == {
        "type": "json_schema",
        "json_schema": {"name": "p", "schema": {"type": "object"}, "strict": True},
    }


def test_the_chat_request_carries_the_same_meaning() -> None:
    body = request(
        max_output_tokens=7,
        temperature=0.5,
        top_p=0.9,
        tools=[],
        tool_choice="auto",
        seed=3,
        top_k=5,
        user="u",
        stream=True,
    )
    chat = to_chat_request(body, [{"role": "user", "content": "hi"}])
    assert (chat.max_completion_tokens, chat.temperature, chat.top_p, chat.seed, chat.top_k) == (7, 0.5, 0.9, 3, 5)
    assert chat.tools is None and chat.tool_choice is None  # no tools: no choice to make
    assert chat.stream and chat.user == "u" and chat.n == 1


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"background": True, "store": False}, "background"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"truncation": "auto"}, "truncation"),
        ({"include": ["reasoning.encrypted_content", "message.output_text.logprobs"]}, "include.1"),
    ],
)
def test_fields_the_gateway_cannot_honour_are_refused_by_name(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        check_supported(request(**fields))
    assert info.value.param == param


def test_empty_option_objects_ask_for_nothing() -> None:
    check_supported(
        request(
            reasoning={"effort": None}, background=False, truncation="disabled", include=["reasoning.encrypted_content"]
        )
    )


@pytest.mark.parametrize(
    ("chat", "responses"),
    [
        (None, None),
        ("messages", "input"),
        ("messages.0", "instructions"),
        ("messages.1", "previous_response_id"),
        ("messages.2.tool_calls.0.function.arguments", "input.0"),
        ("messages.9", "input"),
        ("max_completion_tokens", "max_output_tokens"),
        ("max_tokens", "max_output_tokens"),
        ("response_format", "text.format"),
        ("tools.2.function.name", "tools.2.name"),
        ("tools.0.function", "tools.0"),
        ("tool_choice.function.name", "tool_choice.name"),
        ("tool_choice", "tool_choice"),
        ("temperature", "temperature"),
    ],
)
def test_chats_field_names_become_the_responses_ones(chat: str | None, responses: str | None) -> None:
    assert responses_param(chat, ["instructions", "previous_response_id", "input.0"]) == responses


def test_the_head_echoes_the_request() -> None:
    body = request(
        instructions="be brief",
        metadata={"k": "v"},
        tools=[{"type": "function", "name": "f"}],
        text={"format": {"type": "json_schema", "name": "p", "schema": {"type": "object"}}, "verbosity": "low"},
        parallel_tool_calls=False,
    )
    head = response_head(body, "resp_1", 5, True)
    assert head["instructions"] == "be brief" and head["metadata"] == {"k": "v"} and head["store"] is True
    assert head["tool_choice"] == "auto" and head["tools"] == [{"type": "function", "name": "f"}]
    assert head["text"] == {
        "format": {"type": "json_schema", "name": "p", "schema": {"type": "object"}},
        "verbosity": "low",
    }
    assert head["parallel_tool_calls"] is False and head["status"] == "in_progress" and head["truncation"] == "disabled"
    assert response_head(request(), "resp_2", 5, False)["text"] == {"format": {"type": "text"}}


def stored_with_ids(response_id: str, owner: str = "") -> StoredResponse:
    """A response as the gateway stores it: its items' ids name it (``item_id_of``)."""
    hexes = response_id.removeprefix("resp_")
    output = [{"id": f"msg_{hexes}_0", "type": "message", "role": "assistant", "content": [_said("hello")]}]
    return StoredResponse(
        id=response_id,
        owner=owner,
        created_at=0.0,
        response={"id": response_id, "output": output},
        input_items=normalize_input("hi", response_id),
        previous_response_id=None,
    )


def _said(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


async def test_a_reference_is_replaced_by_the_stored_item_it_names() -> None:
    first = "resp_" + "cd" * 16
    store = DictStore(stored_with_ids(first, owner="key"))
    items = normalize_input(
        [
            {"type": "item_reference", "id": "msg_" + "cd" * 16 + "_in0"},
            {"type": "item_reference", "id": "msg_" + "cd" * 16 + "_0"},
            {"role": "user", "content": "and now?"},
        ],
        RESPONSE,
    )
    resolved = await resolve_references(items, [], store, "key")  # type: ignore[arg-type]
    assert [m["content"] for m in to_chat_messages(resolved)[0]] == ["hi", "hello", "and now?"]
    assert resolved[1]["id"] == "msg_" + "cd" * 16 + "_0"


async def test_a_reference_in_the_chain_needs_no_store_read() -> None:
    history = [{"id": "msg_x", "type": "message", "role": "assistant", "content": [_said("from chain")]}]
    items = normalize_input([{"type": "item_reference", "id": "msg_x"}], RESPONSE)
    assert (await resolve_references(items, history, None, ""))[0] == history[0]


@pytest.mark.parametrize("item_id", ["msg_" + "cd" * 16 + "_7", "msg_unknown", "msg_" + "ef" * 16 + "_0"])
async def test_an_unknown_or_another_keys_item_is_a_400_naming_it(item_id: str) -> None:
    store = DictStore(stored_with_ids("resp_" + "cd" * 16, owner="key"), stored_with_ids("resp_" + "ef" * 16, "other"))
    items = normalize_input([{"role": "user", "content": "x"}, {"type": "item_reference", "id": item_id}], RESPONSE)
    with pytest.raises(InvalidRequestError) as info:
        await resolve_references(items, [], store, "key")  # type: ignore[arg-type]
    assert (info.value.param, info.value.message) == ("input.1.id", f"Item with id '{item_id}' not found.")


async def test_a_reference_with_the_store_off_says_why() -> None:
    items = normalize_input([{"type": "item_reference", "id": "msg_" + "cd" * 16 + "_0"}], RESPONSE)
    with pytest.raises(InvalidRequestError) as info:
        await resolve_references(items, [], None, "")
    assert info.value.param == "input.0.id" and "storing responses is turned off" in info.value.message
