"""Claude Code (the Messages API) and the Codex CLI (the Responses API), run non-interactively as
their users run them against the gateway, each with a home of its own (``cli_agents.py``).

For each CLI: a plain answer on tiny-llm, whose prompt is the CLI's whole system prompt and tool
set (tens of thousands of tokens); the agent loop on the scripted model (served with the qwen3
reasoning parser and the hermes tool-call parser), which calls the CLI's shell tool, gets its
output back and answers; and a second turn of that conversation, resumed. Thinking (reasoning)
on and off. The assertions read the CLI's own output, then check that the gateway answered every
request it sent with a 200 (the proxy's record) and that no generation failed after it (the
gateway's log).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.client_lane.cli_agents import (
    CLAUDE,
    CODEX,
    ClaudeCode,
    Codex,
    RecordingProxy,
    Run,
    agent_script,
    answer_script,
    gateway_statuses,
    hermes_call,
    missing,
)
from tests.client_lane.common import MODEL, SCRIPTED

MARKER = "MARK-7f3"
COMMAND = 'echo MARK-7""f3'
"""Prints the marker, which the command itself does not hold: the scripted model's next step
waits for the marker in the conversation, so only the command's output moves it on."""
THOUGHT = "Run the command, then report what it printed."
FINAL = "The command printed MARK-7f3."
SECOND = "Turn two of the same conversation."
CODEX_NOTICE = "Model metadata for `{model}` not found."
"""The one error item Codex prints for any model outside its own catalog; it goes on with
fallback metadata (``model_catalog_json`` would silence it, but wants the model's whole system
prompt)."""

NewClaude = Callable[[str, bool], ClaudeCode]
NewCodex = Callable[[str, bool], Codex]
"""A new user of the CLI: ``(model, thinking)``, in the test's temporary directory."""

THINKING = pytest.mark.parametrize("thinking", [True, False], ids=["thinking", "no-thinking"])


def _require(binary: Path) -> None:
    why = missing(binary)
    if why is None:
        return
    if os.environ.get("GATEWAY_REQUIRE_PEERS") == "1":
        pytest.fail(f"{why}, and GATEWAY_REQUIRE_PEERS=1 requires the lane")
    pytest.skip(why)


@pytest.fixture(scope="module")
def proxy(gateway_url: str) -> Iterator[RecordingProxy]:
    recorder = RecordingProxy(gateway_url)
    yield recorder
    recorder.close()


@pytest.fixture
def claude(tmp_path: Path, proxy: RecordingProxy) -> NewClaude:
    """A Claude Code user of ``model``, thinking or not."""
    _require(CLAUDE)
    return lambda model, thinking: ClaudeCode(tmp_path, proxy, model, thinking)


@pytest.fixture
def codex(tmp_path: Path, proxy: RecordingProxy) -> NewCodex:
    """A Codex user of ``model``, reasoning or not."""
    _require(CODEX)
    return lambda model, thinking: Codex(tmp_path, proxy, model, thinking)


def thought(thinking: bool, *pieces: str) -> list[str]:
    """What a qwen3 model writes, one response a piece: its thought first when it thinks."""
    return (["<think>", THOUGHT, "</think>"] if thinking else []) + list(pieces)


def answered(run: Run, path: str, log: Path | None) -> list[Any]:
    """The bodies ``run`` sent to ``path``, after checking that the run ended well and that
    every request it sent was answered 200 and, by the gateway's log, finished so."""
    assert run.returncode == 0, run.describe()
    refused = [exchange.brief() for exchange in run.exchanges if exchange.status != 200]
    assert not refused, run.describe()
    ids = [exchange.request_id for exchange in run.exchanges if exchange.request_id]
    failed = {rid: status for rid, status in gateway_statuses(log, ids).items() if status != 200}
    assert not failed, f"the gateway's log gives these requests another status: {failed}\n{run.describe()}"
    bodies = run.bodies(path)
    assert bodies, run.describe()
    return bodies


def texts(value: Any) -> str:
    """Every string inside a JSON value, joined: where a marker may sit in a request."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "\n".join(texts(item) for item in value.values())
    if isinstance(value, list):
        return "\n".join(texts(item) for item in value)
    return ""


# -- Claude Code ------------------------------------------------------------------------------------


def claude_result(run: Run, *, streamed: bool = False) -> dict[str, Any]:
    """The run's result, checked: a success, not an error (``streamed``: the last event's)."""
    assert run.stdout.strip(), run.describe()
    result = run.events()[-1] if streamed else run.json()
    assert result["type"] == "result" and result["is_error"] is False, run.describe()
    assert result["subtype"] == "success", run.describe()
    return dict(result)


def thinking_sent(body: dict[str, Any]) -> bool:
    return bool((body.get("thinking") or {}).get("type", "disabled") != "disabled")


def test_claude_code_answers_on_tiny_llm(claude: NewClaude, gateway_log: Path | None) -> None:
    # Thinking on, Claude Code's default, on a model without a reasoning parser. (Each tiny-llm
    # run takes 10 to 50 s, most of it the prefill and a random-length answer: thinking off is
    # tried on the scripted model only.)
    thinking = True
    user = claude(MODEL, thinking)
    run = user.ask("Say hello.")
    result = claude_result(run)
    bodies = answered(run, "/v1/messages", gateway_log)
    assert isinstance(result["result"], str) and result["result"], run.describe()
    assert result["usage"]["input_tokens"] > 10_000  # its whole system prompt and tools
    assert "Bash" in [tool["name"] for tool in bodies[-1]["tools"]]
    assert all(thinking_sent(body) == thinking for body in bodies)


@THINKING
def test_claude_code_runs_its_bash_tool_and_answers(
    claude: NewClaude, gateway_log: Path | None, thinking: bool
) -> None:
    user = claude(SCRIPTED, thinking)
    call = hermes_call("Bash", {"command": COMMAND, "description": "Print the marker"})
    run = user.ask(agent_script(thought(thinking, call), MARKER, thought(thinking, FINAL)), stream=True)
    events = run.events()
    result = claude_result(run, streamed=True)
    first, second = answered(run, "/v1/messages", gateway_log)
    blocks = [
        block for event in events if event["type"] in {"assistant", "user"} for block in event["message"]["content"]
    ]
    (use,) = [block for block in blocks if block["type"] == "tool_use"]
    assert (use["name"], use["input"]["command"]) == ("Bash", COMMAND)
    (output,) = [block for block in blocks if block["type"] == "tool_result"]
    assert output["tool_use_id"] == use["id"] and not output["is_error"]
    assert MARKER in texts(output["content"])
    assert [block["text"] for block in blocks if block["type"] == "text"] == [FINAL]
    assert result["result"] == FINAL and result["num_turns"] == 2
    thoughts = [block["thinking"] for block in blocks if block["type"] == "thinking"]
    assert thoughts == ([THOUGHT, THOUGHT] if thinking else [])
    assert thinking_sent(first) == thinking_sent(second) == thinking
    # The loop's second request carries the call and its output back.
    assert MARKER in texts(second["messages"][-1]["content"])


def test_claude_code_resumes_the_conversation(claude: NewClaude, gateway_log: Path | None) -> None:
    user = claude(SCRIPTED, True)
    call = hermes_call("Bash", {"command": COMMAND, "description": "Print the marker"})
    turn_one = user.ask(agent_script(thought(True, call), MARKER, thought(True, FINAL)))
    first = claude_result(turn_one)
    answered(turn_one, "/v1/messages", gateway_log)
    assert first["result"] == FINAL
    session = first["session_id"]
    turn_two = user.ask(answer_script(thought(True, SECOND)), resume=session)
    result = claude_result(turn_two)
    (body,) = answered(turn_two, "/v1/messages", gateway_log)
    assert result["result"] == SECOND and result["session_id"] == session
    # The first turn's call, its output and answer, then the new prompt.
    history = body["messages"]
    assert [message["role"] for message in history[-4:]] == ["assistant", "user", "assistant", "user"]
    assert [block["type"] for block in history[-4]["content"]][-1] == "tool_use"
    assert MARKER in texts(history[-3]["content"]) and FINAL in texts(history[-2]["content"])


# -- Codex ----------------------------------------------------------------------------------------------


def codex_turn(run: Run, model: str) -> dict[str, Any]:
    """The run's events, checked: a thread, one completed turn, no error but Codex's notice of a
    model it does not know. Returns the thread id, the items and the usage."""
    events = run.events()
    kinds = [event["type"] for event in events]
    assert "turn.failed" not in kinds and "error" not in kinds, run.describe()
    assert kinds[0] == "thread.started" and kinds[-1] == "turn.completed", run.describe()
    items = [event["item"] for event in events if event["type"] == "item.completed"]
    errors = [item["message"] for item in items if item["type"] == "error"]
    assert all(error.startswith(CODEX_NOTICE.format(model=model)) for error in errors), run.describe()
    return {"thread": events[0]["thread_id"], "items": items, "usage": events[-1]["usage"]}


def messages_of(items: list[dict[str, Any]]) -> list[str]:
    return [item["text"] for item in items if item["type"] == "agent_message"]


def test_codex_answers_on_tiny_llm(codex: NewCodex, gateway_log: Path | None) -> None:
    thinking = True  # reasoning effort medium; off is tried on the scripted model only
    user = codex(MODEL, thinking)
    run = user.ask("Say hello.")
    turn = codex_turn(run, MODEL)
    bodies = answered(run, "/v1/responses", gateway_log)
    (answer,) = messages_of(turn["items"])
    assert answer, run.describe()
    assert turn["usage"]["input_tokens"] > 10_000  # its whole system prompt and tools
    assert "exec_command" in [tool.get("name") for tool in bodies[-1]["tools"]]
    assert all(body["reasoning"].get("effort") == ("medium" if thinking else "none") for body in bodies)


@THINKING
def test_codex_runs_its_shell_tool_and_answers(codex: NewCodex, gateway_log: Path | None, thinking: bool) -> None:
    user = codex(SCRIPTED, thinking)
    call = hermes_call("exec_command", {"cmd": COMMAND})
    run = user.ask(agent_script(thought(thinking, call), MARKER, thought(thinking, FINAL)))
    turn = codex_turn(run, SCRIPTED)
    first, second = answered(run, "/v1/responses", gateway_log)
    (command,) = [item for item in turn["items"] if item["type"] == "command_execution"]
    assert COMMAND in command["command"] and command["exit_code"] == 0
    assert MARKER in command["aggregated_output"]
    assert messages_of(turn["items"]) == [FINAL]
    # Codex shows a reasoning item from its summary only (the gateway, as vLLM, leaves it empty):
    # that the model thought shows in the usage.
    assert (turn["usage"]["reasoning_output_tokens"] > 0) == thinking
    (output,) = [item for item in second["input"] if item["type"] == "function_call_output"]
    assert MARKER in texts(output["output"])
    assert [item["type"] for item in second["input"]].count("reasoning") == (1 if thinking else 0)
    assert first["reasoning"].get("effort") == ("medium" if thinking else "none")


def test_codex_resumes_the_conversation(codex: NewCodex, gateway_log: Path | None) -> None:
    user = codex(SCRIPTED, True)
    call = hermes_call("exec_command", {"cmd": COMMAND})
    first = user.ask(agent_script(thought(True, call), MARKER, thought(True, FINAL)))
    turn_one = codex_turn(first, SCRIPTED)
    answered(first, "/v1/responses", gateway_log)
    assert messages_of(turn_one["items"]) == [FINAL]
    run = user.ask(answer_script(thought(True, SECOND)), resume=turn_one["thread"])
    turn_two = codex_turn(run, SCRIPTED)
    (body,) = answered(run, "/v1/responses", gateway_log)
    assert turn_two["thread"] == turn_one["thread"] and messages_of(turn_two["items"]) == [SECOND]
    history = json.dumps(body["input"])
    assert "function_call_output" in history and MARKER in history and FINAL in history
