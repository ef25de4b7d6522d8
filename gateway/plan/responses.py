"""A Responses request → the chat request it means → the same ``GenerationPlan`` chat gets.

The Responses API is another spelling of a chat completion with one choice, so it is planned by
``prepare.prepare_chat`` itself: the model, the template, the token budget, tool calling (flat
function tools become chat's nested ones), structured outputs (``text.format`` becomes
``response_format``) and every check are chat's, and the core and the backend cannot tell the two
apart. What is the Responses API's own is decided here: the fields the gateway cannot honour are
refused by name, a background response (which must be stored) is put in the jobs' band, the
conversation is assembled (``instructions``, the stored chain of ``previous_response_id``, the
``input`` items: ``responses_input.py``), and the parts of the Response object that echo the
request are fixed once. A 4xx raised by chat's planning names chat's
field; it is renamed to the Responses field the client sent (``messages`` → ``input``,
``max_completion_tokens`` → ``max_output_tokens``, ``tools.0.function.name`` → ``tools.0.name``).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

from gateway.config import Settings
from gateway.core.generation_plan import GenerationPlan
from gateway.errors import InvalidRequestError
from gateway.images.fetch import ImageFetcher
from gateway.models.catalog import ModelCatalog
from gateway.plan.count import count_chat_prompt, default_model
from gateway.plan.prepare import RequestContext, prepare_chat, session_key_of
from gateway.plan.requests import SAMPLING_EXTRAS, ChatCompletionRequest
from gateway.plan.responses_input import (
    history_items,
    load_chain,
    new_id,
    normalize_input,
    resolve_references,
    to_chat_messages,
)
from gateway.plan.responses_request import InputTokensRequest, ResponsesRequest, TextConfig
from gateway.reasoning.seal import ReasoningSeal
from gateway.store.base import ResponseStore

logger = logging.getLogger(__name__)

TOOL_CHOICE_OPTIONS = ("auto", "none", "required")
BUILT_IN_TOOLS = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_2025_08_26",
        "web_search_preview_2025_03_11",
        "file_search",
        "code_interpreter",
        "image_generation",
        "computer_use_preview",
        "computer",
        "mcp",
        "local_shell",
        "shell",
        "apply_patch",
        "tool_search",
    }
)
"""Tools OpenAI runs on its own servers (or, for the shell ones, a client runs on a protocol of its
own): left out of the prompt here."""
ENCRYPTED_REASONING = "reasoning.encrypted_content"
_WARNED: set[str] = set()
"""The built-in tools already warned about in this process (the response header says it every time)."""
INCLUDE_UNSUPPORTED = ("message.output_text.logprobs",)
"""``include`` values asking for something the gateway would have to produce and does not. The
others ask for items of built-in tools, images or reasoning, which never occur here."""


@dataclass(frozen=True, slots=True)
class ResponsesPlan:
    """One Responses request, decided: chat's plan, and what the Response object and the store need."""

    generation: GenerationPlan
    response_id: str
    created_at: int
    head: dict[str, Any]
    """The Response object's fields that echo the request (all but output, status, usage, errors)."""
    input_items: list[dict[str, Any]]
    """This request's own input items, normalized, each with an id: what the store keeps."""
    previous_response_id: str | None
    store: bool
    """Persist the response when it ends (asked for, and the gateway has a store)."""
    owner: str
    """Whose response it is: the sha256 of the API key ("" when the gateway has no keys)."""
    tools: ResponsesTools = dataclasses.field(default_factory=lambda: ResponsesTools([], {}, ()))
    """The tools as offered to the model: what names a call answers with, what was left out."""
    seal_reasoning: bool = False
    """``include`` asks for ``reasoning.encrypted_content``: each reasoning item carries its text
    sealed (``reasoning.seal``)."""
    summarize_reasoning: bool = False
    """``reasoning.summary`` is set: each reasoning item's ``summary`` carries its text (these
    models write no separate summary)."""
    background: bool = False
    """``background: true``: the response runs in a task of the gateway's, in the jobs' band
    (``settings.jobs_priority``), and is stored at every change of status."""


@dataclass(frozen=True, slots=True)
class ResponsesTools:
    """The request's tools as the model gets them."""

    chat: list[dict[str, Any]]
    """Chat's function tools: the request's functions and its namespaces' functions."""
    namespaced: dict[str, tuple[str, str]]
    """A namespaced function's name as the model knows it → its namespace and its own name, as
    the call goes back to the client (``function_call.namespace`` and ``name``)."""
    ignored: tuple[str, ...]
    """Built-in tools (``web_search``...) left out: OpenAI runs them on its servers; the gateway
    cannot, and a client that offers them by default (the Codex CLI) still works without."""

    def model_name(self, namespace: str, name: str) -> str:
        """The name the model knows a namespace's function by."""
        for known, (space, own) in self.namespaced.items():
            if space == namespace and own == name:
                return known
        return name


@dataclass(frozen=True, slots=True)
class ResponsesConversation:
    """A Responses request as the chat request it means, and where its messages came from."""

    chat: ChatCompletionRequest
    origins: list[str]
    """The Responses field each chat message came from (``input.N``, ``instructions``,
    ``previous_response_id``): what a 400 about a message names."""
    own_items: list[dict[str, Any]]
    root: str
    """The conversation's first response id (this one's, when it has no previous response)."""
    tools: ResponsesTools


async def to_conversation(
    body: ResponsesRequest,
    response_id: str,
    store: ResponseStore | None,
    owner: str,
    settings: Settings,
    seal: ReasoningSeal,
) -> ResponsesConversation:
    """The conversation so far (instructions, the stored chain of ``previous_response_id``, the
    input items) as one chat request: what a generation plans and what ``input_tokens`` counts."""
    check_supported(body)
    tools = responses_tools(body.tools or [], body.tool_choice)
    own_items = normalize_input(body.input, response_id)
    chain = await load_chain(store, body.previous_response_id, owner, settings.max_messages)
    history = history_items(chain)
    own_items = await resolve_references(own_items, history, store, owner)
    messages, sources = to_chat_messages(for_model(history + own_items, tools, seal, body.model))
    if body.instructions is not None:
        messages.insert(0, {"role": "system", "content": body.instructions})
    if not messages:
        raise InvalidRequestError("'input' must not be empty", param="input")
    origins = ["instructions"] * (body.instructions is not None) + [
        f"input.{source - len(history)}" if source >= len(history) else "previous_response_id" for source in sources
    ]
    root = chain[-1].id if chain else response_id
    return ResponsesConversation(to_chat_request(body, messages, tools), origins, own_items, root, tools)


async def prepare_response(
    body: ResponsesRequest,
    context: RequestContext,
    catalog: ModelCatalog,
    settings: Settings,
    store: ResponseStore | None,
    owner: str,
    images: ImageFetcher | None = None,
    seal: ReasoningSeal | None = None,
) -> ResponsesPlan:
    seal = seal or ReasoningSeal.from_setting(settings.reasoning_secret)
    response_id = new_id("resp")
    conversation = await to_conversation(body, response_id, store, owner, settings, seal)
    for tool in conversation.tools.ignored:
        if tool not in _WARNED:  # once per tool type: agents offer them on every turn
            _WARNED.add(tool)
            logger.warning("built-in tool %r left out of the prompt: the gateway cannot run it", tool)
    # A conversation's turns share its root response's id as their session key, so a chain of
    # previous_response_id stays on one Triton replica without the client naming a session.
    session = session_key_of(context, body) or f"response:{conversation.root}"
    context = dataclasses.replace(context, session_key=session)
    chat = conversation.chat
    stored = body.store and store is not None
    if body.background:
        if not stored:
            raise InvalidRequestError(
                "background responses must be stored, and storing responses is turned off on this gateway",
                param="background",
            )
        # No client waits on it: it runs in the jobs' band, whatever priority the request named,
        # and streams from Triton even when its POST does not (its events are logged as they come).
        chat = chat.model_copy(update={"priority": settings.jobs_priority, "stream": True})
    try:
        generation = await prepare_chat(chat, context, catalog, settings, images)
    except InvalidRequestError as exc:
        exc.param = responses_param(exc.param, conversation.origins)
        raise
    created_at = int(time.time())
    return ResponsesPlan(
        generation=dataclasses.replace(generation, api="responses", completion_id=response_id),
        response_id=response_id,
        created_at=created_at,
        head=response_head(body, response_id, created_at, stored),
        input_items=conversation.own_items,
        previous_response_id=body.previous_response_id,
        store=stored,
        owner=owner,
        tools=conversation.tools,
        seal_reasoning=ENCRYPTED_REASONING in (body.include or ()),
        summarize_reasoning=body.reasoning is not None and body.reasoning.summary is not None,
        background=bool(body.background),
    )


async def count_input_tokens(
    body: InputTokensRequest,
    catalog: ModelCatalog,
    settings: Settings,
    store: ResponseStore | None,
    owner: str,
    seal: ReasoningSeal | None = None,
) -> int:
    """``POST /v1/responses/input_tokens``: the ``usage.input_tokens`` the same request would
    report, counted without generating; refused as the request itself would be."""
    seal = seal or ReasoningSeal.from_setting(settings.reasoning_secret)
    request = body.as_responses_request(default_model(body.model, await catalog.models()))
    conversation = await to_conversation(request, new_id("resp"), store, owner, settings, seal)
    try:
        return await count_chat_prompt(conversation.chat, catalog, settings)
    except InvalidRequestError as exc:
        exc.param = responses_param(exc.param, conversation.origins)
        raise


def check_supported(body: ResponsesRequest) -> None:
    """Fields of OpenAI's API that ask for something the gateway cannot do: a 400 naming each."""
    refusals = {
        "background": (
            body.background is True and not body.store,
            "background responses must be stored: send background with store true (the default)",
        ),
        "top_logprobs": (body.top_logprobs is not None, "logprobs are not supported on /v1/responses"),
        "prompt": (_set(body.prompt), "stored prompt templates are not supported; send the input itself"),
        "conversation": (
            _set(body.conversation),
            "the Conversations API is not supported; continue a conversation with previous_response_id",
        ),
        "truncation": (
            body.truncation == "auto",
            "truncation 'auto' is not supported: an input over the context is a 400",
        ),
    }
    for param, (refused, message) in refusals.items():
        if refused:
            raise InvalidRequestError(message, param=param)
    for index, value in enumerate(body.include or ()):
        if value in INCLUDE_UNSUPPORTED:
            raise InvalidRequestError(f"include {value!r} is not supported", param=f"include.{index}")


def _set(value: Any) -> bool:
    """Whether an option object asks for anything: ``{}`` or all-null members ask for nothing."""
    if isinstance(value, dict):
        return any(member is not None for member in value.values())
    return value is not None


def to_chat_request(
    body: ResponsesRequest, messages: list[dict[str, Any]], tools: ResponsesTools | None = None
) -> ChatCompletionRequest:
    """The chat request with the same meaning. ``tools: []`` (or only built-in tools) is no
    tools, and ``tool_choice`` ``auto`` or ``none`` without tools is no choice (clients send both
    by default; chat would refuse them)."""
    offered = tools if tools is not None else responses_tools(body.tools or [], body.tool_choice)
    tools_list = offered.chat or None
    choice = body.tool_choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("namespace"), str):
        choice = {"type": "function", "name": offered.model_name(choice["namespace"], str(choice.get("name")))}
    if tools_list is None and choice in ("auto", "none"):
        choice = None
    fields: dict[str, Any] = {name: getattr(body, name) for name in SAMPLING_EXTRAS if name in body.model_fields_set}
    fields.update(
        model=body.model,
        messages=messages,
        stream=body.stream,
        max_completion_tokens=body.max_output_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        tools=tools_list,
        tool_choice=chat_tool_choice(choice),
        parallel_tool_calls=body.parallel_tool_calls,
        response_format=chat_response_format(body.text),
        reasoning_effort=body.reasoning.effort if body.reasoning else None,
        user=body.user,
    )
    # Validated again as a chat request: every value already passed the same field rules here.
    return ChatCompletionRequest.model_validate(fields)


def responses_tools(tools: list[Any], choice: Any = None) -> ResponsesTools:
    """The tools as the model gets them: flat function tools (``{"type": "function", "name",
    "parameters"...}``) become chat's nested ones, and so do a ``namespace`` tool's functions,
    under their own names (or ``<namespace>__<name>`` where two would share one). Built-in tools
    are left out, unless ``tool_choice`` names one: that the gateway cannot honour (400). Any
    other type is a 400 naming it; a function itself is checked by chat's planning."""
    functions: list[tuple[str | None, dict[str, Any], str]] = []
    ignored: list[str] = []
    for index, tool in enumerate(tools):
        where = f"tools.{index}"
        kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
        if kind == "function":
            functions.append((None, tool, where))
        elif kind == "namespace":
            functions.extend(
                (_namespace_name(tool, where), member, f"{where}.tools.{i}")
                for i, member in enumerate(_namespace_members(tool, where))
            )
        elif isinstance(kind, str) and kind in BUILT_IN_TOOLS:
            ignored.append(kind)
        else:
            raise InvalidRequestError(
                f"tools of type {kind!r} are not supported: use function and namespace tools (built-in tools "
                "such as web_search are left out: they run on OpenAI's servers)",
                param=f"{where}.type",
            )
    if isinstance(choice, dict) and choice.get("type") in BUILT_IN_TOOLS:
        raise InvalidRequestError(
            f"tool_choice {choice['type']!r} asks for a built-in tool, which this gateway cannot run",
            param="tool_choice.type",
        )
    counts: dict[str, int] = {}
    for _, tool, _ in functions:
        counts[str(tool.get("name"))] = counts.get(str(tool.get("name")), 0) + 1
    chat: list[dict[str, Any]] = []
    namespaced: dict[str, tuple[str, str]] = {}
    for namespace, tool, _ in functions:
        function = {key: tool[key] for key in ("name", "description", "parameters", "strict") if key in tool}
        if namespace is not None:
            own = str(tool.get("name"))
            name = own if counts[own] == 1 else f"{namespace}__{own}"
            function["name"] = name
            namespaced[name] = (namespace, own)
        chat.append({"type": "function", "function": function})
    return ResponsesTools(chat, namespaced, tuple(ignored))


def _namespace_name(tool: dict[str, Any], where: str) -> str:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequestError("a namespace tool needs a 'name'", param=f"{where}.name")
    return name


def _namespace_members(tool: dict[str, Any], where: str) -> list[dict[str, Any]]:
    members = tool.get("tools")
    if not isinstance(members, list):
        raise InvalidRequestError("a namespace tool needs a 'tools' list", param=f"{where}.tools")
    for index, member in enumerate(members):
        if not isinstance(member, dict) or member.get("type") != "function":
            kind = member.get("type") if isinstance(member, dict) else None
            raise InvalidRequestError(
                f"tools of type {kind!r} are not supported in a namespace: only function tools are",
                param=f"{where}.tools.{index}.type",
            )
    return members


def for_model(
    items: list[dict[str, Any]], tools: ResponsesTools, seal: ReasoningSeal, model: str
) -> list[dict[str, Any]]:
    """The conversation's items as the model reads them: a namespaced call under the name the
    model knows, a reasoning item with sealed content under its text (``encrypted_content``
    that is not this gateway's seal for the model: the item's own text, and a warning)."""
    out = []
    for item in items:
        if item["type"] == "function_call" and "namespace" in item:
            item = {**item, "name": tools.model_name(item["namespace"], item["name"])}
        elif item["type"] == "reasoning" and "encrypted_content" in item:
            text = seal.open(item["encrypted_content"], model)
            if text is None:
                logger.warning(
                    "a reasoning item's encrypted_content did not open (another key or model): its text is used"
                )
            else:
                item = {**item, "content": [{"type": "reasoning_text", "text": text}]}
        out.append(item)
    return out


def chat_tool_choice(choice: Any) -> Any:
    """``{"type": "function", "name": ...}`` → chat's ``{"type": "function", "function": {"name"}}``."""
    if choice is None or choice in TOOL_CHOICE_OPTIONS:
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        if isinstance(choice.get("function"), dict):
            return choice  # already chat's shape
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequestError("a function tool_choice needs a 'name'", param="tool_choice.name")
        return {"type": "function", "function": {"name": name}}
    kind = choice.get("type") if isinstance(choice, dict) else choice
    raise InvalidRequestError(
        f"tool_choice {kind!r} is not supported: use 'auto', 'none', 'required' or "
        '{"type": "function", "name": "..."}',
        param="tool_choice",
    )


def chat_response_format(text: TextConfig | None) -> dict[str, Any] | None:
    """``text.format`` → chat's ``response_format`` (``json_schema`` is flat here, nested there)."""
    fmt = text.format if text is not None else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"type": "json_object"}
    if fmt.schema_ is None:
        raise InvalidRequestError("a json_schema text format needs a 'schema'", param="text.format.schema")
    json_schema: dict[str, Any] = {"name": fmt.name or "response", "schema": fmt.schema_}
    if fmt.strict is not None:
        json_schema["strict"] = fmt.strict
    if fmt.description is not None:
        json_schema["description"] = fmt.description
    return {"type": "json_schema", "json_schema": json_schema}


_PARAMS = (
    (re.compile(r"^(max_tokens|max_completion_tokens)$"), "max_output_tokens"),
    (re.compile(r"^response_format(\..*)?$"), "text.format"),
    (re.compile(r"^tools\.(\d+)\.function$"), r"tools.\1"),
    (re.compile(r"^tools\.(\d+)\.function\.(.*)$"), r"tools.\1.\2"),
    (re.compile(r"^tool_choice\.function(\.(.*))?$"), r"tool_choice.\2"),
)


def responses_param(param: str | None, origins: list[str]) -> str | None:
    """Chat's name for a field → the Responses request's (``origins``: the item each chat message
    came from, ``input.N``, ``instructions`` or ``previous_response_id``)."""
    if param is None:
        return None
    if param == "messages" or param.startswith("messages."):
        index = param.split(".")[1] if "." in param else ""
        if not index.isdigit() or int(index) >= len(origins):
            return "input"
        origin, rest = origins[int(index)], param.split(".", 2)[2:]
        # A part of an item's content keeps its place: a message with images keeps its parts.
        if origin.startswith("input.") and rest and rest[0].startswith("content."):
            return f"{origin}.{rest[0]}"
        return origin
    for pattern, replacement in _PARAMS:
        if pattern.match(param):
            return pattern.sub(replacement, param).rstrip(".")
    return param


def response_head(body: ResponsesRequest, response_id: str, created_at: int, stored: bool) -> dict[str, Any]:
    """The Response object's fields that echo the request, in OpenAI's order."""
    fmt = body.text.format if body.text is not None and body.text.format is not None else None
    text: dict[str, Any] = {"format": fmt.model_dump(by_alias=True, exclude_none=True) if fmt else {"type": "text"}}
    if body.text is not None and body.text.verbosity is not None:
        text["verbosity"] = body.text.verbosity
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": "in_progress",
        "background": body.background is True,
        "completed_at": None,
        "error": None,
        "incomplete_details": None,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "max_tool_calls": body.max_tool_calls,
        "model": body.model,
        "output": [],
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "previous_response_id": body.previous_response_id,
        "reasoning": {"effort": body.reasoning.effort, "summary": body.reasoning.summary} if body.reasoning else None,
        "store": stored,
        "temperature": body.temperature,
        "text": text,
        "tool_choice": body.tool_choice if body.tool_choice is not None else "auto",
        "tools": body.tools or [],
        "top_p": body.top_p,
        "truncation": body.truncation or "disabled",
        "usage": None,
        "user": body.user,
        "metadata": body.metadata or {},
    }
