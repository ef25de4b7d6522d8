"""``n`` > 1 on Triton's real vLLM backend gives vLLM's own choices, at the right index.

The backend cannot carry ``n`` > 1 faithfully (it pairs outputs by position and, not streaming,
sends only the last one), so the gateway sends one single-sequence request per choice, with the
seeds vLLM gives its own child requests (``seed + index``). These tests hold it to vLLM's server:
same texts at the same indexes, same finish reasons, same usage (prompt tokens counted once per
prompt), streamed and not, over many seeds.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.vllm_lane.compare import Answer, both, chat, chat_stream, completion, completion_stream, messages

RUNS = 10


def _run(gw: openai.OpenAI, vl: openai.OpenAI, chatting: bool, stream: bool, **kwargs: Any) -> tuple[Answer, Answer]:
    if chatting and stream:
        (ours, _), (theirs, _) = both(chat_stream, gw, vl, **kwargs)
        return ours, theirs
    call = (chat if chatting else completion) if not stream else completion_stream
    result: tuple[Answer, Answer] = both(call, gw, vl, **kwargs)
    return result


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("chatting", [False, True], ids=["completions", "chat"])
def test_n_with_a_seed_gives_vllms_choices_in_every_run(
    gw: openai.OpenAI, vl: openai.OpenAI, chatting: bool, stream: bool
) -> None:
    # One seed per run: some runs have a sequence that ends early (EOS), which is where the
    # backend's own n>1 loses track of positions.
    # (For chat, "a" is a prompt whose answers often end at EOS within 8 tokens.)
    prompt: dict[str, Any] = {"messages": messages("a")} if chatting else {"prompt": "Hello there"}
    differing = []
    ended_early = 0
    for seed in range(RUNS):
        ours, theirs = _run(gw, vl, chatting, stream, **prompt, max_tokens=8, n=3, temperature=1.0, seed=seed)
        assert len(theirs.texts) == 3
        ended_early += "stop" in theirs.finish_reasons
        if ours != theirs:
            differing.append((seed, ours, theirs))
    assert not differing, f"{len(differing)} of {RUNS} runs differ from vLLM: {differing}"
    assert ended_early  # the case that used to go wrong was exercised


def test_n_sequences_finishing_at_different_steps_keep_their_index(gw: openai.OpenAI, vl: openai.OpenAI) -> None:
    ours, theirs = both(completion, gw, vl, prompt="Hello there", max_tokens=8, n=3, temperature=1.0, seed=5)
    assert theirs.finish_reasons.count("stop") >= 1  # the case under test: one sequence ends early
    assert ours == theirs


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_n_sequences_of_equal_length(gw: openai.OpenAI, vl: openai.OpenAI, stream: bool) -> None:
    kwargs: dict[str, Any] = {"messages": messages("Hello there"), "max_tokens": 8, "n": 2, "temperature": 1.0}
    for _ in range(3):
        ours, theirs = _run(gw, vl, True, stream, **kwargs, seed=5)
        assert theirs.finish_reasons == ("length", "length")
        assert ours == theirs


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_n_with_several_prompts_and_logprobs(gw: openai.OpenAI, vl: openai.OpenAI, stream: bool) -> None:
    # Choice index = prompt position * n + i; prompt tokens are counted once per prompt.
    call = completion_stream if stream else completion
    kwargs: dict[str, Any] = {"max_tokens": 6, "n": 2, "temperature": 1.0, "seed": 11, "logprobs": 1}
    ours, theirs = both(call, gw, vl, prompt=["Hello there", "Once upon a time"], **kwargs)
    assert len(theirs.texts) == 4
    assert ours.texts == theirs.texts
    assert ours.finish_reasons == theirs.finish_reasons
    assert ours.usage == theirs.usage
    for mine, vllms in zip(ours.logprobs, theirs.logprobs, strict=True):
        assert mine["tokens"] == vllms["tokens"]
        assert mine["text_offset"] == vllms["text_offset"]


def test_n_without_a_seed_gives_n_choices(gw: openai.OpenAI) -> None:
    # No seed: each choice is drawn on its own (vLLM's children share the unseeded parameters),
    # so only the shape can be compared.
    reply = gw.chat.completions.create(
        model="tiny-llm", messages=messages("Hello there"), max_tokens=6, n=3, temperature=1.0
    )
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert all(c.finish_reason in ("stop", "length") for c in reply.choices)
    single = gw.chat.completions.create(model="tiny-llm", messages=messages("Hello there"), max_tokens=1)
    assert reply.usage is not None and single.usage is not None
    assert reply.usage.prompt_tokens == single.usage.prompt_tokens  # once, not three times
    assert 3 <= reply.usage.completion_tokens <= 18
