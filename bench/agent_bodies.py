"""A coding agent's request bodies, built synthetically: ``agents``' workload.

Coding-agent CLIs send large bodies on every turn: a dozen or more tools whose JSON schemas
total tens of KB, a system prompt of 10-30 KB, and the conversation. Claude Code sends them to
``/v1/messages``, the Codex CLI to ``/v1/responses``. These bodies have those shapes and sizes but
none of any CLI's text: the prose is English words drawn with a fixed seed, the tools are a
coding agent's usual kinds (a shell, file reading and editing, search, sub-agents, a plan...)
with made-up schemas (nested objects, arrays of objects, enums, a description of a few hundred
characters on every property).

Every API gets the same 16 functions, the same system prompt and the same user message, in its
own shape, three ways: ``short`` (the user message alone), ``no tools`` (with the system prompt)
and ``tools`` (with the system prompt and the tools). The user message holds a ``scripted``-model
script (``tests/triton_models/README.md``) that answers one token, so a request's cost is the
request path, not a stream; ``request`` puts a serial number in it, so every request's last
stretch is new to the gateway's count cache, as a new turn is, while the system prompt and the
tools repeat, as they do turn after turn.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

MODEL = "scripted"
"""Answers what its script says (one token here); a context of 1,000,000 tokens."""
SEED = 29
SCRIPT = '<script>{"responses": [{"utf8": ["ok"]}]}</script>'
"""One response of one token, finish reason ``stop``."""
ANSWER = "ok"

API_PATHS = {"messages": "/v1/messages", "responses": "/v1/responses", "chat": "/v1/chat/completions"}
SHAPES = ("short", "no tools", "tools")

_WORDS = (
    "the a an of to in for on with by from as at into over after before when while if then else and or but not "
    "file files path paths directory repository project module package function class method test tests command "
    "commands shell output input line lines text string value values result results error errors change changes "
    "edit edits read write run runs search pattern match matches tool tools call calls user agent task tasks "
    "plan step steps code source build check checks branch commit diff patch review context session turn "
    "always never only first last each every other same new old current existing absolute relative exact "
    "must should may can use uses used prefer avoid keep make makes give gives return returns send sends "
    "before after until unless instead rather than because so that which what where how long short large small "
    "quickly carefully safely explicitly silently directly"
).split()


def prose(size: int, rng: random.Random) -> str:
    """About ``size`` characters of sentences of English words (not a CLI's text)."""
    sentences: list[str] = []
    length = 0
    while length < size:
        words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 22))]
        sentence = " ".join(words).capitalize() + rng.choice((".", ".", ".", ":", ";"))
        sentences.append(sentence)
        length += len(sentence) + 1
    return " ".join(sentences)[:size].rstrip() + "."


@dataclass(frozen=True)
class Param:
    """One property: ``kind`` is a JSON type, ``enum``, ``array`` (of strings), ``objects`` (an
    array of objects with ``fields``) or ``object`` (nested, with ``fields``)."""

    name: str
    kind: str
    required: bool = False
    options: tuple[str, ...] = ()
    fields: tuple[Param, ...] = ()


def _p(name: str, kind: str = "string", required: bool = False, *options: str) -> Param:
    return Param(name, kind, required, tuple(options))


def _nested(name: str, kind: str, required: bool, *fields: Param) -> Param:
    return Param(name, kind, required, (), fields)


TOOLS: tuple[tuple[str, int, tuple[Param, ...]], ...] = (
    # (name, description characters, properties): the kinds a coding agent carries.
    ("Shell", 2400, (_p("command", "string", True), _p("timeout_ms", "integer"), _p("description"),
                     _p("background", "boolean"), _p("sandbox", "enum", False, "none", "read-only", "workspace"))),
    ("ShellOutput", 500, (_p("shell_id", "string", True), _p("filter"), _p("block", "boolean"))),
    ("StopShell", 350, (_p("shell_id", "string", True),)),
    ("ReadFile", 1400, (_p("file_path", "string", True), _p("offset", "integer"), _p("limit", "integer"),
                        _p("pages"))),
    ("WriteFile", 900, (_p("file_path", "string", True), _p("content", "string", True))),
    ("EditFile", 1300, (_p("file_path", "string", True), _p("old_string", "string", True),
                        _p("new_string", "string", True), _p("replace_all", "boolean"))),
    ("MultiEdit", 1500, (_p("file_path", "string", True),
                         _nested("edits", "objects", True, _p("old_string", "string", True),
                                 _p("new_string", "string", True), _p("replace_all", "boolean")))),
    ("FindFiles", 700, (_p("pattern", "string", True), _p("path"))),
    ("SearchText", 1800, (_p("pattern", "string", True), _p("path"), _p("glob"),
                          _p("output_mode", "enum", False, "content", "files_with_matches", "count"),
                          _p("context_before", "integer"), _p("context_after", "integer"),
                          _p("case_insensitive", "boolean"), _p("file_type"), _p("head_limit", "integer"),
                          _p("multiline", "boolean"))),
    ("SubAgent", 3000, (_p("description", "string", True), _p("prompt", "string", True),
                        _p("agent_type", "enum", True, "general", "explore", "plan", "review"),
                        _p("model", "enum", False, "small", "large", "inherit"),
                        _p("background", "boolean"))),
    ("TodoList", 2600, (_nested("todos", "objects", True, _p("content", "string", True),
                                _p("status", "enum", True, "pending", "in_progress", "completed"),
                                _p("active_form", "string", True),
                                _p("priority", "enum", False, "high", "medium", "low")),)),
    ("FetchPage", 900, (_p("url", "string", True), _p("prompt", "string", True))),
    ("WebLookup", 800, (_p("query", "string", True), _p("allowed_domains", "array"), _p("blocked_domains", "array"))),
    ("NotebookCell", 700, (_p("notebook_path", "string", True), _p("cell_id"), _p("new_source", "string", True),
                           _p("cell_type", "enum", False, "code", "markdown"),
                           _p("edit_mode", "enum", False, "replace", "insert", "delete"))),
    ("AskUser", 1200, (_nested("questions", "objects", True, _p("question", "string", True),
                               _p("header", "string", True),
                               _nested("options", "objects", True, _p("label", "string", True),
                                       _p("description", "string", True)),
                               _p("multi_select", "boolean", True)),
                       _nested("answers", "object", False, _p("question"), _p("answer")))),
    ("FinishPlan", 900, (_nested("plan", "object", True, _p("summary", "string", True),
                                 _nested("steps", "objects", True, _p("title", "string", True),
                                         _p("detail"), _p("risk", "enum", False, "low", "medium", "high"))),
                         _nested("allowed_prompts", "objects", False, _p("tool", "enum", True, "Shell"),
                                 _p("prompt", "string", True)))),
)  # fmt: skip
"""16 functions, ~50 KB of schemas (``stats`` gives the exact sizes)."""

NAMESPACED = 4
"""The last four functions, in the Responses API, are a ``namespace`` tool's (an MCP server's)."""


def schema(params: tuple[Param, ...], rng: random.Random) -> dict[str, Any]:
    """An object schema: every property described (150-400 characters), nested where asked."""
    properties: dict[str, Any] = {}
    for param in params:
        described = {"description": prose(rng.randint(150, 400), rng)}
        if param.kind == "enum":
            properties[param.name] = {"type": "string", "enum": list(param.options), **described}
        elif param.kind == "array":
            properties[param.name] = {"type": "array", "items": {"type": "string"}, **described}
        elif param.kind == "objects":
            properties[param.name] = {"type": "array", "items": schema(param.fields, rng), **described}
        elif param.kind == "object":
            properties[param.name] = {**schema(param.fields, rng), **described}
        else:
            properties[param.name] = {"type": param.kind, **described}
        if param.kind == "integer":
            properties[param.name]["minimum"] = 0
    out: dict[str, Any] = {"type": "object", "properties": properties}
    required = [p.name for p in params if p.required]
    if required:
        out["required"] = required
    out["additionalProperties"] = False
    return out


def functions(seed: int = SEED) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, description, parameters schema) of the 16 functions, the same for the same seed."""
    rng = random.Random(seed)
    out = []
    for name, size, params in TOOLS:
        description = prose(size, rng)
        parameters = {"$schema": "http://json-schema.org/draft-07/schema#", **schema(params, rng)}
        out.append((name, description, parameters))
    return out


def system_prompt(size: int = 20_000, seed: int = SEED + 1) -> str:
    """A system prompt of ``size`` characters: headed sections of paragraphs and bullet lists."""
    rng = random.Random(seed)
    parts = [prose(300, rng)]
    length = len(parts[0])
    while length < size:
        section = [f"# {prose(30, rng).rstrip('.').title()}", prose(rng.randint(400, 900), rng)]
        section += [f"- {prose(rng.randint(60, 200), rng)}" for _ in range(rng.randint(3, 7))]
        parts.append("\n".join(section))
        length += len(parts[-1]) + 2
    return "\n\n".join(parts)[:size]


def user_text(serial: int) -> str:
    return f"{SCRIPT}\nRequest {serial}: find where the retry limit is set and raise it to five."


class Bodies:
    """Every API's bodies, three ways; ``request`` gives one with a fresh serial number."""

    def __init__(self, system_bytes: int = 20_000) -> None:
        self.functions = functions()
        self.system = system_prompt(system_bytes)

    def request(self, api: str, shape: str, serial: int) -> bytes:
        build = {"messages": self.messages, "responses": self.responses, "chat": self.chat}[api]
        return json.dumps(build(shape, user_text(serial)), separators=(",", ":")).encode()

    def messages(self, shape: str, text: str) -> dict[str, Any]:
        """Claude Code's shape: ``system`` as text blocks with ``cache_control``, adaptive
        thinking, high effort, ``max_tokens`` 32000, streamed."""
        body: dict[str, Any] = {
            "model": MODEL,
            "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
            "max_tokens": 32000,
            "stream": True,
            "metadata": {"user_id": "user_0123456789abcdef_session_42"},
            "thinking": {"type": "adaptive"},
            "output_config": {"effort": "high"},
        }
        if shape != "short":
            header = {"type": "text", "text": "You are a coding agent working in the user's repository."}
            body["system"] = [
                {**header, "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": self.system, "cache_control": {"type": "ephemeral"}},
            ]
        if shape == "tools":
            body["tools"] = [
                {"name": name, "description": description, "input_schema": parameters}
                for name, description, parameters in self.functions
            ]
        return body

    def responses(self, shape: str, text: str) -> dict[str, Any]:
        """The Codex CLI's shape: flat function tools, a ``namespace`` tool of 4 functions and a
        ``web_search`` tool, reasoning summaries, encrypted reasoning, nothing stored, streamed."""
        body: dict[str, Any] = {
            "model": MODEL,
            "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}],
            "stream": True,
            "store": False,
            "reasoning": {"summary": "auto"},
            "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "0199a2b4-5c6d-7e8f-9012-3456789abcde",
        }
        if shape != "short":
            body["instructions"] = self.system
        if shape == "tools":

            def function(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
                return {
                    "type": "function",
                    "name": name,
                    "description": description,
                    "strict": False,
                    "parameters": parameters,
                }

            flat, spaced = self.functions[:-NAMESPACED], self.functions[-NAMESPACED:]
            body["tools"] = [
                *(function(*f) for f in flat),
                {
                    "type": "namespace",
                    "name": "mcp__workspace",
                    "description": "Tools of the workspace server.",
                    "tools": [function(*f) for f in spaced],
                },
                {"type": "web_search"},
            ]
            body["tool_choice"] = "auto"
            body["parallel_tool_calls"] = False
        return body

    def chat(self, shape: str, text: str) -> dict[str, Any]:
        """Chat completions, for reference: the system prompt as a system message, the same
        functions as chat's function tools, usage in the last chunk, no ``max_tokens``."""
        messages: list[dict[str, Any]] = [{"role": "user", "content": text}]
        if shape != "short":
            messages.insert(0, {"role": "system", "content": self.system})
        body: dict[str, Any] = {
            "model": MODEL,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if shape == "tools":
            body["tools"] = [
                {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}
                for name, description, parameters in self.functions
            ]
        return body

    def stats(self) -> dict[str, int]:
        """The sizes the report states: the tools' JSON, the system prompt, each body."""
        schemas = sum(len(json.dumps(p, separators=(",", ":"))) for _, _, p in self.functions)
        descriptions = sum(len(d) for _, d, _ in self.functions)
        out = {"functions": len(self.functions), "schema_bytes": schemas, "description_bytes": descriptions}
        tools = self.messages("tools", "")["tools"]
        out["tools_bytes"] = len(json.dumps(tools, separators=(",", ":")))
        out["system_bytes"] = len(self.system)
        for api in API_PATHS:
            out[f"{api}_tools_body_bytes"] = len(self.request(api, "tools", 0))
            out[f"{api}_no_tools_body_bytes"] = len(self.request(api, "no tools", 0))
        return out
