"""Tool-call parsers on hand-written outputs: exact content and calls, what is held and when.

The split-invariance of every parser is tested on generated outputs in
``test_tool_parsers_split.py``; here each format's cases are spelled out, with the streaming
behaviour (what comes back on which ``feed``) checked piece by piece.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gateway.tools import ParsedCall, make_parser
from gateway.tools.scan import JsonSpan, PythonSpan, held_from
from gateway.tools.types import whole_calls

NAMES = frozenset({"get_weather", "search", "noop"})
JSON_STREAMING = frozenset({"hermes", "mistral", "deepseek_v31", "kimi_k2", "llama3_json", "forced_required"})
"""Formats whose calls open with their JSON arguments object (``openai`` is tested apart)."""
WEATHER = ParsedCall("get_weather", '{"city": "Paris"}')


def run(parser: str, *pieces: str, names: frozenset[str] = NAMES) -> tuple[str, list[ParsedCall]]:
    instance = make_parser(parser, names)
    content, calls = [], []
    for piece in pieces:
        text, found = instance.feed(piece)
        content.append(text)
        calls.extend(found)
    text, found = instance.finish()
    return "".join(content) + text, whole_calls(calls + found)


def steps(parser: str, *pieces: str, names: frozenset[str] = NAMES) -> list[tuple[str, list[ParsedCall]]]:
    """What each feed returns, then what finish returns."""
    instance = make_parser(parser, names)
    return [instance.feed(piece) for piece in pieces] + [instance.finish()]


# ---- hermes ----------------------------------------------------------------------------------


def test_hermes_text_then_call_streams_the_text_then_the_call_as_it_settles() -> None:
    """The call opens once its name and the start of its arguments are seen; its arguments
    follow as they settle (a key once whole, a string as it is read); it closes at the tag."""
    assert steps(
        "hermes",
        "Let me check. <tool",
        '_call>{"name": "get_weather", ',
        '"arguments": {"city": "Par',
        'is"}}',
        "</tool_call>",
    ) == [
        ("Let me check. ", []),
        ("", []),
        ("", [ParsedCall("get_weather", "", closes=False), ParsedCall("", '{"city": "Par', opens=False, closes=False)]),
        ("", [ParsedCall("", 'is"}', opens=False, closes=False)]),
        ("", [ParsedCall("", "", opens=False, closes=True)]),
        ("", []),
    ]


def test_hermes_parallel_calls_and_the_whitespace_between_them_is_dropped() -> None:
    text = (
        '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "search", "arguments": "{\\"q\\": \\"日本\\"}"}\n</tool_call>\n'
    )
    assert run("hermes", text) == ("", [WEATHER, ParsedCall("search", '{"q": "日本"}')])


def test_hermes_text_after_a_call_is_content() -> None:
    assert run("hermes", '<tool_call>{"name": "noop", "arguments": {}}</tool_call>\n\nDone 🙂') == (
        "Done 🙂",
        [ParsedCall("noop", "{}")],
    )


@pytest.mark.parametrize(
    "block",
    [
        '<tool_call>{"name": "unknown", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "get_weather", "arguments": [1]}</tool_call>',
        '<tool_call>{"arguments": {}}</tool_call>',
        '<tool_call>{"arguments": {"city": }, "name": "get_weather"}</tool_call>',
        '<tool_call>{"name": "get_weather", "arguments": "{\\"x\\": Infinity}"}</tool_call>',
        '<tool_call>{"name": "get_weather"',
    ],
)
def test_hermes_malformed_block_is_content_verbatim_and_earlier_calls_stay(block: str) -> None:
    """Malformed before the call opened (an unknown or missing name, arguments that are not an
    object, a block that does not name the function first and is invalid, a cut header)."""
    valid = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    assert run("hermes", valid, " ", block) == (block, [WEATHER])
    assert run("hermes", "  ", block) == ("  " + block, [])


@pytest.mark.parametrize(
    ("block", "arguments"),
    [
        ('<tool_call>{"name": "get_weather", "arguments": {"city": }}</tool_call>', '{"city": '),
        ('<tool_call>{"name": "get_weather", "arguments": {"x": Infinity}}</tool_call>', '{"x": '),
        ('<tool_call>{"name": "get_weather", "arguments": {"city": "Par', '{"city": "Par'),
        ('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}}</tool_call>', '{"city": "Paris"}'),
        ('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}</tool_call>', '{"city": "Paris"}'),
    ],
)
def test_hermes_a_call_that_opened_stays_a_call_with_the_arguments_it_streamed(block: str, arguments: str) -> None:
    """Once sent, a call's opening and arguments cannot be taken back: arguments that turn
    malformed (or are cut off) end the call where they stopped making sense; what follows its
    arguments in the block is not read."""
    after = " after" if block.endswith("</tool_call>") else ""  # an open string would swallow it
    assert run("hermes", block, after) == (after.strip(), [ParsedCall("get_weather", arguments)])


def test_hermes_partial_marker_is_held_only_until_it_diverges() -> None:
    assert steps("hermes", "a <tool", "box> b", "<") == [("a ", []), ("<toolbox> b", []), ("", []), ("<", [])]


def test_hermes_missing_arguments_mean_an_empty_object() -> None:
    assert run("hermes", '<tool_call>{"name": "noop"}</tool_call>') == ("", [ParsedCall("noop", "{}")])


def test_hermes_arguments_are_redumped_in_one_spelling() -> None:
    text = (
        '<tool_call>{"name":"get_weather","arguments":{"city":"\\u00e9","n":1.50,"deep":{"a":[true,null]}}}</tool_call>'
    )
    assert run("hermes", text) == (
        "",
        [ParsedCall("get_weather", '{"city": "é", "n": 1.5, "deep": {"a": [true, null]}}')],
    )


def test_hermes_leading_whitespace_is_held_with_a_partial_marker_and_dropped_before_a_call() -> None:
    assert steps("hermes", "\n <t", 'ool_call>{"name": "noop"}</tool_call>') == [
        ("", []),
        ("", [ParsedCall("noop", "{}")]),
        ("", []),
    ]
    assert steps("hermes", "\n <t", "ea") == [("", []), ("\n <tea", []), ("", [])]


def test_hermes_whitespace_only_output_is_content() -> None:
    assert steps("hermes", " \n", " ") == [("", []), ("", []), (" \n ", [])]


# ---- llama3_json -----------------------------------------------------------------------------


def test_llama3_plain_text_is_streamed_from_the_first_token() -> None:
    assert steps("llama3_json", "Hello", " world") == [("Hello", []), (" world", []), ("", [])]


def test_llama3_call_with_python_tag_and_parameters() -> None:
    text = '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}'
    assert run("llama3_json", text) == ("", [WEATHER])
    assert run("llama3_json", text.replace("parameters", "arguments")) == ("", [WEATHER])


def test_llama3_calls_separated_by_semicolons() -> None:
    text = ' {"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "noop", "parameters": {}}'
    assert run("llama3_json", text) == ("", [WEATHER, ParsedCall("noop", "{}")])


def test_llama3_json_that_is_not_a_call_is_content() -> None:
    assert run("llama3_json", '{"answer": 42} and more') == ('{"answer": 42} and more', [])


def test_llama3_malformed_second_call_keeps_the_first() -> None:
    text = '{"name": "get_weather", "parameters": {"city": "Paris"}} ; {"name": "unknown", "parameters": {}}'
    assert run("llama3_json", text) == ('; {"name": "unknown", "parameters": {}}', [WEATHER])


def test_llama3_call_cut_before_it_opened_is_content_and_after_keeps_what_it_streamed() -> None:
    text = '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Pa'
    assert run("llama3_json", text) == ("", [ParsedCall("get_weather", '{"city": "Pa')])
    at = text.index("{", text.index("parameters"))
    assert run("llama3_json", text[:at]) == (text[:at], [])


def test_llama3_arguments_stream_and_the_object_ends_where_its_braces_balance() -> None:
    first, second, last = steps(
        "llama3_json", '{"name": "get_weather", "parameters": {"ci', 'ty": "Paris"}, "id": 1} ; x'
    )
    assert first == ("", [ParsedCall("get_weather", "", closes=False), ParsedCall("", "{", False, False)])
    assert second == ("; x", [ParsedCall("", '"city": "Paris"}', False, False), ParsedCall("", "", False, True)])
    assert last == ("", [])
    malformed = '{"name": "get_weather", "parameters": {"city": Paris}} and text'
    assert run("llama3_json", malformed) == ("and text", [ParsedCall("get_weather", '{"city": ')])


def test_llama3_llama4_markers_around_the_call_are_dropped() -> None:
    text = '<|python_start|><|python_end|>{"name": "get_weather", "parameters": {"city": "Paris"}}<|python_end|>'
    assert run("llama3_json", text) == ("", [WEATHER])


def test_llama3_partial_python_tag_is_held_then_given_back() -> None:
    assert steps("llama3_json", "<|python", "ic|> hi") == [("", []), ("<|pythonic|> hi", []), ("", [])]


def test_llama3_braces_inside_strings_do_not_end_the_call() -> None:
    text = '{"name": "search", "parameters": {"q": "a } b \\" { c"}}'
    assert run("llama3_json", text) == ("", [ParsedCall("search", '{"q": "a } b \\" { c"}')])


# ---- mistral ---------------------------------------------------------------------------------


def test_mistral_array_form_with_parallel_calls() -> None:
    text = 'Sure. [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123def"}, {"name": "noop", "arguments": {}}]'
    assert run("mistral", text) == ("Sure. ", [WEATHER, ParsedCall("noop", "{}")])


def test_mistral_v11_form_repeated() -> None:
    text = '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]search[ARGS]{"q": "日本"}'
    assert run("mistral", text) == ("", [WEATHER, ParsedCall("search", '{"q": "日本"}')])


def test_mistral_v13_call_id_is_ignored() -> None:
    assert run("mistral", '[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Paris"}') == ("", [WEATHER])


def test_mistral_array_whose_first_element_is_no_call_is_content_as_a_whole() -> None:
    text = '[TOOL_CALLS][{"name": "unknown", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "Paris"}}]'
    assert run("mistral", text) == (text, [])


def test_mistral_array_calls_stream_and_a_bad_element_ends_them() -> None:
    text = (
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "unknown", "arguments": {}}] x'
    )
    assert run("mistral", text) == ("x", [WEATHER])
    at = text.index("Par")
    first, second, _ = steps("mistral", text[:at], text[at:])
    assert first == ("", [ParsedCall("get_weather", "", closes=False), ParsedCall("", '{"city": "', False, False)])
    assert second == ("x", [ParsedCall("", 'Paris"}', False, False), ParsedCall("", "", False, True)])
    later = '[TOOL_CALLS][{"arguments": {}, "name": "noop"}, {"name": "get_weather", "arguments": {"city": "Paris"}}]'
    assert run("mistral", later) == ("", [ParsedCall("noop", "{}"), WEATHER])


def test_mistral_empty_array_is_content_not_zero_calls() -> None:
    assert run("mistral", "[TOOL_CALLS] []") == ("[TOOL_CALLS] []", [])


def test_mistral_marker_followed_by_prose_is_content_at_once() -> None:
    assert steps("mistral", "[TOOL_CALLS]Sorry", ", I cannot.") == [
        ("", []),
        ("[TOOL_CALLS]Sorry, I cannot.", []),
        ("", []),
    ]


def test_mistral_unknown_v11_name_is_content_and_later_calls_still_parse() -> None:
    text = '[TOOL_CALLS]unknown[ARGS]{"a": 1} [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}'
    assert run("mistral", text) == ('[TOOL_CALLS]unknown[ARGS]{"a": 1} ', [WEATHER])


def test_mistral_unclosed_array_runs_to_the_end() -> None:
    """Nothing marks where a broken array ends: what follows belongs to it and is not read."""
    text = '[TOOL_CALLS][{"name": "noop", "arguments": {]  [TOOL_CALLS]noop[ARGS]{}'
    assert run("mistral", text) == ("", [ParsedCall("noop", "{")])
    text = '[TOOL_CALLS][{"arguments": {]  [TOOL_CALLS]noop[ARGS]{}'
    assert run("mistral", text) == (text, [])


def test_mistral_v11_arguments_stream_as_they_settle() -> None:
    first, second, third, last = steps("mistral", "Ok [TOOL_CALLS]get_weather[ARGS]{", '"city": "Pa', 'ris"} after')
    assert first == ("Ok ", [ParsedCall("get_weather", "", closes=False), ParsedCall("", "{", False, False)])
    assert second == ("", [ParsedCall("", '"city": "Pa', False, False)])
    assert third == ("after", [ParsedCall("", 'ris"}', False, False), ParsedCall("", "", False, True)])
    assert last == ("", [])


def test_mistral_v11_arguments_malformed_after_opening_end_the_call_up_to_the_next_call() -> None:
    text = '[TOOL_CALLS]get_weather[ARGS]{"city": Paris} lost [TOOL_CALLS]noop[ARGS]{} kept'
    assert run("mistral", text) == ("kept", [ParsedCall("get_weather", '{"city": '), ParsedCall("noop", "{}")])
    assert run("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Pa') == (
        "",
        [ParsedCall("get_weather", '{"city": "Pa')],
    )


def test_mistral_markdown_brackets_are_not_held() -> None:
    assert steps("mistral", "see [the docs](x) [", "T", "x") == [
        ("see [the docs](x) ", []),
        ("", []),
        ("[Tx", []),
        ("", []),
    ]


# ---- pythonic --------------------------------------------------------------------------------


def test_pythonic_call_list_with_literals() -> None:
    text = '<|python_start|>[get_weather(city="Paris"), search(q=\'日本\', n=-2, f=1.5, ok=True, none=None, l=[1, {"a": "b"}])]<|python_end|>'
    assert run("pythonic", text) == (
        "",
        [
            WEATHER,
            ParsedCall("search", '{"q": "日本", "n": -2, "f": 1.5, "ok": true, "none": null, "l": [1, {"a": "b"}]}'),
        ],
    )


def test_pythonic_text_starting_with_a_bracket_is_given_back_as_soon_as_it_cannot_be_a_call() -> None:
    assert steps("pythonic", "[", "1] first") == [("", []), ("[1] first", []), ("", [])]
    assert steps("pythonic", "[get", "_weather is", " a tool]") == [
        ("", []),
        ("[get_weather is", []),
        (" a tool]", []),
        ("", []),
    ]


@pytest.mark.parametrize(
    "text",
    [
        '[get_weather("Paris")]',
        "[get_weather(city=paris)]",
        "[get_weather(city=__import__('os'))]",
        "[unknown(a=1)]",
        "[get_weather(**kw)]",
        "[get_weather(city=f'x')]",
        "[get_weather(city=b'x')]",
        "[(get_weather(city=paris))]",
        "[get_weather(city=",  # cut before the call could open
        "[]",
    ],
)
def test_pythonic_anything_but_literal_keyword_calls_is_content(text: str) -> None:
    """Before the first call opens (``NAME(KEY=`` and a literal), the list is read whole."""
    assert run("pythonic", text) == (text, [])


@pytest.mark.parametrize(
    ("text", "arguments"),
    [
        ("[get_weather(city='a', city='b')]", '{"city": "a"'),  # ast parses it; compiling refuses it
        ("[get_weather(city='''Paris''') ", '{"city": "Paris"}'),
        ("[get_weather(city='Paris', days=x)] more", '{"city": "Paris", "days": '),
        ("[get_weather(city='Par", '{"city": "Par'),
        ("[get_weather(city=(1, 2))]", '{"city": 1'),
        ("[get_weather(city={'a': 1, 'a': 2})]", '{"city": {"a": 1'),
    ],
)
def test_pythonic_a_call_that_opened_stays_a_call_with_the_arguments_it_streamed(text: str, arguments: str) -> None:
    """What turns malformed after the call opened ends it with what was sent; the rest of the
    list is dropped, and text after the list is content."""
    content = text[text.index("]") + 1 :].lstrip() if "] " in text else ""
    assert run("pythonic", text) == (content, [ParsedCall("get_weather", arguments)])


def test_pythonic_an_element_that_is_no_call_ends_the_calls_that_opened() -> None:
    text = "[get_weather(city='Paris'), unknown(a=1), noop()] done"
    assert run("pythonic", text) == ("done", [WEATHER])


def test_pythonic_arguments_stream_as_they_settle() -> None:
    assert steps("pythonic", "[get_weather(city=", "'Par", "is', days", "=3", ")", "]") == [
        ("", []),
        ("", [ParsedCall("get_weather", "", closes=False), ParsedCall("", '{"city": "Par', opens=False, closes=False)]),
        ("", [ParsedCall("", 'is"', opens=False, closes=False)]),
        ("", [ParsedCall("", ', "days": ', opens=False, closes=False)]),
        ("", [ParsedCall("", "3}", opens=False, closes=False), ParsedCall("", "", opens=False, closes=True)]),
        ("", []),
        ("", []),
    ]


def test_pythonic_triple_quoted_and_escaped_strings_split_anywhere() -> None:
    text = "[search(q='''a ] ' b''', r=\"\\\" ]\", e='')]"
    expected = ("", [ParsedCall("search", '{"q": "a ] \' b", "r": "\\" ]", "e": ""}')])
    for position in range(len(text) + 1):
        assert run("pythonic", text[:position], text[position:]) == expected


def test_pythonic_text_after_the_list_is_content() -> None:
    assert run("pythonic", "[noop()]\nDone.") == ("Done.", [ParsedCall("noop", "{}")])


# ---- forced ----------------------------------------------------------------------------------


def test_forced_named_object_is_the_call() -> None:
    names = frozenset({"get_weather"})
    assert run("forced_named", ' {"city": "Paris"} ', names=names) == ("", [WEATHER])
    assert run("forced_named", '{"city": "Par', names=names) == ("", [ParsedCall("get_weather", '{"city": "Par')])
    assert run("forced_named", "{", names=names) == ("{", [])
    assert run("forced_named", "I cannot", names=names) == ("I cannot", [])


@pytest.mark.parametrize("number", ["1e400", "-1e999", "1" * 5000])
def test_forced_named_keeps_the_models_text_when_a_number_does_not_fit_python(number: str) -> None:
    """The text is valid JSON and the forced call's whole output: the number goes out as
    written."""
    names = frozenset({"noop"})
    text = f' {{"x": {number}, "y": [1, 2]}}\n'
    assert run("forced_named", text, names=names) == ("", [ParsedCall("noop", text.strip())])
    assert run("forced_named", '{"x": NaN}', names=names) == ("", [ParsedCall("noop", '{"x": ')])
    assert run("forced_named", '{"x": 1e400', names=names) == ("", [ParsedCall("noop", '{"x": 1e400')])
    assert run("forced_named", "[1e400]", names=names) == ("[1e400]", [])


def test_forced_named_arguments_stream_from_the_first_key() -> None:
    names = frozenset({"get_weather"})
    first, second, third, last = steps("forced_named", '{"city"', ': "Par', 'is"} ', names=names)
    assert first == ("", [ParsedCall("get_weather", "", closes=False), ParsedCall("", '{"city"', False, False)])
    assert second == ("", [ParsedCall("", ': "Par', False, False)])
    assert third == ("", [ParsedCall("", 'is"}', False, False), ParsedCall("", "", False, True)])
    assert last == ("", [])


def test_forced_named_needs_exactly_one_name() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        make_parser("forced_named", NAMES)


def test_forced_required_array_is_the_calls() -> None:
    text = '[{"name": "get_weather", "parameters": {"city": "Paris"}}, {"name": "noop", "parameters": {}}]'
    assert run("forced_required", text) == ("", [WEATHER, ParsedCall("noop", "{}")])
    assert run("forced_required", "[]") == ("[]", [])
    assert run("forced_required", '[{"name": "nope", "parameters": {}}]') == (
        '[{"name": "nope", "parameters": {}}]',
        [],
    )


# ---- streaming contract shared by all --------------------------------------------------------

ALL = [
    "hermes",
    "llama3_json",
    "mistral",
    "pythonic",
    "qwen3_coder",
    "glm45",
    "deepseek_v31",
    "kimi_k2",
    "forced_required",
]


@pytest.mark.parametrize("parser", ALL)
def test_plain_text_piece_comes_back_at_once_unchanged(parser: str) -> None:
    """The per-token case; ``python -m bench micro`` measures its cost."""
    instance = make_parser(parser, NAMES)
    instance.feed("Hello")
    assert instance.feed("a token, of text. ") == ("a token, of text. ", [])


@pytest.mark.parametrize("parser", ALL)
def test_feed_after_finish_is_content(parser: str) -> None:
    instance = make_parser(parser, NAMES)
    instance.feed("<tool_call>")
    instance.finish()
    assert instance.feed("late") == ("late", [])
    assert instance.finish() == ("", [])


@pytest.mark.parametrize("parser", ALL)
def test_called_is_set_by_the_first_call_only(parser: str) -> None:
    outputs = {
        "hermes": '<tool_call>{"name": "noop", "arguments": {}}</tool_call>',
        "llama3_json": '{"name": "noop", "parameters": {}}',
        "mistral": "[TOOL_CALLS]noop[ARGS]{}",
        "pythonic": "[noop()]",
        "qwen3_coder": "<tool_call>\n<function=noop>\n</function>\n</tool_call>",
        "glm45": "<tool_call>noop\n</tool_call>",
        "deepseek_v31": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>noop<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "kimi_k2": "<|tool_calls_section_begin|><|tool_call_begin|>functions.noop:0<|tool_call_argument_begin|>{}"
        "<|tool_call_end|><|tool_calls_section_end|>",
        "forced_required": '[{"name": "noop", "parameters": {}}]',
    }
    instance = make_parser(parser, NAMES)
    assert not instance.called
    # A call whose arguments stream is out when it opens, before its arguments.
    output = outputs[parser]
    if parser in JSON_STREAMING:
        opened = output.rindex("{")
    elif parser == "qwen3_coder":
        opened = output.index(">", output.index("<function="))
    elif parser == "glm45":
        opened = output.index("\n")
    elif parser == "pythonic":
        opened = output.index("(") + 1
    else:
        opened = len(output) - 1
    instance.feed(output[:opened])
    assert not instance.called
    instance.feed(output[opened:])
    instance.finish()
    assert instance.called


marker_text = st.lists(
    st.sampled_from(
        ["<", "<tool", "<tool_call", "</tool_call>", "[", "[TOOL", "[TOOL_CALLS", "a", " ", "é", "🙂", "\n"]
    ),
    max_size=12,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=marker_text, parser=st.sampled_from([("hermes", "<tool_call>"), ("mistral", "[TOOL_CALLS]")]))
def test_marker_formats_hold_only_a_possible_marker_start(text: str, parser: tuple[str, str]) -> None:
    """After every character, all text is out except a tail that could begin the marker (and
    leading whitespace, which a first call would drop)."""
    name, marker = parser
    assume(marker not in text)
    instance = make_parser(name, NAMES)
    shown = ""
    for end in range(1, len(text) + 1):
        shown += instance.feed(text[end - 1])[0]
        prefix = text[:end]
        if not prefix.strip():
            assert shown == ""
        elif not prefix.lstrip().startswith(marker[: len(prefix.lstrip())]) or len(prefix.lstrip()) >= len(marker):
            assert shown == prefix[: held_from(prefix, marker)]
    assert shown + instance.finish()[0] == text


@settings(max_examples=200, deadline=None)
@given(
    lead=st.sampled_from(["", " ", "\n"]),
    first=st.sampled_from(["H", "é", "日", "🙂", "a", "1", "}", "]", ")"]),
    rest=st.text(max_size=20),
    parser=st.sampled_from(["llama3_json", "pythonic", "forced_required", "forced_named"]),
)
def test_leading_formats_stream_plain_text_from_its_first_character(
    lead: str, first: str, rest: str, parser: str
) -> None:
    names = frozenset({"noop"}) if parser == "forced_named" else NAMES
    instance = make_parser(parser, names)
    assert instance.feed(lead) == ("", [])
    assert instance.feed(first) == (lead + first, [])
    for char in rest:
        assert instance.feed(char) == (char, [])
    assert instance.finish() == ("", [])


# ---- scanners --------------------------------------------------------------------------------


def test_json_span_escape_split_from_its_character() -> None:
    span = JsonSpan(0)
    text = '{"a": "\\'
    assert span.end(text) is None
    text += '"}"}'
    assert span.end(text) == len(text)


def test_python_span_waits_to_tell_empty_from_triple_quotes() -> None:
    span = PythonSpan(0)
    text = "[f(a='"
    assert span.end(text) is None
    text += "'"
    assert span.end(text) is None
    text += "')]"  # the third quote: a triple-quoted string opens, and ")]" is inside it
    assert span.end(text) is None
    text += "]''')]"
    assert span.end(text) == len(text)


def test_held_from_finds_only_a_proper_prefix_at_the_end() -> None:
    assert held_from("ab<tool_", "<tool_call>") == 2
    assert held_from("ab<tool_x", "<tool_call>") == 9
    assert held_from("<<", "<tool_call>") == 1
    assert held_from("", "<tool_call>") == 0


# ---- values JSON cannot carry, and text that cannot open a call -----------------------------


@pytest.mark.parametrize(
    "arguments",
    ['{"x": 1e400}', '{"x": -Infinity}', '{"x": NaN}', '{"x": "\\ud83d"}', '"{\\"x\\": 1e999}"'],
)
def test_arguments_without_an_exact_json_utf8_form_are_content(arguments: str) -> None:
    """inf/NaN would be re-dumped as invalid JSON, a lone surrogate cannot be UTF-8 encoded.
    Where the arguments stream, the call has opened: it ends before the value."""
    hermes = f'<tool_call>{{"name": "noop", "arguments": {arguments}}}</tool_call>'
    mistral = f"[TOOL_CALLS]noop[ARGS]{arguments}"
    if arguments.startswith("{"):
        streamed = arguments[: arguments.index(":") + 1] + " " + ('"' if "ud83d" in arguments else "")
        assert run("hermes", hermes) == ("", [ParsedCall("noop", streamed)])
        assert run("mistral", mistral) == ("", [ParsedCall("noop", streamed)])
    else:
        assert run("hermes", hermes) == (hermes, [])
        assert run("mistral", mistral) == (mistral, [])


def test_pythonic_lone_surrogate_or_huge_number_ends_the_call_before_it() -> None:
    for text, arguments in [
        ("[noop(a='\\ud83d')]", '{"a": "'),
        ("[noop(a=1e999)]", '{"a": '),
        ("[noop(a=-1e999)]", '{"a": '),
        ("[noop(a=0x" + "f" * 5000 + ")]", '{"a": '),
    ]:
        assert run("pythonic", text) == ("", [ParsedCall("noop", arguments)])
    text = "[(noop(a=0x" + "f" * 5000 + "))]"  # read whole: an integer JSON cannot spell
    assert run("pythonic", text) == (text, [])


def test_surrogate_pair_escapes_are_one_character() -> None:
    text = '<tool_call>{"name": "noop", "arguments": {"e": "\\ud83d\\ude42"}}</tool_call>'
    assert run("hermes", text) == ("", [ParsedCall("noop", '{"e": "🙂"}')])


@pytest.mark.parametrize(
    ("parser", "first", "rest"),
    [
        ("llama3_json", "{", "Note: braces} in prose"),
        ("llama3_json", "{", "\n  x = 1"),
        ("llama3_json", "{", "}"),
        ("forced_named", "{", "'single': 1}"),
        ("forced_required", "[", "1, 2]"),
        ("forced_required", "[", ' "a"]'),
    ],
)
def test_opener_that_cannot_begin_a_call_is_given_back_at_the_next_character(
    parser: str, first: str, rest: str
) -> None:
    names = frozenset({"noop"}) if parser == "forced_named" else NAMES
    instance = make_parser(parser, names)
    assert instance.feed(first) == ("", [])
    shown = ""
    for end, char in enumerate(rest, start=1):
        shown += instance.feed(char)[0]
        if not rest[:end].isspace():
            assert shown == first + rest[:end]
    assert instance.finish() == ("", [])


# ---- openai (harmony's calls, as the harmony reasoning parser passes them on) ----------------

HARMONY = '<|call|>functions.get_weather<|message|>{"city": "Paris"}<|end|>'


def test_harmony_call_is_the_same_at_every_cut_and_streams_once_its_arguments_begin() -> None:
    for i in range(len(HARMONY) + 1):
        assert run("openai", HARMONY[:i], HARMONY[i:]) == ("", [WEATHER]), i
    at = HARMONY.index("{")
    first, second, _ = steps("openai", HARMONY[:at], HARMONY[at:])
    assert first == ("", [])
    assert second[1][0] == ParsedCall("get_weather", "", closes=False)


@pytest.mark.parametrize(
    "block",
    [
        "<|call|>functions.launch<|message|>{}<|end|>",
        "<|call|>functions.get_weather<|message|>[1]<|end|>",
        '<|call|>functions.get_weather<|message|>"x"<|end|>',
    ],
)
def test_harmony_block_that_is_no_call_is_content(block: str) -> None:
    assert run("openai", block) == (block, [])


def test_harmony_empty_arguments_are_an_empty_object_and_a_cut_call_keeps_what_it_streamed() -> None:
    assert run("openai", "<|call|>functions.noop<|message|><|end|>") == ("", [ParsedCall("noop", "{}")])
    cut = '<|call|>functions.get_weather<|message|>{"city": "Pa'
    assert run("openai", cut) == ("", [ParsedCall("get_weather", '{"city": "Pa')])
