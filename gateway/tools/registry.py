"""Parser names, what each needs from the planner, and detection from a chat template.

``PARSERS[name]`` is a ``ParserSpec``: call it with the request's tool names to get a fresh
parser for one choice. Its attributes tell the planner how to run the request:

- ``needs_special_tokens``: the format's markers are special tokens in some tokenizers, which the
  default ``skip_special_tokens=True`` decode would remove before the parser sees them, so the
  request must decode with ``skip_special_tokens=False``. Mistral's ``[TOOL_CALLS]``/``[ARGS]``
  (without them the calls cannot be found at all); Llama's ``<|python_tag|>`` and
  ``<|python_start|>`` (optional for the parser, kept so they are read as markup); ``<tool_call>``,
  an ordinary added token in Qwen's tokenizer but a special one where a fine-tune reused a
  reserved special token for it (Hermes 2 Pro on Llama 3).
- ``forced``: only meaningful when the backend's structured outputs enforce the shape
  (``tool_choice`` required or named, schemas in ``gateway.tools.schemas``); never detected,
  never chosen for ``auto``.
- ``families`` and ``markers``: documentation (``/v1/models`` metadata, docs/API.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gateway.tools.parsers.forced_named import ForcedNamedParser
from gateway.tools.parsers.forced_required import ForcedRequiredParser
from gateway.tools.parsers.harmony import HarmonyParser
from gateway.tools.parsers.hermes import HermesParser
from gateway.tools.parsers.llama3_json import Llama3JsonParser
from gateway.tools.parsers.mistral import MistralParser
from gateway.tools.parsers.pythonic import PythonicParser
from gateway.tools.types import ToolCallParser


@dataclass(frozen=True, slots=True)
class ParserSpec:
    """A parser factory with the facts the planner needs about its format."""

    name: str
    factory: Callable[[frozenset[str]], ToolCallParser]
    needs_special_tokens: bool
    forced: bool
    families: str
    markers: str

    def __call__(self, tool_names: frozenset[str]) -> ToolCallParser:
        return self.factory(tool_names)


_SPECS = (
    ParserSpec(
        "hermes",
        HermesParser,
        needs_special_tokens=True,
        forced=False,
        families="Qwen 2.5, Qwen 3, Hermes 2 Pro / Hermes 3, and fine-tunes on their format",
        markers='<tool_call>{"name": ..., "arguments": {...}}</tool_call>',
    ),
    ParserSpec(
        "llama3_json",
        Llama3JsonParser,
        needs_special_tokens=True,
        forced=False,
        families="Llama 3.1, 3.2, 3.3; Llama 4 with its JSON template",
        markers='optional <|python_tag|>, then {"name": ..., "parameters": {...}}, several joined by ;',
    ),
    ParserSpec(
        "mistral",
        MistralParser,
        needs_special_tokens=True,
        forced=False,
        families="Mistral 7B v0.3, Mixtral 8x22B, Nemo (JSON array); Small 3.x, Magistral, Devstral (v11+)",
        markers='[TOOL_CALLS][{"name": ..., "arguments": {...}}] or [TOOL_CALLS]name[ARGS]{...}',
    ),
    ParserSpec(
        "pythonic",
        PythonicParser,
        needs_special_tokens=True,
        forced=False,
        families="Llama 4 (pythonic prompt), Llama 3.2 pythonic templates",
        markers='optional <|python_start|>, then [name(arg="value"), ...]',
    ),
    ParserSpec(
        "openai",
        HarmonyParser,
        needs_special_tokens=True,
        forced=False,
        families="gpt-oss (harmony; needs the openai reasoning parser, which passes its calls on)",
        markers="<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>",
    ),
    ParserSpec(
        "forced_named",
        ForcedNamedParser,
        needs_special_tokens=False,
        forced=True,
        families="any model, tool_choice naming a function (structured outputs)",
        markers="the arguments object alone: {...}",
    ),
    ParserSpec(
        "forced_required",
        ForcedRequiredParser,
        needs_special_tokens=False,
        forced=True,
        families='any model, tool_choice "required" (structured outputs)',
        markers='[{"name": ..., "parameters": {...}}, ...]',
    ),
)

PARSERS: Mapping[str, ParserSpec] = MappingProxyType({spec.name: spec for spec in _SPECS})


def make_parser(name: str, tool_names: frozenset[str]) -> ToolCallParser:
    """A fresh parser for one choice. KeyError for an unknown name (settings validate names
    against ``PARSERS`` at startup, so a request never meets one)."""
    return PARSERS[name](tool_names)


_PYTHONIC_PROMPT = re.compile(r"\[\s*func_name1\s*\(")


def detect_parser(template_source: str) -> str | None:
    """The parser a chat template's own markers call for, or None (no tool format we parse).

    ``template_source`` is the template that renders tools: for a repository with named
    templates (Hermes 2 Pro's ``default`` and ``tool_use``), the ``tool_use`` one, or all joined.

    The rules go from the most specific marker to the least, each one what the template itself
    tells the model to write:

    0. harmony's ``<|channel|>`` → ``openai`` (gpt-oss).

    1. ``<tool_call>`` with a JSON ``"name"`` → ``hermes`` (Qwen 2.5/3, Hermes). Not when the
       block holds XML (``<function=`` in Qwen3-Coder, ``<arg_key>`` in GLM 4.5): another format.
    2. ``[TOOL_CALLS]`` → ``mistral``.
    3. A pythonic prompt (``[func_name1(...``, Meta's wording) → ``pythonic``.
    4. Llama 4 (``<|header_start|>``, never in Llama 3): ``llama3_json`` when the template asks
       for ``"parameters"`` JSON (the template shipped with Llama 4 does), else ``pythonic``
       (Llama 4's documented native format).
    5. Llama 3.x (``<|start_header_id|>``) with ``<|python_tag|>`` or the ``"parameters"`` JSON
       prompt → ``llama3_json``. Llama 3.0's template has neither (no tool calling): None.
    """
    source = template_source
    if "<|channel|>" in source:
        return "openai"
    if "<tool_call>" in source:
        if "<function=" in source or "<arg_key>" in source:
            return None
        return "hermes" if '"name"' in source else None
    if "[TOOL_CALLS]" in source:
        return "mistral"
    if _PYTHONIC_PROMPT.search(source):
        return "pythonic"
    if "<|header_start|>" in source:
        return "llama3_json" if '"parameters"' in source else "pythonic"
    if "<|start_header_id|>" in source and ("<|python_tag|>" in source or '"parameters"' in source):
        return "llama3_json"
    return None
