"""Parser registry: names, planner facts, detection from chat templates, forced-call schemas.

The template excerpts below are short stand-ins written for these tests: each keeps only the
markers and prompt wording that tell the formats apart in the real templates of those families.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from gateway.tools import PARSERS, ParsedCall, detect_parser, make_parser
from gateway.tools.schemas import named_call_schema, required_calls_schema
from gateway.tools.types import whole_calls

QWEN = (
    "{%- if tools %}<|im_start|>system\n# Tools\n<tools>{{ tools | tojson }}</tools>\n"
    'Return each call within <tool_call></tool_call> tags:\n<tool_call>\n{"name": <function-name>, '
    '"arguments": <args-json-object>}\n</tool_call><|im_end|>{%- endif %}'
)
QWEN3 = "<think>\n\n</think>\n" + QWEN
HERMES_2_PRO = '<|im_start|>system\nYou are a function calling AI model. <tool_call>\n{"arguments": <args-dict>, "name": <function-name>}\n</tool_call>'
HERMES_ON_LLAMA3 = '<|start_header_id|>system<|end_header_id|>\n\n<tools></tools> <tool_call>\n{"name": <function-name>, "arguments": <args-dict>}\n</tool_call><|eot_id|>'
QWEN3_CODER = (
    '{%- if tool_call.arguments is string %}{"name": ...}{%- endif %}'
    + "<tools><function><name>{{ tool.name }}</name></function></tools>\n<tool_call>\n<function=example_function_name>\n<parameter=p>\nv\n</parameter>\n</function>\n</tool_call>"
)
GLM = "<tool_call>{{ tc.name }}\n<arg_key>{{ k }}</arg_key>\n<arg_value>{{ v }}</arg_value>\n</tool_call>"
GLM_47 = "<tool_call>{{ tc.name }}{% for k, v in _args.items() %}<arg_key>{{ k }}</arg_key><arg_value>{{ v }}</arg_value>{% endfor %}</tool_call>"
QWEN35 = (
    "<tools>\n{{- tool | tojson }}\n</tools>\n\nIf you choose to call a function ONLY reply in the following format:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "</function>\n</tool_call>"
)
DEEPSEEK_V31 = (
    "{%- if not ns.is_first %}{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'+ tool['function']['name'] + "
    "'<｜tool▁sep｜>' + tool['function']['arguments'] + '<｜tool▁call▁end｜>'}}{%- endif %}"
    "{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}"
)
DEEPSEEK_V3 = (
    "{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + "
    "tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + "
    "'<｜tool▁call▁end｜>'}}"
)
DEEPSEEK_V3_PROMPT = (
    '{{"For each function call, you should return object like:\\n" }}'
    '{{"<｜tool▁call▁begin｜>function<｜tool▁sep｜><function_name>\\n```json\\n<function_arguments_in_json_format>'
    '\\n```<｜tool▁call▁end｜>"}}'
)
DEEPSEEK_V31_FENCED_SCHEMAS = (
    "{% for tool in tools %}{{ '- ' + tool.name + ':\\n```json\\n' + (tool | tojson) + '\\n```\\n' }}{% endfor %}"
    + DEEPSEEK_V31
)
"""V3.1's calls with the tools' schemas listed in JSON code fences: the fence alone says nothing."""
DEEPSEEK_V32 = (
    'You can invoke functions by writing a "<｜DSML｜function_calls>" block like the following:\n'
    '<｜DSML｜function_calls>\n<｜DSML｜invoke name="$FUNCTION_NAME">\n'
    '<｜DSML｜parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</｜DSML｜parameter>\n'
    "</｜DSML｜invoke>\n</｜DSML｜function_calls>"
)
KIMI_K2 = (
    "{%- if message['tool_calls'] -%}<|tool_calls_section_begin|>{%- for tool_call in message['tool_calls'] -%}"
    "<|tool_call_begin|>{{ tool_call['id'] }}<|tool_call_argument_begin|>{{ tool_call['function']['arguments'] }}"
    "<|tool_call_end|>{%- endfor -%}<|tool_calls_section_end|>{%- endif -%}"
)
LLAMA_30 = "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] + '<|eot_id|>' }}"
LLAMA_31 = (
    "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
    "{%- if builtin_tools is defined %}{{- '<|python_tag|>' + tool_call.name + '.call(' }}{%- endif %}"
    'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.<|eot_id|>'
)
LLAMA_32 = LLAMA_31.replace(
    "{%- if builtin_tools is defined %}{{- '<|python_tag|>' + tool_call.name + '.call(' }}{%- endif %}", ""
)
LLAMA_32_PYTHONIC = "<|start_header_id|>system<|end_header_id|>\n\nRespond in the format [func_name1(params_name1=params_value1, params_name2=params_value2...), func_name2(params)]<|eot_id|>"
LLAMA_4_JSON = (
    "{{- '<|header_start|>system<|header_end|>\n\n' }}Respond in the format "
    '{"name": function name, "parameters": dictionary of argument name and its value}.'
    "{{- '<|python_start|>' }}{{- '<|python_end|>' }}<|eot|>"
)
LLAMA_4_PYTHONIC = "{{- '<|header_start|>system<|header_end|>\n\n' }}Use exact format: [func_name1(param1=value1, param2=value2), func_name2(...)]<|eot|>"
LLAMA_4_PLAIN = "{{- '<|header_start|>' + message['role'] + '<|header_end|>\n\n' }}{{ message['content'] }}<|eot|>"
MISTRAL_V3 = '[AVAILABLE_TOOLS] [{"type": "function"}][/AVAILABLE_TOOLS][INST] {{ content }}[/INST]{{- "[TOOL_CALLS] [" }}[TOOL_RESULTS] {"content": 1}[/TOOL_RESULTS]'
MISTRAL_V13 = (
    "{{- '[TOOL_CALLS]' + tool_call.function.name }}{{- '[CALL_ID]' + tool_call.id }}{{- '[ARGS]' + arguments }}"
)
CHATML = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


@pytest.mark.parametrize(
    ("template", "parser"),
    [
        (QWEN, "hermes"),
        (QWEN3, "hermes"),
        (HERMES_2_PRO, "hermes"),
        (HERMES_ON_LLAMA3, "hermes"),
        (QWEN3_CODER, "qwen3_coder"),
        (QWEN35, "qwen3_coder"),
        (GLM, "glm45"),
        (GLM_47, "glm45"),
        (DEEPSEEK_V31, "deepseek_v31"),
        (DEEPSEEK_V3, "deepseek_v3"),
        (DEEPSEEK_V3_PROMPT, "deepseek_v3"),
        (DEEPSEEK_V31_FENCED_SCHEMAS, "deepseek_v31"),
        (DEEPSEEK_V32, "deepseek_v32"),
        (DEEPSEEK_V32 + DEEPSEEK_V31, "deepseek_v32"),
        (KIMI_K2, "kimi_k2"),
        (LLAMA_30, None),
        (LLAMA_31, "llama3_json"),
        (LLAMA_32, "llama3_json"),
        (LLAMA_32_PYTHONIC, "pythonic"),
        (LLAMA_4_JSON, "llama3_json"),
        (LLAMA_4_PYTHONIC, "pythonic"),
        (LLAMA_4_PLAIN, "pythonic"),
        (MISTRAL_V3, "mistral"),
        (MISTRAL_V13, "mistral"),
        (CHATML, None),
        ("", None),
    ],
)
def test_detect_parser_from_the_templates_own_markers(template: str, parser: str | None) -> None:
    assert detect_parser(template) == parser


def test_llama3_and_llama4_templates_are_told_apart_by_their_headers() -> None:
    """Both families can ask for the same JSON; only Llama 4 without it means pythonic."""
    assert detect_parser(LLAMA_4_PLAIN) == "pythonic"
    assert detect_parser(LLAMA_4_PLAIN.replace("<|header_start|>", "<|start_header_id|>")) is None


def test_every_parser_is_registered_under_its_name_with_planner_facts() -> None:
    assert set(PARSERS) == {
        "hermes",
        "llama3_json",
        "mistral",
        "pythonic",
        "qwen3_coder",
        "glm45",
        "deepseek_v3",
        "deepseek_v31",
        "deepseek_v32",
        "kimi_k2",
        "openai",
        "forced_named",
        "forced_required",
    }
    for name, spec in PARSERS.items():
        assert spec.name == name and spec.families and spec.markers
    for name in ("mistral", "qwen3_coder", "glm45", "deepseek_v3", "deepseek_v31", "deepseek_v32", "kimi_k2"):
        assert PARSERS[name].needs_special_tokens, name
    assert {name for name, spec in PARSERS.items() if spec.typed} == {"qwen3_coder", "glm45"}
    assert not PARSERS["forced_named"].needs_special_tokens
    assert {name for name, spec in PARSERS.items() if spec.forced} == {"forced_named", "forced_required"}


def test_detection_never_picks_a_forced_parser() -> None:
    for template in (
        QWEN,
        LLAMA_31,
        LLAMA_4_PLAIN,
        MISTRAL_V3,
        QWEN35,
        GLM,
        DEEPSEEK_V3,
        DEEPSEEK_V31,
        DEEPSEEK_V32,
        KIMI_K2,
    ):
        detected = detect_parser(template)
        assert detected is not None and not PARSERS[detected].forced


def test_make_parser_gives_a_fresh_parser_per_choice() -> None:
    first = make_parser("hermes", frozenset({"noop"}))
    second = make_parser("hermes", frozenset({"noop"}))
    first.feed("<tool_call>")
    assert second.feed("hi") == ("hi", [])
    with pytest.raises(KeyError):
        make_parser("nope", frozenset())


WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
FUNCTIONS = [("get_weather", WEATHER_PARAMETERS), ("noop", None)]


def test_required_schema_accepts_what_forced_required_parses_and_nothing_it_would_misread() -> None:
    schema = required_calls_schema(FUNCTIONS)
    output = [{"name": "get_weather", "parameters": {"city": "Paris"}}, {"name": "noop", "parameters": {}}]
    jsonschema.validate(output, schema)
    parser = make_parser("forced_required", frozenset({"get_weather", "noop"}))
    content, pieces = parser.feed(json.dumps(output))
    assert (content, whole_calls(pieces)) == (
        "",
        [ParsedCall("get_weather", '{"city": "Paris"}'), ParsedCall("noop", "{}")],
    )
    for wrong in (
        [],
        [{"name": "get_weather", "parameters": {}}],  # another function's (empty) arguments
        [{"name": "other", "parameters": {}}],
        [{"name": "noop"}],
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, schema)


def test_required_schema_without_parallel_calls_allows_one() -> None:
    schema = required_calls_schema(FUNCTIONS, parallel=False)
    jsonschema.validate([{"name": "noop", "parameters": {}}], schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{"name": "noop", "parameters": {}}] * 2, schema)


def test_named_schema_is_the_functions_parameters() -> None:
    assert named_call_schema(WEATHER_PARAMETERS) == WEATHER_PARAMETERS
    assert named_call_schema(None) == {"type": "object", "properties": {}}
