"""An Anthropic Messages request → the chat request it means (``plan/messages.py``): pure mapping,
the thinking rules, and chat's field names renamed back."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.backend.types import GenerationRequest
from gateway.core.generation_plan import GenerationPlan
from gateway.errors import InvalidRequestError
from gateway.plan.messages import (
    chat_tool_choice,
    check_thinking,
    cut_stops_here,
    messages_param,
)
from gateway.plan.messages import to_chat_request as plan_chat_request
from gateway.plan.messages_request import MessagesCountRequest, MessagesRequest
from gateway.plan.requests import ChatCompletionRequest
from gateway.reasoning.seal import ReasoningSeal

SEAL = ReasoningSeal(["unit-test secret"])


def to_chat_request(body: MessagesCountRequest) -> tuple[ChatCompletionRequest, list[str]]:
    return plan_chat_request(body, SEAL)


def request(**fields: Any) -> MessagesRequest:
    return MessagesRequest.model_validate({"model": "m", "max_tokens": 100, **fields})


def test_system_blocks_and_turns_become_chat_messages() -> None:
    body = request(
        system=[{"type": "text", "text": "Be"}, {"type": "text", "text": "brief."}],
        messages=[
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Need a tool.", "signature": "x"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Zürich"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "21 C"},
                    {"type": "text", "text": "Thanks"},
                ],
            },
        ],
    )
    chat, origins = to_chat_request(body)
    messages = [m.model_dump(exclude_none=True) for m in chat.messages]
    assert messages == [
        {"role": "system", "content": "Be\nbrief."},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "reasoning": "Need a tool.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": json.dumps({"city": "Zürich"})},
                }
            ],
        },
        {"role": "tool", "content": "21 C", "tool_call_id": "toolu_1"},
        {"role": "user", "content": [{"type": "text", "text": "Thanks"}]},
    ]
    assert origins == ["system", "messages.0", "messages.1", "messages.2", "messages.2"]
    assert chat.add_generation_prompt and not chat.continue_final_message


def test_sampling_fields_map_to_chats() -> None:
    body = request(
        messages=[{"role": "user", "content": "hi"}],
        stop_sequences=["END", ""],
        temperature=0.5,
        top_p=0.9,
        top_k=40,
        metadata={"user_id": "u-1"},
        stream=True,
    )
    chat, _ = to_chat_request(body)
    assert (chat.max_tokens, chat.temperature, chat.top_p, chat.top_k) == (100, 0.5, 0.9, 40)
    assert chat.stop == ["END"] and chat.include_stop_str_in_output  # cut by the gateway, which names it
    assert chat.user == "u-1" and chat.stream
    assert chat.include_reasoning is False and chat.chat_template_kwargs is None


def test_a_last_assistant_turn_is_a_prefill() -> None:
    chat, _ = to_chat_request(
        request(messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "The answer is"}])
    )
    assert chat.continue_final_message and not chat.add_generation_prompt


def test_images_become_chat_image_parts() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}
    chat, _ = to_chat_request(request(messages=[{"role": "user", "content": [image, {"type": "text", "text": "?"}]}]))
    content = chat.messages[0].model_dump()["content"]
    assert content[0] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}


def test_tools_and_choices_map_to_chats() -> None:
    tool = {"name": "f", "description": "d", "input_schema": {"type": "object"}}
    chat, _ = to_chat_request(
        request(
            messages=[{"role": "user", "content": "hi"}],
            tools=[tool],
            tool_choice={"type": "any", "disable_parallel_tool_use": True},
        )
    )
    assert chat.tools == [
        {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}
    ]
    assert chat.tool_choice == "required" and chat.parallel_tool_calls is False
    assert chat_tool_choice({"type": "tool", "name": "f"}, True) == (
        {"type": "function", "function": {"name": "f"}},
        None,
    )
    assert chat_tool_choice({"type": "auto"}, False) == (None, None)
    assert chat_tool_choice({"type": "none"}, True) == ("none", None)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0.type"),
        ({"tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
        ({"tool_choice": {"type": "tool"}}, "tool_choice.name"),
        (
            {"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
            "messages.0.content.0.type",
        ),
        ({"messages": [{"role": "user", "content": [{"text": "no type"}]}]}, "messages.0.content.0"),
        (
            {
                "messages": [
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": 3}]}
                ]
            },
            "messages.0.content.0.input",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}]},
            "messages.0.content.0.source.type",
        ),
        ({"system": [{"type": "image"}]}, "system.0.type"),
    ],
)
def test_unsupported_blocks_and_options_are_400s_naming_the_field(fields: dict[str, Any], param: str) -> None:
    body = request(**{"messages": [{"role": "user", "content": "hi"}], **fields})
    with pytest.raises(InvalidRequestError) as info:
        to_chat_request(body)
    assert info.value.param == param


def test_thinking_sets_the_template_switches_and_shows_reasoning() -> None:
    on, _ = to_chat_request(
        request(messages=[{"role": "user", "content": "hi"}], thinking={"type": "enabled", "budget_tokens": 1024})
    )
    off, _ = to_chat_request(request(messages=[{"role": "user", "content": "hi"}], thinking={"type": "disabled"}))
    assert on.chat_template_kwargs == {"enable_thinking": True, "thinking": True} and on.include_reasoning
    assert off.chat_template_kwargs == {"enable_thinking": False, "thinking": False} and not off.include_reasoning


@pytest.mark.parametrize(
    ("thinking", "extra", "param"),
    [
        ({"type": "enabled"}, {}, "thinking.budget_tokens"),
        ({"type": "enabled", "budget_tokens": 1023}, {}, "thinking.budget_tokens"),
        ({"type": "enabled", "budget_tokens": 2000}, {"max_tokens": 2000}, "thinking.budget_tokens"),
        (
            {"type": "enabled", "budget_tokens": 1024},
            {"max_tokens": 4096, "tool_choice": {"type": "any"}},
            "tool_choice.type",
        ),
    ],
)
def test_thinking_rules_are_anthropics(thinking: dict[str, Any], extra: dict[str, Any], param: str) -> None:
    body = request(**{"messages": [{"role": "user", "content": "hi"}], "thinking": thinking, **extra})
    with pytest.raises(InvalidRequestError) as info:
        check_thinking(body)
    assert info.value.param == param


def test_thinking_without_max_tokens_is_checked_for_counting() -> None:
    def count_request(thinking: dict[str, Any], **extra: Any) -> MessagesCountRequest:
        return MessagesCountRequest.model_validate(
            {"model": "m", "messages": [{"role": "user", "content": "hi"}], "thinking": thinking, **extra}
        )

    large = {"type": "enabled", "budget_tokens": 99999}
    assert check_thinking(count_request(large)) is None  # no max_tokens to stay under: accepted
    with pytest.raises(InvalidRequestError) as info:  # the same budget is refused where max_tokens is below it
        check_thinking(request(messages=[{"role": "user", "content": "hi"}], thinking=large, max_tokens=4096))
    assert info.value.param == "thinking.budget_tokens"
    refused = [
        (count_request({"type": "enabled", "budget_tokens": 1023}), "thinking.budget_tokens"),
        (count_request({"type": "enabled"}), "thinking.budget_tokens"),
        (count_request(large, tool_choice={"type": "any"}), "tool_choice.type"),
    ]
    for body, param in refused:  # every other rule still holds for a count
        with pytest.raises(InvalidRequestError) as info:
            check_thinking(body)
        assert info.value.param == param


@pytest.mark.parametrize(
    ("chat", "messages"),
    [
        ("max_completion_tokens", "max_tokens"),
        ("stop", "stop_sequences"),
        ("stop.1", "stop_sequences.1"),
        ("user", "metadata.user_id"),
        ("chat_template_kwargs", "thinking"),
        ("tools.2.function.parameters", "tools.2.input_schema"),
        ("tools.2.function.name", "tools.2.name"),
        ("tool_choice.function.name", "tool_choice.name"),
        ("messages.3.content", "messages.1"),
        ("messages.9", "messages"),
        ("model", "model"),
        (None, None),
    ],
)
def test_chat_param_names_are_renamed_back(chat: str | None, messages: str | None) -> None:
    assert messages_param(chat, ["system", "messages.0", "messages.0", "messages.1"]) == messages


def plan_with(sampling: dict[str, Any]) -> GenerationPlan:
    request = GenerationRequest(request_id="r", model="m", prompt="p", sampling=sampling)
    return GenerationPlan(
        requests=(request,),
        request_id="r",
        chat=True,
        stream=False,
        model_id="m",
        adapter=None,
        completion_id="c",
        created=0,
        n=1,
        stops=("END",),
        include_stop=True,
        max_tokens=(10,),
        include_usage=False,
        continuous_usage=False,
    )


def test_the_backend_keeps_the_stop_and_the_gateway_cuts_it() -> None:
    plan = cut_stops_here(plan_with({"stop": ["END"], "include_stop_str_in_output": True}))
    assert plan.include_stop is False and plan.stops == ("END",)
    assert plan.requests[0].sampling["include_stop_str_in_output"] is True


def test_where_special_tokens_are_kept_the_backend_cuts_the_stop_itself() -> None:
    sampling = {"stop": ["END"], "include_stop_str_in_output": True, "skip_special_tokens": False}
    plan = cut_stops_here(plan_with(sampling))
    assert plan.include_stop is False
    assert plan.requests[0].sampling == {"stop": ["END"], "skip_special_tokens": False}
