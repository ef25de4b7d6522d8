"""SSE on the wire: frames byte for byte, one send per frame, bare-comment pings, disconnects."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.http.sse import DATA_FRAMING, DONE_FRAME, PING_FRAME, data_frame, sse_response

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_frames_byte_exact() -> None:
    assert data_frame(b'{"a":1}') == b'data: {"a":1}\n\n'
    assert DATA_FRAMING == (b"data: ", b"\n\n")
    assert DONE_FRAME == b"data: [DONE]\n\n"
    assert PING_FRAME == b": ping\n\n"  # a bare comment: no id:, no retry:, no event name


class Frames:
    """Scripted frames, with an optional pause before each; records ``aclose``."""

    def __init__(self, frames: list[bytes], pause: float = 0.0, *, says_last: bool = False) -> None:
        self.frames = list(frames)
        self.pause = pause
        self.closed = False
        self.says_last = says_last
        self.ended = False

    def __aiter__(self) -> Frames:
        return self

    async def __anext__(self) -> bytes:
        if not self.frames:
            raise StopAsyncIteration
        await asyncio.sleep(self.pause)
        frame = self.frames.pop(0)
        self.ended = self.says_last and not self.frames
        return frame

    async def aclose(self) -> None:
        self.closed = True


async def serve(
    frames: Frames, *, ping_interval: float = 10.0, disconnect_after: float | None = None
) -> list[dict[str, Any]]:
    """Run the response; returns the messages it sent."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if disconnect_after is None:
            await asyncio.Event().wait()
        await asyncio.sleep(disconnect_after or 0)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    response = sse_response(frames, ping_interval=ping_interval, headers={"X-Extra": "1"})  # type: ignore[arg-type]
    await response({"type": "http", "state": {}}, receive, send)  # type: ignore[arg-type]
    return sent


async def test_each_frame_is_one_send_then_an_empty_last_body() -> None:
    frames = Frames([b"data: a\n\n", b"data: b\n\n"])
    sent = await serve(frames)
    start, *bodies = sent
    assert start["type"] == "http.response.start" and start["status"] == 200
    headers = dict(start["headers"])
    assert headers[b"content-type"] == b"text/event-stream; charset=utf-8"
    assert headers[b"cache-control"] == b"no-cache" and headers[b"x-accel-buffering"] == b"no"
    assert headers[b"x-extra"] == b"1"
    assert [(m["body"], m["more_body"]) for m in bodies] == [
        (b"data: a\n\n", True),
        (b"data: b\n\n", True),
        (b"", False),
    ]
    assert frames.closed


def test_extra_headers_follow_the_streams_own_and_a_lowercase_name_replaces_one_in_its_place() -> None:
    frames = Frames([])
    own = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
    own += [(b"x-accel-buffering", b"no"), (b"connection", b"keep-alive")]
    plain = sse_response(frames, ping_interval=1.0, headers={"X-Gateway-Route": "prefix", "x-b": "2"})  # type: ignore[arg-type]
    assert plain.raw_headers == [*own, (b"x-gateway-route", b"prefix"), (b"x-b", b"2")]
    replaced = sse_response(frames, ping_interval=1.0, headers={"x-b": "2", "cache-control": "no-store"})  # type: ignore[arg-type]
    assert replaced.raw_headers == [own[0], (b"cache-control", b"no-store"), *own[2:], (b"x-b", b"2")]
    assert sse_response(frames, ping_interval=1.0).raw_headers == own  # type: ignore[arg-type]


async def test_a_last_frame_said_so_ends_the_body_itself() -> None:
    frames = Frames([b"data: a\n\n", DONE_FRAME], says_last=True)
    sent = await serve(frames)
    assert [(m["body"], m["more_body"]) for m in sent[1:]] == [(b"data: a\n\n", True), (DONE_FRAME, False)]
    assert frames.closed


async def test_an_idle_stream_gets_bare_comment_pings() -> None:
    sent = await serve(Frames([b"data: late\n\n"], pause=0.35), ping_interval=0.1)
    bodies = [m["body"] for m in sent[1:]]
    assert bodies[-2:] == [b"data: late\n\n", b""]
    pings = bodies[:-2]
    assert len(pings) >= 2 and set(pings) == {PING_FRAME}


async def test_a_busy_stream_sends_no_pings() -> None:
    sent = await serve(Frames([b"data: x\n\n"] * 6, pause=0.03), ping_interval=0.1)
    assert PING_FRAME not in [m["body"] for m in sent[1:]]


async def test_client_disconnect_ends_the_stream_quietly_and_closes_the_frames() -> None:
    frames = Frames([b"data: a\n\n", b"data: never\n\n"], pause=0.2)
    sent = await asyncio.wait_for(serve(frames, disconnect_after=0.3), 2.0)
    assert frames.closed
    assert b"data: never\n\n" not in [m.get("body") for m in sent]


class Produced:
    """Frames as ``StreamFrames`` makes them from a call's batches: a producer adds a token every
    ``gap`` seconds, and each ``__anext__`` takes everything made since the last one (waiting
    when nothing is there)."""

    def __init__(self, tokens: int, gap: float) -> None:
        self.tokens, self.gap = tokens, gap
        self.made: list[bytes] = []
        self.taken = 0
        self.ready = asyncio.Event()
        self.producer: asyncio.Task[None] | None = None
        self.ended = False

    async def _produce(self) -> None:
        for i in range(self.tokens):
            await asyncio.sleep(self.gap)
            self.made.append(b"data: %d\n\n" % i)
            self.ready.set()

    def __aiter__(self) -> Produced:
        return self

    async def __anext__(self) -> bytes:
        if self.producer is None:
            self.producer = asyncio.ensure_future(self._produce())
        while self.taken == len(self.made):
            if self.taken == self.tokens:
                raise StopAsyncIteration
            self.ready.clear()
            await self.ready.wait()
        batch, self.taken = b"".join(self.made[self.taken :]), len(self.made)
        return batch

    async def aclose(self) -> None:
        if self.producer is not None:
            self.producer.cancel()


async def serve_produced(frames: Produced, coalesce: float) -> list[bytes]:
    sent: list[bytes] = []

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()
        return {}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and message["body"]:
            sent.append(message["body"])

    response = sse_response(frames, ping_interval=10.0, coalesce_interval=coalesce)  # type: ignore[arg-type]
    await response({"type": "http", "state": {}}, receive, send)  # type: ignore[arg-type]
    return sent


async def test_a_fast_stream_is_written_at_most_once_per_coalesce_interval() -> None:
    frames = Produced(tokens=200, gap=0.0005)
    loop = asyncio.get_running_loop()
    started = loop.time()
    writes = await serve_produced(frames, coalesce=0.02)
    elapsed = loop.time() - started
    assert b"".join(writes) == b"".join(b"data: %d\n\n" % i for i in range(200))  # every byte, in order
    # The first write goes at once; after it, one write per interval at most.
    assert len(writes) <= elapsed / 0.02 + 2
    assert len(writes) < 200 / 4


async def test_a_stream_slower_than_the_interval_is_written_token_by_token() -> None:
    frames = Produced(tokens=4, gap=0.2)  # 0.2 s apart: a busy machine's stall will not join two
    writes = await serve_produced(frames, coalesce=0.01)
    assert writes == [b"data: %d\n\n" % i for i in range(4)]


async def test_a_client_leaving_while_a_fast_stream_waits_out_its_interval_ends_it_at_once() -> None:
    frames = Produced(tokens=1000, gap=0.001)

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(0.05)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        pass

    response = sse_response(frames, ping_interval=10.0, coalesce_interval=5.0)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(response({"type": "http", "state": {}}, receive, send), 2.0)  # type: ignore[arg-type]
    assert loop.time() - started < 2.0  # not the 5 s interval: the watch cancelled the wait
    await asyncio.sleep(0)  # the producer's cancellation runs
    assert frames.producer is not None and frames.producer.cancelled()  # closed: Triton's call would be cancelled
