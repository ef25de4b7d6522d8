"""``micro``'s measuring process: one tree's app, in process, on a real Triton.

Run as a script with the tree on ``PYTHONPATH`` (``micro`` does it), so ``import gateway`` is that
tree's. It uses public entry points only (``Settings``, ``create_app``, the ASGI app and its
lifespan, ``gateway.tools.make_parser``), so it measures any tree that has them.

Streamed chat requests go one at a time through the ASGI app: Triton's HTTP/2 bytes in, SSE
frames out, with no HTTP server, client socket or client process in the way. Each kind of request
(``FEATURES``: plain, reasoning, tools offered, logprobs, a stop string, continuous usage, a key
with limits) is sent as N-token and one-token streams, the kinds alternated, every answer checked.
The figures are the event loop thread's CPU (``time.thread_time``) of each request and the chunks
each long stream went out in; ``micro`` turns them into µs per token and per request. Prints one
JSON line.

With ``"mode": "instructions"`` it runs under callgrind instead (``bench/instructions.py``): on
the paced ``scripted`` model, each kind's batches of requests counted and dumped apart.

With ``"mode": "agents"`` in its spec it measures ``agents``' bodies instead (``bench/agents.py``):
the CPU per request of each API's coding-agent body with and without tools, or their profile.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
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


async def post(app: Any, body: bytes, path: str = CHAT_PATH, headers: tuple[tuple[bytes, bytes], ...] = ()) -> Answer:
    """One streamed request through the ASGI app, timed; ``headers`` go beside the content type
    and length (an ``authorization`` for a keyed app)."""
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
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *headers,
        ],
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


TOKEN = "tok "
"""What ``firehose`` and the script below send per token."""

SHORT_MARK, LONG_MARK = "SHORT-STREAM", "LONG-STREAM!"
"""Said after the script: the short request's makes the script answer one token. Equally long,
so both requests' prompts are the same size."""

KEY = "bench-micro-key"
"""The keyed app's one API key (its file holds the hash)."""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


@dataclass(frozen=True, slots=True)
class Feature:
    """One kind of streamed chat request, measured beside the plain one in the same process so
    that what it adds is a difference of two figures taken under the same conditions."""

    name: str
    title: str
    """What the report's row says."""
    app: str = "plain"
    """Which app serves it (``APPS``): a feature that needs settings gets an app of its own."""
    body: tuple[tuple[str, Any], ...] = ()
    """Fields added to the plain request's body."""
    headers: tuple[tuple[bytes, bytes], ...] = ()
    scripted: bool = False
    """On the ``scripted`` model even when the others run on ``firehose``: ``firehose`` sends
    ``null`` logprobs, which leave the gateway nothing to convert."""


FEATURES = (
    Feature("plain", "plain"),
    Feature("reasoning", "reasoning (`deepseek_r1`, all of the stream)", app="reasoning"),
    Feature("tools", "tools offered (`hermes`), the model answers prose", app="tools", body=(("tools", TOOLS),)),
    Feature("plain, scripted", "plain, `scripted` model", scripted=True),
    Feature(
        "logprobs",
        "`logprobs`, `top_logprobs: 2` (`scripted` model)",
        body=(("logprobs", True), ("top_logprobs", 2)),
        scripted=True,
    ),
    Feature("stop", "a `stop` string that never matches", body=(("stop", ["never-matches"]),)),
    Feature(
        "usage",
        "`stream_options`: usage, on every chunk",
        body=(("stream_options", {"include_usage": True, "continuous_usage_stats": True}),),
    ),
    Feature(
        "keyed",
        "an API key with `rpm`, `tpm` and `max_concurrent`",
        app="keyed",
        headers=((b"authorization", f"Bearer {KEY}".encode()),),
    ),
)
"""Every kind ``micro`` measures. On the paced ``scripted`` model (instruction counts) every
feature is scripted and ``plain, scripted`` is ``plain`` itself."""

REFERENCE = {"logprobs": "plain, scripted"}
"""The feature whose figures another's added cost is taken over (``plain`` unless named)."""


class Unavailable(Exception):
    """A feature this tree cannot run (a setting or parser it lacks): its figures are missing,
    the run goes on."""


def script(tokens: int, delay: float) -> str:
    """The ``scripted`` model's script: ``tokens`` responses of ``TOKEN``, each carrying a sampled
    token and two alternatives as logprobs (sent only when asked for), ``delay`` seconds apart; one
    response when the prompt after the script says ``SHORT_MARK``."""
    entry = {
        "7": {"logprob": -0.05, "rank": 1, "decoded_token": TOKEN},
        "8": {"logprob": -3.5, "rank": 2, "decoded_token": "tik "},
        "9": {"logprob": -4.25, "rank": 3, "decoded_token": "tak "},
    }
    response: dict[str, Any] = {"utf8": [TOKEN], "logprobs": [[entry]]}
    if delay:
        response["delay"] = delay
    short = {"seen": SHORT_MARK, "responses": [response]}
    return json.dumps({"responses": [response] * tokens, "after": [short]}, separators=(",", ":"))


def settings_for(app: str, model: str, base: dict[str, Any], workdir: Path) -> Any:
    """The ``Settings`` of one of ``APPS`` for ``model``; ``Unavailable`` where this tree lacks
    what it needs. A field an old tree does not know would be ignored, not refused
    (``extra="ignore"``), so each is looked up first."""
    from gateway.config import Settings

    fields = Settings.model_fields
    extra: dict[str, Any] = {}
    if app == "reasoning":
        try:
            from gateway.reasoning.registry import REASONING_PARSERS  # noqa: F401
        except ImportError as exc:
            raise Unavailable(f"no reasoning parsers ({exc})") from None
        extra["model_files"] = {model: {"reasoning_parser": "deepseek_r1"}}
    elif app == "tools":
        extra["model_files"] = {model: {"tool_call_parser": "hermes"}}
    elif app == "keyed":
        if "api_key_policy_file" not in fields:
            raise Unavailable("no api_key_policy_file setting")
        keys = workdir / "keys.toml"
        digest = hashlib.sha256(KEY.encode()).hexdigest()
        keys.write_text(
            f'[[key]]\nname = "bench"\nsha256 = "{digest}"\nrpm = 1000000\ntpm = 1000000000\nmax_concurrent = 4\n'
        )
        extra["api_key_policy_file"] = keys
        if "api_key_reload_interval" in fields:
            extra["api_key_reload_interval"] = 0.0  # no file check on a timer during other features' requests
    # Background work on the loop thread that belongs to no request lands in whichever request
    # runs then: the model list read again every 10 s, keepalive pings every 30 s, the batch
    # runner's turn every second, the read of Triton's metrics every second, the readiness check.
    if "model_refresh_interval" in fields:
        extra["model_refresh_interval"] = 1e9
    if "grpc_keepalive_ms" in fields:
        extra["grpc_keepalive_ms"] = 3_600_000
    if "batch_poll_interval" in fields:  # the batch runner's look at the store, every second
        extra["batch_poll_interval"] = 1e9
    if "engine_load_interval" in fields:
        extra["engine_load_interval"] = 1e9
    if "ready_check_interval" in fields:  # the readiness check when nothing probes, every 10 s
        extra["ready_check_interval"] = 0.0
    if "responses_store" in fields:
        # A store of its own in the worker's directory, not the user's default file: a tree whose
        # schema is older than what another tree wrote there refuses to start on it.
        extra["responses_store"] = f"sqlite:///{workdir / f'{app}-responses.db'}"
    try:
        return Settings(**base, **extra)
    except ValueError as exc:  # pydantic's ValidationError: a model_files key this tree lacks
        raise Unavailable(f"settings refused: {str(exc).splitlines()[0]} {str(exc).splitlines()[-1]}") from None


APPS = ("plain", "reasoning", "tools", "keyed")


class Requests:
    """The two bodies of each feature: a ``tokens``-token stream and a one-token one, alike
    otherwise (the same prompt, the same fields), so their difference is the tokens alone."""

    def __init__(self, prompt: str, tokens: int, all_scripted: bool, delay: float) -> None:
        self.prompt = prompt
        self.tokens = tokens
        self.all_scripted = all_scripted
        self.script = script(tokens, delay)

    def model(self, feature: Feature) -> str:
        return "scripted" if self.all_scripted or feature.scripted else "firehose"

    def body(self, feature: Feature, long: bool) -> bytes:
        if self.model(feature) == "scripted":
            mark = LONG_MARK if long else SHORT_MARK
            content = f"{self.prompt}<script>{self.script}</script> {mark}"
            max_tokens = self.tokens  # the script, not the limit, ends the short one
        else:
            content, max_tokens = self.prompt, self.tokens if long else 1
        request = {
            "model": self.model(feature),
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            "stream": True,
            **dict(feature.body),
        }
        return json.dumps(request).encode()


def check_stream(feature: Feature, answer: Answer, tokens: int) -> int:
    """The number of chunks that carried text, after checking that ``answer`` is a finished
    stream of exactly ``tokens`` tokens of text (the answer's, or the reasoning's) with what the
    feature asked for: a logprob with two alternatives per token, usage on every such chunk.
    A wrong answer raises: it is an error, never a fast success. Tokens that arrive together go
    out as one chunk, so the count says how often the stream woke up."""
    body = answer.body
    if answer.status != 200 or not body.endswith(b"data: [DONE]\n\n"):
        raise RuntimeError(f"{feature.name}: status {answer.status}, {body[-400:]!r}")
    text: list[str] = []
    chunks = logprobs = usage = 0
    ends_with_usage = False
    for line in body.split(b"\n"):
        if not line.startswith(b"data: {"):
            continue
        chunk = json.loads(line[6:])
        if "error" in chunk:
            raise RuntimeError(f"{feature.name}: {chunk['error']}")
        ends_with_usage = bool(chunk.get("usage"))
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("tool_calls"):
                raise RuntimeError(f"{feature.name}: a tool call in prose: {delta}")
            said = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or ""
            text.append(said)
            chunks += bool(said)
            usage += bool(said and chunk.get("usage"))
            content = (choice.get("logprobs") or {}).get("content") or ()
            logprobs += sum(len(item.get("top_logprobs") or ()) == 2 for item in content)
    joined = "".join(text)
    if joined != TOKEN * tokens:
        raise RuntimeError(f"{feature.name}: {len(joined)} characters of text, not {tokens} tokens: {body[-300:]!r}")
    asked = dict(feature.body)
    if asked.get("logprobs") and logprobs != tokens:
        raise RuntimeError(f"{feature.name}: {logprobs} tokens with two alternatives, not {tokens}")
    if "stream_options" in asked and (usage != chunks or not ends_with_usage):
        raise RuntimeError(f"{feature.name}: usage on {usage} of {chunks} chunks, or not at the end")
    return chunks


def replicated(url: str) -> str:
    """``url`` as ``BENCH_MICRO_REPLICAS`` replicas (a variant's environment): the one Triton
    under as many loopback addresses (127.0.0.1, 127.0.0.2...), so the pool knows several
    replicas and its streams take the step that records them for a move."""
    count = int(os.environ.get("BENCH_MICRO_REPLICAS", "1"))
    host, _, port = url.rpartition(":")
    if count <= 1 or host != "127.0.0.1":
        return url
    return ",".join(f"127.0.0.{i}:{port}" for i in range(1, count + 1))


def quiet_background() -> None:
    """No replica housekeeping: every 0.25 s each app's pool (``Bench`` runs four) looks for due
    readiness probes, and every 5 s probes its replica (``ServerReady`` and the model list, about
    1.5 million instructions), on the loop thread, in the middle of whichever request runs then:
    work per second, not per token, that a slower run would count more of. The replica is in
    rotation from the start, so nothing else changes. Module constants, set where the tree has
    them."""
    try:
        from gateway.backend.replicas import pool
    except ImportError:
        return
    if hasattr(pool, "TICK"):
        pool.TICK = 1e9
    if hasattr(pool, "HEALTH_INTERVAL"):
        pool.HEALTH_INTERVAL = 1e9


class Bench:
    """The apps of one tree, serving every feature it can run, and the requests to send them."""

    def __init__(self, spec: dict[str, Any], workdir: Path, all_scripted: bool) -> None:
        self.requests = Requests(spec["prompt"], spec["tokens"], all_scripted, spec.get("delay", 0.0))
        wanted = spec.get("features") or [f.name for f in FEATURES]
        self.features = [f for f in FEATURES if f.name in wanted and not (all_scripted and f.name == "plain, scripted")]
        if "plain" not in [f.name for f in self.features]:
            self.features.insert(0, FEATURES[0])  # what every other feature's cost is over
        self.base = {
            "triton_url": replicated(spec["triton_url"]),
            "model_repository": [Path(p) for p in spec["repositories"]],
        }
        self.workdir = workdir
        self.apps: dict[str, Any] = {}
        self.missing: dict[str, str] = {}
        """Feature name: why this tree cannot run it."""

    async def start(self, stack: AsyncExitStack) -> None:
        """Each app with its lifespan entered (left when ``stack`` closes); a feature whose app
        cannot be made is missing."""
        from gateway.app import create_app

        quiet_background()
        for app in APPS:
            users = [f for f in self.features if f.app == app]
            if not users:
                continue
            model = self.requests.model(users[0])
            try:
                settings = settings_for(app, model, self.base, self.workdir)
            except Unavailable as exc:
                self.missing.update({f.name: str(exc) for f in users})
                continue
            created = create_app(settings)
            await stack.enter_async_context(created.router.lifespan_context(created))
            self.apps[app] = created

    @property
    def running(self) -> list[Feature]:
        return [f for f in self.features if f.name not in self.missing]

    async def send(self, feature: Feature, long: bool) -> Answer:
        return await post(self.apps[feature.app], self.requests.body(feature, long), headers=feature.headers)

    def check(self, feature: Feature, answer: Answer, long: bool) -> int:
        """The answer's chunks with text, 0 when it is wrong, which makes the feature missing
        (``plain``'s raises: without it nothing compares)."""
        try:
            return check_stream(feature, answer, self.requests.tokens if long else 1)
        except RuntimeError as exc:
            if feature.name == "plain":
                raise
            self.missing[feature.name] = f"wrong answer: {str(exc)[:300]}"
            return 0


async def time_features(bench: Bench, requests: int) -> dict[str, Any]:
    """µs of the event loop thread's CPU per token and per one-token request of each feature,
    the features alternated request by request (the order reversed every other pass) so that a
    slow spell of the machine touches them all alike."""
    for feature in bench.running:  # first-use costs: the template, the caches' first fill
        for long in (True, True, False):
            bench.check(feature, await bench.send(feature, long), long)
    samples: dict[str, tuple[list[Answer], list[Answer]]] = {f.name: ([], []) for f in bench.running}
    chunks: dict[str, list[int]] = {f.name: [] for f in bench.running}
    for i in range(requests):
        features = bench.running
        for feature in features if i % 2 == 0 else features[::-1]:
            for long in (True, False):
                answer = await bench.send(feature, long)
                said = bench.check(feature, answer, long)
                if said:
                    samples[feature.name][long is False].append(answer)
                    if long:
                        chunks[feature.name].append(said)
    out: dict[str, Any] = {}
    tokens = bench.requests.tokens
    for feature in bench.running:
        long_answers, short_answers = samples[feature.name]
        long_cpu = statistics.median(a.thread_cpu for a in long_answers)
        short_cpu = statistics.median(a.thread_cpu for a in short_answers)
        every = [a.process_cpu for a in long_answers + short_answers]
        out[feature.name] = {
            # ``micro`` reads µs per token off the long streams' cost against their chunks
            # (bench/compare.py, ``cost_at``); this is the plain difference of medians.
            "us_per_token_median": (long_cpu - short_cpu) / (tokens - 1) * 1e6,
            "us_per_request": short_cpu * 1e6,
            # Every thread's: a traced app's exporter thread counts too (the loop thread's figures
            # do not see it); the mean over the long and short requests.
            "process_us_per_request": statistics.fmean(every) * 1e6,
            "chunks_per_stream": statistics.median(chunks[feature.name]),
            "long_us": [a.thread_cpu * 1e6 for a in long_answers],
            "long_chunks": chunks[feature.name],
            "short_us": [a.thread_cpu * 1e6 for a in short_answers],
        }
    return out


SETTLE = 1.5
"""Seconds a batch of counted requests waits before its dump: a finished call is reset by a timer
a second after its last response if Triton's trailers have not come (``TRAILERS_GRACE``), so a
batch's deferred work would otherwise land in whichever batch runs then."""


async def count_features(bench: Bench, requests: int, library: str) -> dict[str, Any]:
    """Under callgrind (``bench/instructions.py``): each feature's ``requests`` one-token
    requests, then as many long ones, each batch dumped as callgrind counters of its own
    (``<feature>|short``, ``<feature>|long``); instrumentation starts after the apps did, so the
    imports and start-up run at nearly native speed. Before each batch a full garbage collection,
    so that every batch starts from the same collector state and its collections fall at the same
    allocations. Answers are checked after their dump, so the checks are not counted; each long
    stream's chunks are kept, to show that every token was a wake-up of its own."""
    import ctypes
    import gc

    callgrind = ctypes.CDLL(library)
    callgrind.cg_start()
    for feature in bench.running:  # first-use costs, counted by no dump
        for long in (True, False, True, False):
            bench.check(feature, await bench.send(feature, long), long)
    await asyncio.sleep(SETTLE)
    dumps = []
    chunks: dict[str, list[int]] = {}
    for feature in bench.running:
        for long in (False, True):
            gc.collect()
            callgrind.cg_zero()
            answers = [await bench.send(feature, long) for _ in range(requests)]
            await asyncio.sleep(SETTLE)  # the batch's own deferred work, in its dump
            name = f"{feature.name}|{'long' if long else 'short'}"
            callgrind.cg_dump(name.encode())
            said = [bench.check(feature, answer, long) for answer in answers]
            if all(said):
                dumps.append(name)
                if long:
                    chunks[feature.name] = said
    callgrind.cg_stop()
    return {"dumps": dumps, "chunks": chunks}


def as_served() -> None:
    """The garbage collector tuned as the server tunes it once it serves (``server.tune_gc``,
    where the tree has it): with the defaults, collections land in whichever request allocates
    the 700th object, ~35,000 instructions per request that production does not pay."""
    try:
        from gateway.server import tune_gc
    except ImportError:
        return
    tune_gc()


async def measure(spec: dict[str, Any]) -> dict[str, Any]:
    import gateway

    counting = spec.get("mode") == "instructions"
    with tempfile.TemporaryDirectory(prefix="bench-micro-worker-") as workdir:
        bench = Bench(spec, Path(workdir), all_scripted=counting)
        async with AsyncExitStack() as stack:
            await bench.start(stack)
            as_served()
            if counting:
                figures = await count_features(bench, spec["requests"], spec["callgrind_library"])
            else:
                figures = {"features": await time_features(bench, spec["requests"])}
    result: dict[str, Any] = {"package": gateway.__file__, **figures, "missing": bench.missing}
    if counting or not spec.get("parsers", True):
        return result
    return {
        **result,
        "tool_parsers_us_per_feed": tool_parsers(),
        "reasoning_parsers_us_per_feed": reasoning_parsers(),
        "streamed_arguments_us_per_feed": streamed_arguments(),
        "contracts_us_per_token": contracts(),
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

    def fresh(name: str) -> Callable[[str], object]:
        return make_parser(name, tools).feed

    return {name: us_per_feed(functools.partial(fresh, name)) for name in PARSERS}


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

    return {name: us_per_feed(functools.partial(thinking, name)) for name in REASONING_PARSERS}


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
        as_served()
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
