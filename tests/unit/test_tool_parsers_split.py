"""Every tool-call parser, for generated outputs whose answer is known by construction.

Each strategy builds a model output from parts (content text, valid calls, malformed blocks, a
truncated block at the end) and, from the same parts, the content and calls the parser must
return. Every case is fed whole, split at random points, one character at a time, and split in
two at every position: the result must be the expected one every time. So no split can leak
markup into content, drop text, or change a call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gateway.tools import ParsedCall, make_parser
from gateway.tools.parsers.mistral import ARGS
from gateway.tools.types import whole_calls

NAMES = frozenset({"get_weather", "search", "noop"})
FORCED_NAME = "get_weather"


@dataclass
class Case:
    text: str
    content: str
    calls: list[ParsedCall]


def run(parser: str, pieces: list[str]) -> tuple[str, list[ParsedCall]]:
    tools = frozenset({FORCED_NAME}) if parser == "forced_named" else NAMES
    instance = make_parser(parser, tools)
    content: list[str] = []
    calls: list[ParsedCall] = []
    for piece in pieces:
        text, found = instance.feed(piece)
        content.append(text)
        calls.extend(found)
    text, found = instance.finish()
    content.append(text)
    calls.extend(found)
    assert instance.called == bool(calls)
    return "".join(content), whole_calls(calls)


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in zip(points, points[1:], strict=False)]


def check_every_split(parser: str, case: Case, cuts: list[int]) -> None:
    expected = (case.content, case.calls)
    assert run(parser, [case.text]) == expected
    assert run(parser, split(case.text, cuts)) == expected
    assert run(parser, list(case.text)) == expected
    for position in range(len(case.text) + 1):
        assert run(parser, [case.text[:position], case.text[position:]]) == expected, position


def check_same_at_every_split(parser: str, text: str, cuts: list[int]) -> list[ParsedCall]:
    """The answer for ``text`` fed whole, at ``cuts``, a character at a time and in two at every
    position is one answer (for outputs whose answer is not written out); its calls."""
    whole = run(parser, [text])
    assert run(parser, split(text, cuts)) == whole
    assert run(parser, list(text)) == whole
    for position in range(len(text) + 1):
        assert run(parser, [text[:position], text[position:]]) == whole, position
    return whole[1]


# ---- building blocks -------------------------------------------------------------------------

ALPHABET = [*'abZ .,<>[]{}();|"', "\n", "é", "日本", "🙂"]
ALPHABET += ["<tool_", "</tool", "[TOOL_", "[AR", "<|python_"]  # markers that diverge
MARKUP_PIECES = ["<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "<|python_tag|>"]
cuts = st.lists(st.integers(0, 10_000), max_size=8)
texts = st.lists(st.sampled_from(ALPHABET), max_size=8).map("".join)
spaces = st.sampled_from(["", " ", "\n", "\n\n", " \t "])
keys = st.sampled_from(["city", "unit", "q", "lieu", "日付", "x y", 'quo"te'])
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
    | st.sampled_from(["Paris", "é", "日本", "🙂", "a\\b", '{"x": [1]}', "</tool_call>", "[TOOL_CALLS]", "f(x=1)"])
)
values = st.recursive(
    scalars, lambda children: st.lists(children, max_size=3) | st.dictionaries(keys, children, max_size=3), max_leaves=6
)
arguments = st.dictionaries(keys, values, max_size=3)
names = st.sampled_from(sorted(NAMES))


def canonical(args: dict[str, Any]) -> str:
    return json.dumps(args, ensure_ascii=False)


@st.composite
def json_spelling(draw: st.DrawFn, obj: Any) -> str:
    """The same JSON written as a model might: compact or not, indented, ASCII-escaped."""
    indent = draw(st.sampled_from([None, 2]))
    separators = draw(st.sampled_from([None, (",", ":")]))
    return json.dumps(obj, ensure_ascii=draw(st.booleans()), indent=indent, separators=separators)


@st.composite
def call_object(draw: st.DrawFn, key: str) -> tuple[str, ParsedCall]:
    """A valid call object (arguments sometimes as a JSON string) and the call it means."""
    name, args = draw(names), draw(arguments)
    value: Any = args
    if draw(st.booleans()) and key == "arguments":
        value = json.dumps(args, ensure_ascii=draw(st.booleans()))
    obj = {"name": name, key: value} if draw(st.booleans()) else {key: value, "name": name}
    return draw(json_spelling(obj)), ParsedCall(name, canonical(args))


BAD_OBJECTS = [
    '{"name": "get_weather", "arguments": {"city": }}',  # invalid JSON, brackets balanced
    '{"name": "unknown_tool", "arguments": {}}',  # a name the request did not offer
    '{"name": "get_weather", "arguments": [1, 2]}',  # arguments not an object
    '{"name": "get_weather", "arguments": "not json"}',
    '{"arguments": {"city": "Paris"}}',  # no name
    '{"name": 7, "arguments": {}}',
    '{"name": "search", "arguments": {"x": NaN}}',  # not JSON for a strict reader
    '{"answer": "日本 🙂"}',  # plain JSON, not a call
]


def marker_expected(parts: list[tuple[str, str, list[ParsedCall]]]) -> tuple[str, list[ParsedCall]]:
    """What a marker format returns for parts ('text'|'bad'|'call', raw, calls).

    Whitespace right after a valid call is dropped; leading whitespace is dropped when the first
    other thing is a valid call; everything else that is not a valid call is content verbatim.
    """
    content: list[str] = []
    calls: list[ParsedCall] = []
    pending, started, strip = "", False, False
    for kind, raw, found in parts:
        if kind == "call":
            pending, started, strip = "", True, True
            calls.extend(found)
            continue
        if strip:
            raw = raw.lstrip()
            if not raw:
                continue
            strip = False
        if not started:
            if not raw.strip():
                pending += raw
                continue
            started = True
            content.append(pending)
            pending = ""
        content.append(raw)
    content.append(pending)
    return "".join(content), calls


@st.composite
def marker_case(
    draw: st.DrawFn,
    valid: Callable[[], st.SearchStrategy[tuple[str, list[ParsedCall]]]],
    bad: st.SearchStrategy[str],
    truncated: st.SearchStrategy[str],
    markup: list[str],
) -> Case:
    parts: list[tuple[str, str, list[ParsedCall]]] = [("text", draw(spaces), [])]
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["text", "text", "call", "bad"]))
        if kind == "text":
            parts.append(("text", draw(texts | spaces), []))
        elif kind == "call":
            raw, found = draw(valid())
            parts.append(("call", raw, found))
        else:
            parts.append(("bad", draw(bad), []))
    if draw(st.booleans()):
        parts.append(("bad", draw(truncated), []))
    text = "".join(raw for _, raw, _ in parts)
    for piece in markup:  # random text must not spell markup by accident
        assume(text.count(piece) == sum(raw.count(piece) for kind, raw, _ in parts if kind != "text"))
    content, calls = marker_expected(parts)
    return Case(text, content, calls)


# ---- hermes ----------------------------------------------------------------------------------


@st.composite
def hermes_call(draw: st.DrawFn) -> tuple[str, list[ParsedCall]]:
    body, call = draw(call_object("arguments"))
    assume("</tool_call>" not in body)
    return f"<tool_call>{draw(spaces)}{body}{draw(spaces)}</tool_call>", [call]


HERMES_BAD = [
    *BAD_OBJECTS,
    '{"name": "get_weather", "arguments": {"city": "Paris"}}}',  # one brace too many: the tag delimits
    '{"name": "get_weather", "arguments": {"city": "Paris"}',  # one too few
    '{"name": "noop", "arguments": {}} {"name": "noop", "arguments": {}}',  # two objects in one block
]
_HERMES_OPENS = re.compile(r'\s*\{\s*"name"\s*:\s*"(get_weather|search|noop)"\s*,\s*"(arguments|parameters)"\s*:\s*\{')


def hermes_opens(body: str) -> bool:
    """Whether a block's text opens a call whose arguments stream (then it stays a call)."""
    return _HERMES_OPENS.match(body) is not None


HERMES_CONTENT = [body for body in HERMES_BAD if not hermes_opens(body)]
"""Malformed before a call could open: content, verbatim."""
HERMES_OPENED = [body for body in HERMES_BAD if hermes_opens(body)]
"""Malformed after the call opened: a call ending where its arguments stopped making sense
(``test_tool_parsers.py``); here only split against whole."""
hermes_bad = st.sampled_from(HERMES_CONTENT).map(lambda body: f"<tool_call>\n{body}\n</tool_call>") | st.just(
    "<tool_call></tool_call>"
)


@st.composite
def hermes_truncated(draw: st.DrawFn, *, opened: bool = False) -> str:
    """A block cut off: before its call opened (content), or, ``opened``, anywhere."""
    raw, _ = draw(hermes_call())
    cut = raw[: draw(st.integers(len("<tool_call>"), len(raw) - 1))]
    assume(opened or not hermes_opens(cut[len("<tool_call>") :]))
    return cut


@settings(max_examples=150, deadline=None)
@given(case=marker_case(hermes_call, hermes_bad, hermes_truncated(), MARKUP_PIECES[:2]), cuts=cuts)
def test_hermes_any_split_gives_the_expected_content_and_calls(case: Case, cuts: list[int]) -> None:
    check_every_split("hermes", case, cuts)


opened_bad = st.sampled_from(HERMES_OPENED).map(lambda body: f"<tool_call>{body}</tool_call>")


@settings(max_examples=150, deadline=None)
@given(
    case=marker_case(hermes_call, hermes_bad | opened_bad, hermes_truncated(opened=True), MARKUP_PIECES[:2]),
    cuts=cuts,
)
def test_hermes_calls_cut_or_malformed_after_they_opened_are_the_same_for_every_split(
    case: Case, cuts: list[int]
) -> None:
    whole = run("hermes", [case.text])
    assert run("hermes", split(case.text, cuts)) == whole
    assert run("hermes", list(case.text)) == whole


# ---- mistral ---------------------------------------------------------------------------------


@st.composite
def mistral_call(draw: st.DrawFn) -> tuple[str, list[ParsedCall]]:
    if draw(st.booleans()):  # pre-v11: a JSON array (or one object)
        found = [draw(call_object("arguments")) for _ in range(draw(st.integers(1, 3)))]
        objects = [json.loads(raw) for raw, _ in found]
        body = json.dumps(objects[0]) if len(objects) == 1 and draw(st.booleans()) else draw(json_spelling(objects))
        return f"[TOOL_CALLS]{draw(spaces)}{body}", [call for _, call in found]
    name, args = draw(names), draw(arguments)
    call_id = draw(st.sampled_from(["", "[CALL_ID]a1b2c3d4e", "[CALL_ID]xyz "]))
    return f"[TOOL_CALLS]{name}{call_id}[ARGS]{draw(spaces)}{draw(json_spelling(args))}", [
        ParsedCall(name, canonical(args))
    ]


MISTRAL_BAD = [f"[TOOL_CALLS] [{body}]" for body in BAD_OBJECTS if not hermes_opens(body)] + [
    "[TOOL_CALLS][]",
    "[TOOL_CALLS] [{}, 1]",
    '[TOOL_CALLS]unknown_tool[ARGS]{"a": 1}',
    "[TOOL_CALLS]get_weather[ARGS][1]",
    "[TOOL_CALLS]Sorry, I cannot.",
    "[TOOL_CALLS]get weather",
    "[TOOL_CALLS]get_weather[CALL_ID]ab cd",
    "[TOOL_CALLS]get_weather[CALL_ID]a/b",
    "[TOOL_CALLS]get_weather[AR!",
    "[TOOL_CALLS]get_weather[ARGS]x",
    "[TOOL_CALLS]!",
]
MISTRAL_OPENED = [f"[TOOL_CALLS] [{body}]" for body in BAD_OBJECTS if hermes_opens(body)] + [
    '[TOOL_CALLS][{"name": "noop", "arguments": {}} {"name": "noop"}] x',
    '[TOOL_CALLS][{"name": "noop", "arguments": {}}, 3] x',
    "[TOOL_CALLS]get_weather[ARGS]{bad}",
    '[TOOL_CALLS]get_weather[ARGS]{"city": NaN} and text',
    '[TOOL_CALLS]noop[ARGS]{"a": 1e400}',
]
"""A v11 call whose arguments turn malformed after it opened: a call with what was sent, the
rest up to the next ``[TOOL_CALLS]`` dropped (``test_tool_parsers.py``); here split against whole."""
mistral_bad = st.sampled_from(MISTRAL_BAD)


@st.composite
def mistral_truncated(draw: st.DrawFn, *, opened: bool = False) -> str:
    """A call cut off: before a v11 call opened (content), or, ``opened``, anywhere."""
    raw, _ = draw(mistral_call())
    last = len(raw) - 1
    if not opened:  # before the first call's arguments (or, written first, its end)
        last = raw.index("{", raw.index(ARGS)) if ARGS in raw else raw.index('"arguments"')
    return raw[: draw(st.integers(len("[TOOL_CALLS]"), last))]


@settings(max_examples=150, deadline=None)
@given(case=marker_case(mistral_call, mistral_bad, mistral_truncated(), MARKUP_PIECES[2:5]), cuts=cuts)
def test_mistral_any_split_gives_the_expected_content_and_calls(case: Case, cuts: list[int]) -> None:
    check_every_split("mistral", case, cuts)


@settings(max_examples=100, deadline=None)
@given(
    case=marker_case(
        mistral_call, mistral_bad | st.sampled_from(MISTRAL_OPENED), mistral_truncated(opened=True), MARKUP_PIECES[2:5]
    ),
    cuts=cuts,
)
def test_mistral_calls_cut_or_malformed_after_they_opened_are_the_same_for_every_split(
    case: Case, cuts: list[int]
) -> None:
    check_same_at_every_split("mistral", case.text, cuts)


# ---- leading formats: llama3_json, pythonic, forced_* ---------------------------------------

plain_texts = st.tuples(st.sampled_from(["Hello", "é", "日本", "🙂", "Sure", "a{", "x[", "No:"]), texts).map("".join)
"""Output whose first character is not an opener: content from the first token."""


@st.composite
def trailing(draw: st.DrawFn) -> tuple[str, str]:
    """(what follows the last call, the content it gives): whitespace dropped, text kept."""
    space = draw(spaces)
    if draw(st.booleans()):
        return space, ""
    text = draw(plain_texts)
    return space + text, text


@st.composite
def llama3_case(draw: st.DrawFn, *, opened: bool = False) -> Case:
    """Calls, then an ending; a malformed or cut call at the end opens (and streams) only when
    ``opened`` (then the expected answer is not written out: ``check_same_at_every_split``)."""
    lead = draw(spaces) + draw(st.sampled_from(["", "<|python_tag|>", "<|python_start|>", "<|python_tag|> "]))
    if draw(st.integers(0, 5)) == 0:
        text = draw(spaces) + draw(plain_texts)
        return Case(text, text, [])
    found = [
        draw(call_object(draw(st.sampled_from(["parameters", "arguments"])))) for _ in range(draw(st.integers(0, 3)))
    ]
    separators = [draw(spaces) + ";" + draw(spaces) for _ in found]
    text = lead
    calls: list[ParsedCall] = []
    for index, (raw, call) in enumerate(found):
        text += (separators[index] if index else "") + raw
        calls.append(call)
    ending = draw(st.sampled_from(["none", "bad", "truncated", "text", "dangling"]))
    if not found and ending in ("none", "text", "dangling"):
        ending = "bad"
    sep = draw(spaces) + ";" + draw(spaces)
    if ending == "none":
        tail, tail_content = draw(trailing())
        suffix = draw(st.sampled_from(["", "<|python_end|>"]))
        return Case(text + suffix + tail, tail_content, calls)
    if ending == "dangling":  # a separator and no call after it: content, as written
        return Case(text + sep + "; x", sep.lstrip() + "; x", calls)
    if ending == "text":
        tail = draw(plain_texts)
        return Case(text + draw(spaces) + tail, tail, calls)
    if ending == "bad":
        bad = draw(st.sampled_from(BAD_OBJECTS))
    else:
        raw, _ = draw(call_object("parameters"))
        bad = raw[: draw(st.integers(1, len(raw) - 1))]
    assume(opened or not hermes_opens(bad))
    rest = draw(st.sampled_from(["", " more", "; {}"]))
    if not found:
        whole = text + bad + rest
        return Case(whole, whole, [])
    return Case(text + sep + bad + rest, sep.lstrip() + bad + rest, calls)


@settings(max_examples=150, deadline=None)
@given(case=llama3_case(), cuts=cuts)
def test_llama3_json_any_split_gives_the_expected_content_and_calls(case: Case, cuts: list[int]) -> None:
    check_every_split("llama3_json", case, cuts)


@settings(max_examples=100, deadline=None)
@given(case=llama3_case(opened=True), cuts=cuts)
def test_llama3_json_calls_cut_or_malformed_after_they_opened_are_the_same_for_every_split(
    case: Case, cuts: list[int]
) -> None:
    check_same_at_every_split("llama3_json", case.text, cuts)


@st.composite
def python_call(draw: st.DrawFn) -> tuple[str, ParsedCall]:
    name, args = draw(names), draw(arguments.filter(lambda a: all(k.isidentifier() for k in a)))
    space = draw(st.sampled_from(["", " ", "\n    "]))
    rendered = ", ".join(f"{key}={value!r}" for key, value in args.items())
    return f"{name}({space}{rendered})", ParsedCall(name, canonical(args))


PYTHON_BAD = [
    '[get_weather("Paris")]',  # positional
    "[unknown_tool(a=1)]",
    "[get_weather(city=paris)]",  # a variable
    "[get_weather(city=f'x')]",
    "[get_weather(**kw)]",
    "[get_weather(a=b'x')]",
    "[(noop(a=1)) noop()]",  # read whole (parenthesised), then no list
    "[(noop(a=(1, 2)))]",
]
"""Malformed before a call could open: content, verbatim."""
PYTHON_OPENED = [
    "[get_weather(city=(1, 2))]",  # a tuple
    "[get_weather(city={1: 'a'})]",  # a non-string key
    "[get_weather(city=1+2)]",
    "[get_weather(a=1, a=2)]",
    "[get_weather(a=1), 3]",
    "[get_weather(a=1e999)]",
    "[noop() noop()]",
    "[noop())]",  # brackets that do not match
    "[get_weather(a='x' b'y')]",
    "[get_weather(a=-'x')]",
    "[search(q='''open",
]
"""Malformed after the first call opened: calls with what was sent (``test_tool_parsers.py``);
here only split against whole."""
_PYTHON_OPENS = re.compile(
    r"\s*(?:<\|python_start\|>)?\s*\[\s*(?:get_weather|search|noop)\s*\(\s*"
    r"(?:\)|[^\W\d]\w*\s*=\s*(?:[\"'\[{(+\-.0-9]|(?:True|False|None)(?=[^\w'\"])|[rRuU][\"']))"
)


def pythonic_opens(text: str) -> bool:
    """Whether an output's list opens a call that streams (then it stays calls)."""
    return _PYTHON_OPENS.match(text) is not None


@st.composite
def pythonic_case(draw: st.DrawFn, *, opened: bool = False) -> Case:
    """Calls, a malformed list or a cut one; malformed or cut after the first call opened only
    when ``opened`` (then the expected answer is not written out: ``check_same_at_every_split``)."""
    lead = draw(spaces) + draw(st.sampled_from(["", "<|python_start|>", "<|python_start|>\n"]))
    kind = draw(st.sampled_from(["valid", "valid", "bad", "truncated", "plain"]))
    if kind == "plain":
        text = draw(spaces) + draw(plain_texts | st.sampled_from(["[1] a note", "[see](x)", "[]", "[ 3", "[a b]"]))
        return Case(text, text, [])
    found = [draw(python_call()) for _ in range(draw(st.integers(1, 3)))]
    listing = "[" + ", ".join(raw for raw, _ in found) + "]"
    if kind == "valid":
        suffix = draw(st.sampled_from(["", "<|python_end|>", " <|python_end|>\n"]))
        tail, tail_content = draw(trailing())
        return Case(lead + listing + suffix + tail, tail_content, [call for _, call in found])
    bads = PYTHON_BAD + PYTHON_OPENED if opened else PYTHON_BAD
    bad = draw(st.sampled_from(bads)) if kind == "bad" else listing[: draw(st.integers(1, len(listing) - 1))]
    assume(opened or not pythonic_opens(bad))
    whole = lead + bad + draw(st.sampled_from(["", " rest", "<|python_end|>"]))
    return Case(whole, whole, [])


@settings(max_examples=150, deadline=None)
@given(case=pythonic_case(), cuts=cuts)
def test_pythonic_any_split_gives_the_expected_content_and_calls(case: Case, cuts: list[int]) -> None:
    check_every_split("pythonic", case, cuts)


@settings(max_examples=100, deadline=None)
@given(case=pythonic_case(opened=True), cuts=cuts)
def test_pythonic_calls_cut_or_malformed_after_they_opened_are_the_same_for_every_split(
    case: Case, cuts: list[int]
) -> None:
    check_same_at_every_split("pythonic", case.text, cuts)


FORCED_BAD = ["{'a': 1}", "{ a }", "{1: 2}"]
"""Output that cannot open the call: content, verbatim."""
FORCED_OPENED = ['{"a": }', '{"a": NaN}', '{"a": 1]', '{"a": [}']
"""Arguments malformed after the call opened: a call with what was sent (``test_tool_parsers.py``)."""


@st.composite
def forced_named_case(draw: st.DrawFn, *, opened: bool = False) -> Case:
    lead = draw(spaces)
    kind = draw(st.sampled_from(["valid", "valid", "bad", "truncated", "plain"]))
    args = draw(arguments)
    if kind == "valid":
        tail, tail_content = draw(trailing())
        return Case(lead + draw(json_spelling(args)) + tail, tail_content, [ParsedCall(FORCED_NAME, canonical(args))])
    if kind == "plain":
        text = lead + draw(plain_texts | st.sampled_from(["[1, 2]", '"just a string"', "null"]))
        return Case(text, text, [])
    raw = json.dumps(args)
    if kind == "bad":
        bad = draw(st.sampled_from(FORCED_BAD + FORCED_OPENED if opened else FORCED_BAD))
    else:
        bad = raw[: draw(st.integers(1, len(raw) - 1))] if opened else "{"
    return Case(lead + bad, lead + bad, [])


@settings(max_examples=150, deadline=None)
@given(case=forced_named_case(), cuts=cuts)
def test_forced_named_any_split_gives_the_expected_content_and_calls(case: Case, cuts: list[int]) -> None:
    check_every_split("forced_named", case, cuts)


@settings(max_examples=100, deadline=None)
@given(case=forced_named_case(opened=True), cuts=cuts)
def test_forced_named_cut_or_malformed_after_it_opened_is_the_same_for_every_split(case: Case, cuts: list[int]) -> None:
    check_same_at_every_split("forced_named", case.text, cuts)


@st.composite
def forced_required_case(draw: st.DrawFn, *, opened: bool = False) -> Case:
    lead = draw(spaces)
    kind = draw(st.sampled_from(["valid", "valid", "bad", "truncated", "plain"]))
    found = [draw(call_object("parameters")) for _ in range(draw(st.integers(1, 3)))]
    array = draw(json_spelling([json.loads(raw) for raw, _ in found]))
    if kind == "valid":
        tail, tail_content = draw(trailing())
        return Case(lead + array + tail, tail_content, [call for _, call in found])
    if kind == "plain":
        text = lead + draw(plain_texts | st.sampled_from(['{"name": "noop", "parameters": {}}', "[]"]))
        return Case(text, text, [])
    if kind == "bad":
        bad = "[" + draw(st.sampled_from([b for b in BAD_OBJECTS if opened or not hermes_opens(b)])) + "]"
    else:  # before the first call's arguments (or, written first, its end), unless ``opened``
        bad = array[: draw(st.integers(1, len(array) - 1 if opened else array.index('"parameters"')))]
    return Case(lead + bad, lead + bad, [])


@settings(max_examples=150, deadline=None)
@given(case=forced_required_case(), cuts=cuts)
def test_forced_required_any_split_gives_the_expected_content_and_calls(case: Case, cuts: list[int]) -> None:
    check_every_split("forced_required", case, cuts)


@settings(max_examples=100, deadline=None)
@given(case=forced_required_case(opened=True), cuts=cuts)
def test_forced_required_calls_cut_or_malformed_after_they_opened_are_the_same_for_every_split(
    case: Case, cuts: list[int]
) -> None:
    check_same_at_every_split("forced_required", case.text, cuts)


@pytest.mark.parametrize(
    ("parser", "text"),
    [("hermes", f"<tool_call>{body}</tool_call>") for body in HERMES_CONTENT]
    + [("mistral", text) for text in MISTRAL_BAD]
    + [("llama3_json", body) for body in BAD_OBJECTS if not hermes_opens(body)]
    + [("pythonic", text) for text in PYTHON_BAD]
    + [("forced_named", text) for text in FORCED_BAD]
    + [("forced_required", f"[{body}]") for body in BAD_OBJECTS if not hermes_opens(body)],
)
def test_every_listed_malformed_output_is_content_verbatim_at_every_split(parser: str, text: str) -> None:
    """The generated cases draw from these lists; here each one runs, whole and split."""
    check_every_split(parser, Case(text, text, []), [])


@pytest.mark.parametrize("text", PYTHON_OPENED)
def test_every_listed_pythonic_list_malformed_after_opening_is_calls_at_every_split(text: str) -> None:
    assert check_same_at_every_split("pythonic", text, [])
