"""Backend logprob entries in OpenAI's two shapes: chat's top k, and legacy completions' top k
with the sampled token always among them (up to k + 1, as OpenAI and vLLM's server answer)."""

from __future__ import annotations

from gateway.core.logprobs import chat_logprobs, completion_logprobs


def entry(sampled: tuple[str, float, int], *top: tuple[str, float]) -> dict[str, dict[str, object]]:
    """A contract entry: the sampled token first (with its rank), then the top alternatives."""
    text, logprob, rank = sampled
    out: dict[str, dict[str, object]] = {"7": {"decoded_token": text, "logprob": logprob, "rank": rank}}
    for i, (token, value) in enumerate(top, start=1):
        if token != text:
            out[str(100 + i)] = {"decoded_token": token, "logprob": value, "rank": i}
    return out


def test_a_sampled_token_outside_the_top_k_is_still_in_completions_top_logprobs() -> None:
    sampled_low = entry(("ou", -8.32, 40), (" 762", -4.35))
    result = completion_logprobs([sampled_low], top=1, text_offset=0)
    assert result["top_logprobs"] == [{"ou": -8.32, " 762": -4.35}]
    assert list(result["top_logprobs"][0]) == ["ou", " 762"]  # the sampled token first, as vLLM
    assert result["tokens"] == ["ou"] and result["token_logprobs"] == [-8.32]


def test_a_sampled_token_in_the_top_k_is_there_once() -> None:
    top = entry(("a", -0.1, 1), ("a", -0.1), ("b", -2.5))
    assert completion_logprobs([top], top=2, text_offset=0)["top_logprobs"] == [{"a": -0.1, "b": -2.5}]


def test_logprobs_zero_gives_the_sampled_token_alone() -> None:
    assert completion_logprobs([entry(("x", -1.0, 3), ("y", -0.5))], top=0, text_offset=0)["top_logprobs"] == [
        {"x": -1.0}
    ]


def test_chats_top_logprobs_are_the_top_k_only() -> None:
    [item] = chat_logprobs([entry(("ou", -8.32, 40), (" 762", -4.35))], top=1)
    assert item["token"] == "ou"
    assert [t["token"] for t in item["top_logprobs"]] == [" 762"]


def test_token_ids_name_every_chat_token_and_keep_the_sampled_tokens_text_bytes() -> None:
    [item] = chat_logprobs([entry(("é", -0.2, 1), ("é", -0.2), ("b", -2.5))], top=2, token_ids=True)
    assert item["token"] == "token_id:7"
    assert item["bytes"] == list("é".encode())  # vLLM: the sampled token's bytes are its text's
    assert [(t["token"], t["bytes"]) for t in item["top_logprobs"]] == [
        ("token_id:7", list(b"token_id:7")),
        ("token_id:102", list(b"token_id:102")),
    ]


def test_token_ids_name_completion_tokens_and_offsets_count_the_names() -> None:
    entries = [entry(("ab", -0.1, 1), ("ab", -0.1)), entry(("c", -0.3, 2), ("d", -0.2))]
    result = completion_logprobs(entries, top=1, text_offset=3, token_ids=True)
    assert result["tokens"] == ["token_id:7", "token_id:7"]
    assert result["top_logprobs"] == [{"token_id:7": -0.1}, {"token_id:7": -0.3, "token_id:101": -0.2}]
    assert result["text_offset"] == [3, 3 + len("token_id:7")]  # as vLLM's server counts them
