"""What coding-agent CLIs send, through the real Triton path, with the official ``anthropic`` and
``openai`` SDKs and raw HTTP, streamed and not.

Messages API (Claude Code): adaptive thinking shown as ``display: "omitted"`` (empty thinking
blocks whose ``signature`` seals the text), that block sent back giving the template the model's
own thinking, a forged or altered signature giving it nothing, ``system`` turns inside
``messages``, deferred tools, ``context_management`` edits, ``output_config``, and a ``max_tokens``
of 32000 on a model with a small context. Responses API (Codex CLI): ``namespace`` tools,
built-in tools left out, ``reasoning.encrypted_content`` carried by a client with ``store: false``,
and ``reasoning.summary`` events.

One gateway serves the scripted model with the qwen3 reasoning parser, the hermes tool parser, a
template that shows what the tests look for (the tools offered, the reasoning sent back, each
turn's role and calls) and a 2048-token context; its reasoning secret is set, with an older one
that still opens.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from gateway.reasoning.seal import ReasoningSeal
from gateway.triton_launcher import TritonServer
from tests.integration.conftest import GatewayProcess, start_gateway, stop_gateway

SCRIPTED = "scripted"
CONTEXT = 2048
"""The scripted model's context here (``model_files``' ``max_model_len``)."""
SECRET, OLD_SECRET = "agent-tests secret", "agent-tests older secret"
TEMPLATE = (
    "{%- for t in tools or [] %}[tool:{{ t.function.name }}]{% endfor %}"
    "{%- if reasoning_effort is defined and reasoning_effort %}[effort:{{ reasoning_effort }}]{% endif %}"
    "{%- for m in messages %}<{{ m.role }}>"
    "{%- if m.reasoning_content %}[reasoning:{{ m.reasoning_content }}]{% endif %}"
    "{{- m.content or '' }}"
    "{%- for c in m.tool_calls or [] %}[call:{{ c.function.name }}]{% endfor %}"
    "{%- endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)
"""Shows the tools offered, the effort, and per turn its role, the reasoning sent back, its text
and the names of its calls."""
THOUGHT = "Weigh 2+2 — 東京 🙂"
ECHO = "<script>" + json.dumps({"echo_inputs": True}) + "</script>"
"""The scripted model answers one JSON object of what it received (``text_input``: the prompt)."""


def script(*pieces: str, finish: str = "stop") -> str:
    """A scripted reply, one response per piece, the last finishing with ``finish``."""
    responses: list[dict[str, Any]] = [{"utf8": [piece]} for piece in pieces]
    responses[-1]["finish_reason"] = [finish]
    return "<script>" + json.dumps({"responses": responses, "num_input_tokens": 7}) + "</script>"


THINKING_REPLY = script("<think>", THOUGHT, "</think>", "It is 4.")


@pytest.fixture(scope="module")
def agent_gateway(triton: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    folder = tmp_path_factory.mktemp("gateway-agents")
    template = folder / "template.jinja"
    template.write_text(TEMPLATE)
    entry = {
        "reasoning_parser": "qwen3",
        "tool_call_parser": "hermes",
        "chat_template": str(template),
        "max_model_len": CONTEXT,
    }
    env = {"GATEWAY_MODEL_FILES": json.dumps({SCRIPTED: entry}), "GATEWAY_REASONING_SECRET": f"{SECRET},{OLD_SECRET}"}
    process = start_gateway(triton.grpc_url, folder / "gateway.log", env=env)
    yield process
    stop_gateway(process)


@pytest.fixture(scope="module")
def claude(agent_gateway: GatewayProcess) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=agent_gateway.url, api_key="unused", max_retries=0, timeout=60) as sdk:
        yield sdk


@pytest.fixture(scope="module")
def codex(agent_gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=agent_gateway.url + "/v1", api_key="unused", max_retries=0, timeout=60) as sdk:
        yield sdk


def echoed(text: str) -> dict[str, Any]:
    """What Triton received, from an ``ECHO`` reply's text."""
    return dict(json.loads(text))


def message_prompt(message: Any) -> str:
    """The prompt Triton received, from a Messages answer to ``ECHO``."""
    texts = [block.text for block in message.content if block.type == "text"]
    return str(echoed("".join(texts))["text_input"])


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


# -- Messages: raw SSE -----------------------------------------------------------------------------


def message_events(gateway: GatewayProcess, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A raw Messages stream: (event name, data) pairs, each name its data's type."""
    events = []
    with httpx.stream("POST", gateway.url + "/v1/messages", json={**body, "stream": True}, timeout=60) as response:
        assert response.status_code == 200, response.read()
        name = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                assert data["type"] == name
                events.append((name, data))
    return events


# -- Messages: adaptive thinking and its sealed signature ------------------------------------------


ADAPTIVE_OMITTED = {"type": "adaptive", "display": "omitted"}


def test_adaptive_thinking_omitted_gives_empty_thinking_with_a_signature(
    claude: anthropic.Anthropic, agent_gateway: GatewayProcess
) -> None:
    args: dict[str, Any] = {
        "model": SCRIPTED,
        "max_tokens": 1024,
        "messages": [user(THINKING_REPLY)],
        "thinking": ADAPTIVE_OMITTED,
    }
    message = claude.messages.create(**args)
    assert [block.type for block in message.content] == ["thinking", "text"]
    block = message.content[0]
    assert block.type == "thinking" and block.thinking == "" and block.signature
    assert THOUGHT not in block.signature, "the signature hides the text"
    assert message.content[1].type == "text" and message.content[1].text == "It is 4."
    assert message.stop_reason == "end_turn"
    with claude.messages.stream(**args) as stream:
        final = stream.get_final_message()
    streamed = final.content[0]
    assert streamed.type == "thinking" and streamed.thinking == "" and streamed.signature
    assert final.content[1].type == "text" and final.content[1].text == "It is 4."
    events = message_events(agent_gateway, args)
    deltas = [data["delta"]["type"] for name, data in events if name == "content_block_delta"]
    assert "thinking_delta" not in deltas and deltas.count("signature_delta") == 1
    start = next(data for name, data in events if name == "content_block_start")
    assert start["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    # Summarized (and adaptive without display): the text itself.
    shown = claude.messages.create(**{**args, "thinking": {"type": "adaptive", "display": "summarized"}})
    assert shown.content[0].type == "thinking" and shown.content[0].thinking == THOUGHT
    assert claude.messages.create(**{**args, "thinking": {"type": "adaptive"}}).content[0].thinking == THOUGHT  # type: ignore[union-attr]


def _sent_back(thinking: str, signature: str) -> list[dict[str, Any]]:
    """A conversation whose assistant turn carries one thinking block, then an ``ECHO`` turn."""
    return [
        user(THINKING_REPLY),
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": thinking, "signature": signature},
                {"type": "text", "text": "It is 4."},
            ],
        },
        user(ECHO),
    ]


def _omitted_signature(claude: anthropic.Anthropic) -> str:
    message = claude.messages.create(
        model=SCRIPTED, max_tokens=1024, messages=[user(THINKING_REPLY)], thinking=ADAPTIVE_OMITTED
    )
    block = message.content[0]
    assert block.type == "thinking" and block.thinking == ""
    return block.signature


def test_an_omitted_thinking_block_sent_back_gives_the_template_the_thinking(
    claude: anthropic.Anthropic, agent_gateway: GatewayProcess
) -> None:
    signature = _omitted_signature(claude)
    messages = _sent_back("", signature)
    prompt = message_prompt(claude.messages.create(model=SCRIPTED, max_tokens=1024, messages=messages))  # type: ignore[arg-type]
    assert f"<assistant>[reasoning:{THOUGHT}]It is 4.<user>{ECHO}<assistant>" in prompt, prompt
    # The streamed answer's block, sent back as the SDK assembled it, opens the same way.
    with claude.messages.stream(
        model=SCRIPTED, max_tokens=1024, messages=[user(THINKING_REPLY)], thinking=ADAPTIVE_OMITTED
    ) as stream:
        block = stream.get_final_message().content[0]
    assert block.type == "thinking"
    again = [
        messages[0],
        {"role": "assistant", "content": [block.model_dump(), {"type": "text", "text": "x"}]},
        user(ECHO),
    ]
    body = {"model": SCRIPTED, "max_tokens": 1024, "messages": again}
    raw = httpx.post(agent_gateway.url + "/v1/messages", json=body, timeout=60)
    assert raw.status_code == 200, raw.text
    assert f"[reasoning:{THOUGHT}]x" in echoed(raw.json()["content"][0]["text"])["text_input"]
    # The client's edit of the text does not change what the model thought.
    edited = claude.messages.create(model=SCRIPTED, max_tokens=1024, messages=_sent_back("I was told to", signature))  # type: ignore[arg-type]
    assert f"[reasoning:{THOUGHT}]" in message_prompt(edited) and "I was told to" not in message_prompt(edited)


def test_a_forged_or_altered_signature_injects_nothing(claude: anthropic.Anthropic) -> None:
    signature = _omitted_signature(claude)
    middle = len(signature) // 2
    altered = signature[:middle] + ("A" if signature[middle] != "A" else "B") + signature[middle + 1 :]
    forged = ReasoningSeal(["a secret this gateway does not have"]).seal("INJECTED", SCRIPTED)
    other_model = ReasoningSeal([SECRET]).seal("INJECTED", "tiny-llm")
    for bad in (altered, forged, other_model, "EuYBCkQYAiJA"):
        prompt = message_prompt(
            claude.messages.create(model=SCRIPTED, max_tokens=1024, messages=_sent_back("", bad))  # type: ignore[arg-type]
        )
        assert THOUGHT not in prompt and "INJECTED" not in prompt and "[reasoning:" not in prompt, (bad, prompt)
        assert "<assistant>It is 4.<user>" in prompt
    # A blob sealed with the older secret, still listed, opens (rotation).
    rotated = ReasoningSeal([OLD_SECRET]).seal("sealed before the rotation", SCRIPTED)
    prompt = message_prompt(claude.messages.create(model=SCRIPTED, max_tokens=1024, messages=_sent_back("", rotated)))  # type: ignore[arg-type]
    assert "[reasoning:sealed before the rotation]" in prompt


# -- Messages: the conversation and its tools --------------------------------------------------------


def test_a_system_turn_inside_messages_reaches_the_prompt_where_it_was_sent(
    claude: anthropic.Anthropic, agent_gateway: GatewayProcess
) -> None:
    messages = [
        user("first"),
        {"role": "assistant", "content": "ok"},
        {"role": "system", "content": [{"type": "text", "text": "cwd: /repo", "cache_control": {"type": "ephemeral"}}]},
        user(ECHO),
    ]
    message = claude.messages.create(model=SCRIPTED, max_tokens=1024, system="Top rules.", messages=messages)  # type: ignore[arg-type]
    prompt = message_prompt(message)
    assert prompt == f"<system>Top rules.<user>first<assistant>ok<system>cwd: /repo<user>{ECHO}<assistant>", prompt
    events = message_events(agent_gateway, {"model": SCRIPTED, "max_tokens": 1024, "messages": messages})
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert echoed(text)["text_input"] == f"<user>first<assistant>ok<system>cwd: /repo<user>{ECHO}<assistant>"


SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}}
BASH = {"name": "Bash", "description": "Run a command", "input_schema": SCHEMA}
WEB_FETCH = {"name": "WebFetch", "description": "Fetch a URL", "input_schema": SCHEMA, "defer_loading": True}
SEARCH = {"name": "ToolSearch", "description": "Find tools", "input_schema": SCHEMA}


def test_a_deferred_tool_stays_out_of_the_prompt_until_a_tool_reference_loads_it(
    claude: anthropic.Anthropic, agent_gateway: GatewayProcess
) -> None:
    tools = [BASH, SEARCH, WEB_FETCH]
    first = message_prompt(claude.messages.create(model=SCRIPTED, max_tokens=1024, messages=[user(ECHO)], tools=tools))  # type: ignore[arg-type]
    assert first.startswith("[tool:Bash][tool:ToolSearch]<user>") and "WebFetch" not in first
    # Not offered, it cannot be called: the markup stays text.
    call = '<tool_call>\n{"name": "WebFetch", "arguments": {"path": "x"}}\n</tool_call>'
    refused = claude.messages.create(model=SCRIPTED, max_tokens=1024, messages=[user(script(call))], tools=tools)  # type: ignore[arg-type]
    assert "tool_use" not in [block.type for block in refused.content]
    loaded = [
        user("fetch it"),
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_01", "name": "ToolSearch", "input": {"path": "WebFetch"}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": [{"type": "tool_reference", "tool_name": "WebFetch"}],
                },
                {"type": "text", "text": ECHO},
            ],
        },
    ]
    message = claude.messages.create(model=SCRIPTED, max_tokens=1024, messages=loaded, tools=tools)  # type: ignore[arg-type]
    prompt = message_prompt(message)
    assert prompt.startswith("[tool:Bash][tool:ToolSearch][tool:WebFetch]<user>fetch it"), prompt
    assert "<assistant>[call:ToolSearch]<tool>Tool loaded: WebFetch" in prompt
    events = message_events(agent_gateway, {"model": SCRIPTED, "max_tokens": 1024, "messages": loaded, "tools": tools})
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert echoed(text)["text_input"] == prompt
    # Loaded, the model can call it.
    calling = [
        *loaded[:2],
        {"role": "user", "content": [loaded[2]["content"][0], {"type": "text", "text": script(call)}]},
    ]
    answer = claude.messages.create(model=SCRIPTED, max_tokens=1024, messages=calling, tools=tools)  # type: ignore[arg-type]
    assert answer.stop_reason == "tool_use" and [b.name for b in answer.content if b.type == "tool_use"] == ["WebFetch"]


def _thinking_turn(thought: str, answer: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": thought, "signature": "sig"}, {"type": "text", "text": answer}],
    }


def test_clear_thinking_is_applied_and_reported_whole_and_streamed(
    claude: anthropic.Anthropic, agent_gateway: GatewayProcess
) -> None:
    messages = [
        user("one"),
        _thinking_turn("OLD-THOUGHT", "a1"),
        user("two"),
        _thinking_turn("NEW-THOUGHT", "a2"),
        user(ECHO),
    ]
    edits = {"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}]}
    message = claude.beta.messages.create(
        model=SCRIPTED,
        max_tokens=1024,
        messages=messages,  # type: ignore[arg-type]
        thinking={"type": "adaptive"},
        context_management=edits,  # type: ignore[arg-type]
        betas=["context-management-2025-06-27"],
    )
    prompt = message_prompt(message)
    assert "OLD-THOUGHT" not in prompt and "<assistant>a1<user>two<assistant>[reasoning:NEW-THOUGHT]a2" in prompt
    assert message.context_management is not None
    (applied,) = message.context_management.model_dump()["applied_edits"]
    assert applied["type"] == "clear_thinking_20251015" and applied["cleared_thinking_turns"] == 1
    assert applied["cleared_input_tokens"] > 0
    body = {
        "model": SCRIPTED,
        "max_tokens": 1024,
        "messages": messages,
        "thinking": {"type": "adaptive"},
        "context_management": edits,
    }
    events = message_events(agent_gateway, body)
    (delta,) = [data for name, data in events if name == "message_delta"]
    assert delta["context_management"] == {"applied_edits": [applied]}
    with claude.beta.messages.stream(betas=["context-management-2025-06-27"], **body) as stream:  # type: ignore[arg-type]
        final = stream.get_final_message()
    assert final.context_management is not None
    assert final.context_management.model_dump()["applied_edits"] == [applied]
    # Nothing to clear (keep all): an empty report; no context_management asked for: none.
    kept = claude.beta.messages.create(
        **{**body, "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}}  # type: ignore[arg-type]
    )
    assert kept.context_management is not None and kept.context_management.applied_edits == []
    assert "[reasoning:OLD-THOUGHT]a1" in message_prompt(kept)
    plain = httpx.post(agent_gateway.url + "/v1/messages", json={**body, "context_management": None}, timeout=60)
    assert "context_management" not in plain.json()


def test_output_config_sets_the_effort_and_the_format(claude: anthropic.Anthropic) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    message = claude.messages.create(
        model=SCRIPTED,
        max_tokens=1024,
        messages=[user(ECHO)],
        output_config={"effort": "high", "format": {"type": "json_schema", "schema": schema}},  # type: ignore[typeddict-item]
    )
    inputs = echoed(message.content[0].text)  # type: ignore[union-attr]
    assert inputs["text_input"].startswith("[effort:high]<user>")
    assert json.loads(inputs["sampling_parameters"]["structured_outputs"]) == {"json": schema}


# -- Messages: max_tokens within the context -------------------------------------------------------


def test_max_tokens_over_the_context_is_lowered_and_running_out_says_so(
    claude: anthropic.Anthropic, agent_gateway: GatewayProcess
) -> None:
    prompt_tokens = claude.messages.count_tokens(model=SCRIPTED, messages=[user(ECHO)]).input_tokens
    echo = claude.messages.create(model=SCRIPTED, max_tokens=32000, messages=[user(ECHO)])
    assert echoed(echo.content[0].text)["sampling_parameters"]["max_tokens"] == CONTEXT - prompt_tokens  # type: ignore[union-attr]
    assert echo.stop_reason == "end_turn"
    long = [user(script("a", "b", finish="length"))]
    message = claude.messages.create(model=SCRIPTED, max_tokens=32000, messages=long)
    assert message.stop_reason == "model_context_window_exceeded"
    assert message.content[0].type == "text" and message.content[0].text == "ab"
    with claude.messages.stream(model=SCRIPTED, max_tokens=32000, messages=long) as stream:
        assert stream.get_final_message().stop_reason == "model_context_window_exceeded"
    events = message_events(agent_gateway, {"model": SCRIPTED, "max_tokens": 32000, "messages": long})
    (delta,) = [data for name, data in events if name == "message_delta"]
    assert delta["delta"]["stop_reason"] == "model_context_window_exceeded"
    # Within the room, running out is the client's max_tokens.
    capped = claude.messages.create(model=SCRIPTED, max_tokens=100, messages=long)
    assert capped.stop_reason == "max_tokens"
    # A prompt that fills the context is still refused.
    with pytest.raises(anthropic.BadRequestError) as info:
        claude.messages.create(model=SCRIPTED, max_tokens=32000, messages=[user("word " * (CONTEXT + 10))])
    assert "context length" in info.value.body["error"]["message"]  # type: ignore[index]


# -- Responses: namespace tools --------------------------------------------------------------------


PARAMETERS = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}
NAMESPACE = {
    "type": "namespace",
    "name": "github",
    "description": "GitHub",
    "tools": [{"type": "function", "name": "create_issue", "description": "Open an issue", "parameters": PARAMETERS}],
}
CREATE_ISSUE = {"type": "function", "name": "create_issue", "description": "Local tracker", "parameters": PARAMETERS}


def _call(name: str) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": {"title": "Bug"}}) + "\n</tool_call>"


def response_events(gateway: GatewayProcess, body: dict[str, Any]) -> tuple[httpx.Headers, list[dict[str, Any]]]:
    """A raw Responses stream's headers and events."""
    with httpx.stream("POST", gateway.url + "/v1/responses", json={**body, "stream": True}, timeout=60) as response:
        assert response.status_code == 200, response.read()
        raw = response.read().decode()
        headers = response.headers
    events = []
    for block in raw.split("\n\n"):
        if block and not block.startswith(":"):
            name, data = block.split("\n")
            event = json.loads(data.removeprefix("data: "))
            assert name == f"event: {event['type']}"
            events.append(event)
    return headers, events


def response_prompt(response: Any) -> str:
    return str(echoed(response.output_text)["text_input"])


def test_a_namespace_tools_call_comes_back_with_its_namespace(
    codex: openai.OpenAI, agent_gateway: GatewayProcess
) -> None:
    echo = codex.responses.create(model=SCRIPTED, input=ECHO, tools=[NAMESPACE])  # type: ignore[list-item]
    assert response_prompt(echo).startswith("[tool:create_issue]<user>"), "offered under its own name"
    response = codex.responses.create(model=SCRIPTED, input=script(_call("create_issue")), tools=[NAMESPACE])  # type: ignore[list-item]
    (call,) = response.output
    assert call.type == "function_call" and call.namespace == "github" and call.name == "create_issue"
    assert json.loads(call.arguments) == {"title": "Bug"}
    # Two functions of one name: the namespace's is offered as github__create_issue.
    tools = [CREATE_ISSUE, NAMESPACE]
    clash = codex.responses.create(model=SCRIPTED, input=ECHO, tools=tools)  # type: ignore[arg-type]
    assert response_prompt(clash).startswith("[tool:create_issue][tool:github__create_issue]<user>")
    spaced = codex.responses.create(model=SCRIPTED, input=script(_call("github__create_issue")), tools=tools)  # type: ignore[arg-type]
    (call,) = spaced.output
    assert call.type == "function_call" and (call.namespace, call.name) == ("github", "create_issue")
    local = codex.responses.create(model=SCRIPTED, input=script(_call("create_issue")), tools=tools)  # type: ignore[arg-type]
    assert local.output[0].type == "function_call" and local.output[0].namespace is None
    _, events = response_events(
        agent_gateway, {"model": SCRIPTED, "input": script(_call("github__create_issue")), "tools": tools}
    )
    added = next(e for e in events if e["type"] == "response.output_item.added")
    done = next(e for e in events if e["type"] == "response.output_item.done")
    for item in (added["item"], done["item"], events[-1]["response"]["output"][0]):
        assert (item["type"], item["namespace"], item["name"]) == ("function_call", "github", "create_issue")
    stream = codex.responses.create(
        model=SCRIPTED,
        input=script(_call("github__create_issue")),
        tools=tools,  # type: ignore[arg-type]
        stream=True,
    )
    final = list(stream)[-1]
    assert final.type == "response.completed"
    assert final.response.output[0].namespace == "github"  # type: ignore[union-attr]
    # Sent back, the call reaches the prompt under the name the model knows.
    follow = codex.responses.create(
        model=SCRIPTED,
        store=False,
        tools=tools,  # type: ignore[arg-type]
        input=[
            {"role": "user", "content": "open one"},
            call.model_dump(exclude_none=True),  # type: ignore[list-item]
            {"type": "function_call_output", "call_id": call.call_id, "output": "issue #7"},
            {"role": "user", "content": ECHO},
        ],
    )
    assert "<assistant>[call:github__create_issue]<tool>issue #7<user>" in response_prompt(follow)


# -- Responses: built-in tools ---------------------------------------------------------------------


def test_built_in_tools_are_left_out_and_named_in_a_header(codex: openai.OpenAI, agent_gateway: GatewayProcess) -> None:
    tools: list[Any] = [{"type": "web_search"}, CREATE_ISSUE, {"type": "file_search", "vector_store_ids": ["vs_1"]}]
    raw = codex.responses.with_raw_response.create(
        model=SCRIPTED, input=ECHO, tools=tools, extra_body={"client_metadata": {"turn_id": "t-1"}}
    )
    assert raw.http_response.status_code == 200
    assert raw.headers["x-gateway-ignored-tools"] == "web_search,file_search"
    prompt = response_prompt(raw.parse())
    assert prompt.startswith("[tool:create_issue]<user>") and "search" not in prompt
    headers, events = response_events(agent_gateway, {"model": SCRIPTED, "input": script("hi"), "tools": tools})
    assert headers["x-gateway-ignored-tools"] == "web_search,file_search"
    assert events[-1]["type"] == "response.completed"
    only = codex.responses.with_raw_response.create(model=SCRIPTED, input=script("hi"), tools=[{"type": "web_search"}])
    assert only.headers["x-gateway-ignored-tools"] == "web_search" and only.parse().output_text == "hi"
    plain = codex.responses.with_raw_response.create(model=SCRIPTED, input=script("hi"), tools=[CREATE_ISSUE])  # type: ignore[list-item]
    assert "x-gateway-ignored-tools" not in plain.headers
    # Warned about once per tool type per process: this module's only file_search request.
    assert "built-in tool 'file_search' left out of the prompt" in agent_gateway.log_text()
    with pytest.raises(openai.BadRequestError) as info:
        codex.responses.create(model=SCRIPTED, input="hi", tools=tools, tool_choice={"type": "web_search"})  # type: ignore[arg-type, typeddict-item]
    assert info.value.body["param"] == "tool_choice.type"  # type: ignore[index]


# -- Responses: encrypted reasoning and summaries --------------------------------------------------


REASONING_REPLY = script(f"<think>{THOUGHT}", "</think>It is 4.")


def _history(reasoning: dict[str, Any]) -> list[Any]:
    return [
        {"role": "user", "content": REASONING_REPLY},
        reasoning,
        {"role": "assistant", "content": "It is 4."},
        {"role": "user", "content": ECHO},
    ]


def test_encrypted_content_carries_the_reasoning_between_stateless_turns(
    codex: openai.OpenAI, agent_gateway: GatewayProcess
) -> None:
    args: dict[str, Any] = {
        "model": SCRIPTED,
        "input": REASONING_REPLY,
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }
    response = codex.responses.create(**args)
    reasoning, message = response.output
    assert reasoning.type == "reasoning" and message.type == "message"
    blob = reasoning.encrypted_content
    assert blob and THOUGHT not in blob
    unsealed = codex.responses.create(model=SCRIPTED, input=REASONING_REPLY, store=False).output[0]
    assert unsealed.type == "reasoning" and unsealed.encrypted_content is None, "not asked for"
    _, events = response_events(agent_gateway, args)
    done = next(e for e in events if e["type"] == "response.output_item.done")
    assert done["item"]["type"] == "reasoning" and done["item"]["encrypted_content"]
    assert events[-1]["response"]["output"][0]["encrypted_content"] == done["item"]["encrypted_content"]
    # Sent back as the Codex CLI does (the blob, no text), it reaches the prompt as the thought.
    item = {"type": "reasoning", "id": reasoning.id, "summary": [], "encrypted_content": blob}
    back = codex.responses.create(model=SCRIPTED, store=False, input=_history(item))
    assert f"<assistant>[reasoning:{THOUGHT}]It is 4.<user>" in response_prompt(back)
    # The streamed blob, and one whose item's text was edited: the sealed text wins.
    edited = {
        **item,
        "encrypted_content": done["item"]["encrypted_content"],
        "content": [{"type": "reasoning_text", "text": "edited"}],
    }
    prompt = response_prompt(codex.responses.create(model=SCRIPTED, store=False, input=_history(edited)))
    assert f"[reasoning:{THOUGHT}]" in prompt and "edited" not in prompt


def test_encrypted_content_that_does_not_open_injects_nothing(
    codex: openai.OpenAI, agent_gateway: GatewayProcess
) -> None:
    sealed = codex.responses.create(
        model=SCRIPTED, input=REASONING_REPLY, store=False, include=["reasoning.encrypted_content"]
    ).output[0]
    assert sealed.type == "reasoning" and sealed.encrypted_content
    blob = sealed.encrypted_content
    middle = len(blob) // 2
    tampered = blob[:middle] + ("A" if blob[middle] != "A" else "B") + blob[middle + 1 :]
    forged = ReasoningSeal(["a secret this gateway does not have"]).seal("INJECTED", SCRIPTED)
    for bad in (tampered, forged, ReasoningSeal([SECRET]).seal("INJECTED", "tiny-llm")):
        item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": bad}
        prompt = response_prompt(codex.responses.create(model=SCRIPTED, store=False, input=_history(item)))
        assert THOUGHT not in prompt and "INJECTED" not in prompt and "[reasoning:" not in prompt, prompt
        # The item's own text, as any reasoning item's, is what the template gets then.
        own = {**item, "summary": [{"type": "summary_text", "text": "its own summary"}]}
        prompt = response_prompt(codex.responses.create(model=SCRIPTED, store=False, input=_history(own)))
        assert "[reasoning:its own summary]" in prompt and "INJECTED" not in prompt
    assert "encrypted_content did not open" in agent_gateway.log_text()


SUMMARY_EVENTS = [
    "response.reasoning_summary_part.added",
    "response.reasoning_summary_text.delta",
    "response.reasoning_summary_text.done",
    "response.reasoning_summary_part.done",
]


def test_reasoning_summary_is_the_reasoning_text_streamed_as_summary_events(
    codex: openai.OpenAI, agent_gateway: GatewayProcess
) -> None:
    args: dict[str, Any] = {"model": SCRIPTED, "input": REASONING_REPLY, "reasoning": {"summary": "auto"}}
    whole = codex.responses.create(**args)
    reasoning = whole.output[0]
    assert reasoning.type == "reasoning"
    assert [(part.type, part.text) for part in reasoning.summary] == [("summary_text", THOUGHT)]
    assert whole.output_text == "It is 4."
    events = list(codex.responses.create(**args, stream=True))
    types = [event.type for event in events]
    summary = [t for t in types if t.startswith("response.reasoning_summary")]
    assert [t for i, t in enumerate(summary) if i == 0 or summary[i - 1] != t] == SUMMARY_EVENTS
    added = next(e for e in events if e.type == "response.reasoning_summary_part.added")
    assert added.item_id.startswith("rs_")  # type: ignore[union-attr]
    assert added.summary_index == 0 and added.part.text == ""  # type: ignore[union-attr]
    deltas = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")  # type: ignore[union-attr]
    assert deltas == THOUGHT
    text_done = next(e for e in events if e.type == "response.reasoning_summary_text.done")
    part_done = next(e for e in events if e.type == "response.reasoning_summary_part.done")
    assert text_done.text == THOUGHT and part_done.part.text == THOUGHT  # type: ignore[union-attr]
    assert types.index("response.reasoning_summary_part.done") < types.index("response.output_text.delta")
    final = events[-1]
    assert final.type == "response.completed"
    assert final.response.output[0].summary[0].text == THOUGHT  # type: ignore[union-attr]
    with codex.responses.stream(**args) as stream:
        helped = [event.type for event in stream]
        assert stream.get_final_response().output[0].summary[0].text == THOUGHT  # type: ignore[union-attr]
    assert "response.reasoning_summary_text.done" in helped
    _, raw = response_events(agent_gateway, args)
    assert [e["sequence_number"] for e in raw] == list(range(len(raw)))
    # Not asked for: no summary, no summary events.
    plain = [event.type for event in codex.responses.create(model=SCRIPTED, input=REASONING_REPLY, stream=True)]
    assert not [t for t in plain if "summary" in t]
