"""API keys with policies: the key file's parsing and reloading, the limit counters' windows and
token charging (in memory and in the workers' shared file), OpenAI's rate-limit headers, and
the edge middleware that admits a request and puts the headers on every answer."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from gateway.http.security import OWNER, ApiKeyMiddleware
from gateway.keys.context import RequestKey, current_key, model_allowed
from gateway.keys.limits import Admit, FileLimits, MemoryLimits, decide, rate_headers, retry_after, window_of
from gateway.keys.policy import KeyFileError, KeyPolicy, KeyRing, hash_key, parse_key_file

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


A = hash_key("sk-a")
B = hash_key("sk-b")


def key_file(*entries: str) -> str:
    return "\n".join(entries)


def entry(name: str, *hashes: str, extra: str = "") -> str:
    listed = ", ".join(f'"{h}"' for h in hashes)
    return f'[[key]]\nname = "{name}"\nsha256 = [{listed}]\n{extra}\n'


# -- the key file -----------------------------------------------------------------------------------


def test_a_key_file_gives_each_hash_its_policy() -> None:
    table = parse_key_file(
        entry("search", A, B, extra='models = ["tiny-llm"]\nrpm = 5\ntpm = 100\nmax_concurrent = 2')
        + entry("batch", hash_key("sk-c"))
    )
    search = KeyPolicy("search", frozenset({"tiny-llm"}), rpm=5, tpm=100, max_concurrent=2)
    assert table == {A: search, B: search, hash_key("sk-c"): KeyPolicy("batch")}
    assert search.limited and not table[hash_key("sk-c")].limited


def test_a_single_hash_may_be_a_string_and_upper_case() -> None:
    table = parse_key_file(f'[[key]]\nname = "x"\nsha256 = "{A.upper()}"\n')
    assert list(table) == [A]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[[key]]\nname = 'x'\nsha256 = 'abc'\n", "not a sha256"),
        (f"[[key]]\nsha256 = '{A}'\n", "a name is required"),
        (f"[[key]]\nname = 'x'\nsha256 = '{A}'\nrpm = -1\n", "rpm must be"),
        (f"[[key]]\nname = 'x'\nsha256 = '{A}'\nrpm = 'many'\n", "rpm must be"),
        (f"[[key]]\nname = 'x'\nsha256 = '{A}'\nrmp = 5\n", "unknown fields ['rmp']"),
        (f"[[key]]\nname = 'x'\nsha256 = '{A}'\nmodels = 'tiny-llm'\n", "models must be a list"),
        (entry("x", A) + entry("x", B), "the name is used twice"),
        (entry("x", A) + entry("y", A), "a hash is listed twice"),
        ("[[key]\n", "not valid TOML"),
        ("keys = []\n", "unknown top-level"),
    ],
)
def test_a_bad_key_file_says_why(text: str, says: str) -> None:
    with pytest.raises(KeyFileError, match=says.replace("[", r"\[").replace("]", r"\]")):
        parse_key_file(text)


def test_a_key_allows_its_models_and_their_adapters() -> None:
    policy = KeyPolicy("x", frozenset({"tiny-llm", "other:alpha"}))
    assert policy.allows("tiny-llm", "tiny-llm")
    assert policy.allows("tiny-llm:alpha", "tiny-llm")
    assert policy.allows("other:alpha", "other")
    assert not policy.allows("other", "other")
    assert not policy.allows("other:beta", "other")
    assert KeyPolicy("y").allows("anything", "anything")


def test_the_ring_reloads_a_changed_file_and_keeps_the_old_keys_when_the_new_one_is_bad(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    path.write_text(entry("a", A, extra="rpm = 5"))
    ring = KeyRing({"sk-flat"}, path)
    assert ring.lookup(b"sk-a") == KeyPolicy("a", rpm=5)
    assert ring.lookup(b"sk-flat") == KeyPolicy()
    assert ring.lookup(b"sk-b") is None
    assert ring.lookup_digest(hash_key(b"sk-a")) == ring.lookup(b"sk-a")  # the edge keeps the digest
    assert not ring.reload()  # unchanged

    path.write_text(entry("b", B, extra="rpm = 7"))
    assert ring.reload()
    assert ring.lookup(b"sk-a") is None
    assert ring.lookup(b"sk-b") == KeyPolicy("b", rpm=7)

    path.write_text("[[key]\nbroken")
    with pytest.raises(KeyFileError):
        ring.reload()
    assert ring.lookup(b"sk-b") == KeyPolicy("b", rpm=7)
    assert not ring.reload()  # the bad file is reported once
    path.unlink()
    with pytest.raises(OSError):
        ring.reload()
    assert ring.lookup(b"sk-b") == KeyPolicy("b", rpm=7)


def test_a_bad_key_file_at_start_stops_the_gateway(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    path.write_text("nonsense")
    with pytest.raises(KeyFileError):
        KeyRing((), path)


def test_the_hash_command_prints_what_the_file_stores(capsys: pytest.CaptureFixture[str], monkeypatch: Any) -> None:
    import io

    from gateway.keys import hash as hash_command

    monkeypatch.setattr("sys.stdin", io.StringIO("sk-a\n\nsk-b\n"))
    hash_command.main()
    assert capsys.readouterr().out.split() == [A, B]


# -- counting ----------------------------------------------------------------------------------------


def test_decide_checks_concurrency_then_requests_then_tokens() -> None:
    policy = KeyPolicy("x", rpm=5, tpm=100, max_concurrent=2)
    assert decide(policy, 1, 4, 99) is None
    assert decide(policy, 2, 5, 100) == "concurrency"
    assert decide(policy, 1, 5, 100) == "requests"
    assert decide(policy, 1, 4, 100) == "tokens"
    assert decide(KeyPolicy("y"), 10**6, 10**6, 10**6) is None
    # A counting request: neither the slots nor the tokens refuse it, the requests do.
    assert decide(policy, 2, 4, 100, generating=False) is None
    assert decide(policy, 2, 5, 100, generating=False) == "requests"


def test_windows_are_wall_clock_minutes() -> None:
    assert window_of(120.0) == (2, 60.0)
    assert window_of(179.5) == (2, 0.5)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", "file"])
async def counters(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    clock = Clock(6000.0)
    monkeypatch.setattr(time, "time", clock)  # every store reads the wall clock from here
    store = MemoryLimits() if request.param == "memory" else FileLimits(tmp_path / "limits.sqlite", fail="closed")
    yield store, clock
    await store.close()


async def test_rpm_counts_admitted_requests_until_the_minute_turns(counters: Any) -> None:
    store, clock = counters
    policy = KeyPolicy("x", rpm=3)
    admits = [await store.admit(policy) for _ in range(4)]
    assert [a.refused for a in admits] == [None, None, None, "requests"]
    assert [a.requests for a in admits] == [1, 2, 3, 3]
    assert admits[0].reset == 60.0
    clock.now += 59.9
    assert (await store.admit(policy)).refused == "requests"
    clock.now += 0.1
    fresh = await store.admit(policy)
    assert (fresh.refused, fresh.requests) == (None, 1)


async def test_tokens_charged_past_the_budget_refuse_the_next_request_until_the_minute_turns(counters: Any) -> None:
    store, clock = counters
    policy = KeyPolicy("x", tpm=100)
    assert (await store.admit(policy)).refused is None
    store.charge(policy, 60)
    assert (await store.admit(policy)).tokens == 60
    store.charge(policy, 500)  # a long stream runs past the budget: charged in full
    refused = await store.admit(policy)
    assert (refused.refused, refused.tokens) == ("tokens", 560)
    clock.now += 60
    assert (await store.admit(policy)).refused is None


async def test_concurrency_is_held_until_released(counters: Any) -> None:
    store, _ = counters
    policy = KeyPolicy("x", max_concurrent=2)
    first, second = await store.admit(policy), await store.admit(policy)
    assert (first.refused, second.refused) == (None, None)
    assert first.lease is not None and second.lease is not None and first.lease != second.lease
    assert (await store.admit(policy)).refused == "concurrency"
    await store.release(policy, first)
    third = await store.admit(policy)
    assert third.refused is None
    for _ in range(5):
        await store.release(policy, first)  # a slot released twice is released once
    assert (await store.admit(policy)).refused == "concurrency"
    await store.release(policy, second)
    await store.release(policy, third)
    assert (await store.admit(policy)).refused is None


async def test_a_key_without_a_concurrency_limit_holds_no_slot(counters: Any) -> None:
    store, _ = counters
    admit = await store.admit(KeyPolicy("x", rpm=5))
    assert admit.refused is None and admit.lease is None


async def test_a_counting_request_answers_to_rpm_only_and_holds_no_slot(counters: Any) -> None:
    store, _ = counters
    policy = KeyPolicy("x", rpm=3, tpm=10, max_concurrent=1)
    running = await store.admit(policy)
    store.charge(policy, 50)  # over tpm, and the one slot taken
    assert (await store.admit(policy)).refused == "concurrency"
    counted = await store.admit(policy, generating=False)
    assert (counted.refused, counted.requests, counted.lease) == (None, 2, None)
    assert (await store.admit(policy, generating=False)).refused is None
    assert (await store.admit(policy, generating=False)).refused == "requests"  # the third request of 3
    await store.release(policy, running)


async def test_keys_count_apart(counters: Any) -> None:
    store, _ = counters
    a, b = KeyPolicy("a", rpm=1), KeyPolicy("b", rpm=1)
    assert (await store.admit(a)).refused is None
    assert (await store.admit(b)).refused is None
    assert (await store.admit(a)).refused == "requests"


async def test_workers_count_together_in_one_file(tmp_path: Path) -> None:
    first, second = FileLimits(tmp_path / "l.sqlite"), FileLimits(tmp_path / "l.sqlite")
    policy = KeyPolicy("x", rpm=3, tpm=50)
    results = [await (first if i % 2 else second).admit(policy) for i in range(4)]
    assert [r.refused for r in results] == [None, None, None, "requests"]
    first.charge(policy, 30)
    second.charge(policy, 30)
    await first.admit(policy)  # each one's thread writes its charge before its next step
    await second.admit(policy)
    assert (await first.admit(policy)).tokens == 60
    slot = KeyPolicy("y", max_concurrent=1)
    held = await first.admit(slot)
    assert (await second.admit(slot)).refused == "concurrency"
    await first.release(slot, held)
    assert (await second.admit(slot)).refused is None
    await first.close()
    await second.close()


# -- headers -----------------------------------------------------------------------------------------


def test_headers_are_openais_for_the_limits_the_key_has() -> None:
    admit = Admit(None, requests=2, tokens=30, reset=17.2)
    assert dict(rate_headers(KeyPolicy("x", rpm=5, tpm=100), admit)) == {
        b"x-ratelimit-limit-requests": b"5",
        b"x-ratelimit-remaining-requests": b"3",
        b"x-ratelimit-reset-requests": b"18s",
        b"x-ratelimit-limit-tokens": b"100",
        b"x-ratelimit-remaining-tokens": b"70",
        b"x-ratelimit-reset-tokens": b"18s",
    }
    assert rate_headers(KeyPolicy("x", max_concurrent=1), admit) == []
    over = Admit("tokens", requests=2, tokens=130, reset=0.02)
    assert dict(rate_headers(KeyPolicy("x", tpm=100), over))[b"x-ratelimit-remaining-tokens"] == b"0"
    assert dict(rate_headers(KeyPolicy("x", tpm=100), over))[b"x-ratelimit-reset-tokens"] == b"20ms"
    assert dict(rate_headers(KeyPolicy("x", rpm=1), Admit(None, 1, 0, 60.0)))[b"x-ratelimit-reset-requests"] == b"1m0s"
    assert retry_after(over) == 1 and retry_after(Admit("requests", 1, 0, 41.5)) == 42
    assert retry_after(Admit("concurrency", 1, 0, 41.5)) == 1


# -- the middleware -----------------------------------------------------------------------------------


class Slow:
    """An app that answers 200 after ``release`` is set, and records the request's key."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.release.set()
        self.seen: list[tuple[str | None, str]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = current_key.get()
        self.seen.append((None if key is None else key.policy.name, scope["state"][OWNER]))
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})


def limited_app(tmp_path: Path, extra: str) -> tuple[ApiKeyMiddleware, Slow]:
    path = tmp_path / "keys.toml"
    path.write_text(entry("team", A, extra=extra))
    inner = Slow()
    return ApiKeyMiddleware(inner, KeyRing({"sk-flat"}, path), limits=MemoryLimits()), inner


async def post(app: Any, key: str, path: str = "/v1/chat/completions") -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c:
        return await c.post(path, headers={"Authorization": f"Bearer {key}"}, content=b"{}")


async def test_every_answer_carries_the_headers_and_the_request_over_the_limit_is_openais_429(tmp_path: Path) -> None:
    app, inner = limited_app(tmp_path, "rpm = 2\ntpm = 1000")
    first, second, third = [await post(app, "sk-a") for _ in range(3)]
    assert first.status_code == second.status_code == 200
    assert first.headers["x-ratelimit-remaining-requests"] == "1"
    assert second.headers["x-ratelimit-remaining-requests"] == "0"
    assert second.headers["x-ratelimit-limit-tokens"] == "1000"
    assert third.status_code == 429
    assert third.json()["error"]["type"] == "rate_limit_error"
    assert third.json()["error"]["code"] == "rate_limit_exceeded"
    assert "requests per minute" in third.json()["error"]["message"]
    assert 1 <= int(third.headers["retry-after"]) <= 60
    assert third.headers["x-ratelimit-remaining-requests"] == "0"
    assert inner.seen == [("team", "key:team")] * 2


async def test_flat_keys_and_other_paths_are_not_limited(tmp_path: Path) -> None:
    app, inner = limited_app(tmp_path, "rpm = 1")
    assert [(await post(app, "sk-flat")).status_code for _ in range(3)] == [200] * 3
    assert "x-ratelimit-limit-requests" not in (await post(app, "sk-flat")).headers
    assert (await post(app, "sk-a")).status_code == 200
    assert (await post(app, "sk-a", "/v1/models")).status_code == 200  # not a generating POST
    assert (await post(app, "sk-a")).status_code == 429
    assert inner.seen[0] == (None, hash_key("sk-flat"))


async def test_a_slot_is_held_until_the_answer_is_sent(tmp_path: Path) -> None:
    app, inner = limited_app(tmp_path, "max_concurrent = 1")
    inner.release.clear()
    held = asyncio.create_task(post(app, "sk-a"))
    while not inner.seen:
        await asyncio.sleep(0.01)
    refused = await post(app, "sk-a")
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert "concurrent requests" in refused.json()["error"]["message"]
    inner.release.set()
    assert (await held).status_code == 200
    assert (await post(app, "sk-a")).status_code == 200


def test_model_allowed_follows_the_requests_key() -> None:
    assert model_allowed("anything", "anything")
    token = current_key.set(RequestKey(KeyPolicy("x", frozenset({"tiny-llm"}))))
    try:
        assert model_allowed("tiny-llm:alpha", "tiny-llm")
        assert not model_allowed("other", "other")
    finally:
        current_key.reset(token)


# -- Redis ---------------------------------------------------------------------------------------------


@pytest.fixture
def redis_url(tmp_path: Path) -> Any:
    from tests.redis_server import RedisServer

    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server.url
    server.stop()


async def test_redis_counts_as_memory_does(redis_url: str) -> None:
    from gateway.keys.limits import RedisLimits

    first = RedisLimits(redis_url, fail="closed", timeout=1.0)
    second = RedisLimits(redis_url, fail="closed", timeout=1.0)  # another gateway
    policy = KeyPolicy("x", rpm=3, tpm=50, max_concurrent=2)
    a, b = await first.admit(policy), await second.admit(policy)
    assert (a.refused, a.requests, b.refused, b.requests) == (None, 1, None, 2)
    assert 0 < a.reset <= 60
    assert (await first.admit(policy)).refused == "concurrency"
    await second.release(policy, b)
    c = await first.admit(policy)
    assert c.requests == 3
    await first.release(policy, a)
    assert (await second.admit(policy)).refused == "requests"
    assert (await second.admit(policy, generating=False)).refused == "requests"
    await first.release(policy, c)
    first.charge(policy, 70)
    await first.close()  # waits for the charge
    other = KeyPolicy("y", tpm=50)
    second.charge(other, 70)
    await asyncio.sleep(0.2)
    assert (await second.admit(other)).refused == "tokens"
    await second.close()


async def test_redis_down_fails_open_or_closed(tmp_path: Path) -> None:
    from gateway.keys.limits import LimitUnavailable, RedisLimits
    from gateway.triton_launcher import free_port

    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    policy = KeyPolicy("x", rpm=1)
    opened = RedisLimits(url, fail="open", timeout=0.2)
    admit = await opened.admit(policy)
    assert admit.refused is None and not admit.counted and rate_headers(policy, admit) == []
    closed = RedisLimits(url, fail="closed", timeout=0.2)
    with pytest.raises(LimitUnavailable) as refused:
        await closed.admit(policy)
    assert (refused.value.status_code, refused.value.code) == (503, "rate_limiter_unavailable")
    await opened.close()
    await closed.close()
