"""Bad input, systematically: schemathesis strategies over EVERY operation of the gateway's own
OpenAPI document, each case sent both to an open gateway and to one configured with keys (no key,
a wrong one, a flat one, a policy key, a key limited to another model, a key already over its
limit), and hypothesis over raw request bodies. Whatever arrives: no 5xx, no hang, every error
OpenAI-shaped (Anthropic-shaped on Anthropic's ``/v1/messages`` paths), and every stream that
starts ends as its API says a stream ends. ``test_fuzz_bodies.py`` adds the bodies the schema
cannot describe (content parts, tool schemas, images, Anthropic blocks, Responses items).

Runs in-process against an in-memory backend so that the cases stay fast; the real Triton path is
covered by tests/integration/test_fuzz_triton.py. Reproducible by default (``derandomize``: the
same cases every run, as CI needs); ``GATEWAY_FUZZ_SCALE=10`` multiplies every example count for a
deeper run, ``GATEWAY_FUZZ_SEED=<int>`` explores other cases than the fixed ones, and
``GATEWAY_FUZZ_STATS=<file>`` writes where each case stopped.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.core.result import Ok
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.backend.types import BackendModel
from gateway.config import ModelFiles, Settings
from gateway.keys.policy import hash_key
from tests.fakes import ScriptedBackend, text_chunks
from tests.unit.test_app import make_repo

ERROR_KEYS = {"message", "type", "param", "code"}
MODEL = "m"
EMBED = "e"
SCALE = float(os.environ.get("GATEWAY_FUZZ_SCALE", "1"))
SEED = os.environ.get("GATEWAY_FUZZ_SEED")

SERVER_ERROR_TYPES = frozenset(
    {"server_error", "service_unavailable", "timeout_error", "api_error", "overloaded_error"}
)
"""Error types that stand for a 5xx: a stream that ends with one hid a server failure in a 200."""


def fuzz_settings(examples: int) -> Callable[[Any], Any]:
    """Every fuzz test's settings: ``examples`` cases (times ``GATEWAY_FUZZ_SCALE``), no deadline
    (a loaded 2-core machine is slow, not wrong), the same cases every run unless
    ``GATEWAY_FUZZ_SEED`` asks for others, and no example database (a failure found once is
    found again by the fixed cases, not replayed from a file CI does not have)."""
    chosen = settings(
        max_examples=max(1, int(examples * SCALE)),
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=SEED is None,
        database=None,
        print_blob=True,
    )

    def apply(test: Any) -> Any:
        test = chosen(test)
        return hypothesis.seed(int(SEED))(test) if SEED is not None else test

    return apply


# -- the gateways under test --------------------------------------------------------------------------

FLAT_KEY = "sk-flat"
POLICY_KEYS = {
    "sk-team": ("team", f'models = ["{MODEL}", "{EMBED}"]\nrpm = 1000000\ntpm = 100000000\nmax_concurrent = 64'),
    "sk-other": ("other", 'models = ["other"]'),
    "sk-spent": ("spent", "rpm = 1"),
}
KEY_HEADERS: list[tuple[str, dict[str, str]]] = [
    ("no key", {}),
    ("wrong key", {"Authorization": "Bearer sk-wrong"}),
    ("malformed", {"Authorization": "Basic c2stZmxhdA=="}),
    ("flat", {"Authorization": f"Bearer {FLAT_KEY}"}),
    ("team", {"Authorization": "Bearer sk-team"}),
    ("team x-api-key", {"x-api-key": "sk-team"}),
    ("other model", {"Authorization": "Bearer sk-other"}),
    ("over its limit", {"Authorization": "Bearer sk-spent"}),
]


def key_file_text() -> str:
    return "\n".join(
        f'[[key]]\nname = "{name}"\nsha256 = "{hash_key(key)}"\n{policy}\n'
        for key, (name, policy) in POLICY_KEYS.items()
    )


def gateway_settings(tmp: Path, keyed: bool) -> Settings:
    """A gateway serving ``m`` (a chat model that takes images, with a tool-call parser and LoRA
    adapters) and ``e`` (an embedding model), storing responses under ``tmp``; with ``keyed``, a
    flat key and a policy file. Image URLs may name 127.0.0.1 and ``*.example``, so that URLs are
    parsed and checked; no fetch leaves the machine (127.0.0.1 is a private address, refused, and
    ``.example`` never resolves)."""
    repo = make_repo(tmp, adapters=("x",))
    make_repo(tmp, EMBED)
    extra: dict[str, Any] = {}
    if keyed:
        policy = tmp / "keys.toml"
        policy.write_text(key_file_text())
        extra = {"api_keys": FLAT_KEY, "api_key_policy_file": policy, "api_key_reload_interval": 0.0}
    return Settings(
        model_repository=[repo],
        first_response_wait=0.5,
        max_n=4,
        responses_store=f"sqlite:///{tmp / 'responses.db'}",
        model_files={MODEL: ModelFiles(vision=True, tool_call_parser="hermes")},
        image_fetch_hosts=["127.0.0.1", "*.example"],
        image_fetch_timeout=2.0,
        image_max_pixels=4096 * 4096,
        **extra,
    )


class FuzzBackend(ScriptedBackend):
    """``m`` generates (two scripted chunks), ``e`` embeds (it declares only ``embedding_request``)."""

    async def list_models(self) -> list[BackendModel]:
        return [BackendModel(name=MODEL), BackendModel(name=EMBED, inputs=frozenset({"embedding_request"}))]


def scripted_backend() -> ScriptedBackend:
    return FuzzBackend(text_chunks(b"he", b"llo", reason="length"))


def build_app(tmp: Path, keyed: bool) -> Any:
    return create_app(gateway_settings(tmp, keyed), backend=scripted_backend())


@dataclass
class Target:
    """Where a case goes: a gateway (its in-process client) and the headers a client sends it."""

    name: str
    client: TestClient
    headers: dict[str, str]

    def send(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = {**kwargs.pop("headers", {}), **self.headers}
        return self.client.request(method, path, headers=headers, **kwargs)


@dataclass
class Gateways:
    open: TestClient
    keyed: TestClient
    stored: dict[str, list[str]]
    """Ids of stored responses, by target name (each visible only to its owner)."""

    def targets(self) -> list[Target]:
        """Every target once, and the two whose cases get past the keys (the open gateway and the
        team key) three times more: most cases should reach planning and the backend."""
        open_target = Target("open", self.open, {})
        keyed = [Target(name, self.keyed, headers) for name, headers in KEY_HEADERS]
        team = next(t for t in keyed if t.name == "team")
        return [open_target, team] * 3 + keyed


def start_gateways(tmp: Path) -> Iterator[Gateways]:
    """Both gateways with their lifespans running (store open, catalog read), and a stored
    response for the open gateway and for the team key, so that retrieve, input items and
    delete cases can name ids that exist."""
    with (
        TestClient(build_app(tmp / "open", False), raise_server_exceptions=False) as open_client,
        TestClient(build_app(tmp / "keyed", True), raise_server_exceptions=False) as keyed_client,
    ):
        gateways = Gateways(open_client, keyed_client, {})
        for target in gateways.targets():
            if target.name in ("open", "team"):
                answer = target.send("POST", "/v1/responses", json={"model": MODEL, "input": "hi", "store": True})
                assert answer.status_code == 200, answer.text
                gateways.stored[target.name] = [answer.json()["id"]]
        yield gateways


@pytest.fixture(scope="module")
def gateways(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateways]:
    yield from start_gateways(tmp_path_factory.mktemp("fuzz"))


# -- what every answer must be -----------------------------------------------------------------------


def is_anthropic(path: str) -> bool:
    return path == "/v1/messages" or path.startswith("/v1/messages/")


def assert_openai_shaped(status: int, body: bytes, path: str = "") -> None:
    """No 5xx; a 4xx carries OpenAI's error object (Anthropic's on ``/v1/messages*``)."""
    assert status < 500, body[:2000]
    if status < 400:
        return
    payload = json.loads(body)
    if is_anthropic(path):
        assert payload.get("type") == "error" and set(payload["error"]) == {"type", "message"}, payload
        assert isinstance(payload["error"]["message"], str) and payload["error"]["message"]
    else:
        assert set(payload) == {"error"}, payload
        error = payload["error"]
        assert set(error) == ERROR_KEYS, error
        assert isinstance(error["message"], str) and error["message"]
        assert isinstance(error["type"], str) and error["type"]


def sse_events(body: str) -> list[tuple[str | None, str]]:
    """A complete SSE body's events as (event name, data), comments (pings) dropped; fails on a
    body cut off mid-event or a line SSE does not have."""
    assert body.endswith("\n\n"), body[-500:]
    events: list[tuple[str | None, str]] = []
    for block in body.split("\n\n"):
        if not block:
            continue
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            field, _, value = line.partition(": ")
            assert field in ("event", "data", "id", "retry"), line
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
        if data:
            events.append((name, "\n".join(data)))
    assert events, body[:500]
    return events


def assert_complete_stream(path: str, body: str) -> None:
    """A stream that started (200) ends as its API ends one: ``[DONE]`` (chat, completions),
    the Responses object's last state, Anthropic's ``message_stop``; or a client error's event,
    never one standing for a server failure."""
    events = sse_events(body)
    name, data = events[-1]
    if path in ("/v1/chat/completions", "/v1/completions"):
        if data == "[DONE]":
            assert all(d != "[DONE]" for _, d in events[:-1])
            for _, d in events[:-1]:
                json.loads(d)
            return
        error = json.loads(data).get("error")
        assert isinstance(error, dict), f"a stream cut off after: {data[:500]}"
        assert set(error) == ERROR_KEYS and error["type"] not in SERVER_ERROR_TYPES, error
    elif path == "/v1/responses":
        last = json.loads(data)
        assert events[0][0] == "response.created", events[0]
        assert last.get("type") in ("response.completed", "response.incomplete"), last
        assert name == last["type"]
    elif path == "/v1/messages":
        last = json.loads(data)
        if name == "error":
            assert last.get("type") == "error" and last["error"]["type"] not in SERVER_ERROR_TYPES, last
        else:
            assert events[0][0] == "message_start", events[0]
            assert name == "message_stop" and last == {"type": "message_stop"}, last
    else:
        raise AssertionError(f"a stream on {path}")


STATS_FILE = os.environ.get("GATEWAY_FUZZ_STATS")
"""A file each answer's path, status and error message are appended to: where the cases stop
(a fuzz whose cases all end at the same 400 tests nothing behind it)."""


def record_answer(path: str, status: int, text: str) -> None:
    """One line in ``GATEWAY_FUZZ_STATS``'s file, when it is set."""
    if STATS_FILE:
        with open(STATS_FILE, "a", encoding="utf-8") as stats:
            said = text[:120].replace("\n", " ") if status >= 400 else ""
            stats.write(f"{path}\t{status}\t{said}\n")


def assert_answer(response: Any, path: str) -> None:
    """Every fuzz answer's checks: its status and error shape, and a stream's end."""
    record_answer(path, response.status_code, response.text)
    assert_openai_shaped(response.status_code, response.content, path)
    if response.status_code == 200 and response.headers.get("content-type", "").startswith("text/event-stream"):
        assert_complete_stream(path, response.text)


# -- every operation of the OpenAPI document -----------------------------------------------------------


SCHEMA = schemathesis.openapi.from_asgi(
    "/openapi.json", build_app(Path(tempfile.mkdtemp(prefix="fuzz-schema-")), False)
)
OPERATIONS = {result.ok().label: result.ok() for result in SCHEMA.get_all_operations() if isinstance(result, Ok)}
"""Every operation of the document (one the document describes wrongly would be an ``Err``:
none is, ``test_every_route_of_the_app_is_fuzzed`` says)."""
GENERATING = {"POST /v1/chat/completions", "POST /v1/completions", "POST /v1/responses", "POST /v1/messages"}
EXAMPLES = {label: 120 if label in GENERATING else 30 for label in OPERATIONS}


def test_every_route_of_the_app_is_fuzzed() -> None:
    """A route added later is fuzzed without anyone adding it here (the set below only proves the
    document lists what the gateway serves)."""
    assert {
        "GET /health",
        "GET /health/ready",
        "GET /v1/models",
        "GET /v1/models/{model_id}",
        "POST /v1/chat/completions",
        "POST /v1/completions",
        "POST /v1/responses",
        "POST /v1/responses/input_tokens",
        "GET /v1/responses/{response_id}",
        "DELETE /v1/responses/{response_id}",
        "GET /v1/responses/{response_id}/input_items",
        "POST /v1/messages",
        "POST /v1/messages/count_tokens",
        "POST /tokenize",
        "POST /detokenize",
        "POST /v1/embeddings",
    } <= set(OPERATIONS)


def served_model(path: str, body: dict[str, Any], choice: int) -> None:
    """Most cases name a model that exists (else they stop at the 404), of the kind the path
    serves; ``choice`` 7 keeps the generated name."""
    if choice == 7:
        return
    if path == "/v1/embeddings":
        body["model"] = EMBED
    else:
        body["model"] = f"{MODEL}:x" if choice == 6 else MODEL


@pytest.mark.parametrize("label", sorted(OPERATIONS, key=lambda label: (str(label).startswith("DELETE"), label)))
def test_openapi_cases_never_5xx_and_errors_are_shaped(label: str, gateways: Gateways) -> None:
    operation = OPERATIONS[label]
    targets = gateways.targets()

    @fuzz_settings(EXAMPLES[label])
    @given(case=operation.as_strategy(), target=st.sampled_from(targets), choice=st.integers(0, 7))
    def run(case: Any, target: Target, choice: int) -> None:
        if isinstance(case.body, dict):
            served_model(case.path, case.body, choice)
        if case.path_parameters and "response_id" in case.path_parameters and choice < 6:
            ids = gateways.stored.get(target.name) or gateways.stored["open"]
            case.path_parameters["response_id"] = ids[0]  # an id that exists (for some owner)
        if case.path_parameters and "model_id" in case.path_parameters and choice < 6:
            case.path_parameters["model_id"] = MODEL
        kwargs = case.as_transport_kwargs()
        kwargs.pop("cookies", None)
        response = target.send(kwargs.pop("method"), kwargs.pop("url"), **kwargs)
        assert_answer(response, case.path)

    run()


# -- mutated and raw bodies ----------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
FIELDS = [
    "model",
    "messages",
    "prompt",
    "temperature",
    "top_p",
    "n",
    "stream",
    "stream_options",
    "stop",
    "max_tokens",
    "max_completion_tokens",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "seed",
    "response_format",
    "structured_outputs",
    "tools",
    "top_k",
    "min_p",
    "repetition_penalty",
    "min_tokens",
    "ignore_eos",
    "stop_token_ids",
    "include_stop_str_in_output",
    "chat_template_kwargs",
    "echo",
    "suffix",
]


@st.composite
def mutated_requests(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    path = draw(st.sampled_from(["/v1/chat/completions", "/v1/completions"]))
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 2}
    if path.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": "hi"}]
    else:
        body["prompt"] = "hi"
    for field in draw(st.lists(st.sampled_from(FIELDS), max_size=3, unique=True)):
        body[field] = draw(json_values)
    return path, body


@fuzz_settings(200)
@given(request=mutated_requests())
def test_mutated_requests_never_5xx(request: tuple[str, dict[str, Any]], gateways: Gateways) -> None:
    path, body = request
    response = gateways.open.post(path, content=json.dumps(body), headers={"content-type": "application/json"})
    assert_answer(response, path)


RAW_PATHS = ["/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/embeddings", "/tokenize"]


@fuzz_settings(100)
@given(
    raw=st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode()),
    content_type=st.sampled_from(["application/json", "text/plain", ""]),
    path=st.sampled_from(RAW_PATHS),
)
def test_arbitrary_bodies_never_5xx(raw: bytes, content_type: str, path: str, gateways: Gateways) -> None:
    headers = {"content-type": content_type} if content_type else {}
    response = gateways.open.post(path, content=raw, headers=headers)
    assert_answer(response, path)


def test_integers_json_cannot_hold_in_64_bits_echoed_back_are_not_a_500(gateways: Gateways) -> None:
    """Found by the OpenAPI fuzzing above: the Responses object echoes ``text.format`` (and
    ``tools``, ``metadata``), where a client may put an integer beyond 64 bits (a JSON schema's
    ``maximum``); orjson refuses those, so the answer must be encoded another way, not fail."""
    huge = -9223372036854775809
    body = {"model": MODEL, "input": "", "text": {"format": {"": huge, "type": "text"}}}
    for stream in (False, True):
        response = gateways.open.post("/v1/responses", json={**body, "stream": stream})
        assert response.status_code == 200, response.text
        assert str(huge) in response.text


def test_the_checks_catch_a_5xx_a_bare_error_and_a_cut_stream() -> None:
    """The assertions themselves: what they must refuse (a check that passes everything proves nothing)."""
    with pytest.raises(AssertionError):
        assert_openai_shaped(500, b'{"error": {"message": "x", "type": "server_error", "param": null, "code": null}}')
    with pytest.raises(AssertionError):
        assert_openai_shaped(400, b'{"detail": "bad"}')
    with pytest.raises(AssertionError):
        assert_openai_shaped(400, b'{"error": {"message": "x", "type": "t"}}', "/v1/messages")
    with pytest.raises(AssertionError):
        assert_complete_stream("/v1/chat/completions", 'data: {"id": 1}\n\n')
    with pytest.raises(AssertionError):
        assert_complete_stream("/v1/chat/completions", 'data: {"id": 1}\n\ndata: [DO')
    server = json.dumps({"error": {"message": "x", "type": "server_error", "param": None, "code": None}})
    with pytest.raises(AssertionError):
        assert_complete_stream("/v1/chat/completions", f"data: {server}\n\n")
    with pytest.raises(AssertionError):
        assert_complete_stream("/v1/messages", 'event: message_start\ndata: {"type": "message_start"}\n\n')
    assert_complete_stream("/v1/chat/completions", 'data: {"id": 1}\n\n: ping\n\ndata: [DONE]\n\n')
