"""Replay of ``resume_token_ids`` on the real weights: the run after a cut is the uninterrupted run.

Every check compares whole ``SequenceDelta`` records (text bytes, ids, counts, logprobs, the
cumulative logprob as a float, the finish reason), so "equal" means bit-identical, not close.
"""

from __future__ import annotations

import dataclasses

import pytest
from engine import TinyLlmEngine
from generator import FINISH_LENGTH, FINISH_STOP, Generation, ReplayError, SequenceDelta
from sampling_params import SamplingParams
from structured_outputs import StructuredOutputs

PROMPT = "<|im_start|>user\nhello world<|im_end|>\n<|im_start|>assistant\n"
IM_END = 4
CLOSE_BRACE = 97
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "maximum": 120}},
    "required": ["name", "age"],
    "additionalProperties": False,
}

CASES = {
    "greedy": SamplingParams(temperature=0, max_tokens=40, ignore_eos=True),
    "seeded": SamplingParams(
        seed=7,
        temperature=0.9,
        top_k=50,
        top_p=0.95,
        min_p=0.01,
        max_tokens=40,
        ignore_eos=True,
        repetition_penalty=1.2,
        presence_penalty=0.4,
        frequency_penalty=0.3,
        logprobs=2,
    ),
    # EOS is likely as soon as min_tokens allows it: replayed tokens must count towards min_tokens.
    "min_tokens": SamplingParams(seed=3, max_tokens=40, min_tokens=12, logit_bias={IM_END: 6.0}),
    "bad_words": SamplingParams(seed=5, max_tokens=40, ignore_eos=True, bad_words=("the", "an")),
    "grammar": SamplingParams(seed=11, max_tokens=120, structured=StructuredOutputs("json", SCHEMA)),
}


def uninterrupted(engine: TinyLlmEngine, params: SamplingParams) -> list[SequenceDelta]:
    generation = Generation(engine, engine.tokenize(PROMPT), params)
    deltas = []
    while not generation.finished:
        (delta,) = generation.step()
        deltas.append(delta)
    return deltas


def resumed(engine: TinyLlmEngine, params: SamplingParams, ids: list[int]) -> list[SequenceDelta]:
    """What a request resumed with ``ids`` sends (every step after its replay)."""
    generation = Generation(engine, engine.tokenize(PROMPT), params, ids)
    while generation.replaying:
        generation.replay(3)  # small turns: the state must carry across them
    deltas = []
    while True:
        (delta,) = generation.step()
        deltas.append(delta)
        if generation.finished:
            return deltas


def ids_of(deltas: list[SequenceDelta]) -> list[int]:
    return [token for delta in deltas for token in delta.token_ids]


@pytest.mark.parametrize("case", list(CASES))
def test_the_run_after_any_cut_is_the_uninterrupted_tail(engine: TinyLlmEngine, case: str) -> None:
    params = CASES[case]
    whole = uninterrupted(engine, params)
    assert len(whole) >= 8, "the case must generate enough tokens to cut"
    assert all(delta.num_tokens == len(delta.token_ids) == 1 for delta in whole)
    ids = ids_of(whole)
    for cut in sorted({1, 2, 5, len(whole) // 2, len(whole) - 1}):
        rest = resumed(engine, params, ids[:cut])
        assert rest == whole[cut:], f"cut at {cut}"
    if case == "min_tokens":
        assert whole[-1].finish_reason == FINISH_STOP and len(whole) > 12


def test_the_resumed_cumulative_logprob_includes_the_replayed_tokens(engine: TinyLlmEngine) -> None:
    """The replayed ids are output, not prompt: their logprobs are in the running sum."""
    params = CASES["seeded"]
    whole = uninterrupted(engine, params)
    rest = resumed(engine, params, ids_of(whole)[:5])
    assert rest[0].cumulative_logprob != whole[0].cumulative_logprob  # it carries the replayed tokens' sum


def _stop_across(engine: TinyLlmEngine, params: SamplingParams) -> tuple[list[SequenceDelta], int, bytes]:
    """A cut ``k`` whose boundary an ASCII pair of bytes straddles that occurs nowhere earlier:
    (the run without stops, k, the pair)."""
    whole = uninterrupted(engine, params)
    text = b"".join(delta.text for delta in whole)
    start = 0
    for cut, delta in enumerate(whole):
        if cut >= 2 and delta.text and whole[cut - 1].text:
            pair = text[start - 1 : start + 1]
            if pair.isascii() and pair.decode().isprintable() and text.find(pair) == start - 1:
                return whole, cut, pair
        start += len(delta.text)
    raise AssertionError("no usable boundary in the sample")


@pytest.mark.parametrize("case", ["greedy", "seeded"])
def test_a_stop_string_spanning_the_cut_is_cut_exactly(engine: TinyLlmEngine, case: str) -> None:
    base = CASES[case]
    free, cut, pair = _stop_across(engine, base)
    params = dataclasses.replace(base, stop=(pair.decode(),))
    whole = uninterrupted(engine, params)
    text = b"".join(delta.text for delta in free)
    before = b"".join(delta.text for delta in free[:cut])
    # Before the cut, the client got everything but the stop's first byte (held back)...
    assert b"".join(delta.text for delta in whole[:cut]) == before[:-1]
    rest = resumed(engine, params, ids_of(whole)[:cut])
    # ...and the resumed run cuts it exactly as the uninterrupted one: never sent.
    assert rest == whole[cut:]
    assert rest[0].finish_reason == FINISH_STOP and rest[0].text == b""
    assert b"".join(delta.text for delta in [*whole[:cut], *rest]) == text[: len(before) - 1]


@pytest.mark.parametrize("case", ["greedy", "seeded"])
def test_text_held_back_at_the_cut_is_released_after_it(engine: TinyLlmEngine, case: str) -> None:
    base = CASES[case]
    free, cut, pair = _stop_across(engine, base)
    stop = pair[:1].decode() + "\x07"  # starts like the boundary, never completes
    params = dataclasses.replace(base, stop=(stop,))
    whole = uninterrupted(engine, params)
    before = b"".join(delta.text for delta in free[:cut])
    assert b"".join(delta.text for delta in whole[:cut]) == before[:-1]  # its last byte held at the cut
    assert whole[cut].text == pair[:1] + free[cut].text  # released by the next token
    rest = resumed(engine, params, ids_of(whole)[:cut])
    assert rest == whole[cut:]
    assert b"".join(delta.text for delta in [*whole[:cut], *rest]) == b"".join(delta.text for delta in free)


@pytest.mark.parametrize("extra", [[], [5, 6, 7]], ids=["exactly", "beyond"])
def test_max_tokens_reached_inside_the_replay_answers_an_empty_final(engine: TinyLlmEngine, extra: list[int]) -> None:
    params = SamplingParams(seed=2, max_tokens=8, ignore_eos=True, logprobs=1)
    whole = uninterrupted(engine, params)
    (final,) = resumed(engine, params, ids_of(whole) + extra)
    assert final == SequenceDelta(
        text=b"",
        num_tokens=0,
        logprobs=[],
        cumulative_logprob=whole[-1].cumulative_logprob,
        finish_reason=FINISH_LENGTH,
        token_ids=(),
    )


def test_eos_inside_the_replay_ends_it_and_drops_the_ids_after(engine: TinyLlmEngine) -> None:
    params = SamplingParams(seed=2, max_tokens=8)
    ids = ids_of(uninterrupted(engine, SamplingParams(seed=2, max_tokens=8, ignore_eos=True)))
    generation = Generation(engine, engine.tokenize(PROMPT), params, [ids[0], IM_END, ids[1]])
    generation.replay(16)
    assert generation.finished and not generation.replaying
    (final,) = generation.step()
    assert (final.text, final.num_tokens, final.finish_reason, final.token_ids) == (b"", 0, FINISH_STOP, ())


def test_a_replayed_id_the_grammar_refuses_is_a_replay_error(engine: TinyLlmEngine) -> None:
    generation = Generation(engine, engine.tokenize(PROMPT), CASES["grammar"], [CLOSE_BRACE])
    with pytest.raises(ReplayError, match="input 'resume_token_ids': id 97 at position 0 is not allowed there"):
        generation.replay(16)


def test_resume_needs_one_sequence(engine: TinyLlmEngine) -> None:
    with pytest.raises(ValueError, match="n = 1"):
        Generation(engine, engine.tokenize(PROMPT), SamplingParams(n=2), [5])


def test_tokens_held_counts_prompt_and_output_of_unfinished_sequences(engine: TinyLlmEngine) -> None:
    prompt = engine.tokenize(PROMPT)
    generation = Generation(engine, prompt, SamplingParams(seed=1, max_tokens=3, ignore_eos=True, n=2))
    assert generation.tokens_held == 2 * len(prompt)
    generation.step()
    assert generation.tokens_held == 2 * (len(prompt) + 1)
    while not generation.finished:
        generation.step()
    assert generation.tokens_held == 0
