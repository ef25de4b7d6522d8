"""What coding agents (Claude Code) send on the Messages API: adaptive thinking and its display,
effort, sealed thinking signatures, system turns, deferred tools, context edits, and a
``max_tokens`` larger than the context leaves."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.anthropic.encode import MessageEncoder, MessageOptions
from gateway.core.assemble import ChoiceEvent, Usage
from gateway.errors import InvalidRequestError
from gateway.http.sse import event_framing
from gateway.plan.context_edits import (
    CLEARED_RESULT,
    check_edits,
    clear_thinking,
    clear_tool_uses,
    thinking_keep,
    tool_use_edit,
    tool_uses_over,
)
from gateway.plan.messages import check_thinking, loaded_tools, to_chat_request
from gateway.plan.messages_request import AnthropicMessage, MessagesRequest
from gateway.reasoning.seal import ReasoningSeal
from tests.unit.test_messages_encode import parse

SEAL = ReasoningSeal(["unit-test secret"])


def request(**fields: Any) -> MessagesRequest:
    return MessagesRequest.model_validate({"model": "m", "max_tokens": 32000, **fields})


def test_adaptive_thinking_needs_no_budget_and_turns_the_templates_switch_on() -> None:
    body = request(
        messages=[{"role": "user", "content": "hi"}],
        thinking={"type": "adaptive", "display": "omitted"},
        output_config={"effort": "high"},
    )
    check_thinking(body)
    chat, _ = to_chat_request(body, SEAL)
    assert chat.chat_template_kwargs == {"enable_thinking": True, "thinking": True} and chat.include_reasoning
    assert chat.reasoning_effort == "high"
    forced = request(
        messages=[{"role": "user", "content": "hi"}], thinking={"type": "adaptive"}, tool_choice={"type": "any"}
    )
    with pytest.raises(InvalidRequestError) as info:
        check_thinking(forced)
    assert info.value.param == "tool_choice.type"


def test_output_config_format_is_a_json_schema_response_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    body = request(
        messages=[{"role": "user", "content": "hi"}],
        output_config={"format": {"type": "json_schema", "schema": schema}},
    )
    chat, _ = to_chat_request(body, SEAL)
    assert (
        chat.response_format is not None
        and chat.response_format.model_dump(exclude_none=True)["json_schema"]["schema"] == schema
    )
    with pytest.raises(InvalidRequestError) as info:
        to_chat_request(
            request(messages=[{"role": "user", "content": "hi"}], output_config={"format": {"type": "xml"}}), SEAL
        )
    assert info.value.param == "output_config.format"


def test_a_system_turn_inside_messages_stays_where_it_was_sent() -> None:
    body = request(
        system="S",
        messages=[
            {"role": "user", "content": "a"},
            {"role": "system", "content": [{"type": "text", "text": "env", "cache_control": {"type": "ephemeral"}}]},
            {"role": "user", "content": "b"},
        ],
    )
    chat, origins = to_chat_request(body, SEAL)
    assert [(m.role, m.content) for m in chat.messages] == [
        ("system", "S"),
        ("user", "a"),
        ("system", "env"),
        ("user", "b"),
    ]
    assert origins == ["system", "messages.0", "messages.1", "messages.2"]


def _thinking_turn(thinking: str, signature: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": thinking, "signature": signature}, {"type": "text", "text": "ok"}],
    }


def test_a_sealed_signature_gives_back_the_thinking_even_emptied_and_a_foreign_one_keeps_the_text() -> None:
    sealed = SEAL.seal("the real thought", "m")
    for thinking, signature, expected in [
        ("", sealed, "the real thought"),  # display omitted: the block comes back empty
        ("edited by the client", sealed, "the real thought"),
        ("from elsewhere", "EuYBCkQYAiJA", "from elsewhere"),  # another server's signature
        ("other model", SEAL.seal("x", "other"), "other model"),
    ]:
        body = request(
            messages=[
                {"role": "user", "content": "q"},
                _thinking_turn(thinking, signature),
                {"role": "user", "content": "again"},
            ]
        )
        chat, _ = to_chat_request(body, SEAL)
        assert chat.messages[1].model_dump()["reasoning"] == expected


def test_deferred_tools_cost_nothing_until_a_tool_reference_loads_them() -> None:
    tools = [
        {"name": "Bash", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}},
        {"name": "WebFetch", "input_schema": {"type": "object"}, "defer_loading": True},
        {"name": "Cron", "input_schema": {"type": "object"}, "defer_loading": True},
    ]
    first = request(messages=[{"role": "user", "content": "q"}], tools=tools)
    chat, _ = to_chat_request(first, SEAL)
    assert [t["function"]["name"] for t in chat.tools or ()] == ["Bash"]
    search = {"type": "tool_use", "id": "toolu_1", "name": "ToolSearch", "input": {"query": "select:WebFetch"}}
    found = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [{"type": "tool_reference", "tool_name": "WebFetch"}],
    }
    later = request(
        messages=[
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [search]},
            {"role": "user", "content": [found]},
        ],
        tools=tools,
    )
    assert loaded_tools(later.messages) == {"WebFetch"}
    chat, _ = to_chat_request(later, SEAL)
    assert [t["function"]["name"] for t in chat.tools or ()] == ["Bash", "WebFetch"]
    assert chat.messages[-1].model_dump()["content"] == "Tool loaded: WebFetch"


def _turns(*messages: dict[str, Any]) -> list[AnthropicMessage]:
    return [AnthropicMessage.model_validate(m) for m in messages]


def test_clear_thinking_keeps_the_last_turns_thinking() -> None:
    turns = _turns(
        {"role": "user", "content": "1"},
        _thinking_turn("t1", "s"),
        {"role": "user", "content": "2"},
        _thinking_turn("t2", "s"),
        {"role": "user", "content": "3"},
        _thinking_turn("t3", "s"),
    )
    kept, cleared = clear_thinking(turns, thinking_keep({"type": "clear_thinking_20251015"}, "e"))
    assert cleared == 2
    assert [[b["type"] for b in m.content] for m in kept if m.role == "assistant"] == [
        ["text"],
        ["text"],
        ["thinking", "text"],
    ]
    assert clear_thinking(turns, thinking_keep({"keep": "all"}, "e")) == (turns, 0)
    two = thinking_keep({"keep": {"type": "thinking_turns", "value": 2}}, "e")
    assert clear_thinking(turns, two)[1] == 1


def test_clear_tool_uses_past_its_trigger_keeps_the_last_and_the_excluded() -> None:
    turns: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for index, name in enumerate(["Read", "Bash", "Read", "Bash"]):
        use = {"type": "tool_use", "id": f"u{index}", "name": name, "input": {"n": index}}
        turns.append({"role": "assistant", "content": [use]})
        turns.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"u{index}", "content": f"out{index}"}]}
        )
    messages = _turns(*turns)
    rule = tool_use_edit(
        {
            "trigger": {"type": "tool_uses", "value": 3},
            "keep": {"type": "tool_uses", "value": 1},
            "exclude_tools": ["Bash"],
            "clear_tool_inputs": True,
        },
        "e",
    )
    assert tool_uses_over(messages, rule, 0)
    edited, cleared = clear_tool_uses(messages, rule)
    assert cleared == 2  # u0 and u2 (Read); u1 is a Bash use, u3 the last one
    results = [
        b["content"]
        for m in edited
        for b in m.content
        if isinstance(m.content, list) and b.get("type") == "tool_result"
    ]
    assert results == [CLEARED_RESULT, "out1", CLEARED_RESULT, "out3"]
    inputs = [
        b["input"] for m in edited for b in m.content if isinstance(m.content, list) and b.get("type") == "tool_use"
    ]
    assert inputs == [{}, {"n": 1}, {}, {"n": 3}]
    token_rule = tool_use_edit({"type": "clear_tool_uses_20250919"}, "e")
    assert not tool_uses_over(messages, token_rule, 99_999) and tool_uses_over(messages, token_rule, 100_001)


@pytest.mark.parametrize(
    ("edits", "param"),
    [
        ([{"type": "clear_everything"}], "context_management.edits.0.type"),
        (
            [{"type": "clear_tool_uses_20250919"}, {"type": "clear_thinking_20251015"}],
            "context_management.edits.1.type",
        ),
        (
            [{"type": "clear_thinking_20251015", "keep": {"type": "turns", "value": 1}}],
            "context_management.edits.0.keep",
        ),
        (
            [{"type": "clear_tool_uses_20250919", "keep": {"type": "tool_uses", "value": -1}}],
            "context_management.edits.0.keep.value",
        ),
    ],
)
def test_bad_context_edits_are_400s_naming_the_field(edits: list[dict[str, Any]], param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        check_edits(edits)
    assert info.value.param == param


def test_omitted_thinking_streams_no_text_and_its_signature_opens_to_it() -> None:
    options = MessageOptions(
        seal=SEAL, show_thinking=False, window_limited=True, context_management={"applied_edits": []}
    )
    encoder = MessageEncoder("msg_1", "m", event_framing, options)
    raw = encoder.opening(3) + encoder.events([ChoiceEvent(0, "", None, None, None, "secret thought")])
    raw += encoder.events([ChoiceEvent(0, "answer", None, None, None, "")])
    closing, message = encoder.closing("length", None, Usage(3, 4))
    events = parse(raw + closing)
    deltas = [data["delta"]["type"] for name, data in events if name == "content_block_delta"]
    assert deltas == ["signature_delta", "text_delta"]
    thinking = message["content"][0]
    assert thinking["thinking"] == "" and SEAL.open(thinking["signature"], "m") == "secret thought"
    assert message["stop_reason"] == "model_context_window_exceeded"
    assert message["context_management"] == {"applied_edits": []}
    delta = next(data for name, data in events if name == "message_delta")
    assert delta["delta"]["stop_reason"] == "model_context_window_exceeded" and delta["context_management"] == {
        "applied_edits": []
    }
