"""Every tool-call format streams its calls' arguments as they are generated.

For each format, an output with two calls (one with a long string argument full of what JSON
and the format escape, one with typed values) is fed whole, a character at a time and split in
two at every position. Each time the content and the calls are the same; each call is said in
pieces (the first names it, the last closes it) whose arguments join to exactly the final
``arguments``, the one spelling (``json.dumps(obj, ensure_ascii=False)``); and, fed a character
at a time, the long argument arrives in many deltas before the call's markup closes.

Then pythonic's streamed arguments are checked against ``parse_call_list`` (the whole-list
parse) on generated Python spellings, and on random Python-ish text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.tools import ParsedCall, make_parser
from gateway.tools.params import tool_params
from gateway.tools.parsers.pythonic import parse_call_list
from gateway.tools.types import whole_calls

SCHEMAS: dict[str, dict[str, Any] | None] = {
    "get_weather": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "hot": {"type": "boolean"},
            "opts": {"type": "object"},
        },
    },
    "search": {"type": "object", "properties": {"q": {"type": "string"}, "limit": {"type": ["integer", "null"]}}},
    "noop": None,
}
NAMES = frozenset(SCHEMAS)
PARAMS = tool_params(SCHEMAS.items())
LONG = (
    'Line one: "quoted" and \\ a backslash, 日本語 🙂 é, a tab\tthen <b>tags</b>, a partial </tool and </param'
    " and [TOOL, {braces} [brackets] (parens) ; semicolons, 'single quotes', and a newline\nsecond line. "
) * 3
"""A long string value, mixing what JSON escapes with pieces of every format's markup."""
LONG = LONG.strip()  # GLM strips its values
WEATHER: dict[str, Any] = {"city": LONG, "days": 3, "hot": True, "opts": {"unit": "c", "n": [1, 2.5, None]}}
SEARCH: dict[str, Any] = {"q": "日本 🙂", "limit": None}


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


@dataclass
class Output:
    """A model's output, what it means, and where each call's markup closes."""

    text: str
    content: str
    calls: list[tuple[str, dict[str, Any]]]
    closes: list[int]
    """Per call, the index in ``text`` just past its markup."""


def joined(*parts: str | tuple[str]) -> tuple[str, list[int]]:
    """The text of ``parts``; a part in a tuple ends a call's markup (its end is recorded)."""
    text, closes = "", []
    for part in parts:
        if isinstance(part, tuple):
            text += part[0]
            closes.append(len(text))
        else:
            text += part
    return text, closes


def hermes() -> Output:
    text, closes = joined(
        "Let me check. <tool_call>\n",
        (json.dumps({"name": "get_weather", "arguments": WEATHER}, indent=2) + "\n</tool_call>",),
        "\n<tool_call>",
        (json.dumps({"name": "search", "arguments": SEARCH}) + "</tool_call>",),
    )
    return Output(text, "Let me check. ", [("get_weather", WEATHER), ("search", SEARCH)], closes)


def harmony() -> Output:
    text, closes = joined(
        ("<|call|>functions.get_weather<|message|>" + json.dumps(WEATHER) + "<|end|>",),
        ("<|call|>functions.search<|message|>" + dumps(SEARCH) + "<|end|>",),
    )
    return Output(text, "", [("get_weather", WEATHER), ("search", SEARCH)], closes)


def mistral_v11() -> Output:
    text, closes = joined(
        "Sure.",
        ("[TOOL_CALLS]get_weather[ARGS]" + json.dumps(WEATHER),),
        ("[TOOL_CALLS]search[CALL_ID]a1b2c3d4e[ARGS]" + dumps(SEARCH),),
    )
    return Output(text, "Sure.", [("get_weather", WEATHER), ("search", SEARCH)], closes)


def mistral_array() -> Output:
    first = json.dumps({"name": "get_weather", "arguments": WEATHER})
    text, closes = joined("[TOOL_CALLS] [", (first,), ", ", (dumps({"name": "search", "arguments": SEARCH}),), "]")
    return Output(text, "", [("get_weather", WEATHER), ("search", SEARCH)], closes)


def llama3_json() -> Output:
    text, closes = joined(
        "<|python_tag|>",
        (json.dumps({"name": "get_weather", "parameters": WEATHER}),),
        "; ",
        (dumps({"name": "search", "parameters": SEARCH}),),
    )
    return Output(text, "", [("get_weather", WEATHER), ("search", SEARCH)], closes)


def pythonic() -> Output:
    weather = ", ".join(f"{key}={value!r}" for key, value in WEATHER.items())
    text, closes = joined(
        "<|python_start|>[",
        (f"get_weather({weather})",),
        ", ",
        (f"search(q={SEARCH['q']!r}, limit=None)",),
        "]<|python_end|>",
    )
    return Output(text, "", [("get_weather", WEATHER), ("search", SEARCH)], closes)


def qwen3_coder() -> Output:
    def block(name: str, arguments: dict[str, Any]) -> str:
        params = "".join(
            f"<parameter={key}>\n{value if isinstance(value, str) else dumps(value)}\n</parameter>\n"
            for key, value in arguments.items()
        )
        return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"

    text, closes = joined("Checking.\n", (block("get_weather", WEATHER),), "\n", (block("search", SEARCH),))
    return Output(text, "Checking.\n", [("get_weather", WEATHER), ("search", SEARCH)], closes)


def glm45() -> Output:
    def block(name: str, arguments: dict[str, Any]) -> str:
        params = "".join(
            f"<arg_key>{key}</arg_key>\n<arg_value>{value if isinstance(value, str) else dumps(value)}</arg_value>\n"
            for key, value in arguments.items()
        )
        return f"<tool_call>{name}\n{params}</tool_call>"

    text, closes = joined((block("get_weather", WEATHER),), (block("search", SEARCH),))
    return Output(text, "", [("get_weather", WEATHER), ("search", SEARCH)], closes)


def deepseek_v31() -> Output:
    text, closes = joined(
        "On it.<｜tool▁calls▁begin｜>",
        ("<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>" + json.dumps(WEATHER) + "<｜tool▁call▁end｜>",),
        ("<｜tool▁call▁begin｜>search<｜tool▁sep｜>" + dumps(SEARCH) + "<｜tool▁call▁end｜>",),
        "<｜tool▁calls▁end｜>",
    )
    return Output(text, "On it.", [("get_weather", WEATHER), ("search", SEARCH)], closes)


def kimi_k2() -> Output:
    text, closes = joined(
        "<|tool_calls_section_begin|>",
        (
            "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
            + dumps(WEATHER)
            + "<|tool_call_end|>",
        ),
        ("<|tool_call_begin|>functions.search:1<|tool_call_argument_begin|>" + dumps(SEARCH) + "<|tool_call_end|>",),
        "<|tool_calls_section_end|>",
    )
    return Output(text, "", [("get_weather", WEATHER), ("search", SEARCH)], closes)


def forced_named() -> Output:
    text, closes = joined((json.dumps(WEATHER, indent=1),))
    return Output(text, "", [("get_weather", WEATHER)], closes)


def forced_required() -> Output:
    first = json.dumps({"name": "get_weather", "parameters": WEATHER})
    text, closes = joined("[", (first,), ",\n ", (dumps({"name": "search", "parameters": SEARCH}),), "]")
    return Output(text, "", [("get_weather", WEATHER), ("search", SEARCH)], closes)


OUTPUTS: dict[str, tuple[str, Callable[[], Output]]] = {
    "hermes": ("hermes", hermes),
    "openai": ("openai", harmony),
    "mistral-v11": ("mistral", mistral_v11),
    "mistral-array": ("mistral", mistral_array),
    "llama3_json": ("llama3_json", llama3_json),
    "pythonic": ("pythonic", pythonic),
    "qwen3_coder": ("qwen3_coder", qwen3_coder),
    "glm45": ("glm45", glm45),
    "deepseek_v31": ("deepseek_v31", deepseek_v31),
    "kimi_k2": ("kimi_k2", kimi_k2),
    "forced_named": ("forced_named", forced_named),
    "forced_required": ("forced_required", forced_required),
}


def feed(parser: str, pieces: list[str]) -> tuple[str, list[tuple[int, ParsedCall]]]:
    """(the content, each call piece with how much text had been fed when it came out)."""
    names = frozenset({"get_weather"}) if parser == "forced_named" else NAMES
    instance = make_parser(parser, names, PARAMS)
    content: list[str] = []
    out: list[tuple[int, ParsedCall]] = []
    fed = 0
    for piece in pieces:
        fed += len(piece)
        text, found = instance.feed(piece)
        content.append(text)
        out += [(fed, call) for call in found]
    text, found = instance.finish()
    content.append(text)
    out += [(fed, call) for call in found]
    assert instance.called == bool(out)
    return "".join(content), out


def said(pieces: list[ParsedCall]) -> list[tuple[str, list[str]]]:
    """Each call as (its name, its argument deltas), checking the pieces' shape: a call opens
    with its name and closes once before the next opens."""
    calls: list[tuple[str, list[str]]] = []
    open_ = False
    for piece in pieces:
        if piece.opens:
            assert not open_ and piece.name, piece
            calls.append((piece.name, []))
        else:
            assert open_ and not piece.name, piece
        if piece.arguments:
            calls[-1][1].append(piece.arguments)
        open_ = not piece.closes
    assert not open_
    return calls


@pytest.mark.parametrize("case", sorted(OUTPUTS))
def test_the_deltas_join_to_the_final_arguments_at_every_split(case: str) -> None:
    parser, build = OUTPUTS[case]
    output = build()
    expected = [(name, dumps(arguments)) for name, arguments in output.calls]
    content, pieces = feed(parser, [output.text])
    assert content == output.content
    assert [(name, "".join(deltas)) for name, deltas in said([p for _, p in pieces])] == expected
    assert whole_calls([p for _, p in pieces]) == [ParsedCall(name, arguments) for name, arguments in expected]
    splits = [list(output.text)] + [
        [output.text[:position], output.text[position:]] for position in range(len(output.text) + 1)
    ]
    for split in splits:
        content, pieces = feed(parser, split)
        assert (content, [(n, "".join(d)) for n, d in said([p for _, p in pieces])]) == (output.content, expected), len(
            split[0]
        )


@pytest.mark.parametrize("case", sorted(OUTPUTS))
def test_a_long_string_argument_streams_before_its_call_closes(case: str) -> None:
    """Fed a character at a time: each call opens before its markup closes, and its arguments
    arrive before it too, the long string in many deltas."""
    parser, build = OUTPUTS[case]
    output = build()
    _, pieces = feed(parser, list(output.text))
    starts = [index for index, (_, piece) in enumerate(pieces) if piece.opens]
    for number, close in enumerate(output.closes):
        start = starts[number]
        end = starts[number + 1] if number + 1 < len(starts) else len(pieces)
        call = pieces[start:end]
        assert call[0][0] < close, "the call opened only when its markup closed"
        before = [piece.arguments for fed, piece in call if piece.arguments and fed < close]
        if output.calls[number][0] == "get_weather":  # the long string: many deltas
            assert len(before) > len(LONG) // 4, before
        assert before, "no argument delta before the markup closed"


def test_typed_values_go_out_once_whole_and_strings_as_they_are_read() -> None:
    """qwen3_coder and glm45: a string parameter's characters as read; an integer, a boolean,
    an object once its parameter closes (a digit more could still come)."""
    for parser, build in (("qwen3_coder", qwen3_coder), ("glm45", glm45)):
        _, pieces = feed(parser, list(build().text))
        deltas = [piece.arguments for _, piece in pieces if piece.arguments]
        assert ', "days": 3' in deltas and ', "hot": true' in deltas, deltas
        assert ', "opts": {"unit": "c", "n": [1, 2.5, null]}' in deltas
        assert any(delta == "Line" or delta.endswith("L") for delta in deltas[:4]), deltas[:4]


# ---- pythonic against the whole-list parse ---------------------------------------------------

IDENTIFIER_KEYS = st.sampled_from(["city", "q", "n", "x_1", "lieu", "日付", "_k"])
DICT_KEYS = st.sampled_from(["a", "b c", 'q"uote', "it's", "é", "", "\\"])
STRING_PIECES = [
    "a",
    "Z",
    " ",
    "'",
    '"',
    "\\",
    "\n",
    "\t",
    "\r",
    "é",
    "日本",
    "🙂",
    "\x00",
    "\x7f",
    "#",
    "]",
    ")",
    "\\n",
]
strings = st.lists(st.sampled_from(STRING_PIECES), max_size=6).map("".join)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | strings
)
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(DICT_KEYS, children, max_size=3),
    max_leaves=6,
)
blanks = st.sampled_from(["", " ", "\n    ", "  # a comment\n  ", " \\\n "])


@st.composite
def spelled(draw: st.DrawFn, value: Any) -> str:
    """``value`` as a model might write it in Python: any quotes, concatenated or
    parenthesised strings, hex or underscored integers, trailing commas, comments."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        way = draw(st.sampled_from(["repr", "hex", "underscore", "paren"]))
        if way == "hex":
            return ("-" if value < 0 else "") + hex(abs(value))
        if way == "underscore":
            return f"{value:_}"
        return f"({value!r})" if way == "paren" else repr(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return draw(spelled_string(value))
    if isinstance(value, list):
        items = [draw(spelled(item)) for item in value]
        trailing = "," if items and draw(st.booleans()) else ""
        return "[" + ", ".join(items) + trailing + "]"
    items = [
        f"{draw(spelled_string(key, key=True))}{draw(blanks)}:{draw(blanks)}{draw(spelled(item))}"
        for key, item in value.items()
    ]
    trailing = "," if items and draw(st.booleans()) else ""
    return "{" + ", ".join(items) + trailing + "}"


@st.composite
def spelled_string(draw: st.DrawFn, value: str, *, key: bool = False) -> str:
    """A string literal; a dict key is not put in parentheses (the stream refuses that)."""
    way = draw(st.sampled_from(["repr", "json", "split", "triple", "prefix"] + ([] if key else ["paren"])))
    if way == "json":
        return dumps(value)  # a valid Python literal too (ensure_ascii off: no surrogate pairs)
    if way == "split" and value:
        cut = draw(st.integers(0, len(value)))
        # An empty first piece right before the second would open a triple-quoted string (''')
        between = draw(blanks) or (" " if cut == 0 else "")
        return repr(value[:cut]) + between + repr(value[cut:])
    if way == "triple" and not any(c in value for c in '"\\\r'):
        return '"""' + value + '"""' if not value.endswith('"') else repr(value)
    if way == "prefix":
        return draw(st.sampled_from(["u", "U"])) + repr(value)
    if way == "paren":
        return "(" + repr(value) + ")"
    return repr(value)


@st.composite
def call_lists(draw: st.DrawFn) -> tuple[str, list[ParsedCall]]:
    calls, parts = [], []
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(sorted(NAMES)))
        arguments = draw(st.dictionaries(IDENTIFIER_KEYS, values, max_size=3))
        rendered = [f"{key}{draw(blanks)}={draw(blanks)}{draw(spelled(item))}" for key, item in arguments.items()]
        trailing = "," if rendered and draw(st.booleans()) else ""
        parts.append(f"{name}({draw(blanks)}{', '.join(rendered)}{trailing}{draw(blanks)})")
        calls.append(ParsedCall(name, dumps(arguments)))
    return "[" + ", ".join(parts) + "]", calls


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in zip(points, points[1:], strict=False)]


def streamed(text: str, pieces: list[str]) -> tuple[str, list[ParsedCall]]:
    content, out = feed("pythonic", pieces)
    said([piece for _, piece in out])
    return content, whole_calls([piece for _, piece in out])


@settings(max_examples=300, deadline=None)
@given(case=call_lists(), cuts=st.lists(st.integers(0, 10_000), max_size=8))
def test_pythonic_streamed_arguments_are_the_whole_parse(case: tuple[str, list[ParsedCall]], cuts: list[int]) -> None:
    text, calls = case
    whole = parse_call_list(text, NAMES)
    if any("\\ud8" in c.arguments for c in calls) or whole is None:
        return  # a value without a UTF-8 form (generated surrogates): nothing to compare
    assert whole == calls, text  # the spelling is valid Python meaning ``calls``
    assert streamed(text, [text]) == ("", calls), text
    assert streamed(text, split(text, cuts)) == ("", calls), text
    assert streamed(text, list(text)) == ("", calls), text


FRAGMENTS = [
    "get_weather(",
    "noop(",
    "search(",
    "city=",
    "q =",
    "n=",
    ")",
    "]",
    "[",
    ",",
    " ",
    "\n",
    "'",
    '"',
    "'''",
    '"""',
    "\\",
    "\\n",
    "\\x4",
    "\\N{BULLET}",
    "\\u00e9",
    "r'",
    "u'",
    "b'",
    "f'",
    "True",
    "None",
    "x",
    "1",
    "0x1F",
    "1_0",
    "1e5",
    "-",
    "+",
    ".5",
    "(",
    "{",
    "}",
    ":",
    "'k'",
    "#",
    "1j",
    "é",
    "🙂",
]


@settings(max_examples=500, deadline=None)
@given(
    body=st.lists(st.sampled_from(FRAGMENTS), max_size=14).map("".join),
    head=st.sampled_from(["[get_weather(city=", "[noop(", "[search(q='", "[get_weather(city='a', n="]),
    tail=st.sampled_from(["", "]", ")]", "')]", " then text"]),
    cuts=st.lists(st.integers(0, 10_000), max_size=6),
)
def test_pythonic_any_text_is_the_same_at_every_split_and_valid_lists_agree_with_the_whole_parse(
    body: str, head: str, tail: str, cuts: list[int]
) -> None:
    text = head + body + tail
    answer = streamed(text, [text])
    assert streamed(text, split(text, cuts)) == answer
    assert streamed(text, list(text)) == answer
    end = text.rfind("]")
    whole = parse_call_list(text[: end + 1], NAMES) if end != -1 else None
    if whole is not None and text[end + 1 :].strip() == "" and text.count("'k'") < 2:  # no repeated dict key
        assert answer == ("", whole), text
