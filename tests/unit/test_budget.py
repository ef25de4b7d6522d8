"""plan/budget.py: counting only when the count can change the request refuses and sends exactly
what counting every prompt in place does; usage falls to the backend only where it reports it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from gateway.backend.contracts import Contract, build_contract
from gateway.backend.contracts.vllm import VLLM
from gateway.backend.types import ModelInterface, TensorSpec
from gateway.config import Settings
from gateway.errors import InvalidRequestError
from gateway.models.catalog import ServedModel
from gateway.models.tokens import PromptTokenizer, TokenCounter
from gateway.plan.budget import count_needed, plan_budget, token_budget

WEIGHTS = Path(__file__).resolve().parents[2] / "triton_models" / "weights" / "tiny-llm"
TOKENIZER = Tokenizer.from_file(str(WEIGHTS / "tokenizer.json"))


def _ensemble(*extra: str) -> Contract:
    """An ensemble's contract; it reports the prompt's tokens only when it declares
    ``return_num_input_tokens`` (TensorRT-LLM since mid-2025)."""
    specs = [TensorSpec("text_input", "BYTES", (1,)), TensorSpec("max_tokens", "INT32", (1,))]
    specs += [TensorSpec(name, "BOOL", (1,), True) for name in ("stream", *extra)]
    interface = ModelInterface({s.name: s for s in specs}, decoupled=True, max_batch_size=8, platform="ensemble")
    return build_contract("ensemble", interface)


SILENT_ENSEMBLE = _ensemble()
COUNTING_ENSEMBLE = _ensemble("return_num_input_tokens", "return_num_output_tokens")


def model(max_model_len: int | None, *, bound: bool = True, contract: Contract = VLLM) -> ServedModel:
    counting = PromptTokenizer(TOKENIZER)
    if not bound:
        counting.bound = None
    return ServedModel(
        name="m",
        tokenizer=TOKENIZER,
        prompt_tokenizer=counting,
        max_model_len=max_model_len,
        backend="python",
        layout=contract.layout,
        contract=contract,
    )


class CountingCounter(TokenCounter):
    """The real counter, recording what it was asked to count."""

    def __init__(self) -> None:
        super().__init__(threads=1)
        self.prompts: list[str] = []

    async def count(self, count: Any, prompt: str) -> int:
        self.prompts.append(prompt)
        return await super().count(count, prompt)


def outcome(call: Any) -> tuple[str, Any]:
    try:
        return "ok", call()
    except InvalidRequestError as exc:
        return "refused", (type(exc).__name__, exc.message, exc.param, exc.code)


def planned(*args: Any, **kwargs: Any) -> tuple[int, int | None]:
    counter = CountingCounter()
    try:
        return asyncio.run(plan_budget(*args, counter, **kwargs))
    finally:
        counter.close()


@settings(max_examples=400, deadline=None)
@given(
    prompt=st.one_of(st.text(max_size=80), st.sampled_from(["", " ", "hello world", "<|im_start|>"])),
    requested=st.one_of(st.none(), st.integers(min_value=1, max_value=120)),
    max_model_len=st.one_of(st.none(), st.integers(min_value=1, max_value=150)),
    min_tokens=st.one_of(st.none(), st.integers(min_value=0, max_value=150)),
    cap=st.one_of(st.none(), st.integers(min_value=1, max_value=100)),
    contract=st.sampled_from([VLLM, SILENT_ENSEMBLE, COUNTING_ENSEMBLE]),
)
def test_counting_only_when_needed_refuses_and_sends_what_counting_always_does(
    prompt: str,
    requested: int | None,
    max_model_len: int | None,
    min_tokens: int | None,
    cap: int | None,
    contract: Contract,
) -> None:
    served = model(max_model_len, contract=contract)
    config = Settings(max_tokens_limit=cap)
    always = outcome(lambda: token_budget(requested, served, prompt, config, min_tokens=min_tokens))
    when_needed = outcome(lambda: planned(requested, served, prompt, config, min_tokens=min_tokens))
    assert when_needed[0] == always[0]
    if always[0] == "refused":
        assert when_needed[1] == always[1]
        return
    assert when_needed[1][0] == always[1][0]  # the max_tokens sent
    counted = when_needed[1][1]
    assert counted in (None, always[1][1])
    if counted is None:  # then the backend reports the prompt's tokens
        assert contract is not SILENT_ENSEMBLE


@pytest.mark.parametrize("contract", [VLLM, COUNTING_ENSEMBLE], ids=["vllm", "ensemble-reporting-counts"])
def test_a_prompt_that_fits_with_max_tokens_given_is_not_counted(contract: Contract) -> None:
    counter = CountingCounter()
    result = asyncio.run(plan_budget(16, model(1_000_000, contract=contract), "word " * 20_000, Settings(), counter))
    counter.close()
    assert result == (16, None)
    assert counter.prompts == []


@pytest.mark.parametrize(
    ("why", "requested", "served"),
    [
        ("no max_tokens: the default is the room left", None, model(1_000_000)),
        ("the bound does not prove it fits", 16, model(100_000)),
        ("a TensorRT-LLM ensemble without return_num_input_tokens", 16, model(1_000_000, contract=SILENT_ENSEMBLE)),
        ("no bound for the tokenizer's shape", 16, model(1_000_000, bound=False)),
    ],
)
def test_a_prompt_whose_count_can_matter_is_counted(why: str, requested: int | None, served: ServedModel) -> None:
    prompt = "word " * 20_000
    assert count_needed(requested, served, prompt), why
    counter = CountingCounter()
    _, counted = asyncio.run(plan_budget(requested, served, prompt, Settings(), counter))
    counter.close()
    assert counted == len(TOKENIZER.encode(prompt).ids)
    assert counter.prompts == [prompt]


def test_no_tokenizer_means_no_count() -> None:
    served = ServedModel(name="m", max_model_len=10)
    assert not count_needed(None, served, "hello")


def test_a_prompt_over_the_limit_is_refused_before_it_is_counted() -> None:
    counter = CountingCounter()
    with pytest.raises(InvalidRequestError) as info:
        asyncio.run(plan_budget(None, model(1_000_000), "x" * 101, Settings(max_prompt_chars=100), counter))
    counter.close()
    assert info.value.code == "prompt_too_long"
    assert counter.prompts == []


def test_up_to_context_lowers_max_tokens_to_the_room_and_the_cap_instead_of_refusing() -> None:
    prompt = "hello world " * 10
    used = len(TOKENIZER.encode(prompt).ids)
    served = model(used + 50)
    with pytest.raises(InvalidRequestError):
        planned(32000, served, prompt, Settings())
    assert planned(32000, served, prompt, Settings(), up_to_context=True) == (50, used)
    capped = Settings(max_tokens_limit=20)
    assert planned(32000, served, prompt, capped, up_to_context=True)[0] == 20
    with pytest.raises(InvalidRequestError):
        planned(32000, model(used), prompt, Settings(), up_to_context=True)  # no room at all
