"""What every framework's test asks for: one function tool and one structured output, both with
closed value sets, so tiny-llm's enforced answers stay short and are checkable; and a recorder of
the requests a client sent."""

import base64
import json
from typing import Any, Literal

import httpx
from pydantic import BaseModel, Field

MODEL = "tiny-llm"
SCRIPTED = "scripted"
"""The test model that replays a script given in the prompt (tests/triton_models/README.md),
served with the ``qwen3`` reasoning parser; ``reasoning_model(parser)`` names its copies served
with the other parsers: what each reasoning model's clients see."""
THOUGHT, ANSWER = "Weigh 2+2: it is 4.", "Four."

REASONING_OUTPUTS: dict[str, tuple[str, ...]] = {
    # The template opened <think> in the prompt: the output starts inside the reasoning.
    "deepseek_r1": (THOUGHT, "</think>", ANSWER),
    "deepseek_v3": (THOUGHT, "</think>", ANSWER),
    "qwen3": ("<think>", THOUGHT, "</think>", ANSWER),
    "mistral": ("[THINK]", THOUGHT, "[/THINK]", ANSWER),
    "granite": ("Here is my thought process:", THOUGHT, "Here is my response:", ANSWER),
    "openai": (
        "<|channel|>analysis<|message|>",
        THOUGHT,
        "<|end|><|start|>assistant<|channel|>final<|message|>",
        ANSWER,
    ),
}
"""What a model of each reasoning parser writes for the same thought and answer, one token per
response: every piece but the answer is reasoning (markers included)."""

THINKING_SWITCHES: dict[str, dict[str, bool]] = {"deepseek_v3": {"thinking": True}}
"""``chat_template_kwargs`` a request sends to turn thinking on, for the hybrid models' parsers
(without it they answer plainly). The Responses API carries no template variables: those
parsers' models are tried on Chat Completions only."""


def reasoning_model(parser: str) -> str:
    """The scripted model's name as served with ``parser`` (``scripted`` itself for qwen3)."""
    return SCRIPTED if parser == "qwen3" else f"{SCRIPTED}-{parser}"


def thinking_prompt(parser: str = "qwen3") -> str:
    """A prompt the scripted model answers as a model of ``parser`` thinks: one token per response."""
    responses = [{"text": [base64.b64encode(piece.encode()).decode()]} for piece in REASONING_OUTPUTS[parser]]
    return "<script>" + json.dumps({"responses": responses}) + "</script>"


def reasoning_tokens(parser: str) -> int:
    """The completion tokens a ``parser`` model spends thinking in ``thinking_prompt(parser)``."""
    return len(REASONING_OUTPUTS[parser]) - 1


# Every Python client's requests carry this seed, so a run replays: a failure is reproducible.
SEED = 0
City = Literal["Paris", "Tokyo", "Lima"]
# A closed set, not an int with bounds: LlamaIndex's FunctionTool drops Annotated bounds, and an
# unbounded integer lets tiny-llm write digits to the context's end.
Days = Literal[1, 2, 3, 4, 5, 6, 7]


class WeatherArgs(BaseModel):
    """The tool's arguments, as its schema asks for them (a schema that does not close the object
    allows more, which are ignored)."""

    city: City
    unit: Literal["c", "f"]
    days: Days


class Forecast(BaseModel):
    """A forecast."""

    city: City
    sunny: bool
    days: int = Field(ge=1, le=7)


def get_weather(city: City, unit: Literal["c", "f"], days: Days) -> str:
    """The weather forecast for a city."""
    return f"{city}: clear for {days} days (unit {unit})"


def check_weather_call(name: str, arguments: dict[str, Any] | str) -> WeatherArgs:
    """A call of get_weather whose arguments fit its schema."""
    assert name == "get_weather"
    if isinstance(arguments, str):
        return WeatherArgs.model_validate_json(arguments)
    return WeatherArgs.model_validate(arguments)


class Recorder:
    """Every request a client sent through its httpx client, with the answer's status: give
    ``sync()`` or ``async_()`` to the OpenAI client the framework wraps."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def _request(self, request: httpx.Request) -> None:
        body = json.loads(request.content) if request.content else None
        self.requests.append({"method": request.method, "path": request.url.path, "body": body})

    def _response(self, response: httpx.Response) -> None:
        self.requests[-1]["status"] = response.status_code

    async def _arequest(self, request: httpx.Request) -> None:
        self._request(request)

    async def _aresponse(self, response: httpx.Response) -> None:
        self._response(response)

    def sync(self) -> httpx.Client:
        return httpx.Client(event_hooks={"request": [self._request], "response": [self._response]}, timeout=120)

    def async_(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(event_hooks={"request": [self._arequest], "response": [self._aresponse]}, timeout=120)

    def bodies(self) -> list[dict[str, Any]]:
        """The request bodies, after checking every request was answered 200."""
        assert [(r["path"], r.get("status")) for r in self.requests] == [(r["path"], 200) for r in self.requests]
        return [r["body"] for r in self.requests]
