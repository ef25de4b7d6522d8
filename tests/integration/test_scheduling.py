"""Scheduling over real HTTP against the session's real Triton: bands, fair share, shedding,
deadlines and headroom, as a client of each key sees them.

Every test holds a model's slots with slow streams (``Holder``: the client closes the stream to
give its slot back, which the gateway turns into a cancel of Triton's work), queues requests one
at a time, each counted on the gateway's ``gateway_requests_waiting`` gauge before the next is
sent so that the arrival order is known, then frees a slot. With one free slot the queued
requests run one after another, so the order in which they finish is the order they were
admitted. Costs are made equal (same prompt, same ``max_tokens``, and the script reports exactly
the prompt tokens the gateway counts, so no cost is corrected when a request ends): the expected
order is then computable from the policy alone.

Three gateways: one slot and no headroom (order, shedding, deadlines, bands, metrics, errors);
two slots with headroom, fair and fifo (headroom, and the fifo order).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.keys.policy import hash_key
from gateway.triton_launcher import TritonServer
from tests.integration.conftest import GatewayProcess, start_gateway, stop_gateway

pytestmark = pytest.mark.anyio

SCRIPTED = "scripted"
WAITING = "gateway_requests_waiting"
RUNNING = "gateway_requests_running"
PRIORITY = "x-gateway-priority"

KEYS = {
    # name: key file fields; the key itself is "sk-<name>"
    "a": "weight = 1",
    "b": "weight = 1.0",
    "c": "weight = 2",
    "ops": 'top_priority = "critical"',  # runs as standard unless it asks for critical
    "std": 'priority = "standard"',  # may ask nothing more urgent than standard
    "bulk": 'priority = "sheddable"',  # sheddable by default, and may not ask more
    "hold": "",  # the slow streams that hold slots: a flow of their own
}
WEIGHTS = {"a": 1, "b": 1, "c": 2, "ops": 1}
FLAT_KEY = "sk-flat"

SHORT_TOKENS = 3
"""A queued request's script: this many responses of one token each, 0.05 s apart (a slot held
~0.15 s, long enough that one slot's requests finish in admission order on a busy machine),
asked with ``max_tokens`` equal to it."""


def script(responses: int, delay: float, prompt_tokens: int = 1) -> str:
    return json.dumps(
        {"responses": [{"utf8": ["tok "], "delay": delay} for _ in range(responses)], "num_input_tokens": prompt_tokens}
    )


SHORT = script(SHORT_TOKENS, 0.05)
HOLD = script(400, 0.05)
"""20 s of stream: longer than any test holds a slot, short enough to end by itself after a failure."""


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer sk-{name}"}


def key_file() -> str:
    return "\n".join(
        f'[[key]]\nname = "{name}"\nsha256 = "{hash_key("sk-" + name)}"\n{fields}\n' for name, fields in KEYS.items()
    )


# -- gateways --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def key_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("scheduling-keys") / "keys.toml"
    path.write_text(key_file())
    return path


def _gateway(
    triton: TritonServer, key_path: Path, tmp_path_factory: pytest.TempPathFactory, name: str, **env: str
) -> Iterator[GatewayProcess]:
    gateway = start_gateway(
        triton.grpc_url,
        tmp_path_factory.mktemp(name) / "gateway.log",
        env={
            "GATEWAY_API_KEY_POLICY_FILE": str(key_path),
            "GATEWAY_API_KEYS": FLAT_KEY,
            "GATEWAY_QUEUE_TIMEOUT": "20",
            "GATEWAY_LOG_REQUESTS": "true",
            **{f"GATEWAY_{setting}": value for setting, value in env.items()},
        },
    )
    yield gateway
    stop_gateway(gateway)


@pytest.fixture(scope="module")
def one_slot(
    triton: TritonServer, key_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    """Fair scheduling, one slot per model, no headroom: the next request is always the policy's pick."""
    yield from _gateway(
        triton, key_path, tmp_path_factory, "one-slot", MAX_CONCURRENT_REQUESTS="1", SCHEDULING_HEADROOM="0"
    )


@pytest.fixture(scope="module")
def headroom_fair(
    triton: TritonServer, key_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    """Two slots and half of that (one slot) of headroom."""
    yield from _gateway(
        triton, key_path, tmp_path_factory, "headroom-fair", MAX_CONCURRENT_REQUESTS="2", SCHEDULING_HEADROOM="0.5"
    )


@pytest.fixture(scope="module")
def headroom_fifo(
    triton: TritonServer, key_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    """The same in fifo mode, which never uses headroom."""
    yield from _gateway(
        triton,
        key_path,
        tmp_path_factory,
        "headroom-fifo",
        MAX_CONCURRENT_REQUESTS="2",
        SCHEDULING_HEADROOM="0.5",
        SCHEDULING="fifo",
    )


@contextlib.asynccontextmanager
async def client(gateway: GatewayProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as http:
        yield http


@contextlib.asynccontextmanager
async def sdk(gateway: GatewayProcess, name: str) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=gateway.url + "/v1", api_key=f"sk-{name}", max_retries=0, timeout=30
    ) as openai_client:
        yield openai_client


# -- metrics ---------------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


async def metric(http: httpx.AsyncClient, name: str, **labels: str) -> float:
    """Sum of ``name``'s samples whose labels include ``labels`` (0 when there is none yet). The
    metrics page is behind a key when keys are on."""
    page = await http.get("/metrics", headers=bearer("hold"))
    assert page.status_code == 200, page.text
    total = 0.0
    for line in page.text.splitlines():
        match = _SAMPLE.match(line)
        if match and match["name"] == name:
            found = dict(_LABEL.findall(match["labels"] or ""))
            if all(found.get(label) == value for label, value in labels.items()):
                total += float(match["value"])
    return total


async def reaches(http: httpx.AsyncClient, name: str, value: float, timeout: float = 10.0, **labels: str) -> None:
    """Wait, without blocking the loop the requests run on, for a gauge to show ``value``: the event
    a step waits on, where a fixed sleep races a busy machine."""
    deadline = time.monotonic() + timeout
    while (seen := await metric(http, name, **labels)) != value:
        if time.monotonic() > deadline:
            raise AssertionError(f"{name}{labels} stayed {seen}, never {value}")
        await asyncio.sleep(0.02)


# -- requests --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ask:
    """One request: its label in the test, its key's name, and how it asks for a band."""

    label: str
    key: str
    priority: int | None = None
    """The body field."""
    header: str | None = None
    """``x-gateway-priority``."""
    timeout: str | None = None
    """``x-request-timeout``."""


async def send(http: httpx.AsyncClient, ask: Ask, prompt: str = SHORT) -> httpx.Response:
    headers = {"Authorization": f"Bearer {FLAT_KEY}"} if ask.key == "flat" else bearer(ask.key)
    if ask.header is not None:
        headers[PRIORITY] = ask.header
    if ask.timeout is not None:
        headers["x-request-timeout"] = ask.timeout
    body: dict[str, Any] = {"model": SCRIPTED, "prompt": prompt, "max_tokens": SHORT_TOKENS}
    if ask.priority is not None:
        body["priority"] = ask.priority
    return await http.post("/v1/completions", json=body, headers=headers)


async def queue_one_by_one(
    http: httpx.AsyncClient, asks: Sequence[Ask], prompt: str = SHORT
) -> tuple[list[asyncio.Task[httpx.Response]], list[str]]:
    """Send ``asks`` in order, each once the gateway counts the one before as waiting. Returns the
    requests and the list their labels are appended to as they finish."""
    finished: list[str] = []

    async def one(ask: Ask) -> httpx.Response:
        response = await send(http, ask, prompt)
        finished.append(ask.label)
        return response

    base = await metric(http, WAITING, model=SCRIPTED)
    tasks = []
    for count, ask in enumerate(asks, 1):
        tasks.append(asyncio.create_task(one(ask)))
        await reaches(http, WAITING, base + count, model=SCRIPTED)
    return tasks, finished


class Holder:
    """A slow stream holding one slot until ``release``: the client closes it, the gateway cancels
    Triton's work and passes the slot on."""

    def __init__(self, http: httpx.AsyncClient, key: str) -> None:
        self.http = http
        self.key = key
        self.opened = asyncio.Event()
        self.headers: httpx.Headers | None = None
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        body = {"model": SCRIPTED, "prompt": HOLD, "stream": True, "max_tokens": 400}
        async with self.http.stream("POST", "/v1/completions", json=body, headers=bearer(self.key)) as response:
            assert response.status_code == 200, await response.aread()
            self.headers = response.headers
            self.opened.set()
            async for _ in response.aiter_bytes():
                pass

    async def release(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


@contextlib.asynccontextmanager
async def holding(http: httpx.AsyncClient, count: int, key: str = "hold") -> AsyncIterator[list[Holder]]:
    """``count`` slots held (counted running on the gateway), all given back on the way out."""
    base = await metric(http, RUNNING, model=SCRIPTED)
    holders: list[Holder] = []
    try:
        for _ in range(count):
            holders.append(Holder(http, key))
            await reaches(http, RUNNING, base + len(holders), model=SCRIPTED)
        yield holders
    finally:
        for holder in holders:
            await holder.release()


async def balanced_prompt(http: httpx.AsyncClient) -> str:
    """``SHORT`` whose script reports (``num_input_tokens``, what ``usage`` then shows) exactly as
    many prompt tokens as the gateway counts for it: the cost a request is queued with (prompt +
    ``max_tokens``) is then the cost it is charged when it ends, so no correction moves a flow.
    The number is part of the prompt, so it may change the count (``91`` is two tokens, ``92``
    one); trailing spaces (a token each, still the same JSON) make up a count that fell short."""
    reported, spaces = 0, 0
    for _ in range(8):
        prompt = script(SHORT_TOKENS, 0.05, reported) + " " * spaces
        answer = await http.post("/tokenize", json={"model": SCRIPTED, "prompt": prompt}, headers=bearer("hold"))
        assert answer.status_code == 200, answer.text
        counted = answer.json()["count"]
        if counted == reported:
            return prompt
        if counted > reported:
            reported = counted
        else:
            spaces += reported - counted
    raise AssertionError("no script reports its own prompt token count")


# -- admission order -------------------------------------------------------------------------------

ARRIVALS = [
    ("a1", "a", 0),
    ("a2", "a", 0),
    ("a3", "a", 0),
    ("a4", "a", 0),
    ("ops1", "ops", -1),
    ("b1", "b", 0),
    ("b2", "b", 0),
    ("c1", "c", 0),
    ("c2", "c", 0),
    ("c3", "c", 0),
    ("c4", "c", 0),
    ("ops2", "ops", -1),
]
"""(label, key, band) in arrival order, all queued behind one held slot. The critical ones ask by
header (ops1) and by body field (ops2)."""


def asks_of(arrivals: Sequence[tuple[str, str, int]]) -> list[Ask]:
    return [
        Ask(label, key, priority=-1 if label == "ops2" else None, header="critical" if label == "ops1" else None)
        for label, key, _ in arrivals
    ]


def start_time_fair_order(arrivals: Sequence[tuple[str, str, int]], weights: dict[str, int]) -> list[str]:
    """The admission order the policy gives requests of equal cost, all queued before any is admitted.

    Bands are strict: every waiting request of a lower band goes before any of a higher one.
    Inside a band, start-time fair queueing: on arrival a request's start tag is
    max(virtual time, its flow's last finish tag), and its finish tag start + cost / weight;
    the next admitted is the lowest start tag, ties by arrival. Nothing is admitted while the
    requests arrive (the slot is held), so the virtual time is the same for all of them, and
    fresh flows start at it. A flow's tags step by cost / weight: weight 2 takes two turns per
    round, and a flow that sent many requests does not push the others behind all of them. With
    equal costs charged exactly, tagging at the flow's head when it reaches the front gives the
    same order."""
    virtual = Fraction(0)
    finish: dict[str, Fraction] = {}
    tagged = []
    for arrival, (label, flow, band) in enumerate(arrivals):
        start = max(virtual, finish.get(flow, virtual))
        finish[flow] = start + Fraction(1, weights[flow])
        tagged.append((band, start, arrival, label))
    return [label for *_, label in sorted(tagged)]


async def test_one_slot_admits_by_band_then_by_weighted_fair_share_not_by_arrival(one_slot: GatewayProcess) -> None:
    expected = start_time_fair_order(ARRIVALS, WEIGHTS)
    # start tags (in costs): a 0,1,2,3; b 0,1; c (weight 2) 0,½,1,1½; critical first whenever it came
    assert expected == ["ops1", "ops2", "a1", "b1", "c1", "c2", "a2", "b2", "c3", "c4", "a3", "a4"]
    async with client(one_slot) as http:
        prompt = await balanced_prompt(http)
        async with holding(http, 1) as (holder,):
            tasks, finished = await queue_one_by_one(http, asks_of(ARRIVALS), prompt)
            await holder.release()
            responses = await asyncio.gather(*tasks)
    assert [r.status_code for r in responses] == [200] * len(ARRIVALS), [r.text for r in responses]
    assert finished == expected
    assert finished.index("b2") < finished.index("a3")  # b, who came after a's four, is not last
    bands = {label: str(band) for label, _, band in ARRIVALS}
    assert {ask.label: r.headers.get(PRIORITY) for ask, r in zip(asks_of(ARRIVALS), responses, strict=True)} == bands
    # the costs were equal as intended: every request reported the prompt tokens the gateway counted
    prompt_tokens = json.loads(prompt)["num_input_tokens"]
    assert prompt_tokens > 1
    assert {r.json()["usage"]["total_tokens"] for r in responses} == {prompt_tokens + SHORT_TOKENS}


async def test_fifo_admits_by_band_then_by_arrival(headroom_fifo: GatewayProcess) -> None:
    """Two slots held, one freed: the queue drains through one slot, in fifo's order."""
    async with client(headroom_fifo) as http:
        prompt = await balanced_prompt(http)
        async with holding(http, 2) as (first, _):
            tasks, finished = await queue_one_by_one(http, asks_of(ARRIVALS), prompt)
            await first.release()
            responses = await asyncio.gather(*tasks)
    assert [r.status_code for r in responses] == [200] * len(ARRIVALS), [r.text for r in responses]
    assert finished == ["ops1", "ops2", "a1", "a2", "a3", "a4", "b1", "b2", "c1", "c2", "c3", "c4"]


# -- shedding --------------------------------------------------------------------------------------

SHEDDABLE_WAYS: list[tuple[str, dict[str, Any]]] = [
    ("std", {"extra_body": {"priority": 1}}),
    ("std", {"extra_headers": {PRIORITY: "sheddable"}}),
    ("bulk", {}),  # the key's own band
]


async def test_sheddable_work_is_refused_at_once_while_the_slot_is_busy_and_runs_when_it_is_free(
    one_slot: GatewayProcess,
) -> None:
    async with client(one_slot) as http:
        async with holding(http, 1):
            for name, way in SHEDDABLE_WAYS:
                async with sdk(one_slot, name) as openai_client:
                    started = time.monotonic()
                    with pytest.raises(openai.RateLimitError) as refused:
                        await openai_client.completions.create(
                            model=SCRIPTED, prompt=SHORT, max_tokens=SHORT_TOKENS, **way
                        )
                    took = time.monotonic() - started
                assert took < 1.0, f"refused after {took:.2f} s: it waited (queue timeout 20 s)"
                error = refused.value
                assert isinstance(error.body, dict)
                assert (error.body["type"], error.body["code"]) == ("rate_limit_error", "sheddable_saturated")
                assert error.body["message"]
                assert int(error.response.headers["retry-after"]) >= 1
                assert error.response.headers[PRIORITY] == "1"
            assert await metric(http, WAITING, model=SCRIPTED) == 0  # never queued
        await reaches(http, RUNNING, 0, model=SCRIPTED)
        for name, way in SHEDDABLE_WAYS:
            async with sdk(one_slot, name) as openai_client:
                raw = await openai_client.completions.with_raw_response.create(
                    model=SCRIPTED, prompt=SHORT, max_tokens=SHORT_TOKENS, **way
                )
            assert raw.headers[PRIORITY] == "1"
            assert raw.parse().choices[0].text == "tok " * SHORT_TOKENS
        # chat and Responses take the body field too
        async with sdk(one_slot, "std") as openai_client:
            chat = await openai_client.chat.completions.with_raw_response.create(
                model=SCRIPTED,
                messages=[{"role": "user", "content": f"<script>{SHORT}</script>"}],
                extra_body={"priority": 1},
            )
            assert chat.headers[PRIORITY] == "1"
            assert chat.parse().choices[0].message.content == "tok " * SHORT_TOKENS
            answer = await openai_client.responses.with_raw_response.create(
                model=SCRIPTED, input=SHORT, extra_body={"priority": 1}
            )
            assert answer.headers[PRIORITY] == "1"
            assert answer.parse().output_text == "tok " * SHORT_TOKENS


# -- deadlines -------------------------------------------------------------------------------------


async def test_a_deadline_the_queue_cannot_meet_is_refused_at_once_and_a_long_one_waits(
    one_slot: GatewayProcess,
) -> None:
    async with client(one_slot) as http:
        for _ in range(2):  # a history: slots held ~0.75 s each
            assert (await send(http, Ask("history", "std"), script(15, 0.05))).status_code == 200
        async with holding(http, 1) as (holder,):
            waiting, _ = await queue_one_by_one(http, [Ask("w1", "std"), Ask("w2", "std")])
            # two ahead + itself, times a mean hold of at least 0.15 s, over one slot: >= 0.45 s
            started = time.monotonic()
            refused = await send(http, Ask("hurried", "std", timeout="0.2"))
            took = time.monotonic() - started
            assert refused.status_code == 429, refused.text
            assert took < 0.15, f"refused after {took:.3f} s, not at once"
            error = refused.json()["error"]
            assert (error["type"], error["code"]) == ("rate_limit_error", "deadline_unmeetable")
            assert int(refused.headers["retry-after"]) >= 1
            assert refused.headers[PRIORITY] == "0"
            patient, _ = await queue_one_by_one(http, [Ask("patient", "std", timeout="30")])
            await holder.release()
            answers = await asyncio.gather(*waiting, *patient)
        assert [a.status_code for a in answers] == [200, 200, 200]
        assert await metric(http, "gateway_requests_shed_total", model=SCRIPTED, band="0", reason="deadline") >= 1


# -- bands a key may ask ---------------------------------------------------------------------------


async def test_a_key_cannot_raise_its_own_band(one_slot: GatewayProcess) -> None:
    cases = [
        (Ask("std body", "std", priority=-1), "0"),
        (Ask("std header", "std", header="critical"), "0"),
        (Ask("std header int", "std", header="-1"), "0"),
        (Ask("std lower", "std", header="sheddable"), "1"),  # less urgent is always allowed
        (Ask("bulk body", "bulk", priority=0), "1"),  # its top is its own band, sheddable
        (Ask("ops default", "ops"), "0"),
        (Ask("ops body", "ops", priority=-1), "-1"),
        (Ask("ops header", "ops", header="critical"), "-1"),
        (Ask("ops header int", "ops", header="-1"), "-1"),
        (Ask("flat", "flat", priority=-1), "-1"),  # a flat key may ask any band
    ]
    async with client(one_slot) as http:
        for ask, band in cases:
            response = await send(http, ask)
            assert response.status_code == 200, (ask, response.text)
            assert response.headers[PRIORITY] == band, ask
        # ...and is ordered as the band it got: standard behind a critical that came later
        async with holding(http, 1) as (holder,):
            await asyncio.wait_for(holder.opened.wait(), 10)
            assert holder.headers is not None and holder.headers[PRIORITY] == "0"  # on a stream too
            tasks, finished = await queue_one_by_one(
                http, [Ask("std asks critical", "std", priority=-1), Ask("ops critical", "ops", header="critical")]
            )
            await holder.release()
            responses = await asyncio.gather(*tasks)
    assert [r.status_code for r in responses] == [200, 200]
    assert [r.headers[PRIORITY] for r in responses] == ["0", "-1"]
    assert finished == ["ops critical", "std asks critical"]


# -- headroom --------------------------------------------------------------------------------------


async def test_headroom_lets_a_quiet_key_and_critical_work_past_a_flood_at_once(headroom_fair: GatewayProcess) -> None:
    """Key a holds both regular slots and has one more waiting. One slot of headroom: b's flow
    runs fewer than its weighted share (1 of 2 slots), and critical is more urgent than what runs,
    so each is admitted at once; a, at its share already, never takes it."""
    async with client(headroom_fair) as http:
        async with holding(http, 2, key="a") as holders:
            flood, _ = await queue_one_by_one(http, [Ask("a3", "a")])
            for ask, band in ((Ask("b1", "b"), "0"), (Ask("critical", "ops", priority=-1), "-1")):
                try:
                    answer = await asyncio.wait_for(send(http, ask), 10)
                except TimeoutError:
                    pytest.fail(f"{ask.label} was not admitted while a's streams held both regular slots")
                assert answer.status_code == 200, answer.text
                assert answer.headers[PRIORITY] == band
                assert not any(holder.task.done() for holder in holders)  # a's streams still run
                await reaches(http, RUNNING, 2, model=SCRIPTED)  # the headroom slot came back...
                assert await metric(http, WAITING, model=SCRIPTED) == 1  # ...and a3 did not take it
                assert not flood[0].done()
            for holder in holders:
                await holder.release()
            assert (await flood[0]).status_code == 200
        for key, band in (("b", "0"), ("ops", "-1")):
            labels = {"model": SCRIPTED, "key": key, "band": band}
            assert await metric(http, "gateway_queue_wait_seconds_count", **labels) == 1
            assert await metric(http, "gateway_queue_wait_seconds_sum", **labels) < 0.05  # no wait


async def test_fifo_never_uses_headroom(headroom_fifo: GatewayProcess) -> None:
    """The same flood: b and critical wait (each is counted waiting before the next is sent),
    then drain through one freed slot in band order, then arrival order."""
    async with client(headroom_fifo) as http:
        async with holding(http, 2, key="a") as (first, _):
            tasks, finished = await queue_one_by_one(
                http, [Ask("a3", "a"), Ask("b1", "b"), Ask("critical", "ops", priority=-1)]
            )
            await first.release()
            responses = await asyncio.gather(*tasks)
    assert [r.status_code for r in responses] == [200, 200, 200]
    assert finished == ["critical", "a3", "b1"]


# -- observability and errors ----------------------------------------------------------------------


def access_lines(gateway: GatewayProcess) -> list[dict[str, Any]]:
    return [
        json.loads(line.split("] ", 1)[1])
        for line in gateway.log_text().splitlines()
        if " gateway.access [" in line and "] {" in line
    ]


async def test_queue_waits_and_sheds_are_counted_and_logged(one_slot: GatewayProcess) -> None:
    async with client(one_slot) as http:
        assert (await send(http, Ask("fast", "a"))).status_code == 200  # admitted at once: a wait of 0
        async with holding(http, 1):
            assert (await send(http, Ask("shed", "std", priority=1))).status_code == 429
        labels = {"model": SCRIPTED, "key": "a", "band": "0"}
        assert await metric(http, "gateway_queue_wait_seconds_count", **labels) > 0
        shed = {"model": SCRIPTED, "band": "1", "reason": "sheddable"}
        assert await metric(http, "gateway_requests_shed_total", **shed) > 0
    lines = access_lines(one_slot)
    mine = [line for line in lines if line["key"] == "a"]
    assert mine and all(line["priority"] == 0 and isinstance(line["queue_ms"], int | float) for line in mine)
    assert any(line["key"] == "std" and line["status"] == 429 and line["priority"] == 1 for line in lines)


async def test_an_unknown_band_is_a_400_naming_the_header(one_slot: GatewayProcess) -> None:
    async with sdk(one_slot, "std") as openai_client:
        with pytest.raises(openai.BadRequestError) as bad:
            await openai_client.completions.create(
                model=SCRIPTED, prompt=SHORT, max_tokens=SHORT_TOKENS, extra_headers={PRIORITY: "urgent"}
            )
    assert isinstance(bad.value.body, dict)
    assert bad.value.body["type"] == "invalid_request_error"
    assert bad.value.body["param"] == PRIORITY
    assert "urgent" in bad.value.body["message"]
