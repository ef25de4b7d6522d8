"""LangChain (``langchain-openai``'s ``ChatOpenAI``): tools bound with a required choice, a
structured output from a pydantic model, the Responses API (with and without a reasoning effort),
and the deprecated ``functions``/``function_call`` pair older chains still send."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_function
from langchain_openai import ChatOpenAI

from tests.client_lane.common import MODEL, SEED, Forecast, Recorder, check_weather_call, get_weather

QUESTION = [("user", "Weather in Lima?")]


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def _llm(base_url: str, recorder: Recorder, **kwargs: Any) -> ChatOpenAI:
    if not kwargs.get("use_responses_api"):
        kwargs["seed"] = SEED  # the Responses API has none
    return ChatOpenAI(
        model=MODEL,
        base_url=base_url,
        api_key="unused",
        max_retries=0,
        http_client=recorder.sync(),
        **kwargs,
    )


# bind_tools sends the tool's schema open (no additionalProperties: false; strict is off by default):
# the gateway closes it for a forced call, else tiny-llm adds a property of its own and fills it
# until the context ends.
def test_bound_tools_with_a_required_choice(base_url: str, recorder: Recorder) -> None:
    llm = _llm(base_url, recorder).bind_tools([tool(get_weather)], tool_choice="required")
    message = llm.invoke(QUESTION)
    assert isinstance(message, AIMessage) and message.tool_calls
    for call in message.tool_calls:
        check_weather_call(call["name"], call["args"])
    (body,) = recorder.bodies()
    assert body["tool_choice"] == "required"


def test_with_structured_output(base_url: str, recorder: Recorder) -> None:
    forecast = _llm(base_url, recorder).with_structured_output(Forecast).invoke(QUESTION)
    assert isinstance(forecast, Forecast)
    (body,) = recorder.bodies()
    assert body["response_format"]["type"] == "json_schema"


@pytest.mark.parametrize("reasoning", [None, {"effort": "low"}])
def test_the_responses_api(base_url: str, recorder: Recorder, reasoning: dict[str, str] | None) -> None:
    llm = _llm(base_url, recorder, use_responses_api=True, max_completion_tokens=16, reasoning=reasoning)
    message = llm.invoke(QUESTION)
    assert isinstance(message, AIMessage)
    assert message.response_metadata["status"] in {"completed", "incomplete"}
    (body,) = recorder.bodies()
    assert recorder.requests[0]["path"] == "/v1/responses"
    if reasoning is not None:
        assert body["reasoning"] == reasoning


# The function's schema is open, as above, and closed for the forced call.
def test_legacy_functions_and_function_call(base_url: str, recorder: Recorder) -> None:
    function = convert_to_openai_function(get_weather)
    message = _llm(base_url, recorder).invoke(QUESTION, functions=[function], function_call={"name": "get_weather"})
    call = message.additional_kwargs["function_call"]
    check_weather_call(call["name"], call["arguments"])
    (body,) = recorder.bodies()
    assert body["function_call"] == {"name": "get_weather"} and "tools" not in body
