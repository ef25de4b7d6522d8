"""The stand-ins' engine (tests/trtllm_stand_ins/engine.py) computes what transformers computes with
tiny-llm's weights, and applies TensorRT-LLM-format LoRA as peft applies the adapter it came from;
one sequence's token rules (generation.py)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from tests.trtllm_stand_ins.build import PEFT_ADAPTERS
from tests.trtllm_stand_ins.engine import StandInEngine
from tests.trtllm_stand_ins.generation import (
    FINISH_END_ID,
    FINISH_LENGTH,
    FINISH_STOP_WORDS,
    GenerationParams,
    Sequence,
)
from tests.trtllm_stand_ins.lora import read_peft_adapter, unpack_adapter
from tests.trtllm_stand_ins.reference import TINY_LLM_WEIGHTS
from tests.trtllm_stand_ins.sampling import build_sampling_config

PROMPT = [1, 50, 300, 999, 12, 7, 700]


@pytest.fixture(scope="module")
def engine() -> StandInEngine:
    return StandInEngine(TINY_LLM_WEIGHTS)


@pytest.fixture(scope="module")
def reference() -> Iterator[object]:
    from transformers import LlamaForCausalLM

    yield LlamaForCausalLM.from_pretrained(str(TINY_LLM_WEIGHTS), dtype=torch.float32).eval()


def test_logits_match_transformers_for_the_prompt_and_a_cached_step(engine: StandInEngine, reference: object) -> None:
    prefill = engine.forward(PROMPT, None, None, all_logits=True)
    step = engine.forward([42], prefill.cache, None)
    with torch.inference_mode():
        expected = reference(input_ids=torch.tensor([[*PROMPT, 42]])).logits[0]  # type: ignore[operator]
    assert prefill.all_logits is not None
    torch.testing.assert_close(prefill.all_logits, expected[:-1], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(step.logits, expected[-1], atol=1e-4, rtol=1e-4)


def test_lora_rows_act_as_the_peft_adapter_they_came_from(engine: StandInEngine, reference: object) -> None:
    from peft import PeftModel

    weights, config = read_peft_adapter(PEFT_ADAPTERS / "alpha")
    adapter = engine.prepare_adapter(unpack_adapter(weights[0], config[0], engine.shape, max_rank=64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peft_model = PeftModel.from_pretrained(reference, str(PEFT_ADAPTERS / "alpha")).eval()
        with torch.inference_mode():
            expected = peft_model(input_ids=torch.tensor([PROMPT])).logits[0, -1]
        peft_model.unload()
    adapted = engine.forward(PROMPT, None, adapter).logits
    torch.testing.assert_close(adapted, expected, atol=5e-3, rtol=1e-3)  # FP16 rows
    assert (adapted - engine.forward(PROMPT, None, None).logits).abs().max() > 0.1


def run(engine: StandInEngine, **values: object) -> Sequence:
    sampling = build_sampling_config(**values.pop("sampling", {}))  # type: ignore[arg-type]
    sequence = Sequence(engine, tuple(PROMPT), GenerationParams(sampling=sampling, **values))  # type: ignore[arg-type]
    while not sequence.finished:
        sequence.step()
    return sequence


def test_greedy_is_deterministic_and_seeded_sampling_repeats_with_its_seed(engine: StandInEngine) -> None:
    assert run(engine, max_new_tokens=8).tokens == run(engine, max_new_tokens=8).tokens
    sampled = {"top_k": 50, "temperature": 1.5, "seed": 3}
    assert (
        run(engine, max_new_tokens=8, sampling=sampled).tokens == run(engine, max_new_tokens=8, sampling=sampled).tokens
    )
    other = run(engine, max_new_tokens=8, sampling={**sampled, "seed": 4}).tokens
    assert other != run(engine, max_new_tokens=8, sampling=sampled).tokens


def test_the_end_id_ends_the_sequence_and_is_not_returned(engine: StandInEngine) -> None:
    greedy = run(engine, max_new_tokens=6).tokens
    ended = run(engine, max_new_tokens=6, end_id=greedy[2])
    assert ended.tokens == greedy[:2] and ended.finish_reason == FINISH_END_ID


def test_min_tokens_hold_the_end_id_back(engine: StandInEngine) -> None:
    greedy = run(engine, max_new_tokens=6).tokens
    held = run(engine, max_new_tokens=6, end_id=greedy[0], sampling={"min_tokens": 3})
    assert greedy[0] not in held.tokens[:3] and len(held.tokens) >= 3


def test_a_stop_word_ends_the_sequence_and_stays_in_it(engine: StandInEngine) -> None:
    greedy = run(engine, max_new_tokens=8).tokens
    stopped = run(engine, max_new_tokens=8, stop_words=((greedy[2], greedy[3]),))
    assert stopped.tokens == greedy[:4] and stopped.finish_reason == FINISH_STOP_WORDS


def test_a_bad_word_is_never_generated(engine: StandInEngine) -> None:
    greedy = run(engine, max_new_tokens=8).tokens
    avoided = run(engine, max_new_tokens=8, bad_words=((greedy[0],),))
    assert greedy[0] not in avoided.tokens and avoided.finish_reason == FINISH_LENGTH


def test_an_embedding_bias_steers_the_choice(engine: StandInEngine) -> None:
    bias = np.zeros(engine.vocab_size, dtype=np.float32)
    bias[777] = 1000.0
    assert run(engine, max_new_tokens=3, embedding_bias=bias).tokens == [777, 777, 777]


def test_log_probs_are_the_chosen_tokens_and_add_up(engine: StandInEngine) -> None:
    sequence = Sequence(engine, tuple(PROMPT), GenerationParams(max_new_tokens=4, sampling=build_sampling_config()))
    steps = [sequence.step() for _ in range(4)]
    assert all(step.logprob <= 0 for step in steps)
    assert sequence.cumulative_logprob == pytest.approx(sum(step.logprob for step in steps))
