"""The OpenAI Agents SDK (``openai-agents``): an agent with a function tool and a pydantic
``output_type``, forced to use the tool (``tool_choice="required"``; the SDK resets it after the
call, so the run can end), on both of its model classes over the same ``AsyncOpenAI`` client."""

from __future__ import annotations

import asyncio

import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    RunResult,
    ToolCallItem,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI
from openai.types.shared import Reasoning

from tests.client_lane.common import MODEL, Forecast, Recorder, check_weather_call, get_weather

set_tracing_disabled(True)


async def _run(base_url: str, recorder: Recorder, api: str, effort: str | None) -> RunResult:
    async with (
        recorder.async_() as http,
        AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, http_client=http) as client,
    ):
        model = (OpenAIResponsesModel if api == "responses" else OpenAIChatCompletionsModel)(MODEL, client)
        settings = ModelSettings(tool_choice="required")
        if effort is not None:
            settings = settings.resolve(ModelSettings(reasoning=Reasoning(effort=effort)))
        agent = Agent(
            name="forecaster",
            instructions="Look the weather up, then answer with a forecast.",
            tools=[function_tool(get_weather)],
            output_type=Forecast,
            model=model,
            model_settings=settings,
        )
        return await Runner.run(agent, "Weather in Tokyo?", max_turns=6)


@pytest.mark.parametrize("effort", [None, "low"])
@pytest.mark.parametrize("api", ["responses", "chat"])
def test_a_required_tool_then_the_output_type(base_url: str, api: str, effort: str | None) -> None:
    recorder = Recorder()
    result = asyncio.run(_run(base_url, recorder, api, effort))
    assert isinstance(result.final_output, Forecast)
    calls = [item.raw_item for item in result.new_items if isinstance(item, ToolCallItem)]
    assert calls
    for call in calls:
        check_weather_call(call.name, call.arguments)
    first, *later = recorder.bodies()
    assert first["tool_choice"] == "required"
    assert later, "the run ended without a request after the tool call"
    if effort is not None:
        wanted = {"reasoning": {"effort": effort}} if api == "responses" else {"reasoning_effort": effort}
        for body in (first, *later):
            assert body.items() >= wanted.items()
