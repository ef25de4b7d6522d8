"""The script format of the test-only ``scripted`` model (tests/triton_models/scripted/1/replay.py;
format: tests/triton_models/README.md), above all ``after``: the steps of an agent's loop."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import pytest

MODEL_VERSION_DIR = Path(__file__).resolve().parents[1] / "triton_models" / "scripted" / "1"
if str(MODEL_VERSION_DIR) not in sys.path:
    sys.path.insert(0, str(MODEL_VERSION_DIR))

from replay import ScriptError, locate_script, parse_script, plan  # noqa: E402

CALL = [{"utf8": ["<tool_call>"]}, {"utf8": ['{"name": "Bash", "arguments": {"command": "echo MARK-7\\"\\"f3"}}']}]
ANSWER = [{"utf8": ["Done: MARK-7f3."]}]
CALL_TEXTS = [response["utf8"][0].encode() for response in CALL]


def tagged(script: dict[str, Any], before: str = "", after: str = "") -> bytes:
    """A prompt as a chat template renders it: the script inside a user turn."""
    return f"{before}<|im_start|>user\n<script>{json.dumps(script)}</script><|im_end|>\n{after}".encode()


def texts(text_input: bytes, request_id: str = "") -> list[bytes]:
    return [response.text[0] for response in parse_script(text_input, request_id).responses]


AGENT = {"responses": CALL, "after": [{"seen": "MARK-7f3", "responses": ANSWER}]}


def test_the_first_request_of_a_loop_replays_the_top_level_responses() -> None:
    assert texts(tagged(AGENT, after="<|im_start|>assistant\n")) == CALL_TEXTS


def test_once_the_tool_output_follows_the_script_its_entry_is_replayed() -> None:
    loop = "<|im_start|>assistant\n<tool_call>...</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nMARK-7f3\n"
    assert texts(tagged(AGENT, after=loop + "</tool_response><|im_end|>\n<|im_start|>assistant\n")) == [
        b"Done: MARK-7f3."
    ]


def test_the_marker_before_the_script_does_not_count() -> None:
    # In the system prompt, or an earlier turn: only what came after this script is a step of it.
    assert texts(tagged(AGENT, before="system: MARK-7f3\n")) == CALL_TEXTS


def test_the_last_entry_seen_wins() -> None:
    script = {
        "responses": [{"utf8": ["step 1"]}],
        "after": [
            {"seen": "first-output", "responses": [{"utf8": ["step 2"]}]},
            {"seen": "second-output", "responses": [{"utf8": ["step 3"]}]},
        ],
    }
    assert texts(tagged(script, after="first-output")) == [b"step 2"]
    assert texts(tagged(script, after="first-output ... second-output")) == [b"step 3"]
    assert texts(tagged(script, after="second-output")) == [b"step 3"]


def test_a_new_script_in_a_later_turn_starts_over() -> None:
    turn_one = tagged(AGENT, after="<tool_response>MARK-7f3</tool_response> Done: MARK-7f3.")
    second = {"responses": [{"utf8": ["turn 2"]}], "after": [{"seen": "MARK-7f3", "responses": ANSWER}]}
    prompt = turn_one + f"<|im_start|>user\n<script>{json.dumps(second)}</script><|im_end|>\n".encode()
    assert texts(prompt) == [b"turn 2"]


def test_the_text_after_the_script_is_what_follows_its_closing_tag() -> None:
    script, rest = locate_script(b'x <script>{"a": 1}</script> <script>{"b": 2}</script> tail')
    assert (script, rest) == ({"b": 2}, " tail")
    assert locate_script(b'{"b": 2}') == ({"b": 2}, "")
    assert locate_script(b'wrapped {"b": 2} MARK') == ({"b": 2}, "")  # untagged: no text after


def test_an_entry_may_script_choices() -> None:
    script = {
        "responses": [{"utf8": ["first"]}],
        "after": [{"seen": "MARK", "choices": [[{"utf8": ["zero"]}], [{"utf8": ["one"]}]]}],
    }
    assert texts(tagged(script, after="MARK"), "req-1") == [b"one"]


def test_the_picked_entry_replays_like_the_top_level_one() -> None:
    encoded = base64.b64encode("é".encode()[:1]).decode()
    script = {"responses": CALL, "after": [{"seen": "MARK", "responses": [{"text": [encoded]}, {"utf8": ["x"]}]}]}
    parsed = parse_script(tagged(script, after="MARK"))
    assert [r.finish_reason for r in parsed.responses] == [["None"], ["stop"]]
    steps = plan(parsed, stream=False, flags={"return_num_output_tokens": True}, inputs={})
    (step,) = steps
    assert step.final and step.outputs is not None
    assert step.outputs["text_output"].tolist() == ["é".encode()[:1] + b"x"]
    assert step.outputs["num_output_tokens"].tolist() == [2]


@pytest.mark.parametrize(
    ("after", "message"),
    [
        ({"seen": "x", "responses": []}, "'after' must be a list"),
        ([{"responses": ANSWER}], "'after' entry 0 needs 'seen'"),
        ([{"seen": "", "responses": ANSWER}], "'after' entry 0 needs 'seen'"),
        ([{"seen": "x", "responses": ANSWER, "hang": 1}], "'after' entry 0 must be an object"),
        ([{"seen": "x"}], "'after' entry 0 needs 'responses' or 'choices'"),
        ([{"seen": "x", "responses": ANSWER, "choices": []}], "'after' entry 0 has 'responses' or 'choices'"),
        (
            [{"seen": "x", "responses": ANSWER}, {"seen": "y", "responses": [{"size": 1}]}],
            "'after' entry 1: response 0",
        ),
    ],
)
def test_a_malformed_entry_is_refused_whether_seen_or_not(after: Any, message: str) -> None:
    with pytest.raises(ScriptError, match=message):
        parse_script(tagged({"responses": ANSWER, "after": after}))
