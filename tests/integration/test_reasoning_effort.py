"""Reasoning effort on both APIs reaches the chat template as vLLM passes it (the template's
``reasoning_effort`` variable), through a real Triton: the scripted model echoes the prompt the
gateway rendered, with a template that prints the variable."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.triton_launcher import TritonServer
from tests.integration.conftest import GatewayProcess, start_gateway, stop_gateway

ECHO = json.dumps({"echo_inputs": True})
TEMPLATE = (
    "{%- if reasoning_effort is defined and reasoning_effort %}effort={{ reasoning_effort }}\n{% endif -%}"
    "{%- for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor -%}"
)


@pytest.fixture(scope="module")
def effort_gateway(triton: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    where = tmp_path_factory.mktemp("effort")
    template = where / "effort.jinja"
    template.write_text(TEMPLATE)
    files = json.dumps({"scripted": {"chat_template": str(template)}})
    process = start_gateway(triton.grpc_url, where / "gateway.log", env={"GATEWAY_MODEL_FILES": files})
    yield process
    stop_gateway(process)


def post(gateway: GatewayProcess, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(gateway.url + path, json={"model": "scripted", **body}, timeout=30)


def prompt_of_chat(gateway: GatewayProcess, **fields: Any) -> str:
    response = post(gateway, "/v1/chat/completions", {"messages": [{"role": "user", "content": ECHO}], **fields})
    assert response.status_code == 200, response.text
    return str(json.loads(response.json()["choices"][0]["message"]["content"])["text_input"])


def test_chats_reasoning_effort_reaches_the_template(effort_gateway: GatewayProcess) -> None:
    assert prompt_of_chat(effort_gateway, reasoning_effort="low") == f"effort=low\nuser: {ECHO}\n"
    assert prompt_of_chat(effort_gateway) == f"user: {ECHO}\n"
    # Over a chat_template_kwargs of the same name, as vLLM sets it.
    both = prompt_of_chat(effort_gateway, reasoning_effort="high", chat_template_kwargs={"reasoning_effort": "low"})
    assert both.startswith("effort=high\n")


def test_responses_reasoning_effort_reaches_the_template_and_is_echoed(effort_gateway: GatewayProcess) -> None:
    body = {"input": ECHO, "reasoning": {"effort": "medium", "summary": "auto"}, "store": False}
    response = post(effort_gateway, "/v1/responses", body)
    assert response.status_code == 200, response.text
    answer = response.json()
    text = answer["output"][0]["content"][0]["text"]
    assert json.loads(text)["text_input"] == f"effort=medium\nuser: {ECHO}\n"
    assert answer["reasoning"] == {"effort": "medium", "summary": "auto"}


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "extreme"}, "reasoning_effort"),
        ("/v1/responses", {"input": "hi", "reasoning": {"effort": "extreme"}}, "reasoning.effort"),
    ],
)  # fmt: skip
def test_an_unknown_effort_is_a_400_naming_it(
    effort_gateway: GatewayProcess, path: str, body: dict[str, Any], param: str
) -> None:
    response = post(effort_gateway, path, body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param


def test_effort_is_unknown_to_the_reference_template_and_changes_nothing(gateway: GatewayProcess) -> None:
    """A model without a reasoning mode ignores it, as OpenAI's non-reasoning models do."""
    body = {"model": "tiny-llm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0}
    plain = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=30).json()
    effort = httpx.post(gateway.url + "/v1/chat/completions", json={**body, "reasoning_effort": "low"}, timeout=30)
    assert effort.status_code == 200
    assert effort.json()["choices"][0]["message"] == plain["choices"][0]["message"]
    assert effort.json()["usage"] == plain["usage"]
