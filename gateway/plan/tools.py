"""Tool calling, planned: what the chat template sees, what constrains the output, how it is read.

Every decision is vLLM's where vLLM has made one:

- ``tool_choice`` unset means ``auto`` when there are tools (OpenAI's default);
- ``none``: the tools are still rendered (unless the model's ``exclude_tools_when_tool_choice_none``
  setting says otherwise) and nothing is parsed;
- ``auto``: the model's tool-call parser reads the text (chosen per model, ``ServedModel.tool_parser``);
  a model with none gets a 400, as vLLM answers without ``--enable-auto-tool-choice``;
- ``required`` and a named function are forced through the backend's structured outputs: a JSON
  schema for an array of ``{"name", "parameters"}`` calls, or for the named function's arguments
  (vLLM's own schemas, so the same model answers the same way on both servers), and the output is
  read as that JSON. A backend that cannot enforce a schema gets a 400 rather than a hope. A
  ``response_format`` (or ``structured_outputs``) beside a forced choice is accepted, as OpenAI
  accepts it: the forced turn is a call, constrained by the call's schema alone (``sampling.py``
  puts it in the format's place), and the format constrains the turns that answer in text
  (``tool_choice`` ``auto`` or ``none``). Agent frameworks send both on every turn.

Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gateway.core.generation_plan import FORCED_NAMED, FORCED_REQUIRED, ToolPlan
from gateway.errors import InvalidRequestError
from gateway.models.catalog import ServedModel
from gateway.plan.requests import ChatCompletionRequest
from gateway.tools.params import ToolParams, tool_params
from gateway.tools.registry import PARSERS
from gateway.tools.schemas import named_call_schema, required_calls_schema

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""OpenAI's rule for function names."""


@dataclass(frozen=True, slots=True)
class ToolsDecision:
    """The three things tool calling changes in a request."""

    template_tools: list[dict[str, Any]] | None
    """What the template's ``tools`` variable gets (None: no tools section)."""
    plan: ToolPlan | None
    """None: the output is plain text."""
    structured: dict[str, Any] | None
    """A JSON schema the backend must enforce (forced tool choices)."""


NO_TOOLS = ToolsDecision(None, None, None)


def from_legacy_functions(body: ChatCompletionRequest) -> ChatCompletionRequest:
    """``functions`` / ``function_call`` (OpenAI's deprecated fields, still sent by older LangChain
    and LlamaIndex code) as the ``tools`` / ``tool_choice`` they mean, one call per turn; the
    request keeps ``functions`` set, so its answer takes the deprecated shape."""
    if body.functions is None:
        if body.function_call is not None:
            raise InvalidRequestError("`function_call` needs `functions`.", param="function_call")
        return body
    if body.tools is not None:
        raise InvalidRequestError(
            "Send `functions` or `tools`, not both (`functions` is deprecated).", param="functions"
        )
    if not body.functions:
        raise InvalidRequestError("`functions` must not be an empty array.", param="functions")
    choice: Any = body.function_call
    if isinstance(choice, dict) and isinstance(choice.get("name"), str):
        choice = {"type": "function", "function": {"name": choice["name"]}}
    elif choice not in (None, "none", "auto"):
        raise InvalidRequestError(
            f'Invalid value for `function_call`: {choice!r}; use "none", "auto" or {{"name": "my_function"}}.',
            param="function_call",
        )
    tools = [{"type": "function", "function": function} for function in body.functions]
    return body.model_copy(update={"tools": tools, "tool_choice": choice, "parallel_tool_calls": False})


def plan_tools(body: ChatCompletionRequest, model: ServedModel) -> ToolsDecision:
    """Decide tool calling for a request whose ``tools``/``tool_choice`` agree (``validate.py``)."""
    if not body.tools:
        return NO_TOOLS
    tools = [_check_tool(tool, index) for index, tool in enumerate(body.tools)]
    names = frozenset(tool["function"]["name"] for tool in tools)
    parallel = body.parallel_tool_calls is not False
    legacy = body.functions is not None
    choice: Any = body.tool_choice if body.tool_choice is not None else "auto"
    if choice == "none":
        return ToolsDecision(None if model.exclude_tools_when_none else tools, None, None)
    if choice == "auto":
        if model.tool_parser is None:
            raise InvalidRequestError(
                f"tool_choice 'auto' needs a tool-call parser for the model '{model.name}', and its chat template "
                "has no tool-call markers the gateway knows. Set one with GATEWAY_MODEL_FILES "
                f'(\'{{"{model.name}": {{"tool_call_parser": "hermes"}}}}\'; one of {", ".join(sorted(PARSERS))}), '
                "or use tool_choice 'required' or a named function.",
                param="tool_choice",
            )
        params = _params(tools) if PARSERS[model.tool_parser].typed else ()
        plan = ToolPlan(model.tool_parser, names, parallel, legacy_functions=legacy, params=params)
        return ToolsDecision(tools, plan, None)
    _check_enforceable(model)
    if choice == "required":
        functions = [(tool["function"]["name"], tool["function"].get("parameters")) for tool in tools]
        schema = required_calls_schema(functions, parallel=parallel)
        return ToolsDecision(tools, ToolPlan(FORCED_REQUIRED, names, parallel), schema)
    name = choice["function"]["name"]  # validate.py checked the shape and that the tool exists
    tool = next(tool for tool in tools if tool["function"]["name"] == name)
    schema = named_call_schema(tool["function"].get("parameters"))
    forced = ToolPlan(FORCED_NAMED, frozenset({name}), parallel, forced_name=name, legacy_functions=legacy)
    return ToolsDecision(tools, forced, schema)


def _params(tools: list[dict[str, Any]]) -> ToolParams:
    """The parameter types a ``typed`` format's parser reads values with."""
    return tool_params((tool["function"]["name"], tool["function"].get("parameters")) for tool in tools)


def _check_enforceable(model: ServedModel) -> None:
    if not model.enforces_guides:
        raise InvalidRequestError(
            f"tool_choice 'required' or a named function is forced with structured outputs, which the model "
            f"'{model.name}' (TensorRT-LLM {model.layout}: no guided decoding) cannot enforce; "
            "use tool_choice 'auto' or 'none'.",
            param="tool_choice",
        )


def _check_tool(tool: Any, index: int) -> dict[str, Any]:
    where = f"tools.{index}"
    if not isinstance(tool, dict) or tool.get("type", "function") != "function":
        kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
        raise InvalidRequestError(f"only tools of type 'function' are supported, got {kind!r}", param=f"{where}.type")
    function = tool.get("function")
    if not isinstance(function, dict):
        raise InvalidRequestError("a tool needs a 'function' object", param=f"{where}.function")
    name = function.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidRequestError(
            f"invalid function name {name!r}: use 1 to 64 letters, digits, underscores or dashes",
            param=f"{where}.function.name",
        )
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise InvalidRequestError(
            "a function's 'parameters' must be a JSON Schema object", param=f"{where}.function.parameters"
        )
    return {**tool, "type": "function"}
