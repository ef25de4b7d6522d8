"""The OpenAI request surface, parameter by parameter, against real Triton and the tiny LM.

The model has random weights, so tests check behaviour that does not depend on the text making
sense: determinism, forced tokens through ``logit_bias``, token counts, finish reasons, shapes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from tokenizers import Tokenizer

from tests.integration.conftest import MODEL, GatewayProcess

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = Tokenizer.from_file(str(ROOT / "triton_models" / "weights" / "tiny-llm" / "tokenizer.json"))
HELLO = TOKENIZER.encode("hello", add_special_tokens=False).ids[0]
EOS = TOKENIZER.token_to_id("<|im_end|>")
MESSAGES = [{"role": "user", "content": "hi there"}]
FORCE_HELLO = {"logit_bias": {str(HELLO): 100}}


def chat(client: openai.OpenAI, **kwargs: object):  # type: ignore[no-untyped-def]
    args: dict[str, object] = {"model": MODEL, "messages": MESSAGES, "max_tokens": 12, "temperature": 0}
    extra = {
        k: kwargs.pop(k)
        for k in list(kwargs)
        if k
        in {
            "top_k",
            "min_p",
            "repetition_penalty",
            "min_tokens",
            "ignore_eos",
            "stop_token_ids",
            "include_stop_str_in_output",
            "skip_special_tokens",
            "continuous_usage_stats",
        }
    }
    extra.setdefault("ignore_eos", True)
    args.update(kwargs)
    return client.chat.completions.create(extra_body=extra, **args)  # type: ignore[call-overload]


def text_of(reply) -> str:  # type: ignore[no-untyped-def]
    return reply.choices[0].message.content or ""


# -- sampling ------------------------------------------------------------------------------------


def test_temperature_zero_is_deterministic(client: openai.OpenAI) -> None:
    assert text_of(chat(client)) == text_of(chat(client))


@pytest.mark.parametrize("narrowing", [{"top_p": 1e-6}, {"top_k": 1}, {"min_p": 1.0}])
def test_narrow_sampling_equals_greedy(client: openai.OpenAI, narrowing: dict[str, float]) -> None:
    greedy = text_of(chat(client))
    for seed in (1, 2):
        assert text_of(chat(client, temperature=1.0, seed=seed, **narrowing)) == greedy


def test_logit_bias_forces_a_token(client: openai.OpenAI) -> None:
    reply = chat(client, max_tokens=5, **FORCE_HELLO)
    assert text_of(reply) == "hello" * 5
    assert reply.usage.completion_tokens == 5


def tokens_of(reply) -> list[str]:  # type: ignore[no-untyped-def]
    return [item.token for item in reply.choices[0].logprobs.content]


@pytest.mark.parametrize(
    "penalty", [{"repetition_penalty": 2.0}, {"presence_penalty": 2.0}, {"frequency_penalty": 2.0}]
)
def test_penalties_reduce_repetition(client: openai.OpenAI, penalty: dict[str, float]) -> None:
    greedy = tokens_of(chat(client, max_tokens=12, logprobs=True))
    repeated = max(set(greedy), key=greedy.count)
    assert greedy.count(repeated) >= 2, "the greedy text should repeat a token for this test to mean anything"
    penalized = tokens_of(chat(client, max_tokens=12, logprobs=True, **penalty))
    assert penalized != greedy
    assert penalized.count(repeated) < greedy.count(repeated)


def test_eos_ends_with_stop_unless_ignore_eos(client: openai.OpenAI) -> None:
    force_eos = {"logit_bias": {str(EOS): 100}}
    stopped = chat(client, ignore_eos=False, **force_eos)
    assert stopped.choices[0].finish_reason == "stop" and text_of(stopped) == ""
    ignored = chat(client, ignore_eos=True, max_tokens=4, **force_eos)
    assert ignored.choices[0].finish_reason == "length" and ignored.usage.completion_tokens == 4


def test_stop_token_ids_and_min_tokens(client: openai.OpenAI) -> None:
    stopped = chat(client, stop_token_ids=[HELLO], **FORCE_HELLO)
    assert stopped.choices[0].finish_reason == "stop" and "hello" not in text_of(stopped)
    delayed = chat(client, stop_token_ids=[HELLO], min_tokens=3, **FORCE_HELLO)
    assert delayed.choices[0].finish_reason == "stop"
    assert delayed.usage.completion_tokens >= 3


def test_max_completion_tokens_wins_over_max_tokens(client: openai.OpenAI) -> None:
    reply = chat(client, max_tokens=10, max_completion_tokens=3)
    assert reply.usage.completion_tokens == 3 and reply.choices[0].finish_reason == "length"


def test_max_tokens_over_context_is_context_length_exceeded(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        chat(client, max_tokens=131_072)  # tiny-llm's whole context: with the prompt, over it
    assert info.value.code == "context_length_exceeded"


# -- stop strings --------------------------------------------------------------------------------


def test_stop_string_cuts_before_and_finishes_with_stop(client: openai.OpenAI) -> None:
    reply = chat(client, max_tokens=6, stop=["lohel"], **FORCE_HELLO)
    assert text_of(reply) == "hel" and reply.choices[0].finish_reason == "stop"
    kept = chat(client, max_tokens=6, stop=["lohel"], include_stop_str_in_output=True, **FORCE_HELLO)
    assert text_of(kept) == "hellohel"


def test_stop_string_never_leaks_into_stream(client: openai.OpenAI) -> None:
    chunks = list(chat(client, max_tokens=6, stop="ohe", stream=True, **FORCE_HELLO))
    deltas = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(deltas) == "hell"
    assert chunks[-1].choices[0].finish_reason == "stop"


# -- n, logprobs, usage ---------------------------------------------------------------------------


def test_n_choices_have_indices_and_own_finish_reasons(client: openai.OpenAI) -> None:
    reply = chat(client, n=3, temperature=1.0, seed=5, max_tokens=6)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert all(c.finish_reason == "length" for c in reply.choices)
    assert len({c.message.content for c in reply.choices}) == 3
    assert reply.usage.completion_tokens == 18


def test_n_greedy_choices_are_n_answers_as_openai_gives_them(client: openai.OpenAI) -> None:
    """vLLM refuses n > 1 with greedy sampling; OpenAI answers, and so does the gateway: each choice
    is a request of its own, and greedy decoding gives each the same text."""
    reply = chat(client, n=2, temperature=0, max_tokens=6)
    assert [c.index for c in reply.choices] == [0, 1]
    one = chat(client, temperature=0, max_tokens=6)
    assert [c.message.content for c in reply.choices] == [one.choices[0].message.content] * 2
    assert reply.usage.completion_tokens == 2 * one.usage.completion_tokens
    chunks = list(chat(client, n=2, temperature=0, max_tokens=6, stream=True))
    texts = {0: "", 1: ""}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts == {c.index: c.message.content for c in reply.choices}


def test_n_choices_stream_with_their_index(client: openai.OpenAI) -> None:
    whole = chat(client, n=2, temperature=1.0, seed=9, max_tokens=6)
    chunks = list(chat(client, n=2, temperature=1.0, seed=9, max_tokens=6, stream=True))
    texts = {0: "", 1: ""}
    finishes = {}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    assert texts == {c.index: c.message.content for c in whole.choices}
    assert finishes == {0: "length", 1: "length"}


def test_chat_logprobs_shape_and_consistency(client: openai.OpenAI) -> None:
    reply = chat(client, logprobs=True, top_logprobs=3, max_tokens=4)
    content = reply.choices[0].logprobs.content
    assert len(content) == reply.usage.completion_tokens == 4
    for item in content:
        assert item.logprob <= 0 and len(item.top_logprobs) == 3
        # greedy: the sampled token is the most likely one
        assert item.logprob == pytest.approx(max(t.logprob for t in item.top_logprobs))
        assert item.bytes == list(item.token.encode())


def sse_chunks(gateway: GatewayProcess, path: str, body: dict[str, object]) -> list[dict[str, Any]]:
    raw = httpx.post(gateway.url + path, json=body, timeout=30).text
    return [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]


def logprob_count(choice: dict[str, Any]) -> int:
    logprobs = choice.get("logprobs") or {}
    return len(logprobs.get("content") or logprobs.get("tokens") or ())


def assert_usage_exact_on_every_chunk(chunks: list[dict[str, Any]], total: int) -> None:
    """Every chunk's completion_tokens is the number of tokens (logprob entries) sent up to it,
    the role chunks' is 0, and the usage chunk has the total."""
    *streamed, last = chunks
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == total
    seen = 0
    for chunk in streamed:
        usage = chunk["usage"]
        if chunk["choices"][0].get("delta", {}).get("role"):
            assert usage["completion_tokens"] == 0
        seen += sum(logprob_count(choice) for choice in chunk["choices"])
        assert usage["completion_tokens"] == seen, chunk
        assert usage["total_tokens"] == usage["prompt_tokens"] + seen
    assert seen == total


@pytest.mark.parametrize("n", [1, 2])
def test_stream_usage_include_and_continuous(gateway: GatewayProcess, n: int) -> None:
    body = {
        "model": MODEL,
        "messages": MESSAGES,
        "max_tokens": 4,
        "n": n,
        "temperature": 1.0,
        "seed": 3,
        "logprobs": True,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    chunks = sse_chunks(gateway, "/v1/chat/completions", body)
    assert [c["choices"][0]["delta"] for c in chunks[:n]] == [{"role": "assistant", "content": ""}] * n
    assert_usage_exact_on_every_chunk(chunks, 4 * n)
    assert len({c["usage"]["prompt_tokens"] for c in chunks}) == 1


def test_continuous_usage_is_exact_when_responses_arrive_together(gateway: GatewayProcess) -> None:
    # The scripted model sends its responses back to back (two tokens each): the gateway reads
    # several per step, and each chunk must still count only the tokens up to it.
    def entries(*tokens: str) -> list[dict[str, object]]:
        return [{str(i): {"logprob": -0.5, "rank": 1, "decoded_token": t}} for i, t in enumerate(tokens)]

    choice = [{"utf8": ["ab"], "num_output_tokens": [2], "logprobs": [entries("a", "b")]} for _ in range(6)]
    script = json.dumps({"choices": [choice, choice]})
    body = {
        "model": "scripted",
        "messages": [{"role": "user", "content": script}],
        "n": 2,
        "temperature": 1.0,
        "logprobs": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    chunks = sse_chunks(gateway, "/v1/chat/completions", body)
    assert_usage_exact_on_every_chunk(chunks, 24)


def test_unknown_and_unused_fields_are_accepted(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_tokens=2,
        user="u-1",
        store=False,
        metadata={"k": "v"},
        service_tier="auto",
        extra_body={"totally_new_field": {"x": 1}},
    )
    assert reply.usage.completion_tokens <= 2


def test_unset_fields_sent_as_null_are_their_defaults(client: openai.OpenAI, gateway: GatewayProcess) -> None:
    # What a client that writes every key sends (the openai SDK sends an explicit None as null).
    reply = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=2,
        n=None,
        stream=None,
        logprobs=None,
        top_logprobs=None,
        stop=None,
        seed=None,
        stream_options=None,
        temperature=None,
        top_p=None,
        presence_penalty=None,
        frequency_penalty=None,
        logit_bias=None,
        user=None,
        response_format=None,
        tools=None,
        tool_choice=None,
        parallel_tool_calls=None,
        max_completion_tokens=None,
        extra_body={"include_stop_str_in_output": None, "add_generation_prompt": None, "ignore_eos": None},
    )
    assert len(reply.choices) == 1 and reply.choices[0].logprobs is None
    legacy = client.completions.create(
        model=MODEL,
        prompt="hi",
        max_tokens=2,
        n=None,
        stream=None,
        logprobs=None,
        echo=None,
        suffix=None,
        best_of=None,
        stop=None,
        seed=None,
        stream_options=None,
    )
    assert len(legacy.choices) == 1 and not legacy.choices[0].text.startswith("hi")
    raw = httpx.post(
        gateway.url + "/v1/chat/completions",
        json={
            "model": MODEL,
            "messages": MESSAGES,
            "max_tokens": 2,
            "stream": True,
            "stream_options": {"include_usage": None},
        },
        timeout=30,
    )
    assert raw.status_code == 200 and raw.text.endswith("data: [DONE]\n\n") and '"usage":' not in raw.text


def test_message_roles_and_text_parts(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=MODEL,
        max_tokens=2,
        messages=[
            {"role": "developer", "content": "be brief"},
            {"role": "system", "content": "sys"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "name": "x"},
            {"role": "assistant", "content": "ok"},
            {"role": "tool", "content": "42", "tool_call_id": "call_1"},
            {"role": "user", "content": "and?"},
        ],
    )
    assert reply.choices[0].finish_reason in {"stop", "length"}


def test_audio_parts_are_a_clear_400(client: openai.OpenAI) -> None:
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=MODEL,
            max_tokens=2,
            messages=[{"role": "user", "content": [{"type": "text", "text": "hear"}, audio]}],  # type: ignore[list-item]
        )
    assert info.value.body["param"] == "messages.0.content.1"  # type: ignore[index]


def test_response_format_json_object_is_enforced(client: openai.OpenAI) -> None:
    # More in test_structured_outputs.py; a backend that cannot enforce it: test_trtllm.py.
    assert text_of(chat(client, response_format={"type": "json_object"})).startswith("{")


def test_response_format_text_is_plain_generation(client: openai.OpenAI) -> None:
    assert chat(client, response_format={"type": "text"}).choices[0].finish_reason == "length"


# -- legacy completions ----------------------------------------------------------------------------


def test_completions_prompt_list_and_n(client: openai.OpenAI) -> None:
    reply = client.completions.create(
        model=MODEL, prompt=["one", "two"], n=2, max_tokens=3, temperature=1.0, seed=3, extra_body={"ignore_eos": True}
    )
    assert [c.index for c in reply.choices] == [0, 1, 2, 3]
    assert all(c.finish_reason == "length" for c in reply.choices)
    assert reply.usage.completion_tokens == 12


def test_completions_echo_and_logprobs(client: openai.OpenAI) -> None:
    echoed = client.completions.create(model=MODEL, prompt="abc", echo=True, max_tokens=2, temperature=0)
    plain = client.completions.create(model=MODEL, prompt="abc", max_tokens=2, temperature=0)
    assert echoed.choices[0].text == "abc" + plain.choices[0].text
    withlp = client.completions.create(
        model=MODEL, prompt="abc", max_tokens=3, temperature=0, logprobs=2, extra_body={"ignore_eos": True}
    )
    lp = withlp.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.text_offset) == 3
    assert all(len(t) == 2 for t in lp.top_logprobs)  # greedy: the sampled token is the top one


def test_completions_top_logprobs_always_hold_the_sampled_token(client: openai.OpenAI) -> None:
    """Up to logprobs + 1 entries (OpenAI's reference): a token sampled from outside the top 1 is
    there beside it, with its own logprob."""
    reply = client.completions.create(
        model=MODEL, prompt="abc", max_tokens=24, temperature=2.0, seed=3, logprobs=1, extra_body={"ignore_eos": True}
    )
    lp = reply.choices[0].logprobs
    entries = list(zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True))
    assert all(token in top and 1 <= len(top) <= 2 for token, _, top in entries)
    assert any(len(top) == 2 and top[token] == logprob for token, logprob, top in entries)


def test_completions_without_max_tokens_stop_at_16_tokens(client: openai.OpenAI) -> None:
    """The legacy default of OpenAI's and vLLM's /v1/completions; chat keeps the room left."""
    reply = client.completions.create(model=MODEL, prompt="abc", extra_body={"ignore_eos": True})
    assert (reply.usage.completion_tokens, reply.choices[0].finish_reason) == (16, "length")


def test_completions_stream_matches_non_stream(client: openai.OpenAI) -> None:
    args = dict(model=MODEL, prompt="story:", max_tokens=8, temperature=0, extra_body={"ignore_eos": True})
    whole = client.completions.create(**args)  # type: ignore[call-overload]
    chunks = list(client.completions.create(stream=True, **args))  # type: ignore[call-overload]
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "length"


@pytest.mark.parametrize(
    ("extra", "param"),
    [({"suffix": "tail"}, "suffix"), ({"prompt": [1, 2, 3]}, "prompt"), ({"best_of": 3}, "best_of")],
)
def test_completions_unsupported_options_are_400(client: openai.OpenAI, extra: dict[str, object], param: str) -> None:
    args: dict[str, object] = {"model": MODEL, "prompt": "x", "max_tokens": 2, **extra}
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(**args)  # type: ignore[call-overload]
    assert info.value.body["param"] == param  # type: ignore[index]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"prompt": ""}, "prompt"),
        ({"max_tokens": 3, "extra_body": {"min_tokens": 5}}, "min_tokens"),
        ({"extra_body": {"stop_token_ids": [99999]}}, "stop_token_ids"),
        ({"extra_body": {"stop_token_ids": [-1]}}, "stop_token_ids"),
        ({"logit_bias": {"99999": 5}}, "logit_bias"),
    ],
    ids=["empty-prompt", "min-tokens-over-max-tokens", "stop-token-id-out-of-vocab", "stop-token-id-negative",
         "logit-bias-out-of-vocab"],
)  # fmt: skip
def test_what_vllm_refuses_is_a_400_naming_the_field(
    client: openai.OpenAI, extra: dict[str, object], param: str
) -> None:
    # The same requests as tests/vllm_lane's: vLLM's server answers them 400.
    args: dict[str, object] = {"model": MODEL, "prompt": "hello", "max_tokens": 3, **extra}
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(**args)  # type: ignore[call-overload]
    assert info.value.body["param"] == param  # type: ignore[index]


def test_tool_choice_naming_a_function_without_tools_is_400(client: openai.OpenAI) -> None:
    choice = {"type": "function", "function": {"name": "get_weather"}}
    with pytest.raises(openai.BadRequestError) as info:
        chat(client, tool_choice=choice)
    assert info.value.body["param"] == "tool_choice"  # type: ignore[index]
    assert "`tools` must be set" in info.value.message
