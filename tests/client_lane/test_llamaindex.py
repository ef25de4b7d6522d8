"""LlamaIndex (``llama-index-llms-openai-like``'s ``OpenAILike``, which takes any model name): a
chat with a function tool the model is required to call, and ``structured_predict`` into a
pydantic model."""

from __future__ import annotations

from llama_index.core.prompts import PromptTemplate
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai_like import OpenAILike

from tests.client_lane.common import MODEL, SEED, Forecast, Recorder, check_weather_call, get_weather


def _llm(base_url: str, recorder: Recorder) -> OpenAILike:
    return OpenAILike(
        model=MODEL,
        api_base=base_url,
        api_key="unused",
        is_chat_model=True,
        is_function_calling_model=True,
        max_retries=0,
        additional_kwargs={"seed": SEED},
        http_client=recorder.sync(),
    )


def test_chat_with_a_required_tool(base_url: str) -> None:
    recorder = Recorder()
    llm = _llm(base_url, recorder)
    weather = FunctionTool.from_defaults(fn=get_weather)
    response = llm.chat_with_tools([weather], user_msg="Weather in Paris?", tool_required=True)
    calls = llm.get_tool_calls_from_response(response, error_on_no_tool_call=True)
    assert calls
    for call in calls:
        check_weather_call(call.tool_name, call.tool_kwargs)
    (body,) = recorder.bodies()
    assert body["tool_choice"] == "required"


def test_structured_predict(base_url: str) -> None:
    recorder = Recorder()
    forecast = _llm(base_url, recorder).structured_predict(
        Forecast, PromptTemplate("A forecast for {city}."), city="Lima"
    )
    assert isinstance(forecast, Forecast)
    assert recorder.bodies()
