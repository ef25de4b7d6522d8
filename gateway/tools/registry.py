"""Parser names, what each needs from the planner, and detection from a chat template.

``PARSERS[name]`` is a ``ParserSpec``: call it with the request's tool names to get a fresh
parser for one choice. Its attributes tell the planner how to run the request:

- ``needs_special_tokens``: the format's markers are special tokens in some tokenizers, which the
  default ``skip_special_tokens=True`` decode would remove before the parser sees them, so the
  request must decode with ``skip_special_tokens=False``. Mistral's ``[TOOL_CALLS]``/``[ARGS]``
  and DeepSeek's tokens (V3, R1 and V3.1's ``<｜tool▁calls▁begin｜>`` and the rest, V3.2's
  ``｜DSML｜`` tags): without them the calls cannot be found at all. Llama's ``<|python_tag|>`` and
  ``<|python_start|>`` (optional for the parser, kept so they are read as markup); ``<tool_call>``,
  an ordinary added token in Qwen's tokenizer but a special one where a fine-tune reused a
  reserved special token for it (Hermes 2 Pro on Llama 3).
- ``forced``: only meaningful when the backend's structured outputs enforce the shape
  (``tool_choice`` required or named, schemas in ``gateway.tools.schemas``); never detected,
  never chosen for ``auto``.
- ``typed``: the format writes argument values as bare text, typed by the tools' parameter
  schemas (``gateway.tools.params``), so the planner passes those along with the names.
- ``families`` and ``markers``: documentation (``/v1/models`` metadata, docs/API.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gateway.tools.params import ToolParams
from gateway.tools.parsers.deepseek_v3 import DeepSeekV3Parser
from gateway.tools.parsers.deepseek_v31 import CALL_BEGIN as DEEPSEEK_CALL_BEGIN
from gateway.tools.parsers.deepseek_v31 import SEP as DEEPSEEK_SEP
from gateway.tools.parsers.deepseek_v31 import DeepSeekV31Parser
from gateway.tools.parsers.deepseek_v32 import DSML, DeepSeekV32Parser
from gateway.tools.parsers.forced_named import ForcedNamedParser
from gateway.tools.parsers.forced_required import ForcedRequiredParser
from gateway.tools.parsers.glm45 import Glm45Parser
from gateway.tools.parsers.harmony import HarmonyParser
from gateway.tools.parsers.hermes import HermesParser
from gateway.tools.parsers.kimi_k2 import ARGUMENT_BEGIN as KIMI_ARGUMENT_BEGIN
from gateway.tools.parsers.kimi_k2 import KimiK2Parser
from gateway.tools.parsers.llama3_json import Llama3JsonParser
from gateway.tools.parsers.mistral import MistralParser
from gateway.tools.parsers.pythonic import PythonicParser
from gateway.tools.parsers.qwen3_coder import Qwen3CoderParser
from gateway.tools.types import ToolCallParser

ParserFactory = Callable[[frozenset[str], ToolParams], ToolCallParser]


def _untyped(parser: Callable[[frozenset[str]], ToolCallParser]) -> ParserFactory:
    """A factory for a format whose arguments are JSON: they carry their own types, so the
    parameter schemas are not needed."""

    def make(tool_names: frozenset[str], params: ToolParams) -> ToolCallParser:
        return parser(tool_names)

    return make


@dataclass(frozen=True, slots=True)
class ParserSpec:
    """A parser factory with the facts the planner needs about its format."""

    name: str
    factory: ParserFactory
    needs_special_tokens: bool
    forced: bool
    families: str
    markers: str
    typed: bool = False

    def __call__(self, tool_names: frozenset[str], params: ToolParams = ()) -> ToolCallParser:
        return self.factory(tool_names, params)


_SPECS = (
    ParserSpec(
        "hermes",
        _untyped(HermesParser),
        needs_special_tokens=True,
        forced=False,
        families="Qwen 2.5, Qwen 3, Hermes 2 Pro / Hermes 3, and fine-tunes on their format",
        markers='<tool_call>{"name": ..., "arguments": {...}}</tool_call>',
    ),
    ParserSpec(
        "llama3_json",
        _untyped(Llama3JsonParser),
        needs_special_tokens=True,
        forced=False,
        families="Llama 3.1, 3.2, 3.3; Llama 4 with its JSON template",
        markers='optional <|python_tag|>, then {"name": ..., "parameters": {...}}, several joined by ;',
    ),
    ParserSpec(
        "mistral",
        _untyped(MistralParser),
        needs_special_tokens=True,
        forced=False,
        families="Mistral 7B v0.3, Mixtral 8x22B, Nemo (JSON array); Small 3.x, Magistral, Devstral (v11+)",
        markers='[TOOL_CALLS][{"name": ..., "arguments": {...}}] or [TOOL_CALLS]name[ARGS]{...}',
    ),
    ParserSpec(
        "pythonic",
        _untyped(PythonicParser),
        needs_special_tokens=True,
        forced=False,
        families="Llama 4 (pythonic prompt), Llama 3.2 pythonic templates",
        markers='optional <|python_start|>, then [name(arg="value"), ...]',
    ),
    ParserSpec(
        "openai",
        _untyped(HarmonyParser),
        needs_special_tokens=True,
        forced=False,
        families="gpt-oss (harmony; needs the openai reasoning parser, which passes its calls on)",
        markers="<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>",
    ),
    ParserSpec(
        "qwen3_coder",
        Qwen3CoderParser,
        needs_special_tokens=True,
        forced=False,
        families="Qwen3-Coder, Qwen 3.5 and later",
        markers="<tool_call><function=name><parameter=key>value</parameter>...</function></tool_call>",
        typed=True,
    ),
    ParserSpec(
        "glm45",
        Glm45Parser,
        needs_special_tokens=True,
        forced=False,
        families="GLM-4.5, GLM-4.6 (and GLM-4.7's one-line spelling)",
        markers="<tool_call>name<arg_key>key</arg_key><arg_value>value</arg_value>...</tool_call>",
        typed=True,
    ),
    ParserSpec(
        "deepseek_v3",
        _untyped(DeepSeekV3Parser),
        needs_special_tokens=True,
        forced=False,
        families="DeepSeek V3, V3-0324, R1, R1-0528",
        markers="<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name\\n```json\\n{...}\\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>",
    ),
    ParserSpec(
        "deepseek_v31",
        _untyped(DeepSeekV31Parser),
        needs_special_tokens=True,
        forced=False,
        families="DeepSeek V3.1, V3.1-Terminus, V3.2-Exp",
        markers="<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>name<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>",
    ),
    ParserSpec(
        "deepseek_v32",
        _untyped(DeepSeekV32Parser),
        needs_special_tokens=True,
        forced=False,
        families="DeepSeek V3.2, V3.2-Speciale (DSML)",
        markers='<｜DSML｜function_calls><｜DSML｜invoke name="name">'
        '<｜DSML｜parameter name="key" string="true|false">value</｜DSML｜parameter>...'
        "</｜DSML｜invoke>...</｜DSML｜function_calls>",
    ),
    ParserSpec(
        "kimi_k2",
        _untyped(KimiK2Parser),
        needs_special_tokens=True,
        forced=False,
        families="Kimi K2 Instruct, K2 Thinking, K2.5",
        markers="<|tool_calls_section_begin|><|tool_call_begin|>functions.name:0<|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>",
    ),
    ParserSpec(
        "forced_named",
        _untyped(ForcedNamedParser),
        needs_special_tokens=False,
        forced=True,
        families="any model, tool_choice naming a function (structured outputs)",
        markers="the arguments object alone: {...}",
    ),
    ParserSpec(
        "forced_required",
        _untyped(ForcedRequiredParser),
        needs_special_tokens=False,
        forced=True,
        families='any model, tool_choice "required" (structured outputs)',
        markers='[{"name": ..., "parameters": {...}}, ...]',
    ),
)

PARSERS: Mapping[str, ParserSpec] = MappingProxyType({spec.name: spec for spec in _SPECS})


def make_parser(name: str, tool_names: frozenset[str], params: ToolParams = ()) -> ToolCallParser:
    """A fresh parser for one choice; ``params`` types the values of the ``typed`` formats.
    KeyError for an unknown name (settings validate names against ``PARSERS`` at startup, so a
    request never meets one)."""
    return PARSERS[name](tool_names, params)


_PYTHONIC_PROMPT = re.compile(r"\[\s*func_name1\s*\(")
_AFTER_SEPARATOR = re.compile(
    re.escape(DEEPSEEK_SEP) + r"(?:(?!" + re.escape(DEEPSEEK_SEP) + r").){0,120}?(name|arguments)", re.S
)
"""What a DeepSeek template writes after ``<｜tool▁sep｜>``: the first of the call's name or its
arguments (``tool['function']['name']``, ``<function_name>``, ``tool_call_arguments``...)."""


def _names_after_separator(source: str) -> bool:
    """The template writes the function's name after ``<｜tool▁sep｜>`` (V3 and R1: the type word
    before it), not the arguments (V3.1)."""
    return any(match.group(1) == "name" for match in _AFTER_SEPARATOR.finditer(source))


def detect_parser(template_source: str) -> str | None:
    """The parser a chat template's own markers call for, or None (no tool format we parse).

    ``template_source`` is the template that renders tools: for a repository with named
    templates (Hermes 2 Pro's ``default`` and ``tool_use``), the ``tool_use`` one, or all joined.

    The rules go from the most specific marker to the least, each one what the template itself
    tells the model to write:

    0. harmony's ``<|channel|>`` → ``openai`` (gpt-oss).

    1. ``<tool_call>`` with XML inside the block: ``<function=`` → ``qwen3_coder`` (Qwen3-Coder,
       Qwen 3.5), ``<arg_key>`` → ``glm45`` (GLM-4.5, 4.6). Else with a JSON ``"name"`` →
       ``hermes`` (Qwen 2.5/3, Hermes).
    2. ``<|tool_call_argument_begin|>`` → ``kimi_k2``.
    3. DSML's ``｜DSML｜`` → ``deepseek_v32`` (DeepSeek V3.2 ships no Jinja template; a template
       written for it renders its calls in DSML).
    4. ``<｜tool▁call▁begin｜>``: what the template writes after ``<｜tool▁sep｜>`` tells the
       two spellings apart. The function's name first (``function<｜tool▁sep｜>`` + name, then
       the fenced JSON: DeepSeek V3 and R1) → ``deepseek_v3``; the arguments (the name came
       before the separator: V3.1, V3.2-Exp) → ``deepseek_v31``, which is also the answer when
       no separator says either.
    5. ``[TOOL_CALLS]`` → ``mistral``.
    6. A pythonic prompt (``[func_name1(...``, Meta's wording) → ``pythonic``.
    7. Llama 4 (``<|header_start|>``, never in Llama 3): ``llama3_json`` when the template asks
       for ``"parameters"`` JSON (the template shipped with Llama 4 does), else ``pythonic``
       (Llama 4's documented native format).
    8. Llama 3.x (``<|start_header_id|>``) with ``<|python_tag|>`` or the ``"parameters"`` JSON
       prompt → ``llama3_json``. Llama 3.0's template has neither (no tool calling): None.
    """
    source = template_source
    if "<|channel|>" in source:
        return "openai"
    if "<tool_call>" in source:
        if "<function=" in source:
            return "qwen3_coder"
        if "<arg_key>" in source:
            return "glm45"
        return "hermes" if '"name"' in source else None
    if KIMI_ARGUMENT_BEGIN in source:
        return "kimi_k2"
    if DSML in source:
        return "deepseek_v32"
    if DEEPSEEK_CALL_BEGIN in source:
        return "deepseek_v3" if _names_after_separator(source) else "deepseek_v31"
    if "[TOOL_CALLS]" in source:
        return "mistral"
    if _PYTHONIC_PROMPT.search(source):
        return "pythonic"
    if "<|header_start|>" in source:
        return "llama3_json" if '"parameters"' in source else "pythonic"
    if "<|start_header_id|>" in source and ("<|python_tag|>" in source or '"parameters"' in source):
        return "llama3_json"
    return None
