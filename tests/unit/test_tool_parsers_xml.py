"""``qwen3_coder`` and ``glm45``: XML-ish calls whose values are text typed by the tools' schemas.

Hand-written cases first, then generated outputs fed whole, at random splits, a character at a
time and split in two at every position (the helpers of ``test_tool_parsers_split.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gateway.tools import ParsedCall, make_parser
from gateway.tools.params import tool_params
from gateway.tools.types import whole_calls
from tests.unit.test_tool_parsers_split import Case, cuts, marker_case, split, texts

SCHEMAS: dict[str, dict[str, Any] | None] = {
    "get_weather": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "hot": {"type": "boolean"},
            "opts": {"type": "object"},
            "tags": {"type": "array"},
        },
    },
    "search": {"type": "object", "properties": {"q": {"type": "string"}, "limit": {"type": ["integer", "null"]}}},
    "noop": None,
}
NAMES = frozenset(SCHEMAS)
PARAMS = tool_params(SCHEMAS.items())


def run(parser: str, pieces: list[str]) -> tuple[str, list[ParsedCall]]:
    instance = make_parser(parser, NAMES, PARAMS)
    content: list[str] = []
    calls: list[ParsedCall] = []
    for piece in pieces:
        text, found = instance.feed(piece)
        content.append(text)
        calls.extend(found)
    text, found = instance.finish()
    assert instance.called == bool(calls + found)
    return "".join(content) + text, whole_calls(calls + found)


def check_same_at_every_split(parser: str, text: str, points: list[int]) -> list[ParsedCall]:
    """One answer for ``text`` however it is split (outputs whose answer is not written out)."""
    whole = run(parser, [text])
    assert run(parser, split(text, points)) == whole
    assert run(parser, list(text)) == whole
    for position in range(len(text) + 1):
        assert run(parser, [text[:position], text[position:]]) == whole, position
    return whole[1]


def check_every_split(parser: str, case: Case, points: list[int]) -> None:
    expected = (case.content, case.calls)
    assert run(parser, [case.text]) == expected
    assert run(parser, split(case.text, points)) == expected
    assert run(parser, list(case.text)) == expected
    for position in range(len(case.text) + 1):
        assert run(parser, [case.text[:position], case.text[position:]]) == expected, position


def qwen(name: str, *params: tuple[str, str]) -> str:
    body = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in params)
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def glm(name: str, *params: tuple[str, str], newline: bool = True) -> str:
    body = "".join(f"<arg_key>{key}</arg_key>\n<arg_value>{value}</arg_value>\n" for key, value in params)
    return f"<tool_call>{name}{chr(10) if newline else ''}{body}</tool_call>"


# ---- qwen3_coder -----------------------------------------------------------------------------


def test_qwen3_coder_values_are_typed_by_the_schema() -> None:
    text = "Let me look.\n\n" + qwen(
        "get_weather", ("city", "1984"), ("days", "3"), ("hot", "true"), ("opts", '{"u": "c"}'), ("tags", "['a']")
    )
    assert run("qwen3_coder", [text]) == (
        "Let me look.\n\n",
        [ParsedCall("get_weather", '{"city": "1984", "days": 3, "hot": true, "opts": {"u": "c"}, "tags": ["a"]}')],
    )


def test_qwen3_coder_parallel_calls_multiline_values_and_text_after() -> None:
    code = "def f():\n    return '<b>'\n"
    text = qwen("search", ("q", code), ("limit", "None")) + "\n" + qwen("noop") + "\nDone."
    assert run("qwen3_coder", [text]) == (
        "Done.",
        [ParsedCall("search", json.dumps({"q": code, "limit": None})), ParsedCall("noop", "{}")],
    )


def test_qwen3_coder_a_value_may_quote_the_closing_parameter_tag() -> None:
    value = "x = '</parameter>' and more"
    assert run("qwen3_coder", [qwen("search", ("q", value))]) == ("", [ParsedCall("search", json.dumps({"q": value}))])


def test_qwen3_coder_parameters_not_in_the_schema_are_strings() -> None:
    assert run("qwen3_coder", [qwen("noop", ("n", "5"))]) == ("", [ParsedCall("noop", '{"n": "5"}')])


QWEN_BAD = [
    qwen("unknown_tool", ("a", "1")),
    '<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>',  # hermes' JSON is not this format
    "<tool_call>\n<function=get_weather\n</tool_call>",
    "<tool_call></tool_call>",
]
"""Malformed before the call could open: content, verbatim."""
QWEN_OPENED = {
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</tool_call>": '{"city": "Paris\\n</parameter>',
    "<tool_call>\n<function=get_weather>\nsome text\n</function>\n</tool_call>": "{",
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n</tool_call>": '{"city": "Paris\\n</function>',
    "<tool_call>\n<function=get_weather>\n</function>\nextra\n</tool_call>": "{}",
    qwen("get_weather", ("days", "3"), ("days", "4")): '{"days": 3',
    qwen("get_weather", ("city", "Paris"))[:-30]: '{"city": "Paris',  # the layout newline waits
}
"""Malformed or cut after the call opened: the call with the arguments sent until then."""


@pytest.mark.parametrize("block", QWEN_BAD)
def test_qwen3_coder_malformed_block_is_content_verbatim_and_earlier_calls_stay(block: str) -> None:
    valid = qwen("noop")
    assert run("qwen3_coder", [valid, " ", block]) == (block, [ParsedCall("noop", "{}")])
    check_every_split("qwen3_coder", Case(block, block, []), [])


@pytest.mark.parametrize(("block", "sent"), QWEN_OPENED.items())
def test_qwen3_coder_malformed_after_the_call_opened_keeps_what_was_sent(block: str, sent: str) -> None:
    """The rest of the block is not read; text after it is content (a cut block has none)."""
    closed = block.endswith("</tool_call>")
    text = block + (" after" if closed else "")
    check_every_split("qwen3_coder", Case(text, "after" if closed else "", [ParsedCall("get_weather", sent)]), [])


def test_qwen3_coder_string_values_stream_and_typed_ones_wait_until_whole() -> None:
    instance = make_parser("qwen3_coder", NAMES, PARAMS)
    text = qwen("get_weather", ("city", "Zürich\nOst"), ("days", "12"), ("q", "x"))
    pieces = []
    for char in text:
        pieces += [call.arguments for call in instance.feed(char)[1] if call.arguments]
    assert pieces[:4] == ["{", '"city": "Z', "ü", "r"]
    assert pieces[-8:] == ["\\nO", "s", "t", '"', ', "days": 12', ', "q": "x', '"', "}"]  # a newline waits
    assert "".join(pieces) == '{"city": "Zürich\\nOst", "days": 12, "q": "x"}'


def test_qwen3_coder_a_nullable_string_waits_until_it_cannot_be_null() -> None:
    schema = {"f": {"type": "object", "properties": {"s": {"type": ["string", "null"]}}}}
    for value, arguments in [("null", '{"s": null}'), ("nul", '{"s": "nul"}'), ("nullx", '{"s": "nullx"}')]:
        instance = make_parser("qwen3_coder", frozenset({"f"}), tool_params(schema.items()))
        sent = [call.arguments for char in qwen("f", ("s", value)) for call in instance.feed(char)[1]]
        assert "".join(sent) == arguments
        assert not {'"s": "', '"s": "n', '"s": "nu', '"s": "nul', '"s": "null'} & set(sent)


# ---- glm45 -----------------------------------------------------------------------------------


def test_glm45_values_are_json_unless_the_schema_says_string() -> None:
    text = "Checking.\n" + glm("get_weather", ("city", "1984"), ("days", " 3 "), ("opts", '{"u": "c"}'))
    assert run("glm45", [text]) == (
        "Checking.\n",
        [ParsedCall("get_weather", '{"city": "1984", "days": 3, "opts": {"u": "c"}}')],
    )


def test_glm45_one_line_spelling_and_a_call_without_arguments() -> None:
    text = glm("search", ("q", "日本 🙂"), newline=False) + glm("noop")
    assert run("glm45", [text]) == ("", [ParsedCall("search", '{"q": "日本 🙂"}'), ParsedCall("noop", "{}")])


GLM_BAD = [
    glm("unknown_tool", ("a", "1")),
    '<tool_call>{"name": "noop", "arguments": {}}</tool_call>',
    "<tool_call></tool_call>",
]
"""Malformed before the call could open: content, verbatim."""
GLM_OPENED = {
    "<tool_call>get_weather\n<arg_key>city</arg_key>\n</tool_call>": "{",  # a key without its value
    "<tool_call>get_weather\n<arg_value>Paris</arg_value>\n</tool_call>": "{",
    "<tool_call>get_weather\n<arg_key>city</arg_key><arg_value>Paris\n</tool_call>": '{"city": "Paris',
    "<tool_call>get_weather\nsome words\n</tool_call>": "{",
    glm("get_weather", ("days", "3"), ("days", "4")): '{"days": 3',
    glm("get_weather", ("city", "Paris"))[:-20]: '{"city": "Paris',  # a partial closing tag waits
}
"""Malformed or cut after the call opened: the call with the arguments sent until then."""


@pytest.mark.parametrize(("block", "sent"), GLM_OPENED.items())
def test_glm45_malformed_after_the_call_opened_keeps_what_was_sent(block: str, sent: str) -> None:
    closed = block.endswith("</tool_call>")
    text = block + (" after" if closed else "")
    check_every_split("glm45", Case(text, "after" if closed else "", [ParsedCall("get_weather", sent)]), [])


def test_glm45_declared_strings_stream_stripped_and_other_values_wait() -> None:
    instance = make_parser("glm45", NAMES, PARAMS)
    text = glm("get_weather", ("city", "  Zü rich \n"), ("days", " 12 "), newline=False)
    pieces = []
    for char in text:
        pieces += [call.arguments for call in instance.feed(char)[1] if call.arguments]
    assert pieces == ["{", '"city": "Z', "ü", " r", "i", "c", "h", '"', ', "days": 12', "}"]


@pytest.mark.parametrize("block", GLM_BAD)
def test_glm45_malformed_block_is_content_verbatim_and_earlier_calls_stay(block: str) -> None:
    assert run("glm45", [glm("noop"), "\n", block]) == (block, [ParsedCall("noop", "{}")])
    check_every_split("glm45", Case(block, block, []), [])


# ---- generated outputs -----------------------------------------------------------------------

plain = texts.filter(lambda t: "<" not in t and t == t.strip())
"""String values: no tag characters (a value quoting a closing tag is the hand-written case)."""
objects = st.dictionaries(st.sampled_from(["u", "日付"]), st.integers(-5, 5) | st.booleans() | plain, max_size=2)


@st.composite
def typed_arguments(draw: st.DrawFn) -> tuple[str, dict[str, Any], list[tuple[str, str]]]:
    """A function, its arguments, and the (key, text) pairs a model writes for them."""
    name = draw(st.sampled_from(sorted(NAMES)))
    values: dict[str, Any] = {}
    if name == "get_weather":
        values = {
            "city": draw(plain),
            "days": draw(st.integers(-(10**6), 10**6)),
            "hot": draw(st.booleans()),
            "opts": draw(objects),
            "tags": draw(st.lists(plain, max_size=2)),
        }
    elif name == "search":
        values = {"q": draw(plain), "limit": draw(st.none() | st.integers(0, 50))}
    keys = draw(st.permutations(sorted(values)))
    pairs = [(key, _spell(values[key])) for key in keys[: draw(st.integers(0, len(keys)))]]
    return name, {key: values[key] for key, _ in pairs}, pairs


def _spell(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return json.dumps(value, ensure_ascii=False)


@st.composite
def qwen_call(draw: st.DrawFn) -> tuple[str, list[ParsedCall]]:
    name, args, pairs = draw(typed_arguments())
    return qwen(name, *pairs), [ParsedCall(name, json.dumps(args, ensure_ascii=False))]


@st.composite
def glm_call(draw: st.DrawFn) -> tuple[str, list[ParsedCall]]:
    name, args, pairs = draw(typed_arguments())
    return glm(name, *pairs, newline=draw(st.booleans())), [ParsedCall(name, json.dumps(args, ensure_ascii=False))]


def qwen_opens_at(raw: str) -> int:
    return raw.index(">", raw.index("<function="))


def glm_opens_at(raw: str) -> int:
    return min(at for at in (raw.find("\n", 11), raw.find("<arg_key>"), raw.find("</tool_call>")) if at != -1)


@st.composite
def truncated(draw: st.DrawFn, call: Any, opens_at: Callable[[str], int] | None = None) -> str:
    """A block cut off anywhere, or, with ``opens_at`` (where what opens its call ends), before
    its call opens."""
    raw, _ = draw(call())
    last = opens_at(raw) if opens_at else len(raw) - 1
    return str(raw[: draw(st.integers(len("<tool_call>"), last))])


MARKUP = ["<tool_call>", "</tool_call>"]


@settings(max_examples=150, deadline=None)
@given(
    case=marker_case(qwen_call, st.sampled_from(QWEN_BAD), truncated(qwen_call, qwen_opens_at), MARKUP),
    points=cuts,
)
def test_qwen3_coder_any_split_gives_the_expected_content_and_calls(case: Case, points: list[int]) -> None:
    check_every_split("qwen3_coder", case, points)


@settings(max_examples=100, deadline=None)
@given(
    case=marker_case(qwen_call, st.sampled_from(QWEN_BAD + list(QWEN_OPENED)), truncated(qwen_call), MARKUP),
    points=cuts,
)
def test_qwen3_coder_calls_cut_or_malformed_after_they_opened_are_the_same_for_every_split(
    case: Case, points: list[int]
) -> None:
    check_same_at_every_split("qwen3_coder", case.text, points)


@settings(max_examples=150, deadline=None)
@given(case=marker_case(glm_call, st.sampled_from(GLM_BAD), truncated(glm_call, glm_opens_at), MARKUP), points=cuts)
def test_glm45_any_split_gives_the_expected_content_and_calls(case: Case, points: list[int]) -> None:
    assume(case.text)
    check_every_split("glm45", case, points)


@settings(max_examples=100, deadline=None)
@given(
    case=marker_case(glm_call, st.sampled_from(GLM_BAD + list(GLM_OPENED)), truncated(glm_call), MARKUP),
    points=cuts,
)
def test_glm45_calls_cut_or_malformed_after_they_opened_are_the_same_for_every_split(
    case: Case, points: list[int]
) -> None:
    check_same_at_every_split("glm45", case.text, points)
