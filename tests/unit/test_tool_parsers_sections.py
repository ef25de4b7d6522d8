"""``deepseek_v31`` and ``kimi_k2``: calls inside a section of special tokens, JSON arguments
that stream once a call names one of the tools and its arguments object begins.

Hand-written cases first, then generated outputs fed whole, at random splits, a character at a
time and split in two at every position (the helpers of ``test_tool_parsers_split.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.tools import ParsedCall
from gateway.tools.types import whole_calls
from tests.unit.test_tool_parsers import run, steps
from tests.unit.test_tool_parsers_split import (
    Case,
    arguments,
    canonical,
    check_every_split,
    check_same_at_every_split,
    cuts,
    json_spelling,
    marker_case,
    names,
)

WEATHER = ParsedCall("get_weather", '{"city": "Paris"}')


def deepseek(*calls: tuple[str, str], end: bool = True) -> str:
    body = "".join(f"<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{args}<｜tool▁call▁end｜>" for name, args in calls)
    return f"<｜tool▁calls▁begin｜>{body}{'<｜tool▁calls▁end｜>' if end else ''}"


def kimi(*calls: tuple[str, str], end: bool = True) -> str:
    body = "".join(
        f"<|tool_call_begin|>{head}<|tool_call_argument_begin|>{args}<|tool_call_end|>" for head, args in calls
    )
    return f"<|tool_calls_section_begin|>{body}{'<|tool_calls_section_end|>' if end else ''}"


# ---- deepseek_v31 ----------------------------------------------------------------------------


def test_deepseek_text_then_parallel_calls_then_text() -> None:
    text = "Checking." + deepseek(("get_weather", '{"city": "Paris"}'), ("noop", "{}")) + "\nDone"
    assert run("deepseek_v31", text) == ("Checking.Done", [WEATHER, ParsedCall("noop", "{}")])


def test_deepseek_section_end_may_be_missing_when_the_output_ends_after_a_call() -> None:
    assert run("deepseek_v31", deepseek(("get_weather", '{"city": "Paris"}'), end=False)) == ("", [WEATHER])


def test_deepseek_call_end_quoted_in_a_value_does_not_cut_the_arguments() -> None:
    args = json.dumps({"q": "<｜tool▁call▁end｜>"}, ensure_ascii=False)
    assert run("deepseek_v31", deepseek(("search", args))) == ("", [ParsedCall("search", args)])


def test_deepseek_arguments_as_a_json_string_holding_an_object() -> None:
    assert run("deepseek_v31", deepseek(("get_weather", json.dumps('{"city": "Paris"}')))) == ("", [WEATHER])


def test_deepseek_v3_spelling_is_content() -> None:
    text = deepseek(("function<｜tool▁sep｜>get_weather\n```json\n{}\n```", "x"))
    assert run("deepseek_v31", text) == (text, [])


def test_deepseek_arguments_stream_and_join_to_the_whole() -> None:
    text = deepseek(("get_weather", '{"city": "Paris"}'), ("noop", "{}")) + "Done"
    at = text.index('"Par')
    first, second, last = steps("deepseek_v31", text[:at], text[at:])
    assert first == ("", [ParsedCall("get_weather", "", closes=False), ParsedCall("", '{"city": ', False, False)])
    assert second[0] == "Done" and whole_calls(first[1] + second[1]) == [WEATHER, ParsedCall("noop", "{}")]
    assert last == ("", [])


@pytest.mark.parametrize(
    ("calls", "expected"),
    [
        ((("get_weather", '{"city": }'),), [ParsedCall("get_weather", '{"city": ')]),
        (
            (("get_weather", '{"city": "Pa'),),
            [ParsedCall("get_weather", '{"city": "Pa<｜tool▁call▁end｜><｜tool▁calls▁end｜>after')],
        ),
        ((("noop", "{}"), ("get_weather", "[1]")), [ParsedCall("noop", "{}")]),
        ((("noop", "{}"), ("unknown", "{}")), [ParsedCall("noop", "{}")]),
        ((("noop", '{"a": 1}}'),), [ParsedCall("noop", '{"a": 1}')]),
    ],
)
def test_deepseek_what_turns_malformed_after_a_call_opened_ends_the_calls_there(
    calls: tuple[tuple[str, str], ...], expected: list[ParsedCall]
) -> None:
    """What was sent stays; the rest of the section is not read, the text after it is content
    (an unclosed string runs to the end of the output, as in every streaming format)."""
    assert run("deepseek_v31", deepseek(*calls) + "after") == ("" if '"Pa' in calls[0][1] else "after", expected)


# ---- kimi_k2 ---------------------------------------------------------------------------------


def test_kimi_calls_name_the_function_in_their_ids() -> None:
    text = "Sure." + kimi(("functions.get_weather:0", '{"city": "Paris"}'), (" search:1 ", ' {"q": "日本"} '))
    assert run("kimi_k2", text) == ("Sure.", [WEATHER, ParsedCall("search", '{"q": "日本"}')])


@pytest.mark.parametrize("head", ["functions.get_weather", "get_weather:x", "functions.unknown:0", "tool_call_1"])
def test_kimi_head_without_a_known_name_and_index_is_content(head: str) -> None:
    text = kimi((head, '{"city": "Paris"}'))
    assert run("kimi_k2", text) == (text, [])


# ---- generated outputs -----------------------------------------------------------------------

FORMATS: dict[str, tuple[Callable[..., str], str, Callable[[str, int], str]]] = {
    "deepseek_v31": (deepseek, "<｜tool▁call▁begin｜>", lambda name, index: name),
    "kimi_k2": (kimi, "<|tool_call_begin|>", lambda name, index: f"functions.{name}:{index}"),
}


def section_call(parser: str) -> Callable[[], st.SearchStrategy[tuple[str, list[ParsedCall]]]]:
    wrap, _, head = FORMATS[parser]

    @st.composite
    def valid(draw: st.DrawFn) -> tuple[str, list[ParsedCall]]:
        found = [(draw(names), draw(arguments)) for _ in range(draw(st.integers(1, 3)))]
        pairs = [(head(name, index), draw(json_spelling(args))) for index, (name, args) in enumerate(found)]
        return wrap(*pairs), [ParsedCall(name, canonical(args)) for name, args in found]

    return valid


CONTENT_ARGUMENTS = ["[1, 2]", '"not json"', "null"]
"""Arguments that are no object: the first call cannot open, and the section is read whole."""
OPENED_ARGUMENTS = ['{"city": }', '{"x": NaN}', '{"city": "Par']


def bad_sections(parser: str) -> list[str]:
    """Malformed before any call could open: content, verbatim."""
    wrap, _, head = FORMATS[parser]
    return [wrap((head("get_weather", 0), body)) for body in CONTENT_ARGUMENTS] + [
        wrap(),  # no call at all
        wrap((head("unknown_tool", 0), "{}")),
        wrap((head("get_weather", 0), "[1]"), (head("noop", 1), "{}")),  # one bad call spoils the section
    ]


def opened_bad_sections(parser: str) -> list[str]:
    """Malformed after a call opened: calls ending where the section stopped making sense."""
    wrap, _, head = FORMATS[parser]
    call_end = "<｜tool▁call▁end｜>" if parser == "deepseek_v31" else "<|tool_call_end|>"
    return [wrap((head("get_weather", 0), body)) for body in OPENED_ARGUMENTS] + [
        wrap((head("noop", 0), "{}"), (head("get_weather", 1), "[1]")),
        wrap((head("noop", 0), "{} trailing")),
        wrap((head("noop", 0), '{"a": 1}}')),
        wrap((head("noop", 0), "{}")).replace(call_end, call_end + " xyz "),  # text between the tokens
    ]


@st.composite
def truncated_section(draw: st.DrawFn, parser: str, *, opened: bool = False) -> str:
    """A section cut inside its last call: before its first call opened (content), or,
    ``opened``, anywhere in the last call."""
    raw, _ = draw(section_call(parser)())
    wrap, call_begin, _ = FORMATS[parser]
    end_marker = wrap(end=True)[len(wrap(end=False)) :]
    if not opened:
        return raw[: draw(st.integers(len(wrap(end=False)) + 1, raw.index("{", len(wrap(end=False)))))]
    last_call = raw.rfind(call_begin)
    return raw[: draw(st.integers(last_call + 1, len(raw) - len(end_marker) - 1))]


@pytest.mark.parametrize("parser", sorted(FORMATS))
@settings(max_examples=120, deadline=None)
@given(data=st.data(), points=cuts)
def test_sections_any_split_give_the_expected_content_and_calls(
    parser: str, data: st.DataObject, points: list[int]
) -> None:
    wrap, call_begin, _ = FORMATS[parser]
    markup = [wrap(end=False), wrap(end=True)[len(wrap(end=False)) :], call_begin]
    case = data.draw(
        marker_case(section_call(parser), st.sampled_from(bad_sections(parser)), truncated_section(parser), markup)
    )
    check_every_split(parser, case, points)


@pytest.mark.parametrize("parser", sorted(FORMATS))
@settings(max_examples=80, deadline=None)
@given(data=st.data(), points=cuts)
def test_sections_cut_or_malformed_after_a_call_opened_are_the_same_for_every_split(
    parser: str, data: st.DataObject, points: list[int]
) -> None:
    wrap, call_begin, _ = FORMATS[parser]
    markup = [wrap(end=False), wrap(end=True)[len(wrap(end=False)) :], call_begin]
    bad = st.sampled_from(bad_sections(parser) + opened_bad_sections(parser))
    case = data.draw(marker_case(section_call(parser), bad, truncated_section(parser, opened=True), markup))
    check_same_at_every_split(parser, case.text, points)


@pytest.mark.parametrize(("parser", "text"), [(p, text) for p in sorted(FORMATS) for text in bad_sections(p)])
def test_every_listed_malformed_section_is_content_verbatim_at_every_split(parser: str, text: str) -> None:
    check_every_split(parser, Case(text, text, []), [])


@pytest.mark.parametrize(("parser", "text"), [(p, text) for p in sorted(FORMATS) for text in opened_bad_sections(p)])
def test_every_listed_section_malformed_after_opening_is_calls_at_every_split(parser: str, text: str) -> None:
    calls = check_same_at_every_split(parser, text, [])
    assert calls and calls[0].name in ("get_weather", "noop")
