"""A real nginx between the gateway and Triton drains gracefully: no stream may notice.

``nginx -s reload`` and ``nginx -s quit`` send one HTTP/2 GOAWAY naming the last stream nginx took
and then let every stream up to it run to its end (frames in ``tests/integration/nginx.py``). The
gateway's streams to Triton ride on that connection, so every SSE stream in flight must still end
with all its tokens, its finish reason and ``[DONE]``, in an HTTP body that ends properly (the
chunked terminator is there: httpx reads to the end without a protocol error), and new requests
must go to a new connection. A control with grpc.aio through the same nginx shows the proxy
itself loses nothing, so a failure here is the gateway's.

The streams replay a script (``scripted`` test model) so that each one carries known, distinct
text: 30 pieces 50 ms apart, about 1.5 s, long enough that the signal lands mid-stream.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import tritonclient.grpc.aio as grpcclient

from gateway.triton_launcher import TritonServer, free_port
from tests.integration.conftest import (
    TEST_REPOSITORY,
    GatewayProcess,
    read_metric,
    start_gateway,
    stop_gateway,
    stop_in_background,
    wait_for,
)
from tests.integration.nginx import Nginx

SCRIPTED = "scripted"
STREAMS = 32
PIECES = 30
SDK_STREAMS = 8
"""How many of the ``STREAMS`` go through the openai SDK (chat) instead of raw httpx (completions)."""


def script(stream: int, pieces: int = PIECES, delay: float = 0.05) -> tuple[str, str]:
    """A scripted model prompt and the exact text it streams back."""
    texts = [f"s{stream}p{piece} " for piece in range(pieces)]
    return json.dumps({"responses": [{"utf8": [t], "delay": delay} for t in texts]}), "".join(texts)


@dataclass
class Outcome:
    """What one client saw of its stream."""

    expected: str
    text: str = ""
    finish_reason: str | None = None
    done: bool = False
    errors: list[dict[str, object]] = field(default_factory=list)
    failure: str | None = None
    """The exception that ended the read, if any (an incomplete body shows up here)."""

    @property
    def ok(self) -> bool:
        return (
            self.failure is None
            and not self.errors
            and self.done
            and self.text == self.expected
            and self.finish_reason == "stop"
        )

    def summary(self) -> str:
        got = f"{len(self.text)}/{len(self.expected)} chars, finish={self.finish_reason}, done={self.done}"
        return f"{got}, errors={self.errors}, failure={self.failure}"


async def read_sse(http: httpx.AsyncClient, prompt: str, outcome: Outcome, started: Callable[[], None]) -> None:
    """Raw SSE over httpx: every line up to the end of the body, which must end cleanly."""
    body = {"model": SCRIPTED, "prompt": prompt, "stream": True}
    try:
        async with http.stream("POST", "/v1/completions", json=body) as response:
            if response.status_code != 200:
                outcome.failure = f"HTTP {response.status_code}: {(await response.aread())[:300]!r}"
                return
            async for line in response.aiter_lines():
                if outcome.done and line:
                    outcome.failure = f"data after [DONE]: {line[:100]}"
                if line == "data: [DONE]":
                    outcome.done = True
                elif line.startswith("data: "):
                    event = json.loads(line[6:])
                    if "error" in event:
                        outcome.errors.append(event["error"])
                    for choice in event.get("choices") or []:
                        if choice["text"] and not outcome.text:
                            started()
                        outcome.text += choice["text"]
                        outcome.finish_reason = choice["finish_reason"] or outcome.finish_reason
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        outcome.failure = repr(exc)


async def read_sdk(sdk: openai.AsyncOpenAI, prompt: str, outcome: Outcome, started: Callable[[], None]) -> None:
    """The openai SDK's chat stream (the script rides in the user message); the SDK stops at [DONE]."""
    try:
        stream = await sdk.chat.completions.create(
            model=SCRIPTED, messages=[{"role": "user", "content": prompt}], stream=True
        )
        async for chunk in stream:
            for choice in chunk.choices:
                if choice.delta.content and not outcome.text:
                    started()
                outcome.text += choice.delta.content or ""
                outcome.finish_reason = choice.finish_reason or outcome.finish_reason
        outcome.done = True
    except Exception as exc:  # noqa: BLE001 - whatever the SDK raised is the finding
        outcome.failure = repr(exc)


async def streams_through(
    gateway: GatewayProcess,
    event: Callable[[], Awaitable[None]],
    count: int = STREAMS,
    pieces: int = PIECES,
    sdk_streams: int = SDK_STREAMS,
) -> list[Outcome]:
    """Start ``count`` streams, run ``event`` once every one has its first text, return what each saw."""
    running = asyncio.Event()
    first = 0

    def started() -> None:
        nonlocal first
        first += 1
        if first == count:
            running.set()

    outcomes, work = [], []
    limits = httpx.Limits(max_connections=count + 8)
    async with (
        httpx.AsyncClient(base_url=gateway.url, timeout=30, limits=limits) as http,
        openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=30) as sdk,
    ):
        for i in range(count):
            prompt, expected = script(i, pieces)
            outcome = Outcome(expected)
            outcomes.append(outcome)
            read = (
                read_sdk(sdk, prompt, outcome, started) if i < sdk_streams else read_sse(http, prompt, outcome, started)
            )
            work.append(asyncio.create_task(read))
        try:
            await asyncio.wait_for(running.wait(), timeout=15)
        except TimeoutError:
            pass  # the assertion below on the outcomes says what went wrong
        else:
            await event()
        await asyncio.wait_for(asyncio.gather(*work), timeout=60)
    assert running.is_set(), f"only {first}/{count} streams started: {[o.summary() for o in outcomes[:3]]}"
    return outcomes


def assert_all_finished(gateway: GatewayProcess, outcomes: list[Outcome]) -> None:
    failed = [(i, o.summary()) for i, o in enumerate(outcomes) if not o.ok]
    events = sum(bool(o.errors) for o in outcomes)
    cut = [(i, o.failure) for i, o in enumerate(outcomes) if o.failure and i >= SDK_STREAMS]
    assert not failed, (
        f"{len(failed)}/{len(outcomes)} streams broken ({events} raw streams with an error event, "
        f"{len(cut)} raw reads failed: {cut[:2]}); first: {failed[:3]}"
    )
    assert_nothing_in_flight(gateway)


def assert_nothing_in_flight(gateway: GatewayProcess) -> None:
    """Every stream that ended, however it ended, gave its slot back."""
    metrics = gateway.url + "/metrics"
    assert wait_for(lambda: read_metric(metrics, "gateway_requests_running") == 0, timeout=5), (
        f"{read_metric(metrics, 'gateway_requests_running'):g} request(s) still running in the gateway"
    )


def assert_serves(gateway: GatewayProcess, stream: int = 99) -> None:
    """A new streaming request gets its whole text, and a plain one its JSON answer."""
    prompt, expected = script(stream, pieces=3, delay=0.0)
    outcome = Outcome(expected)

    async def one() -> None:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=15) as http:
            await read_sse(http, prompt, outcome, lambda: None)

    asyncio.run(one())
    assert outcome.ok, outcome.summary()
    plain = httpx.post(gateway.url + "/v1/completions", json={"model": SCRIPTED, "prompt": prompt}, timeout=15)
    assert plain.status_code == 200 and plain.json()["choices"][0]["text"] == expected, plain.text


@pytest.fixture
def nginx(triton: TritonServer, tmp_path: Path) -> Iterator[Nginx]:
    """nginx on a fresh port in front of the session's Triton."""
    proxy = Nginx(tmp_path / "nginx", free_port(), triton.grpc_url).start()
    yield proxy
    proxy.kill()
    assert not proxy.worker_pids()


@pytest.fixture
def gateway_via(tmp_path: Path) -> Iterator[Callable[[Nginx], GatewayProcess]]:
    started: list[GatewayProcess] = []

    def start(proxy: Nginx) -> GatewayProcess:
        gateway = start_gateway(proxy.url, tmp_path / f"gateway-{len(started)}.log", "--model-refresh-interval", "0.5")
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        stop_gateway(gateway)


def test_reload_lets_every_stream_finish_and_new_requests_work(nginx: Nginx, gateway_via) -> None:  # type: ignore[no-untyped-def]
    gateway = gateway_via(nginx)
    assert_serves(gateway)  # the gateway's connection to nginx is open before the streams start

    async def reload() -> None:
        await asyncio.to_thread(nginx.reload)

    outcomes = asyncio.run(streams_through(gateway, reload))
    assert_all_finished(gateway, outcomes)
    assert nginx.running
    assert_serves(gateway)


def test_quit_lets_every_stream_finish_then_503_then_back(nginx: Nginx, gateway_via) -> None:  # type: ignore[no-untyped-def]
    gateway = gateway_via(nginx)
    assert_serves(gateway)

    async def quit_() -> None:
        await asyncio.to_thread(nginx.quit)

    outcomes = asyncio.run(streams_through(gateway, quit_))
    assert nginx.wait(timeout=10) == 0
    assert_all_finished(gateway, outcomes)
    # Three refusals some way apart: each failed dial makes the next wait longer (0.25, 0.5, 1 s on
    # h2), so the failure is remembered for a second when nginx comes back, and the gateway must
    # not say ready while requests would still fail on it.
    for pause in (0.0, 0.3, 0.6):
        time.sleep(pause)
        started = time.monotonic()
        refused = httpx.post(
            gateway.url + "/v1/completions", json={"model": SCRIPTED, "prompt": script(0, 1)[0]}, timeout=20
        )
        assert time.monotonic() - started < 5, "a request with nothing behind the gateway must fail fast"
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["type"] == "service_unavailable"
    nginx.start()
    assert wait_for(lambda: httpx.get(gateway.url + "/health/ready", timeout=5).status_code == 200, timeout=10)
    assert_serves(gateway)


def test_reload_then_triton_killed_and_restarted_behind_nginx(tmp_path: Path, gateway_via) -> None:  # type: ignore[no-untyped-def]
    """A private Triton (test models only: it starts in about a second) behind its own nginx."""
    port = free_port()
    private = TritonServer(TEST_REPOSITORY, grpc_port=port, log_file=tmp_path / "triton-1.log").start()
    proxy = Nginx(tmp_path / "nginx", free_port(), private.grpc_url).start()
    try:
        gateway = gateway_via(proxy)
        assert_serves(gateway)

        async def reload() -> None:
            await asyncio.to_thread(proxy.reload)

        assert_all_finished(gateway, asyncio.run(streams_through(gateway, reload)))

        async def kill() -> None:
            await asyncio.to_thread(private.kill)

        # Triton vanishes mid-stream: every stream ends with one error event in a complete body. Behind
        # nginx the gateway sees RST_STREAM(INTERNAL_ERROR) (nginx lost its upstream), not a lost
        # connection, so a 500-type error is as right as a 503-type one.
        killed = asyncio.run(streams_through(gateway, kill, count=4, pieces=200, sdk_streams=0))
        for outcome in killed:
            assert outcome.failure is None and not outcome.done, outcome.summary()
            assert len(outcome.errors) == 1 and outcome.errors[0]["message"], outcome.summary()
            assert outcome.errors[0]["type"] in ("service_unavailable", "server_error"), outcome.summary()
            assert outcome.expected.startswith(outcome.text) and outcome.text != outcome.expected
        assert_nothing_in_flight(gateway)
        private.stop()
        private = TritonServer(TEST_REPOSITORY, grpc_port=port, log_file=tmp_path / "triton-2.log").start()
        assert wait_for(lambda: httpx.get(gateway.url + "/health/ready", timeout=5).status_code == 200, timeout=15)
        assert_serves(gateway)
    finally:
        proxy.kill()
        stop_in_background(private)
    assert not proxy.worker_pids()


def test_control_grpc_aio_streams_survive_the_same_reload(nginx: Nginx) -> None:
    """The proxy itself: grpc.aio, every stream on one channel (as the gateway does), the same reload."""

    async def run() -> list[str]:
        client = grpcclient.InferenceServerClient(url=nginx.url)
        running = asyncio.Event()
        seen = [""] * (STREAMS + 1)  # the last one opens after the reload

        async def one(i: int) -> None:
            prompt = script(i)[0]
            text = grpcclient.InferInput("text_input", [1], "BYTES")
            text.set_data_from_numpy(np.array([prompt.encode()], dtype=np.object_))
            stream = grpcclient.InferInput("stream", [1], "BOOL")
            stream.set_data_from_numpy(np.array([True]))

            async def requests():  # type: ignore[no-untyped-def]
                yield {"model_name": SCRIPTED, "inputs": [text, stream], "request_id": f"control-{i}"}

            async for result, error in client.stream_infer(requests()):
                if error is not None:
                    seen[i] += f"<error {error}>"
                    return
                seen[i] += b"".join(result.as_numpy("text_output")).decode()
                if all(seen[:STREAMS]):
                    running.set()

        try:
            work = asyncio.gather(*(one(i) for i in range(STREAMS)))
            await asyncio.wait_for(running.wait(), timeout=15)
            await asyncio.to_thread(nginx.reload)
            await asyncio.wait_for(work, timeout=60)
            await one(STREAMS)  # a new stream after the reload
        finally:
            await client.close()
        return seen

    seen = asyncio.run(run())
    broken = [(i, got) for i, got in enumerate(seen) if got != script(i)[1]]
    assert not broken, f"{len(broken)}/{len(seen)} grpc.aio streams broken: {broken[:3]}"
