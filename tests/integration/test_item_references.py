"""``item_reference`` input items, as the Vercel AI SDK's default provider sends earlier turns
(with ``store`` on, without ``previous_response_id``): the gateway replaces each with the item it
stored, for the same API key. The scripted model echoes the prompt it was given."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.integration.conftest import GatewayProcess

ECHO = "<script>" + json.dumps({"echo_inputs": True}) + "</script>"


def respond(gateway: GatewayProcess, **body: Any) -> httpx.Response:
    return httpx.post(gateway.url + "/v1/responses", json={"model": "scripted", **body}, timeout=30)


def prompt_of(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    text = response.json()["output"][0]["content"][0]["text"]
    return str(json.loads(text)["text_input"])


def test_references_to_a_stored_turn_are_that_turn(gateway: GatewayProcess) -> None:
    first = respond(gateway, input=[{"role": "user", "content": "the first question " + ECHO}])
    assert first.status_code == 200, first.text
    answer = first.json()["output"][0]
    items = httpx.get(f"{gateway.url}/v1/responses/{first.json()['id']}/input_items", timeout=30).json()["data"]
    question = items[0]
    second = respond(
        gateway,
        input=[
            {"type": "item_reference", "id": question["id"]},
            {"type": "item_reference", "id": answer["id"]},
            {"role": "user", "content": ECHO},
        ],
    )
    prompt = prompt_of(second)
    assert "the first question" in prompt and answer["content"][0]["text"] in prompt
    # The same conversation sent in full renders the same prompt.
    spelled = respond(
        gateway,
        input=[
            {"role": "user", "content": "the first question " + ECHO},
            {"role": "assistant", "content": answer["content"][0]["text"]},
            {"role": "user", "content": ECHO},
        ],
        store=False,
    )
    assert prompt_of(spelled) == prompt


def test_a_reference_beside_previous_response_id_is_found_in_the_chain(gateway: GatewayProcess) -> None:
    """The chain already holds the answer; the reference puts it in once more, where it stands."""
    first = respond(gateway, input="before " + ECHO)
    answer = first.json()["output"][0]
    second = respond(
        gateway,
        previous_response_id=first.json()["id"],
        input=[{"type": "item_reference", "id": answer["id"]}, {"role": "user", "content": ECHO}],
    )
    assert prompt_of(second).count(answer["content"][0]["text"]) == 2


def test_an_unknown_id_is_a_400_naming_the_item(gateway: GatewayProcess) -> None:
    response = respond(gateway, input=[{"role": "user", "content": "hi"}, {"type": "item_reference", "id": "msg_nope"}])
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["param"], error["message"]) == ("input.1.id", "Item with id 'msg_nope' not found.")
