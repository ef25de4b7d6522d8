"""Chat completions end to end: openai SDK and raw HTTP → gateway → real Triton → tiny LM."""

from __future__ import annotations

import asyncio
import json
import socket

import httpx
import openai
import pytest

from gateway.triton_launcher import TritonServer
from tests.integration.conftest import MODEL, GatewayProcess, read_metric, wait_for

MESSAGES = [{"role": "user", "content": "Tell me a story about a robot."}]


def test_non_streaming_chat_reports_real_usage(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8, temperature=0)
    choice = reply.choices[0]
    assert reply.object == "chat.completion"
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in {"stop", "length"}
    assert reply.usage is not None
    assert reply.usage.prompt_tokens > 0
    assert 0 < reply.usage.completion_tokens <= 8
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_max_tokens_ends_with_finish_reason_length(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=5, temperature=0, extra_body={"ignore_eos": True}
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 5


def test_stream_and_non_stream_give_the_same_answer(client: openai.OpenAI) -> None:
    args = dict(model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0, extra_body={"ignore_eos": True})
    whole = client.chat.completions.create(**args)  # type: ignore[call-overload]
    chunks = list(client.chat.completions.create(stream=True, **args))  # type: ignore[call-overload]
    assert chunks[0].choices[0].delta.role == "assistant"
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason == "length"
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])


def test_same_seed_same_text_other_seed_other_text(client: openai.OpenAI) -> None:
    def sample(seed: int) -> str:
        reply = client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=16, temperature=1.0, seed=seed, extra_body={"ignore_eos": True}
        )
        return reply.choices[0].message.content or ""

    first, again, other = sample(7), sample(7), sample(8)
    assert first == again
    assert first != other


def test_lora_adapters_change_the_output(client: openai.OpenAI) -> None:
    def greedy(model: str) -> str:
        reply = client.chat.completions.create(
            model=model, messages=MESSAGES, max_tokens=16, temperature=0, extra_body={"ignore_eos": True}
        )
        assert reply.model == model
        return reply.choices[0].message.content or ""

    base, alpha, beta = greedy(MODEL), greedy(f"{MODEL}:alpha"), greedy(f"{MODEL}:beta")
    assert len({base, alpha, beta}) == 3
    assert greedy("alpha") == alpha  # the bare adapter name resolves too


def test_unknown_adapter_is_openai_shaped_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model=f"{MODEL}:gamma", messages=MESSAGES, max_tokens=4)
    body = info.value.body
    assert isinstance(body, dict)
    assert body["code"] == "model_not_found" and body["param"] == "model"
    assert "gamma" in body["message"]


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=MESSAGES, max_tokens=4)


def test_models_lists_base_and_adapters(client: openai.OpenAI) -> None:
    models = {m.id: m for m in client.models.list().data}
    assert {MODEL, f"{MODEL}:alpha", f"{MODEL}:beta"} <= set(models)
    assert models[f"{MODEL}:alpha"].model_extra["parent"] == MODEL  # type: ignore[index]
    assert models[MODEL].model_extra["parent"] is None  # type: ignore[index]
    assert client.models.retrieve(f"{MODEL}:beta").id == f"{MODEL}:beta"


def test_raw_sse_framing_is_openai_like(gateway: GatewayProcess) -> None:
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 6, "stream": True, "temperature": 0}
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = b"".join(response.iter_bytes()).decode()
    assert raw.endswith("data: [DONE]\n\n")
    events = raw.split("\n\n")[:-1]
    for event in events:
        for line in event.split("\n"):
            assert line.startswith("data: ") or line.startswith(": "), f"unexpected SSE line {line!r}"
            assert not line.startswith(("id:", "retry:", "event:"))
    payloads = [json.loads(e[6:]) for e in events if e.startswith("data: {")]
    assert payloads[0]["choices"][0]["delta"]["role"] == "assistant"
    assert {p["object"] for p in payloads} == {"chat.completion.chunk"}
    assert len({p["id"] for p in payloads}) == 1
    assert payloads[-1]["choices"][0]["finish_reason"] in {"stop", "length"}


def test_health_endpoints(gateway: GatewayProcess) -> None:
    assert httpx.get(gateway.url + "/health").json() == {"status": "ok"}
    ready = httpx.get(gateway.url + "/health/ready")
    assert ready.status_code == 200 and MODEL in ready.json()["models"]


@pytest.mark.anyio
async def test_async_sdk_stream_and_non_stream(async_client: openai.AsyncOpenAI) -> None:
    args = dict(model=MODEL, messages=MESSAGES, max_tokens=10, temperature=0, extra_body={"ignore_eos": True})
    whole = await async_client.chat.completions.create(**args)  # type: ignore[call-overload]
    stream = await async_client.chat.completions.create(stream=True, **args)  # type: ignore[call-overload]
    parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    assert "".join(parts) == whole.choices[0].message.content


@pytest.mark.anyio
async def test_sixteen_concurrent_streams_keep_their_content_apart(async_client: openai.AsyncOpenAI) -> None:
    async def run(seed: int, stream: bool) -> str:
        args = dict(
            model=MODEL if seed % 2 else f"{MODEL}:alpha",
            messages=MESSAGES,
            max_tokens=24,
            temperature=1.0,
            seed=seed,
            extra_body={"ignore_eos": True},
        )
        if not stream:
            reply = await async_client.chat.completions.create(**args)  # type: ignore[call-overload]
            return reply.choices[0].message.content or ""
        chunks = await async_client.chat.completions.create(stream=True, **args)  # type: ignore[call-overload]
        return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])

    seeds = range(100, 116)
    streamed = await asyncio.gather(*(run(s, True) for s in seeds))
    solo = [await run(s, False) for s in seeds]
    assert streamed == solo
    assert len(set(solo)) == 16


def _cancel_counts(triton: TritonServer) -> tuple[float, float]:
    return (
        read_metric(triton.metrics_url, "tiny_llm_requests_cancelled_total"),
        read_metric(triton.metrics_url, "tiny_llm_requests_in_flight"),
    )


@pytest.mark.parametrize("n", [1, 3])
def test_client_disconnect_mid_stream_cancels_triton_work(
    gateway: GatewayProcess, triton: TritonServer, n: int
) -> None:
    # n > 1 is n Triton requests (one per choice): every one of them is cancelled.
    cancelled_before, _ = _cancel_counts(triton)
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 1500, "stream": True, "ignore_eos": True, "n": n}
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, timeout=30) as response:
        lines = response.iter_lines()
        received = [next(lines) for _ in range(6)]
        assert any(line.startswith("data: {") for line in received)
        assert _cancel_counts(triton)[1] >= 1  # the model is generating for us right now
    # leaving the block closed the connection mid-stream
    assert wait_for(lambda: _cancel_counts(triton) == (cancelled_before + n, 0), timeout=5), _cancel_counts(triton)


@pytest.mark.parametrize("n", [1, 3])
def test_client_disconnect_on_non_streaming_request_cancels_triton_work(
    gateway: GatewayProcess, triton: TritonServer, n: int
) -> None:
    # The client leaves once the model is generating for it, not after a fixed time: a fast
    # machine generates 1500 tokens within a second, and the answer was then already complete.
    cancelled_before, _ = _cancel_counts(triton)
    body = json.dumps({"model": MODEL, "messages": MESSAGES, "max_tokens": 1500, "ignore_eos": True, "n": n})
    address = httpx.URL(gateway.url)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {address.host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection((address.host, address.port), timeout=10) as connection:
        connection.sendall(head.encode() + body.encode())
        assert wait_for(lambda: _cancel_counts(triton)[1] >= n, timeout=10, interval=0.01), _cancel_counts(triton)
        connection.setblocking(False)
        with pytest.raises(BlockingIOError):  # nothing answered yet: the client leaves a request still running
            connection.recv(1)
    assert wait_for(lambda: _cancel_counts(triton) == (cancelled_before + n, 0), timeout=5), _cancel_counts(triton)
