"""``jobs.runner.BatchRunner`` on a real job store (a SQLite file) and a scripted ``LineRunner``.

The runner's turns are driven by hand (``turn()``) on a hand-moved clock, so the retry backoff
(seconds) costs nothing; the background loop is never started. What is checked: a turn leases
and runs lines and keeps their answers; "not now" waits and asks again without spending an
attempt; a transient answer is retried up to ``batch_line_attempts``, any other kept at once;
a cancelled batch stops its running lines; a runner that closes gives its lines back at once.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gateway.config import Settings
from gateway.jobs.lines import parse_input_file
from gateway.jobs.records import BatchRecord, new_id
from gateway.jobs.runner import RETRY_BACKOFF, BatchRunner, LineAnswer, LineCall
from gateway.jobs.store import JobStore
from gateway.store import ResponseStore, open_store

pytestmark = pytest.mark.anyio

OWNER = "key:team-a"
T0 = 1_700_000_000.0
LEASE = 30.0
OK = LineAnswer(200, b'{"object":"chat.completion","n":1180591620717411303425}')
BAD = LineAnswer(400, b'{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":null}}')
DOWN = LineAnswer(503, b'{"error":{"message":"down","type":"service_unavailable","param":null,"code":null}}')


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass(frozen=True)
class Knobs:
    """The runner's settings (``RunnerSettings``), small."""

    batch_runner: bool = True
    batch_concurrency: int = 4
    batch_max_concurrency: int = 8
    batch_lease_seconds: float = LEASE
    batch_poll_interval: float = 1.0
    batch_line_attempts: int = 3


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class ScriptedLines:
    """A ``LineRunner`` answering each line (its body's ``line``) from a script, the last answer
    again once the script is spent; ``hold``: lines that run until cancelled."""

    script: dict[int, list[LineAnswer | Exception]] = field(default_factory=dict)
    hold: set[int] = field(default_factory=set)
    calls: list[LineCall] = field(default_factory=list)
    called_at: list[float] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)

    def lines(self) -> list[int]:
        return [json.loads(call.body)["line"] for call in self.calls]

    async def run(self, call: LineCall) -> LineAnswer:
        line = json.loads(call.body)["line"]
        tries = self.lines().count(line)
        self.calls.append(call)
        self.called_at.append(time.monotonic())
        if line in self.hold:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled.append(line)
                raise
        answers = self.script.get(line, [OK])
        answer = answers[min(tries, len(answers) - 1)]
        if isinstance(answer, Exception):
            raise answer
        return answer


@dataclass
class Metrics:
    ended: list[str] = field(default_factory=list)

    def batch_line_ended(self, result: str) -> None:
        self.ended.append(result)

    def batch_lines_running(self, count: int) -> None:
        pass

    def batch_census(self, batches: dict[str, int], lines: dict[str, int]) -> None:
        pass


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[ResponseStore]:
    store = open_store(Settings(responses_store=f"sqlite:///{tmp_path / 'jobs.db'}"))
    assert store is not None
    await store.start()
    yield store
    await store.close()


@pytest.fixture
async def jobs(database: ResponseStore) -> JobStore:
    store = JobStore(database)
    await store.start()
    return store


async def new_batch(jobs: JobStore, count: int, *, max_concurrency: int = 8, window: float = 3600.0) -> BatchRecord:
    """A batch of ``count`` chat lines, from an input file as an upload gives it."""
    content = "".join(
        json.dumps({"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions", "body": {"line": i}})
        + "\n"
        for i in range(1, count + 1)
    )
    record = BatchRecord(
        id=new_id("batch_"),
        owner=OWNER,
        endpoint="/v1/chat/completions",
        input_file_id="file-input",
        completion_window="1h",
        status="in_progress",
        created_at=T0,
        expires_at=T0 + window,
        max_concurrency=max_concurrency,
        times={"in_progress": T0},
    )
    await jobs.create_batch(record, parse_input_file(content.encode(), 1000), T0 + 86400)
    return record


def runner_on(jobs: JobStore, lines: ScriptedLines, clock: Clock, **knobs: Any) -> BatchRunner:
    return BatchRunner(jobs, lines, Knobs(**knobs), Metrics(), clock)


async def settle(runner: BatchRunner) -> None:
    """Every line this runner started has ended (its answer kept or its line given back)."""
    await asyncio.gather(*list(runner._running.values()), return_exceptions=True)
    assert not runner._running


async def until(predicate: Callable[[], bool], timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.001)


async def rows(jobs: JobStore, batch: BatchRecord) -> list[tuple[Any, ...]]:
    """Each line's state, attempts, lease holder, lease end and status code."""
    return await jobs.db.fetch_all(
        "SELECT line, state, attempts, lease_owner, lease_until, status_code FROM gateway_batch_lines "
        "WHERE batch_id = ? ORDER BY line",
        (batch.id,),
    )


async def file_lines(jobs: JobStore, file_id: str | None, now: float) -> list[dict[str, Any]]:
    assert file_id is not None
    content = await jobs.file_content(file_id, OWNER, now)
    assert content is not None
    return [json.loads(line) for line in content.splitlines()]


def ended(runner: BatchRunner) -> list[str]:
    assert isinstance(runner.metrics, Metrics)
    return runner.metrics.ended


async def test_a_turn_runs_each_line_keeps_its_answer_and_a_later_turn_closes_the_batch(jobs: JobStore) -> None:
    batch = await new_batch(jobs, 3)
    clock = Clock()
    lines = ScriptedLines({2: [BAD]})
    runner = runner_on(jobs, lines, clock)
    await runner.turn()
    await settle(runner)
    assert sorted(lines.lines()) == [1, 2, 3]
    call = lines.calls[0]
    assert (call.url, call.owner) == ("/v1/chat/completions", OWNER)
    assert call.request_id.startswith("batch_req_") and len({c.request_id for c in lines.calls}) == 3
    assert json.loads(call.body) == {"line": lines.lines()[0]}
    assert [(line, state, code) for line, state, _, _, _, code in await rows(jobs, batch)] == [
        (1, "done", 200),
        (2, "error", 400),
        (3, "done", 200),
    ]
    clock.now += 1
    await runner.turn()
    closed = await jobs.get_batch(batch.id, OWNER)
    assert closed is not None and closed.status == "completed"
    output = await file_lines(jobs, closed.output_file_id, clock.now)
    assert [(item["custom_id"], item["response"]["status_code"]) for item in output] == [("req-1", 200), ("req-3", 200)]
    assert output[0]["response"]["body"]["n"] == 1180591620717411303425
    errors = await file_lines(jobs, closed.error_file_id, clock.now)
    assert [(item["custom_id"], item["response"]["body"]["error"]["message"]) for item in errors] == [("req-2", "bad")]
    assert sorted(ended(runner)) == ["completed", "completed", "failed"]


async def test_a_turn_takes_its_free_places_and_the_batchs_limit_only(jobs: JobStore) -> None:
    await new_batch(jobs, 6, max_concurrency=2)
    lines = ScriptedLines(hold={1, 2, 3, 4, 5, 6})
    runner = runner_on(jobs, lines, Clock(), batch_concurrency=3)
    await runner.turn()
    await until(lambda: len(lines.calls) == 2)
    await runner.turn()  # a place free, but the batch is at its limit
    other = await new_batch(jobs, 3)
    await runner.turn()  # one free place left: one line of the other batch
    await until(lambda: len(lines.calls) == 3)
    assert json.loads(lines.calls[2].body) == {"line": 1} and len(runner._running) == 3
    assert other.id in {key[0] for key in runner._running}
    await runner.turn()
    await asyncio.sleep(0)
    assert len(lines.calls) == 3
    await runner.close()


async def test_a_runner_with_batch_runner_off_runs_nothing_but_still_closes_batches(jobs: JobStore) -> None:
    batch = await new_batch(jobs, 1)
    worker = runner_on(jobs, ScriptedLines(), Clock())
    await worker.turn()
    await settle(worker)
    idle_lines = ScriptedLines()
    idle = runner_on(jobs, idle_lines, Clock(T0 + 1), batch_runner=False)
    other = await new_batch(jobs, 1)
    await idle.turn()
    assert idle_lines.calls == []
    closed = await jobs.get_batch(batch.id, OWNER)
    assert closed is not None and closed.status == "completed"
    still = await jobs.get_batch(other.id, OWNER)
    assert still is not None and still.status == "in_progress"


async def test_not_now_waits_and_asks_again_holding_the_lease_without_spending_an_attempt(jobs: JobStore) -> None:
    batch = await new_batch(jobs, 1)
    wait = 0.05
    lines = ScriptedLines({1: [LineAnswer(retry_after=wait), LineAnswer(retry_after=wait), OK]})
    runner = runner_on(jobs, lines, Clock(), batch_line_attempts=1)  # one attempt: a 5xx would be final
    await runner.turn()
    await until(lambda: len(lines.calls) == 1)
    ((_, state, attempts, holder, _, _),) = await rows(jobs, batch)
    assert (state, attempts, holder) == ("pending", 0, runner.name)  # held while it waits
    assert await jobs.lease("another", T0, LEASE, 10, 8) == []
    await settle(runner)
    assert len(lines.calls) == 3
    gaps = [b - a for a, b in zip(lines.called_at, lines.called_at[1:], strict=False)]
    assert all(gap >= 0.8 * wait - 0.005 for gap in gaps), gaps  # retry_after, jittered by at most 20 %
    assert [row[1:3] for row in await rows(jobs, batch)] == [("done", 0)]
    assert ended(runner) == ["completed"]


@pytest.mark.parametrize("transient", [DOWN, LineAnswer(500, b'{"error":{}}'), LineAnswer(429, b'{"error":{}}')])
async def test_a_transient_answer_is_retried_after_the_backoff_up_to_the_attempts_then_kept(
    jobs: JobStore, transient: LineAnswer
) -> None:
    batch = await new_batch(jobs, 1)
    clock = Clock()
    lines = ScriptedLines({1: [transient]})
    runner = runner_on(jobs, lines, clock, batch_line_attempts=3)
    await runner.turn()
    await settle(runner)
    assert await rows(jobs, batch) == [(1, "pending", 1, None, T0 + RETRY_BACKOFF[0], None)]
    clock.now = T0 + RETRY_BACKOFF[0] - 0.1
    await runner.turn()
    assert len(lines.calls) == 1  # not before its backoff
    clock.now = T0 + RETRY_BACKOFF[0]
    await runner.turn()
    await settle(runner)
    assert len(lines.calls) == 2
    assert await rows(jobs, batch) == [(1, "pending", 2, None, clock.now + RETRY_BACKOFF[1], None)]
    clock.now += RETRY_BACKOFF[1]
    await runner.turn()
    await settle(runner)
    assert len(lines.calls) == 3  # the last attempt: its answer is the line's
    assert [row[1:] for row in await rows(jobs, batch)] == [("error", 2, None, None, transient.status_code)]
    assert ended(runner) == ["retried", "retried", "failed"]
    clock.now += 1
    await runner.turn()
    closed = await jobs.get_batch(batch.id, OWNER)
    assert closed is not None and closed.status == "completed" and closed.output_file_id is None
    (kept,) = await file_lines(jobs, closed.error_file_id, clock.now)
    assert kept["response"]["status_code"] == transient.status_code
    assert kept["response"]["body"] == json.loads(transient.body)


async def test_a_line_answered_after_a_transient_failure_ends_in_the_output(jobs: JobStore) -> None:
    batch = await new_batch(jobs, 1)
    clock = Clock()
    runner = runner_on(jobs, ScriptedLines({1: [DOWN, OK]}), clock)
    await runner.turn()
    await settle(runner)
    clock.now += RETRY_BACKOFF[0]
    await runner.turn()
    await settle(runner)
    assert [row[1:3] for row in await rows(jobs, batch)] == [("done", 1)]


async def test_a_client_error_is_kept_at_once(jobs: JobStore) -> None:
    batch = await new_batch(jobs, 1)
    lines = ScriptedLines({1: [BAD, OK]})
    runner = runner_on(jobs, lines, Clock(), batch_line_attempts=5)
    await runner.turn()
    await settle(runner)
    assert len(lines.calls) == 1
    assert [row[1:] for row in await rows(jobs, batch)] == [("error", 0, None, None, 400)]
    assert ended(runner) == ["failed"]


async def test_a_line_whose_answering_raises_is_a_500_retried_then_kept_in_openais_error_shape(
    jobs: JobStore,
) -> None:
    batch = await new_batch(jobs, 1)
    clock = Clock()
    lines = ScriptedLines({1: [RuntimeError("a bug")]})
    runner = runner_on(jobs, lines, clock, batch_line_attempts=2)
    await runner.turn()
    await settle(runner)
    clock.now += RETRY_BACKOFF[0]
    await runner.turn()
    await settle(runner)
    assert len(lines.calls) == 2
    clock.now += 1
    await runner.turn()
    closed = await jobs.get_batch(batch.id, OWNER)
    assert closed is not None
    (kept,) = await file_lines(jobs, closed.error_file_id, clock.now)
    assert kept["response"]["status_code"] == 500
    error = kept["response"]["body"]["error"]
    assert error["type"] == "server_error" and "RuntimeError" in error["message"]


async def test_cancelling_a_batch_stops_its_running_lines_and_closes_it_cancelled(jobs: JobStore) -> None:
    batch = await new_batch(jobs, 4)
    clock = Clock()
    lines = ScriptedLines(hold={1, 2})
    runner = runner_on(jobs, lines, clock, batch_concurrency=2)
    await runner.turn()
    await until(lambda: len(lines.calls) == 2)
    await jobs.cancel_batch(batch.id, OWNER, clock.now)
    clock.now += 1
    await runner.turn()  # sees the batch cancelling: stops its lines
    await settle(runner)
    assert sorted(lines.cancelled) == [1, 2]
    assert [row[:2] for row in await rows(jobs, batch)] == [
        (1, "cancelled"),
        (2, "cancelled"),
        (3, "pending"),
        (4, "pending"),
    ]
    assert ended(runner) == ["cancelled", "cancelled"]
    clock.now += 1
    await runner.turn()
    closed = await jobs.get_batch(batch.id, OWNER)
    assert closed is not None and closed.status == "cancelled" and closed.output_file_id is None
    errors = await file_lines(jobs, closed.error_file_id, clock.now)
    assert [(item["custom_id"], item["error"]["code"]) for item in errors] == [
        (f"req-{i}", "batch_cancelled") for i in range(1, 5)
    ]
    assert len(lines.calls) == 2  # the lines never started stayed so


async def test_close_gives_the_running_lines_back_to_be_leased_at_once(jobs: JobStore) -> None:
    batch = await new_batch(jobs, 3)
    clock = Clock()
    lines = ScriptedLines(hold={1, 2})
    runner = runner_on(jobs, lines, clock, batch_concurrency=2)
    await runner.turn()
    await until(lambda: len(lines.calls) == 2)
    clock.now += 5
    await runner.close()
    assert sorted(lines.cancelled) == [1, 2]
    assert [row[:5] for row in await rows(jobs, batch)] == [
        (1, "pending", 0, None, T0 + 5),
        (2, "pending", 0, None, T0 + 5),
        (3, "pending", 0, None, None),
    ]
    assert ended(runner) == []  # given back, neither answered nor retried
    successor = runner_on(jobs, ScriptedLines(), clock)
    await successor.turn()  # at once, not after the first runner's leases would have run out
    await settle(successor)
    assert [row[1] for row in await rows(jobs, batch)] == ["done", "done", "done"]


async def test_a_runner_that_stalled_past_its_lease_keeps_no_answer(jobs: JobStore) -> None:
    batch = await new_batch(jobs, 1)
    clock = Clock()
    release = asyncio.Event()
    slow_answer = LineAnswer(200, b'{"by":"stalled"}')

    class Stalling(ScriptedLines):
        async def run(self, call: LineCall) -> LineAnswer:
            self.calls.append(call)
            await release.wait()
            return slow_answer

    stalling = Stalling()
    stalled = runner_on(jobs, stalling, clock)
    await stalled.turn()
    await until(lambda: len(stalling.calls) == 1)
    clock.now += LEASE  # it never renewed: its lease ran out
    other = runner_on(jobs, ScriptedLines({1: [LineAnswer(200, b'{"by":"other"}')]}), clock)
    await other.turn()
    await settle(other)
    release.set()
    await settle(stalled)
    assert ended(stalled) == [] and ended(other) == ["completed"]
    clock.now += 1
    await other.turn()
    closed = await jobs.get_batch(batch.id, OWNER)
    assert closed is not None
    (kept,) = await file_lines(jobs, closed.output_file_id, clock.now)
    assert kept["response"]["body"] == {"by": "other"}


async def test_a_batch_past_its_window_closes_expired_with_its_unrun_lines(jobs: JobStore) -> None:
    batch = await new_batch(jobs, 3, max_concurrency=1, window=100.0)
    clock = Clock()
    runner = runner_on(jobs, ScriptedLines(), clock)
    await runner.turn()
    await settle(runner)
    clock.now = T0 + 100
    await runner.turn()
    closed = await jobs.get_batch(batch.id, OWNER)
    assert closed is not None and closed.status == "expired"
    assert [item["custom_id"] for item in await file_lines(jobs, closed.output_file_id, clock.now)] == ["req-1"]
    errors = await file_lines(jobs, closed.error_file_id, clock.now)
    assert [(item["custom_id"], item["error"]["code"]) for item in errors] == [
        ("req-2", "batch_expired"),
        ("req-3", "batch_expired"),
    ]


async def test_a_runner_whose_own_lease_ran_out_does_not_start_the_line_a_second_time(jobs: JobStore) -> None:
    """Its turns stopped for longer than a lease (the store unreachable, say): the next turn leases
    again, before it renews, the lines it still runs."""
    batch = await new_batch(jobs, 1)
    clock = Clock()
    lines = ScriptedLines(hold={1})
    runner = runner_on(jobs, lines, clock)
    await runner.turn()
    await until(lambda: len(lines.calls) == 1)
    clock.now += LEASE + 1
    await runner.turn()
    for _ in range(3):  # a line task started now would have called the line runner by then
        await asyncio.sleep(0)
    assert len(lines.calls) == 1 and len(runner._running) == 1
    ((_, state, _, holder, until_, _),) = await rows(jobs, batch)
    assert (state, holder, until_) == ("pending", runner.name, clock.now + LEASE)  # its lease, again live
    await runner.close()
    assert [row[1:4] for row in await rows(jobs, batch)] == [("pending", 0, None)]


async def test_lines_still_running_when_the_window_ends_are_stopped_and_the_batch_closes_expired(
    jobs: JobStore,
) -> None:
    batch = await new_batch(jobs, 3, window=60.0)
    clock = Clock()
    lines = ScriptedLines(hold={1, 2})
    runner = runner_on(jobs, lines, clock, batch_concurrency=2)
    await runner.turn()
    await until(lambda: len(lines.calls) == 2)
    clock.now = batch.expires_at + 1
    await runner.turn()  # past the window: what runs is stopped, as expired
    await settle(runner)
    assert sorted(lines.cancelled) == [1, 2]
    assert ended(runner) == ["expired", "expired"]
    await runner.turn()
    closed = await jobs.get_batch(batch.id, OWNER)
    assert closed is not None and closed.status == "expired"
    errors = await file_lines(jobs, closed.error_file_id, clock.now)
    assert [(item["custom_id"], item["error"]["code"]) for item in errors] == [
        (f"req-{i}", "batch_expired") for i in range(1, 4)
    ]
