"""``micro``'s measuring process: one tree's app, in process, on a real Triton.

Run as a script with the tree on ``PYTHONPATH`` (``micro`` does it), so ``import gateway`` is that
tree's. It uses public entry points only (``Settings``, ``create_app``, the ASGI app and its
lifespan, ``gateway.tools.make_parser``), so it measures any tree that has them.

Streamed chat requests go one at a time through the ASGI app: Triton's HTTP/2 bytes in, SSE
frames out, with no HTTP server, client socket or client process in the way. The figure is the
event loop thread's CPU (``time.thread_time``) per token: requests of N tokens less requests of
one token, over N - 1. Every token is a wake-up, as at c = 1. Prints one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


async def one_request(app: Any, body: bytes) -> tuple[float, bytes]:
    """Thread CPU seconds of one streamed request through the ASGI app, and its body."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    finished = asyncio.Event()
    sent = False
    out: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await finished.wait()  # the client stays until the answer ends
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            out.append(message.get("body", b""))
            if not message.get("more_body", False):
                finished.set()

    started = time.thread_time()
    await app(scope, receive, send)
    return time.thread_time() - started, b"".join(out)


async def per_token(app: Any, model: str, prompt: str, tokens: int, requests: int, *, said: int = 1) -> dict[str, Any]:
    """``said``: how many times each token's text is in the stream (a reasoning delta says it
    under two names)."""

    def body(n: int) -> bytes:
        messages = [{"role": "user", "content": prompt}]
        return json.dumps({"model": model, "messages": messages, "max_tokens": n, "stream": True}).encode()

    long_body, short_body = body(tokens), body(1)
    for _ in range(3):  # first-use costs
        await one_request(app, long_body)
    long, short = [], []
    for _ in range(requests):
        cpu, text = await one_request(app, long_body)
        if text.count(b"tok ") != tokens * said or not text.endswith(b"data: [DONE]\n\n"):
            raise RuntimeError(f"unexpected stream: {text[-300:]!r}")
        long.append(cpu)
        short.append((await one_request(app, short_body))[0])
    return {
        "us_per_token": (statistics.median(long) - statistics.median(short)) / (tokens - 1) * 1e6,
        "us_per_request": statistics.median(short) * 1e6,
    }


PROSE = "The weather in Paris is mild today, with a light breeze from the west. " * 8
PIECES = [PROSE[i : i + 4] for i in range(0, len(PROSE), 4)]
"""Plain prose in 4-character pieces, about a token each."""


def us_per_feed(make_feed: Callable[[], Callable[[str], object]], rounds: int = 5, repeat: int = 100) -> float:
    """The best of ``rounds`` of µs per ``feed`` of ``PIECES``, each round ``repeat`` fresh
    parsers from ``make_feed`` (which sets a parser up and returns its ``feed``; not timed)."""
    best = float("inf")
    for _ in range(rounds):
        elapsed = 0
        for _ in range(repeat):
            feed = make_feed()
            start = time.perf_counter_ns()
            for piece in PIECES:
                feed(piece)
            elapsed += time.perf_counter_ns() - start
        best = min(best, elapsed / (repeat * len(PIECES)) / 1000)
    return best


def tool_parsers() -> dict[str, float]:
    """µs per ``feed`` of plain prose, per parser: what a request that offers tools pays per
    token when the model answers in text."""
    try:
        from gateway.tools import PARSERS, make_parser
    except ImportError:
        return {}
    tools = frozenset({"get_weather"})
    return {name: us_per_feed(lambda name=name: make_parser(name, tools).feed) for name in PARSERS}


STREAMED_OPENINGS = {
    "hermes": '<tool_call>{"name": "get_weather", "arguments": {"text": "',
    "mistral": '[TOOL_CALLS]get_weather[ARGS]{"text": "',
    "forced_named": '{"text": "',
    "qwen3_coder": "<tool_call>\n<function=get_weather>\n<parameter=text>\n",
}
"""Each streaming family's call, opened up to a string argument's first character."""


def streamed_arguments() -> dict[str, float]:
    """µs per ``feed`` of a string argument while a call streams it, per format: what each
    token of a long argument (code a tool writes) costs; empty where arguments do not stream."""
    from gateway.tools import make_parser

    try:
        from gateway.tools.argstream import ArgumentStream  # noqa: F401
    except ImportError:
        return {}
    out = {}
    for name, opening in STREAMED_OPENINGS.items():

        def make_feed(name: str = name, opening: str = opening) -> Callable[[str], object]:
            parser = make_parser(name, frozenset({"get_weather"}))
            parser.feed(opening)
            return parser.feed

        out[name] = us_per_feed(make_feed)
    return out


def reasoning_parsers() -> dict[str, float]:
    """µs per ``feed`` of prose inside the reasoning, per parser: what a reasoning model's
    request pays per token while it thinks."""
    try:
        from gateway.reasoning.registry import REASONING_PARSERS, make_reasoning_parser
    except ImportError:
        return {}
    openings = {"qwen3": "<think>", "mistral": "[THINK]", "granite": "Here is my thought process:"}
    openings["openai"] = "<|channel|>analysis<|message|>"

    def thinking(name: str) -> Callable[[str], object]:
        parser = make_reasoning_parser(name)
        parser.feed(openings.get(name, ""))
        return parser.feed

    return {name: us_per_feed(lambda name=name: thinking(name)) for name in REASONING_PARSERS}


async def measure(spec: dict[str, Any]) -> dict[str, Any]:
    import gateway
    from gateway.app import create_app
    from gateway.config import Settings

    repositories = [Path(p) for p in spec["repositories"]]
    settings = Settings(triton_url=spec["triton_url"], model_repository=repositories)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        process_started = time.process_time()
        result = await per_token(app, "firehose", spec["prompt"], spec["tokens"], spec["requests"])
        # Every thread's CPU: a traced app's exporter thread counts too (the loop thread's figures
        # do not see it). 3 warm-up requests, then ``requests`` long and ``requests`` short ones.
        process = time.process_time() - process_started
        result["process_us_per_request"] = process / (3 + 2 * spec["requests"]) * 1e6
    extra: dict[str, Any] = {}
    reasoning = reasoning_parsers()
    if reasoning:  # the same stream, all of it reasoning (deepseek_r1: the prompt opened it)
        thinking = Settings(
            triton_url=spec["triton_url"],
            model_repository=repositories,
            model_files={"firehose": {"reasoning_parser": "deepseek_r1"}},  # type: ignore[dict-item]
        )
        app = create_app(thinking)
        async with app.router.lifespan_context(app):
            split = await per_token(app, "firehose", spec["prompt"], spec["tokens"], spec["requests"], said=2)
        extra["us_per_token_reasoning"] = split["us_per_token"]
    return {
        "package": gateway.__file__,
        **result,
        **extra,
        "tool_parsers_us_per_feed": tool_parsers(),
        "reasoning_parsers_us_per_feed": reasoning,
        "streamed_arguments_us_per_feed": streamed_arguments(),
        "contracts_us_per_token": contracts(),
    }


def contracts() -> dict[str, float]:
    """Each backend contract's read-and-assemble µs per token (``bench/contracts.py``), where the
    tree has it."""
    try:
        from bench.contracts import contracts_us_per_token
    except ImportError:
        return {}
    return contracts_us_per_token()


def main() -> None:
    import uvloop

    spec = json.loads(sys.argv[1])
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        result = runner.run(measure(spec))
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
