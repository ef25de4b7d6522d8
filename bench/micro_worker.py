"""``micro``'s measuring process: one tree's app, in process, on a real Triton.

Run as a script with the tree on ``PYTHONPATH`` (``micro`` does it), so ``import gateway`` is that
tree's. It uses public entry points only (``Settings``, ``create_app``, the ASGI app and its
lifespan, ``gateway.tools.make_parser``), so it measures any tree that has them.

Streamed chat requests go one at a time through the ASGI app: Triton's HTTP/2 bytes in, SSE
frames out, with no HTTP server, client socket or client process in the way. The figure is the
event loop thread's CPU (``time.thread_time``) per token: requests of N tokens less requests of
one token, over N - 1. Every token is a wake-up, as at c = 1. Prints one JSON line.

With ``"mode": "agents"`` in its spec it measures ``agents``' bodies instead (``bench/agents.py``):
the CPU per request of each API's coding-agent body with and without tools, or their profile.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHAT_PATH = "/v1/chat/completions"


@dataclass(frozen=True, slots=True)
class Answer:
    """One request through the ASGI app: the event loop thread's CPU seconds, every thread's
    (token counts run on threads), wall seconds, the status and the body."""

    thread_cpu: float
    process_cpu: float
    wall: float
    status: int
    body: bytes


async def post(app: Any, body: bytes, path: str = CHAT_PATH) -> Answer:
    """One streamed request through the ASGI app, timed."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
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
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await finished.wait()  # the client stays until the answer ends
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            out.append(message.get("body", b""))
            if not message.get("more_body", False):
                finished.set()

    thread, process, wall = time.thread_time(), time.process_time(), time.perf_counter()
    await app(scope, receive, send)
    return Answer(
        time.thread_time() - thread,
        time.process_time() - process,
        time.perf_counter() - wall,
        status,
        b"".join(out),
    )


async def one_request(app: Any, body: bytes) -> tuple[float, bytes]:
    """Thread CPU seconds of one streamed chat request through the ASGI app, and its body."""
    answer = await post(app, body)
    return answer.thread_cpu, answer.body


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


AGENT_ENDS = {
    "messages": b"event: message_stop\n",
    "responses": b"event: response.completed\n",
    "chat": b"data: [DONE]\n",
}
"""Each API's last event, which a finished stream has."""


def agent_bodies() -> Any:
    """``bench/agent_bodies.py`` beside this script, not the variant's ``bench``: every variant
    gets the same bodies, and a tree from before the module measures too."""
    import importlib.util

    loaded = importlib.util.spec_from_file_location("bench_agent_bodies", Path(__file__).with_name("agent_bodies.py"))
    if loaded is None or loaded.loader is None:
        raise RuntimeError("bench/agent_bodies.py is missing")
    module = importlib.util.module_from_spec(loaded)
    sys.modules[loaded.name] = module  # dataclasses look their module up
    loaded.loader.exec_module(module)
    return module


class AgentRequests:
    """Sends ``agent_bodies``' requests, each with a new serial number, and checks each answer."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.module = agent_bodies()
        self.bodies = self.module.Bodies()
        self.serial = 0

    @property
    def keys(self) -> list[tuple[str, str]]:
        return [(api, shape) for api in self.module.API_PATHS for shape in self.module.SHAPES]

    def body(self, api: str, shape: str) -> bytes:
        self.serial += 1
        return bytes(self.bodies.request(api, shape, self.serial))

    async def send(self, api: str, shape: str, body: bytes | None = None) -> Answer:
        answer = await post(self.app, body or self.body(api, shape), self.module.API_PATHS[api])
        self.check(api, shape, answer)
        return answer

    def check(self, api: str, shape: str, answer: Answer) -> None:
        if answer.status != 200 or self.module.ANSWER.encode() not in answer.body or AGENT_ENDS[api] not in answer.body:
            raise RuntimeError(f"{api} {shape}: status {answer.status}, {answer.body[-600:]!r}")


async def agent_costs(app: Any, requests: int) -> dict[str, Any]:
    """µs per request of each API's bodies three ways (``agent_bodies.SHAPES``), alternated
    request by request (the order reversed every other pass): medians of ``requests`` each."""
    sender = AgentRequests(app)
    keys = sender.keys
    for api, shape in keys * 2:  # first-use costs: the template, the count cache's first fill
        await sender.send(api, shape)
    samples: dict[tuple[str, str], list[Answer]] = {key: [] for key in keys}
    for i in range(requests):
        for api, shape in keys if i % 2 == 0 else keys[::-1]:
            samples[api, shape].append(await sender.send(api, shape))
    out: dict[str, Any] = {}
    for (api, shape), answers in samples.items():
        out.setdefault(api, {})[shape] = {
            "us_thread": statistics.median(a.thread_cpu for a in answers) * 1e6,
            "us_process": statistics.median(a.process_cpu for a in answers) * 1e6,
            "us_wall": statistics.median(a.wall for a in answers) * 1e6,
        }
    return {"agents": out, "agent_sizes": sender.bodies.stats()}


def _where(file: str, line: int, name: str) -> str:
    """A profile entry's name: the path from the package down, or the built-in's."""
    if file == "~":
        return name
    if "/site-packages/" in file:
        file = file.split("/site-packages/", 1)[1]
    elif "/lib/python3" in file:
        file = file.split("/lib/python3", 1)[1].split("/", 1)[1]
    else:
        for package in ("gateway", "bench"):
            if f"/{package}/" in file:
                file = f"{package}/" + file.split(f"/{package}/", 1)[1]
                break
    return f"{file}:{line}({name})"


def _area(file: str, name: str) -> str:
    """Where self time is spent, coarsely: a gateway subpackage, a library, a built-in's owner."""
    if file == "~":
        owner = name.split(" of '", 1)[1].split("'", 1)[0] if " of '" in name else name.strip("<>")
        return f"C: {owner}"
    if "/gateway/" in file:
        parts = file.split("/gateway/", 1)[1].split("/")
        return "gateway/" + (parts[0] if len(parts) > 1 else parts[0].removesuffix(".py"))
    for marker in ("/site-packages/",):
        if marker in file:
            return file.split(marker, 1)[1].split("/", 1)[0].removesuffix(".py")
    if "/bench/" in file:
        return "bench (the ASGI client)"
    if file.startswith("<template"):
        return "jinja2 (the chat template)"
    if "/lib/python3" in file:
        return "stdlib " + file.split("/lib/python3", 1)[1].split("/", 2)[1].removesuffix(".py")
    return file


PROFILED = ("no tools", "tools")
"""The two bodies the profile compares: what the tools add is the difference."""


def profile_summary(profiles: dict[str, Any], requests: int, top: int) -> dict[str, Any]:
    """One API's profiles (``PROFILED``) as µs per request: the total, self time by area, and the
    entries with the most self, cumulative and added cumulative time with tools, each row
    ``[where, calls, self µs, cumulative µs, the same figure without tools]``."""
    import pstats

    tables: dict[str, dict[str, tuple[float, float, float]]] = {}
    areas: dict[str, dict[str, float]] = {}
    totals = {}
    for shape, profile in profiles.items():
        stats: Any = pstats.Stats(profile)
        totals[shape] = stats.total_tt / requests * 1e6
        table = tables[shape] = {}
        for (file, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items():
            table[_where(file, line, name)] = (calls / requests, tottime / requests * 1e6, cumtime / requests * 1e6)
            area = areas.setdefault(_area(file, name), dict.fromkeys(PROFILED, 0.0))
            area[shape] += tottime / requests * 1e6
    with_tools, without = tables["tools"], tables["no tools"]
    nothing = (0.0, 0.0, 0.0)

    def rows(key: int, ranked: list[str]) -> list[list[Any]]:
        return [[where, *with_tools[where], without.get(where, nothing)[key]] for where in ranked[:top]]

    def added(key: int) -> list[str]:
        return sorted(with_tools, key=lambda w: -(with_tools[w][key] - without.get(w, nothing)[key]))

    return {
        "requests": requests,
        "us_per_request": totals,
        "areas": sorted(([a, t["tools"], t["no tools"]] for a, t in areas.items()), key=lambda r: -r[1]),
        "by_self": rows(1, sorted(with_tools, key=lambda w: -with_tools[w][1])),
        "by_cumulative": rows(2, sorted(with_tools, key=lambda w: -with_tools[w][2])),
        "by_self_added": rows(1, added(1)),
        "by_cumulative_added": rows(2, added(2)),
    }


async def agent_profile(app: Any, requests: int, top: int = 40) -> dict[str, Any]:
    """cProfile of ``requests`` of each API's body with tools and as many without, alternated,
    on the event loop thread (a count run on a thread does not show), the bodies built before.
    Per API: self time by area, and the entries with the most self and the most cumulative time
    with tools, each beside its figure without (µs per request)."""
    import cProfile

    sender = AgentRequests(app)
    out: dict[str, Any] = {}
    for api in sender.module.API_PATHS:
        for shape in PROFILED * 3:
            await sender.send(api, shape)
        profiles = {shape: cProfile.Profile() for shape in PROFILED}
        bodies = [(shape, sender.body(api, shape)) for _ in range(requests) for shape in PROFILED]
        for shape, body in bodies:
            profiles[shape].enable()
            answer = await post(app, body, sender.module.API_PATHS[api])
            profiles[shape].disable()
            sender.check(api, shape, answer)
        out[api] = profile_summary(profiles, requests, top)
    return out


async def measure_agents(spec: dict[str, Any]) -> dict[str, Any]:
    """``agents``' figures: the bodies' costs, or (``profile``) the profile instead."""
    import gateway
    from gateway.app import create_app
    from gateway.config import Settings

    files = {"scripted": {"tool_call_parser": spec["tool_parser"]}} if spec.get("tool_parser") else {}
    settings = Settings(
        triton_url=spec["triton_url"],
        model_repository=[Path(p) for p in spec["repositories"]],
        model_files=files,  # type: ignore[arg-type]
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        try:
            from gateway.server import tune_gc
        except ImportError:
            pass
        else:
            tune_gc()  # as the server does once it serves
        if spec.get("profile"):
            result = {"profile": await agent_profile(app, spec["profile"])}
        else:
            result = await agent_costs(app, spec["requests"])
    return {"package": gateway.__file__, **result}


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
        result = runner.run(measure_agents(spec) if spec.get("mode") == "agents" else measure(spec))
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
