"""``deepseek_v3`` (V3 and R1: fenced JSON) and ``deepseek_v32`` (V3.2's DSML): hand-written
outputs, then generated ones, each fed whole, a character at a time and split in two at every
position. The content and the calls must be the same every time, every call must be said as one
opening piece, argument pieces and one closing piece, and the pieces' arguments must join to
exactly the call's arguments.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.tools import PARSERS, ParsedCall, make_parser
from gateway.tools.types import whole_calls

NAMES = frozenset({"get_weather", "search", "noop"})
WEATHER = ParsedCall("get_weather", '{"city": "Paris"}')


def pieces(parser: str, chunks: list[str]) -> tuple[str, list[ParsedCall]]:
    """The content and the call pieces the parser returns for ``chunks`` fed in order."""
    instance = make_parser(parser, NAMES)
    content: list[str] = []
    parts: list[ParsedCall] = []
    for chunk in chunks:
        text, found = instance.feed(chunk)
        content.append(text)
        parts.extend(found)
    text, found = instance.finish()
    content.append(text)
    parts.extend(found)
    assert instance.called == bool(parts)
    return "".join(content), parts


def well_formed(parts: list[ParsedCall]) -> None:
    """Each call: one piece that opens it (its name, no arguments), then pieces that neither open
    nor name, the last one closing it; or, a call read whole, one piece that opens and closes."""
    open_call = False
    for part in parts:
        if part.opens:
            assert not open_call and part.name, parts
            assert part.closes or part.arguments == "", parts
            open_call = not part.closes
        else:
            assert open_call and part.name == "", parts
            if part.closes:
                assert part.arguments == "", parts
                open_call = False
    assert not open_call, parts


def run(parser: str, text: str) -> tuple[str, list[ParsedCall]]:
    """The answer for ``text``, the same fed whole, a character at a time and in two at every
    position, with well-formed pieces each time."""
    content, parts = pieces(parser, [text])
    well_formed(parts)
    answer = (content, whole_calls(parts))
    splits = [list(text)] + [[text[:at], text[at:]] for at in range(len(text) + 1)]
    for chunks in splits:
        got_content, got_parts = pieces(parser, chunks)
        well_formed(got_parts)
        assert (got_content, whole_calls(got_parts)) == answer, chunks
    return answer


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


# ---- deepseek_v3 -----------------------------------------------------------------------------


def v3_call(name: str, arguments: str, head: str = "function") -> str:
    return f"<｜tool▁call▁begin｜>{head}<｜tool▁sep｜>{name}\n```json\n{arguments}\n```<｜tool▁call▁end｜>"


def v3(*calls: str, end: bool = True) -> str:
    """A section as the template renders it: a newline before each call after the first."""
    return "<｜tool▁calls▁begin｜>" + "\n".join(calls) + ("<｜tool▁calls▁end｜>" if end else "")


def test_v3_one_call() -> None:
    assert run("deepseek_v3", v3(v3_call("get_weather", '{"city": "Paris"}'))) == ("", [WEATHER])


def test_v3_several_calls_with_content_before_and_after() -> None:
    text = "Let me check." + v3(v3_call("get_weather", '{"city": "Paris"}'), v3_call("noop", "{}")) + "\nDone."
    assert run("deepseek_v3", text) == ("Let me check.Done.", [WEATHER, ParsedCall("noop", "{}")])


def test_v3_arguments_with_escapes_unicode_and_nesting_are_respelled_once() -> None:
    arguments = {"q": 'say "hi"\n\\ </tag> ```', "where": {"city": "Zürich 東京 🙂", "tags": [1, 2.5, None, True]}}
    spelled = json.dumps(arguments, indent=2)  # the model's spelling: ASCII escapes, indented
    assert run("deepseek_v3", v3(v3_call("search", spelled))) == ("", [ParsedCall("search", dumps(arguments))])


def test_v3_layout_around_the_fence_and_a_missing_section_end() -> None:
    text = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜> function <｜tool▁sep｜> noop ```json{}```  <｜tool▁call▁end｜>"
    assert run("deepseek_v3", text) == ("", [ParsedCall("noop", "{}")])
    assert run("deepseek_v3", v3(v3_call("get_weather", '{"city": "Paris"}'), end=False)) == ("", [WEATHER])


def test_v3_arguments_as_a_json_string_holding_an_object_are_read_whole() -> None:
    text = v3(v3_call("get_weather", dumps('{"city": "Paris"}')))
    assert run("deepseek_v3", text) == ("", [WEATHER])


@pytest.mark.parametrize(
    "text",
    [
        v3(v3_call("launch_rockets", "{}")),  # an unknown tool
        v3(v3_call("get_weather", '{"city": "Paris"}', head="")),  # V3.1's spelling: no type word
        v3(v3_call("get_weather", '{"city": "Paris"}', head="tool")),
        v3(v3_call("get_weather", "[1]")),
        v3(v3_call("get_weather", '"not an object"')),
        v3(),  # no call at all
        v3(v3_call("get_weather", "{}").replace("```json\n", "")),  # no fence
        v3(v3_call("launch_rockets", "{}"), v3_call("noop", "{}")),  # one bad call spoils the section
        "<｜tool▁calls▁begin｜>text<｜tool▁calls▁end｜>",
        "Cut: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_wea",
    ],
)
def test_v3_malformed_before_a_call_opened_is_content_verbatim(text: str) -> None:
    assert run("deepseek_v3", text + " after") == (text + " after", [])


@pytest.mark.parametrize(
    ("calls", "expected"),
    [
        ((v3_call("get_weather", '{"city": }'),), [ParsedCall("get_weather", '{"city": ')]),
        ((v3_call("noop", "{}"), v3_call("launch_rockets", "{}")), [ParsedCall("noop", "{}")]),
        ((v3_call("noop", "{}"), v3_call("get_weather", "[1]")), [ParsedCall("noop", "{}")]),
        ((v3_call("noop", "{} trailing"),), [ParsedCall("noop", "{}")]),
        ((v3_call("noop", "{}").replace("\n```<", "<"),), [ParsedCall("noop", "{}")]),  # no closing fence
    ],
)
def test_v3_malformed_after_a_call_opened_ends_the_calls_there(
    calls: tuple[str, ...], expected: list[ParsedCall]
) -> None:
    """What was sent stays, the rest of the section is not read, the text after it is content."""
    assert run("deepseek_v3", v3(*calls) + "after") == ("after", expected)


def test_v3_cut_inside_the_arguments_keeps_what_was_sent() -> None:
    text = "Sure." + v3(v3_call("get_weather", '{"city": "Pa'))[: -len("\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>")]
    assert run("deepseek_v3", text) == ("Sure.", [ParsedCall("get_weather", '{"city": "Pa')])


def test_v3_opens_at_the_arguments_and_streams_a_long_string_before_the_call_closes() -> None:
    long = "x" * 500
    text = v3(v3_call("search", dumps({"q": long})))
    at = text.index(long) + 300
    _, parts = pieces("deepseek_v3", [text[: text.index("{")]])
    assert parts == []  # the name is known, the arguments have not begun
    _, parts = pieces("deepseek_v3", [text[: text.index("{") + 1]])
    assert parts[0] == ParsedCall("search", "", closes=False)
    instance = make_parser("deepseek_v3", NAMES)
    content, opened = instance.feed(text[:at])
    assert content == "" and opened[0] == ParsedCall("search", "", closes=False)
    assert "".join(p.arguments for p in opened) == '{"q": "' + "x" * 300 and not any(p.closes for p in opened)
    content, rest = instance.feed(text[at:])
    assert content == "" and rest[-1].closes
    assert whole_calls(opened + rest) == [ParsedCall("search", dumps({"q": long}))]


# ---- deepseek_v32 ----------------------------------------------------------------------------

D = "｜DSML｜"


def parameter(key: str, value: str, string: str = "true") -> str:
    return f'<{D}parameter name="{key}" string="{string}">{value}</{D}parameter>'


def invoke(name: str, *parameters: str) -> str:
    return f'<{D}invoke name="{name}">\n' + "\n".join(parameters) + f"\n</{D}invoke>"


def dsml(*invokes: str, end: bool = True) -> str:
    """A block as DeepSeek's encoding renders it."""
    return f"<{D}function_calls>\n" + "\n".join(invokes) + (f"\n</{D}function_calls>" if end else "")


def rendered(arguments: dict[str, Any]) -> list[str]:
    """The parameters of an arguments object: strings as they are, everything else as JSON."""
    return [
        parameter(key, value) if isinstance(value, str) else parameter(key, dumps(value), "false")
        for key, value in arguments.items()
    ]


def test_v32_one_call() -> None:
    assert run("deepseek_v32", dsml(invoke("get_weather", parameter("city", "Paris")))) == ("", [WEATHER])


def test_v32_several_calls_with_content_before_and_after() -> None:
    text = "Checking.\n\n" + dsml(invoke("get_weather", parameter("city", "Paris")), invoke("noop")) + "\nDone."
    assert run("deepseek_v32", text) == ("Checking.\n\nDone.", [WEATHER, ParsedCall("noop", "{}")])


def test_v32_values_typed_by_their_string_attribute() -> None:
    arguments = {
        "q": 'say "hi"\n\\ <b> </｜DSML｜param 🙂',  # raw text, quotes and a partial closing tag included
        "n": 3,
        "x": 2.5,
        "ok": False,
        "none": None,
        "where": {"city": "Zürich 東京", "tags": [1, {"k": "</｜DSML｜parameter>"}]},
        "list": ["a", 1],
    }
    text = dsml(invoke("search", *rendered(arguments)))
    assert run("deepseek_v32", text) == ("", [ParsedCall("search", dumps(arguments))])


def test_v32_json_values_are_respelled_and_non_json_is_the_string_it_spells() -> None:
    text = dsml(
        invoke(
            "search",
            parameter("a", " 1E2 ", "false"),
            parameter("b", '{"k" : "\\u00e9"}', "false"),
            parameter("c", "Paris", "false"),
            parameter("d", "NaN", "false"),
            parameter("e", "", "true"),
        )
    )
    expected = {"a": 100.0, "b": {"k": "é"}, "c": "Paris", "d": "NaN", "e": ""}
    assert run("deepseek_v32", text) == ("", [ParsedCall("search", dumps(expected))])


def test_v32_a_missing_block_end_after_the_last_call() -> None:
    assert run("deepseek_v32", dsml(invoke("get_weather", parameter("city", "Paris")), end=False)) == ("", [WEATHER])


@pytest.mark.parametrize(
    "text",
    [
        dsml(invoke("launch_rockets", parameter("city", "Paris"))),  # an unknown tool
        dsml(invoke("launch_rockets"), invoke("noop")),
        dsml(),  # no invoke at all
        dsml("text first", invoke("noop")),
        dsml(f"<{D}invoke  nam='noop'>"),
        f"<{D}function_calls>{invoke('noop')}".replace('name="noop"', 'name="noop"x'),
        f'Cut: <{D}function_calls>\n<{D}invoke name="get_wea',
    ],
)
def test_v32_malformed_before_a_call_opened_is_content_verbatim(text: str) -> None:
    assert run("deepseek_v32", text + " after") == (text + " after", [])


@pytest.mark.parametrize(
    ("invokes", "expected"),
    [
        ((invoke("get_weather", parameter("city", "Paris"), parameter("city", "Rome")),), '{"city": "Paris"'),
        ((invoke("get_weather", parameter("city", "Paris", "maybe")),), "{"),
        ((invoke("get_weather", parameter("city", "Paris"), "text"),), '{"city": "Paris"'),
        ((invoke("get_weather", parameter("d", '{"a": }', "false")),), '{"d": {"a": '),
        ((invoke("get_weather", parameter("d", '{"a": 1} x', "false")),), '{"d": {"a": 1}'),
        ((invoke("get_weather", f'<{D}parameter name="city">Paris</{D}parameter>'),), "{"),
    ],
)
def test_v32_malformed_after_a_call_opened_ends_the_call_there(invokes: tuple[str, ...], expected: str) -> None:
    """What was sent stays, the rest of the block is not read, the text after it is content."""
    assert run("deepseek_v32", dsml(*invokes) + "after") == ("after", [ParsedCall("get_weather", expected)])


def test_v32_the_block_end_closes_an_unclosed_invoke() -> None:
    text = dsml(invoke("get_weather", parameter("city", "Paris"))).replace(f"\n</{D}invoke>", "") + " after"
    assert run("deepseek_v32", text) == ("after", [WEATHER])


def test_v32_an_unknown_second_invoke_ends_the_calls() -> None:
    text = dsml(invoke("noop"), invoke("launch_rockets"), invoke("noop")) + "after"
    assert run("deepseek_v32", text) == ("after", [ParsedCall("noop", "{}")])


def test_v32_the_block_end_inside_a_value_ends_the_call_there() -> None:
    text = f'<{D}function_calls><{D}invoke name="search">{parameter("q", "abc")[: -len(f"</{D}parameter>")]}'
    text += f"</{D}function_calls> after"
    assert run("deepseek_v32", text) == ("after", [ParsedCall("search", '{"q": "abc')])


def test_v32_cut_inside_a_value_keeps_all_of_its_text() -> None:
    text = f'Sure.<{D}function_calls>\n<{D}invoke name="search">\n<{D}parameter name="q" string="true">ab </{D}para'
    assert run("deepseek_v32", text) == ("Sure.", [ParsedCall("search", '{"q": "ab </｜DSML｜para')])


def test_v32_opens_at_the_name_and_streams_a_long_string_before_the_call_closes() -> None:
    long = "ü" * 500
    text = dsml(invoke("search", parameter("q", long), parameter("n", "1", "false")))
    name_end = text.index('">', text.index("invoke")) + 2
    _, parts = pieces("deepseek_v32", [text[: name_end - 1]])
    assert parts == []
    instance = make_parser("deepseek_v32", NAMES)
    content, opened = instance.feed(text[:name_end])
    assert content == "" and opened == [ParsedCall("search", "", closes=False), ParsedCall("", "{", False, False)]
    at = text.index(long) + 300
    content, more = instance.feed(text[name_end:at])
    assert content == "" and "".join(p.arguments for p in more) == '"q": "' + "ü" * 300
    content, rest = instance.feed(text[at:])
    assert content == "" and rest[-1].closes
    assert whole_calls(opened + more + rest) == [ParsedCall("search", dumps({"q": long, "n": 1}))]


def test_v32_an_object_value_streams_as_it_settles() -> None:
    text = dsml(invoke("search", parameter("d", '{"k": "abcdef"}', "false")))
    instance = make_parser("deepseek_v32", NAMES)
    _, parts = instance.feed(text[: text.index("cdef")])
    assert "".join(p.arguments for p in parts) == '{"d": {"k": "ab'


# ---- generated outputs -----------------------------------------------------------------------

ALPHABET = [*"abZ .,{}[]:;`'\"\\/", "\n", "\t", "é", "日本", "🙂", "<", "</", "</｜DSML｜", "```", "<｜tool▁sep｜>"]
text_values = st.lists(st.sampled_from(ALPHABET), max_size=6).map("".join)
keys = st.sampled_from(["city", "q", "lieu", "日付", "x y", 'quo"te'])
scalars = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats(allow_nan=False, allow_infinity=False)
values = st.recursive(
    scalars | text_values,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=6,
)
arguments = st.dictionaries(keys, values, max_size=3)
dsml_arguments = st.dictionaries(st.sampled_from(["city", "q", "日付", "x y", "a-b"]), values, max_size=3)
"""A DSML parameter's name is an attribute value: it has no ``"``."""
names = st.sampled_from(sorted(NAMES))
prose = st.sampled_from(["", "Sure. ", "日本 🙂\n", "a < b "])


@st.composite
def v3_output(draw: st.DrawFn) -> tuple[str, str, list[ParsedCall]]:
    calls = [(draw(names), draw(arguments)) for _ in range(draw(st.integers(1, 3)))]
    indent = draw(st.sampled_from([None, 2]))
    before, after = draw(prose), draw(prose)
    text = before + v3(*(v3_call(name, json.dumps(args, indent=indent)) for name, args in calls)) + after
    return text, before + after.lstrip(), [ParsedCall(name, dumps(args)) for name, args in calls]


@st.composite
def v32_output(draw: st.DrawFn) -> tuple[str, str, list[ParsedCall]]:
    calls = [(draw(names), draw(dsml_arguments)) for _ in range(draw(st.integers(1, 3)))]
    before, after = draw(prose), draw(prose)
    text = before + dsml(*(invoke(name, *rendered(args)) for name, args in calls)) + after
    return text, before + after.lstrip(), [ParsedCall(name, dumps(args)) for name, args in calls]


def cut_to(text: str, point: int) -> str:
    return text[: point % (len(text) + 1)]


@settings(max_examples=60, deadline=None)
@given(case=v3_output())
def test_v3_generated_outputs_at_every_split(case: tuple[str, str, list[ParsedCall]]) -> None:
    text, content, calls = case
    assert run("deepseek_v3", text) == (content, calls)


@settings(max_examples=60, deadline=None)
@given(case=v32_output())
def test_v32_generated_outputs_at_every_split(case: tuple[str, str, list[ParsedCall]]) -> None:
    text, content, calls = case
    assert run("deepseek_v32", text) == (content, calls)


@pytest.mark.parametrize("parser", ["deepseek_v3", "deepseek_v32"])
@settings(max_examples=60, deadline=None)
@given(data=st.data(), point=st.integers(0, 10_000))
def test_generated_outputs_cut_anywhere_are_the_same_at_every_split(
    parser: str, data: st.DataObject, point: int
) -> None:
    """An output cut short (``max_tokens``): one answer whatever the split, nothing lost."""
    text, _, _ = data.draw(v3_output() if parser == "deepseek_v3" else v32_output())
    cut = cut_to(text, point)
    content, calls = run(parser, cut)
    if not calls:
        assert content == cut


V3_PARTS = [
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
    "function",
    "noop",
    "get_weather",
    "\n",
    "```json\n",
    "```",
    "{}",
    '{"city": "Pa',
    '"}',
    "<｜tool",
    " x ",
]
DSML_PARTS = [
    f"<{D}function_calls>",
    f"</{D}function_calls>",
    '<｜DSML｜invoke name="noop">',
    '<｜DSML｜invoke name="get_weather">',
    '<｜DSML｜invoke name="nope">',
    f"</{D}invoke>",
    '<｜DSML｜parameter name="city" string="true">',
    '<｜DSML｜parameter name="n" string="false">',
    f"</{D}parameter>",
    "</｜DSML｜",
    '{"a": [1',
    "]}",
    "Paris",
    "\n",
    " x ",
    "<",
]


@pytest.mark.parametrize(("parser", "parts"), [("deepseek_v3", V3_PARTS), ("deepseek_v32", DSML_PARTS)])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_markup_in_any_order_is_one_answer_at_every_split(parser: str, parts: list[str], data: st.DataObject) -> None:
    """Fragments of the format's markup in any order, valid or not: the answer does not depend
    on the split, and what is no call comes back as content, verbatim."""
    text = "".join(data.draw(st.lists(st.sampled_from(parts), max_size=12)))
    content, calls = run(parser, text)
    if not calls:
        assert content == text


@pytest.mark.parametrize("parser", ["deepseek_v3", "deepseek_v32"])
@settings(max_examples=100, deadline=None)
@given(data=st.data(), edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 12)), min_size=1, max_size=3))
def test_valid_outputs_with_markup_cut_out_or_added_are_one_answer_at_every_split(
    parser: str, data: st.DataObject, edits: list[tuple[int, int]]
) -> None:
    """A valid output with spans cut out and fragments put in (a call's markup broken anywhere):
    the answer does not depend on the split, and what is no call comes back as content."""
    text, _, _ = data.draw(v3_output() if parser == "deepseek_v3" else v32_output())
    parts = V3_PARTS if parser == "deepseek_v3" else DSML_PARTS
    for at, length in edits:
        at %= len(text) + 1
        text = text[:at] + data.draw(st.sampled_from(["", *parts])) + text[at + length :]
    content, calls = run(parser, text)
    if not calls:
        assert content == text


# ---- the contract every parser keeps ---------------------------------------------------------

NOOP = {
    "deepseek_v3": v3(v3_call("noop", "{}")),
    "deepseek_v32": dsml(invoke("noop")),
}


@pytest.mark.parametrize("parser", sorted(NOOP))
def test_plain_text_comes_back_at_once_and_after_finish_is_content(parser: str) -> None:
    instance = make_parser(parser, NAMES)
    instance.feed("Hello")
    assert instance.feed("a token, of text. ") == ("a token, of text. ", [])
    instance.finish()
    assert instance.feed("late") == ("late", [])
    assert instance.finish() == ("", [])


@pytest.mark.parametrize("parser", sorted(NOOP))
def test_called_once_the_call_opened(parser: str) -> None:
    output = NOOP[parser]
    opened = output.index("{") + 1 if parser == "deepseek_v3" else output.index('">') + 2
    instance = make_parser(parser, NAMES)
    instance.feed(output[: opened - 1])
    assert not instance.called
    instance.feed(output[opened - 1 :])
    assert instance.called


def test_both_formats_are_registered_with_special_tokens_kept() -> None:
    for name in NOOP:
        spec = PARSERS[name]
        assert spec.needs_special_tokens and not spec.forced and not spec.typed and spec.families and spec.markers
