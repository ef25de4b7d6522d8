"""``ArgumentStream``: the re-dumped arguments, piece by piece, equal ``dump_arguments`` of the whole."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.tools.argstream import ArgumentStream
from gateway.tools.calls import INVALID, dump_arguments, load_json


def stream(text: str, cuts: list[int]) -> tuple[list[str], ArgumentStream]:
    """Feed ``text`` grown at each cut; the pieces returned, and the stream."""
    arguments = ArgumentStream(0)
    pieces = [arguments.advance(text[:cut]) for cut in sorted(set(cuts)) if cut <= len(text)]
    pieces.append(arguments.advance(text, final=True))
    return pieces, arguments


def expected(text: str) -> str | None:
    value = load_json(text)
    return dump_arguments(value) if isinstance(value, dict) else None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    value=st.dictionaries(st.text(max_size=6), json_values, max_size=5),
    indent=st.sampled_from([None, 0, 2]),
    ascii_only=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_any_spelling_cut_anywhere_streams_the_one_spelling(
    value: dict[str, Any], indent: int | None, ascii_only: bool, cuts: list[int]
) -> None:
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
    pieces, arguments = stream(text, cuts)
    assert arguments.done and not arguments.failed and arguments.end == len(text)
    assert "".join(pieces) == expected(text)


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet='{}[]":,0123456789.eE+-tfnrulase \\u\n', max_size=30), cut=st.integers(0, 30))
def test_what_the_whole_text_refuses_never_completes(text: str, cut: int) -> None:
    pieces, arguments = stream(text, [cut])
    whole = expected(text)
    if arguments.done:
        rest = text[arguments.end :]
        assert whole is not None or rest.strip(), text
        if not rest.strip():
            assert "".join(pieces) == whole
    else:
        assert whole is None, text


@pytest.mark.parametrize(
    ("text", "prefixes"),
    [
        ('{"city": "Pa', ['{"city": "Pa']),
        ('{"ci', ["{"]),
        ('{"n": 12', ['{"n": ']),
        ('{"e": "\\ud83d', ['{"e": "']),
        ('{"e": "a\\', ['{"e": "a']),
        ('{"t": tru', ['{"t": ']),
    ],
)
def test_nothing_a_later_character_could_change_is_sent(text: str, prefixes: list[str]) -> None:
    arguments = ArgumentStream(0)
    assert arguments.advance(text) == prefixes[0]
    assert not arguments.done and not arguments.failed


@pytest.mark.parametrize(
    "text",
    [
        '{"x": 1e400}',
        '{"x": NaN}',
        '{"x": "\\ud83d"}',
        '{"x": "\\ude42"}',
        '{"a": 1, "a": 2}',
        '{"x": "a\nb"}',
        "[1]",
        '"{}"',
        '{"x": 01}',
        '{"x": "\\q"}',
    ],
)
def test_what_load_json_or_dump_arguments_refuse_fails(text: str) -> None:
    _, arguments = stream(text, [])
    assert arguments.failed
    assert expected(text) is None or '"a": 1, "a"' in text


def test_numbers_take_pythons_spelling_and_text_after_the_object_is_left() -> None:
    text = '{ "a" : 1E2 , "b" : -0 , "c" : [ 1.50 , true ] }  </tool_call>'
    pieces, arguments = stream(text, list(range(len(text))))
    assert "".join(pieces) == '{"a": 100.0, "b": 0, "c": [1.5, true]}'
    assert text[arguments.end :] == "  </tool_call>"
    assert load_json('{"a": 1}') is not INVALID
