"""The token loop on the real tiny-llm weights: determinism, finish rules, n, LoRA, byte streaming."""

from __future__ import annotations

import pytest
from bad_words import bad_word_token_ids
from engine import TinyLlmEngine
from generator import FINISH_LENGTH, FINISH_STOP, Generation, PromptTooLongError, SequenceDelta, merge_deltas
from sampling_params import SamplingParams

PROMPT = "<|im_start|>user\nhello world<|im_end|>\n<|im_start|>assistant\n"
IM_END = 4


def run(engine: TinyLlmEngine, params: SamplingParams, prompt: str = PROMPT) -> list[list[SequenceDelta]]:
    """All steps' deltas, per step."""
    generation = Generation(engine, engine.tokenize(prompt), params)
    steps = []
    while not generation.finished:
        steps.append(generation.step())
    return steps


def merged(steps: list[list[SequenceDelta]]) -> list[SequenceDelta]:
    result: list[SequenceDelta | None] = [None] * len(steps[0])
    for step in steps:
        result = [merge_deltas(old, new) for old, new in zip(result, step, strict=True)]
    return [delta for delta in result if delta is not None]


def test_greedy_is_deterministic_and_stops_at_max_tokens(engine: TinyLlmEngine) -> None:
    params = SamplingParams(temperature=0, max_tokens=12)
    first, second = run(engine, params), run(engine, params)
    assert merged(first) == merged(second)
    assert len(first) == 12
    assert all(step[0].num_tokens == 1 for step in first)
    assert [step[0].finish_reason for step in first] == [None] * 11 + [FINISH_LENGTH]


def test_same_seed_same_tokens_different_seed_different_tokens(engine: TinyLlmEngine) -> None:
    a = merged(run(engine, SamplingParams(seed=1, max_tokens=20)))[0]
    b = merged(run(engine, SamplingParams(seed=1, max_tokens=20)))[0]
    c = merged(run(engine, SamplingParams(seed=2, max_tokens=20)))[0]
    assert a.text == b.text and a.cumulative_logprob == b.cumulative_logprob
    assert a.text != c.text


def test_n_sequences_differ_and_the_first_matches_n1(engine: TinyLlmEngine) -> None:
    single = merged(run(engine, SamplingParams(seed=5, max_tokens=10)))
    pair = merged(run(engine, SamplingParams(seed=5, max_tokens=10, n=2)))
    assert len(pair) == 2
    assert pair[0].text == single[0].text
    assert pair[0].text != pair[1].text


def test_eos_ends_with_stop_and_its_text_is_dropped(engine: TinyLlmEngine) -> None:
    steps = run(engine, SamplingParams(temperature=0, max_tokens=10, logit_bias={IM_END: 100}))
    assert len(steps) == 1
    delta = steps[0][0]
    assert delta.finish_reason == FINISH_STOP and delta.num_tokens == 1 and delta.text == b""


def test_ignore_eos_and_min_tokens_hold_eos_back(engine: TinyLlmEngine) -> None:
    ignored = run(engine, SamplingParams(temperature=0, max_tokens=5, ignore_eos=True, logit_bias={IM_END: 100}))
    assert len(ignored) == 5 and ignored[-1][0].finish_reason == FINISH_LENGTH
    held = run(engine, SamplingParams(temperature=0, max_tokens=10, min_tokens=3, logit_bias={IM_END: 100}))
    assert len(held) == 4 and held[-1][0].finish_reason == FINISH_STOP


def test_stop_token_ids_and_include_stop_str(engine: TinyLlmEngine) -> None:
    greedy = merged(run(engine, SamplingParams(temperature=0, max_tokens=8)))[0]
    # logprobs=0 returns just the chosen token: it tells us the first greedy token id.
    first_token = run(engine, SamplingParams(temperature=0, max_tokens=1, logprobs=0))[0][0]
    assert first_token.logprobs is not None and len(first_token.logprobs[0]) == 1
    chosen = int(next(iter(first_token.logprobs[0])))
    stopped = run(engine, SamplingParams(temperature=0, max_tokens=8, stop_token_ids=(chosen,)))
    assert len(stopped) == 1 and stopped[0][0].finish_reason == FINISH_STOP and stopped[0][0].text == b""
    kept = run(
        engine,
        SamplingParams(temperature=0, max_tokens=8, stop_token_ids=(chosen,), include_stop_str_in_output=True),
    )
    assert kept[0][0].text == first_token.text == engine.token_bytes[chosen]
    assert greedy.text.startswith(first_token.text)


def test_stop_string_truncates_and_finishes_with_stop(engine: TinyLlmEngine) -> None:
    text = merged(run(engine, SamplingParams(seed=11, max_tokens=30)))[0].text
    # A 2-byte ASCII window after the first byte, not occurring earlier: a stop string we can predict.
    cut = next(i for i in range(1, len(text) - 1) if text[i : i + 2].isascii() and text.find(text[i : i + 2]) == i)
    stop = text[cut : cut + 2].decode()
    result = merged(run(engine, SamplingParams(seed=11, max_tokens=30, stop=(stop,))))[0]
    assert result.finish_reason == FINISH_STOP
    assert result.text == text[:cut]


def test_streaming_deltas_concatenate_to_the_full_bytes(engine: TinyLlmEngine) -> None:
    steps = run(engine, SamplingParams(seed=3, max_tokens=40, stop=("e",)))
    whole = merged(steps)[0]
    assert b"".join(step[0].text for step in steps) == whole.text
    assert sum(step[0].num_tokens for step in steps) == whole.num_tokens == len(steps)


def test_max_model_len_caps_generation(engine: TinyLlmEngine) -> None:
    prompt_ids = engine.tokenize(PROMPT)
    room = engine.config.max_model_len - len(prompt_ids)
    generation = Generation(engine, prompt_ids, SamplingParams(max_tokens=None))
    assert generation.max_tokens == room
    with pytest.raises(PromptTooLongError, match="maximum model length"):
        Generation(engine, [5] * engine.config.max_model_len, SamplingParams())
    with pytest.raises(PromptTooLongError, match="empty"):
        Generation(engine, [], SamplingParams())


def test_lora_adapters_change_the_greedy_output(engine: TinyLlmEngine) -> None:
    outputs = {
        name: merged(run(engine, SamplingParams(temperature=0, max_tokens=12, lora_name=name)))[0].text
        for name in (None, "alpha", "beta")
    }
    assert len(set(outputs.values())) == 3
    # Switching back to the base model restores its output exactly.
    again = merged(run(engine, SamplingParams(temperature=0, max_tokens=12)))[0].text
    assert again == outputs[None]


def test_logprobs_have_the_vllm_shape(engine: TinyLlmEngine) -> None:
    steps = run(engine, SamplingParams(seed=9, max_tokens=3, logprobs=2))
    total = 0.0
    for step in steps:
        (entry,) = step[0].logprobs or []
        chosen = next(iter(entry.values()))
        assert set(chosen) == {"logprob", "rank", "decoded_token"}
        assert chosen["rank"] >= 1 and chosen["logprob"] <= 0
        assert len(entry) in (2, 3)  # the chosen token plus the top 2 (chosen may be among them)
        assert {1, 2} <= {value["rank"] for value in entry.values()}
        total += float(chosen["logprob"])
    assert steps[-1][0].cumulative_logprob == pytest.approx(total, abs=1e-4)


def test_penalties_and_filters_run(engine: TinyLlmEngine) -> None:
    params = SamplingParams(
        seed=4,
        max_tokens=10,
        top_k=5,
        top_p=0.8,
        min_p=0.05,
        repetition_penalty=1.3,
        presence_penalty=0.5,
        frequency_penalty=0.5,
    )
    a, b = merged(run(engine, params))[0], merged(run(engine, params))[0]
    assert a == b and a.num_tokens == 10


def test_skip_special_tokens_false_emits_special_token_text(engine: TinyLlmEngine) -> None:
    params = SamplingParams(temperature=0, max_tokens=1, logit_bias={3: 100}, skip_special_tokens=False)
    assert run(engine, params)[0][0].text == b"<|im_start|>"
    params = SamplingParams(temperature=0, max_tokens=1, logit_bias={3: 100})
    assert run(engine, params)[0][0].text == b""


def test_allowed_token_ids_are_the_only_tokens_sampled(engine: TinyLlmEngine) -> None:
    allowed = [10, 11, 12]
    for seed in range(3):
        steps = run(engine, SamplingParams(seed=seed, max_tokens=8, allowed_token_ids=tuple(allowed), logprobs=0))
        chosen = [int(next(iter(entry))) for step in steps for entry in step[0].logprobs]
        assert chosen and set(chosen) <= set(allowed)


def test_bad_words_never_appear_where_they_would_have(engine: TinyLlmEngine) -> None:
    def tokens(params: SamplingParams) -> list[int]:
        return [int(next(iter(entry))) for step in run(engine, params) for entry in step[0].logprobs]

    free = tokens(SamplingParams(temperature=0, max_tokens=12, logprobs=0))
    word = engine.tokenizer.decode(free[:2])
    sequences = bad_word_token_ids([word], engine.encode_text)
    assert any(free[i : i + len(seq)] == list(seq) for seq in sequences for i in range(len(free)))
    kept_out = tokens(SamplingParams(temperature=0, max_tokens=12, logprobs=0, bad_words=(word,)))
    assert kept_out != free
    assert not any(kept_out[i : i + len(seq)] == list(seq) for seq in sequences for i in range(len(kept_out)))
