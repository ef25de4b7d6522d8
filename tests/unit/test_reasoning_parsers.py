"""Reasoning parsers: the split into reasoning and answer, whatever the pieces the text comes in."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.reasoning.registry import REASONING_PARSERS, detect_reasoning_parser, make_reasoning_parser


def run(name: str, pieces: list[str], *, calls: bool = True, opened: bool = False) -> tuple[str, str]:
    parser = make_reasoning_parser(name, calls=calls, opened=opened)
    reasoning = content = ""
    for piece in pieces:
        r, c = parser.feed(piece)
        reasoning, content = reasoning + r, content + c
    r, c = parser.finish()
    return reasoning + r, content + c


HARMONY_CALL = (
    "<|channel|>analysis<|message|>Need weather <tool_call>.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Paris"}<|call|>'
)
# parser → [(model output, reasoning, content)]
CASES: dict[str, list[tuple[str, str, str]]] = {
    "deepseek_r1": [
        ("Let me think.\n</think>\n\nIt is 4.", "Let me think.\n", "\n\nIt is 4."),
        ("<think>Hmm</think>Yes", "Hmm", "Yes"),
        ("Cut off in thought <", "Cut off in thought <", ""),
        ("", "", ""),
    ],
    "qwen3": [
        ("<think>\nweigh 2+2\n</think>\n\n4", "\nweigh 2+2\n", "\n\n4"),
        ("  <think>a</think>b", "a", "b"),
        ("No thinking <think>here</think>", "", "No thinking <think>here</think>"),
        ("<think>never closed", "never closed", ""),
        ("<thi", "", "<thi"),
        (" ", "", " "),
    ],
    "mistral": [("[THINK]plan[/THINK]answer", "plan", "answer"), ("plain", "", "plain")],
    "granite": [
        ("Here is my thought process: a. Here is my response: b", " a. ", " b"),
        ("Here's my thought process:x Here's my response:y", "x ", "y"),
        ("Just text", "", "Just text"),
    ],
    "openai": [
        (
            "<|channel|>analysis<|message|>User says hi.<|end|><|start|>assistant<|channel|>final<|message|>Hi <b>!<|return|>",
            "User says hi.",
            "Hi <b>!",
        ),
        (HARMONY_CALL, "Need weather <tool_call>.", '<|call|>functions.get_weather<|message|>{"city": "Paris"}<|end|>'),
        ("plain answer <|x", "", "plain answer <|x"),
        (
            "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant to=browser.search<|channel|>commentary<|message|>{}<|call|>",
            "",
            "Checking.",
        ),
    ],
}
FLAT = [(name, *case) for name, cases in CASES.items() for case in cases]


def check_every_split(name: str, output: str, expected: tuple[str, str], *, opened: bool = False) -> None:
    """``output`` whole, cut once or twice anywhere (the second cut every third place), and one
    character at a time: the same split every time."""
    assert run(name, [output], opened=opened) == expected
    for i in range(len(output) + 1):
        for j in range(i, len(output) + 1, 3):
            assert run(name, [output[:i], output[i:j], output[j:]], opened=opened) == expected, (i, j)
    assert run(name, list(output), opened=opened) == expected, "one character at a time"


@pytest.mark.parametrize(("name", "output", "reasoning", "content"), FLAT)
def test_every_two_cuts_give_the_same_split(name: str, output: str, reasoning: str, content: str) -> None:
    check_every_split(name, output, (reasoning, content))


@settings(max_examples=150, deadline=None)
@given(
    name=st.sampled_from(sorted(REASONING_PARSERS)),
    text=st.text(alphabet=st.sampled_from(list("<>/|think[]THINK channel message end start a\n ")), max_size=40),
    cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=6),
)
def test_any_split_of_any_text_gives_the_split_of_the_whole(name: str, text: str, cuts: list[int]) -> None:
    points = sorted({min(c, len(text)) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    assert run(name, pieces) == run(name, [text])


def test_harmony_drops_a_call_when_the_request_reads_no_calls() -> None:
    """No tools (or ``tool_choice: "none"``): the call's markup must not reach the content."""
    assert run("openai", [HARMONY_CALL], calls=False) == ("Need weather <tool_call>.", "")


def test_thinking_and_answered_follow_the_output() -> None:
    parser = make_reasoning_parser("qwen3")
    assert not parser.thinking and not parser.answered
    parser.feed("<think>x")
    assert parser.thinking and not parser.answered
    parser.feed("</think>y")
    assert parser.answered and not parser.thinking
    implicit = make_reasoning_parser("deepseek_r1")
    assert implicit.thinking, "the prompt opened the reasoning"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("{{ '<|start|>assistant<|channel|>final<|message|>' }}", "openai"),
        ("{%- if message.thinking %}[THINK]{{ message.thinking }}[/THINK]", "mistral"),
        ("Here is my thought process:", "granite"),
        ("{%- if enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}", "qwen3"),
        ("{{'<｜Assistant｜><think>\\n'}}", "deepseek_r1"),
        (
            "{% if thinking %}{{'<｜Assistant｜><think>'}}{% else %}{{'<｜Assistant｜></think>'}}{% endif %}",
            "deepseek_v3",
        ),
        ("{% set content = content.split('</think>')[-1] %}", "deepseek_r1"),
        ("{{ '<|im_start|>assistant\\n' }}", None),
    ],
)
def test_detection_from_the_templates_markers(source: str, expected: str | None) -> None:
    assert detect_reasoning_parser(source) == expected


def test_every_parser_is_registered_under_its_name() -> None:
    assert set(REASONING_PARSERS) == {"deepseek_r1", "deepseek_v3", "qwen3", "mistral", "granite", "openai"}
    for name, spec in REASONING_PARSERS.items():
        assert spec.name == name and spec.families and spec.markers
    assert REASONING_PARSERS["openai"].needs_special_tokens and REASONING_PARSERS["mistral"].needs_special_tokens
    assert REASONING_PARSERS["deepseek_v3"].switch == "thinking"
