"""``jobs.background``: the event log (replay, then live; its bound), and the registry of background
responses (retention, owners, cancellation, shutdown), on a hand-moved clock and no sleeps."""

from __future__ import annotations

import asyncio

import pytest

from gateway.errors import RateLimitError, ShuttingDownError
from gateway.jobs.background import BackgroundJob, BackgroundResponses, EventLog, EventsDroppedError, LogReader

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def frames(*numbers: int) -> bytes:
    """SSE frames whose data is each event's sequence number."""
    return b"".join(b"event: e\ndata: %d\n\n" % n for n in numbers)


def numbers(data: bytes) -> list[int]:
    return [int(block.split(b"data: ")[1]) for block in data.split(b"\n\n") if block]


async def drain(reader: LogReader) -> list[int]:
    out: list[int] = []
    async for chunk in reader:
        out += numbers(chunk)
    return out


def test_events_count_the_frames_in_each_chunk() -> None:
    log = EventLog()
    log.append(frames(0, 1))
    log.append(frames(2))
    log.append(b"")
    assert log.events == 3 and log.held_from == 0


@pytest.mark.parametrize("after", [-1, 0, 1, 2, 3, 4, 5, 9])
async def test_a_reader_gets_exactly_the_events_after_its_number_also_inside_a_chunk(after: int) -> None:
    log = EventLog()
    for chunk in (frames(0, 1, 2), frames(3), frames(4, 5)):
        log.append(chunk)
    log.close()
    assert await drain(log.reader(after)) == list(range(after + 1, 6))


async def test_a_live_reader_gets_each_new_chunk_then_ends_with_the_log() -> None:
    log = EventLog()
    log.append(frames(0, 1))
    reader = log.reader(0)
    assert numbers(await reader.__anext__()) == [1]
    waiting = asyncio.ensure_future(reader.__anext__())
    await asyncio.sleep(0)
    assert not waiting.done()  # nothing new: it waits
    log.append(frames(2, 3))
    assert numbers(await waiting) == [2, 3] and not reader.ended
    log.append(frames(4))
    log.close()
    assert numbers(await reader.__anext__()) == [4] and reader.ended  # the last bytes say the end
    with pytest.raises(StopAsyncIteration):
        await reader.__anext__()


async def test_a_reader_that_joins_after_the_end_ends_at_once() -> None:
    log = EventLog()
    log.append(frames(0))
    log.close()
    reader = log.reader(0)
    assert await reader.__anext__() == b"" and reader.ended


async def test_several_readers_wait_together_and_one_leaving_does_not_stop_the_others() -> None:
    log = EventLog()
    first, second = log.reader(), log.reader()
    waits = [asyncio.ensure_future(reader.__anext__()) for reader in (first, second)]
    await asyncio.sleep(0)
    waits[0].cancel()
    await asyncio.sleep(0)
    log.append(frames(0))
    assert numbers(await waits[1]) == [0]
    assert numbers(await first.__anext__()) == [0]  # its position did not move


async def test_the_bound_drops_the_oldest_chunks_and_a_reader_asking_for_them_is_told() -> None:
    chunk = frames(0)
    log = EventLog(max_bytes=len(chunk) * 4)
    for n in range(6):
        log.append(frames(n))
    # The fifth chunk went over: two dropped, down to three quarters of the bound; the sixth fits.
    assert log.events == 6 and log.held_from == 2
    with pytest.raises(EventsDroppedError) as info:
        log.reader(0)
    assert info.value.held_from == 2
    log.close()
    assert await drain(log.reader(1)) == [2, 3, 4, 5]


async def test_a_reader_left_behind_by_the_bound_is_told_instead_of_skipping() -> None:
    log = EventLog(max_bytes=len(frames(0)) * 4)
    reader = log.reader()
    for n in range(6):
        log.append(frames(n))
    with pytest.raises(EventsDroppedError):
        await reader.__anext__()


def test_the_newest_chunk_stays_even_over_the_bound() -> None:
    log = EventLog(max_bytes=4)
    log.append(frames(0, 1))
    assert log.held_from == 0 and log.events == 2


def test_a_closed_log_takes_no_more_events() -> None:
    log = EventLog()
    log.close()
    with pytest.raises(RuntimeError):
        log.append(frames(0))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def ends(job: BackgroundJob) -> None:
    await job.wait()
    await asyncio.sleep(0)  # the done callback runs a loop turn after the task


async def test_a_finished_job_is_kept_for_its_retention_and_only_for_its_owner() -> None:
    clock = Clock()
    jobs = BackgroundResponses(retention=60.0, clock=clock)

    async def run(job: BackgroundJob) -> None:
        job.log.append(frames(0))

    job = jobs.start("resp_1", "alice", run)
    assert jobs.get("resp_1", "alice") is job and jobs.get("resp_1", "bob") is None
    await ends(job)
    assert job.log.closed and jobs.running == 0 and job.finished_at == 1000.0
    clock.now += 59.0
    assert jobs.get("resp_1", "alice") is job
    clock.now += 2.0
    assert jobs.get("resp_1", "alice") is None


async def test_past_max_finished_the_oldest_finished_jobs_go_first() -> None:
    jobs = BackgroundResponses(max_finished=2, clock=Clock())

    async def run(job: BackgroundJob) -> None:
        pass

    for n in range(3):
        await ends(jobs.start(f"resp_{n}", "", run))
    assert [jobs.get(f"resp_{n}", "") is not None for n in range(3)] == [False, True, True]


async def test_past_max_finished_bytes_the_oldest_finished_logs_go_first() -> None:
    jobs = BackgroundResponses(max_finished_bytes=len(frames(0)) * 2, clock=Clock())

    async def run(job: BackgroundJob) -> None:
        job.log.append(frames(0))

    for n in range(3):
        await ends(jobs.start(f"resp_{n}", "", run))
    assert [jobs.get(f"resp_{n}", "") is not None for n in range(3)] == [False, True, True]


async def test_a_full_registry_refuses_more_jobs_until_one_ends() -> None:
    jobs = BackgroundResponses(max_running=1)
    release = asyncio.Event()

    async def run(job: BackgroundJob) -> None:
        await release.wait()

    job = jobs.start("resp_1", "", run)
    with pytest.raises(RateLimitError) as info:
        jobs.start("resp_2", "", run)
    assert info.value.status_code == 429 and info.value.code == "too_many_background_responses"
    release.set()
    await ends(job)
    jobs.check_room()  # room again


async def test_cancel_stops_a_running_job_which_stores_its_end() -> None:
    jobs = BackgroundResponses()
    started = asyncio.Event()
    seen: list[str | None] = []

    async def run(job: BackgroundJob) -> None:
        try:
            started.set()
            await asyncio.Event().wait()  # forever, until cancelled
        except asyncio.CancelledError:
            seen.append(job.cancel_reason)
            job.result = {"status": "cancelled"}

    job = jobs.start("resp_1", "", run)
    await started.wait()
    await jobs.cancel(job)
    assert seen == ["cancelled"] and job.done and job.result == {"status": "cancelled"}
    assert not job.cancel("cancelled")  # done: nothing to cancel


async def test_a_job_cancelled_before_its_task_ran_is_told_as_it_starts() -> None:
    jobs = BackgroundResponses()
    seen: list[str] = []

    async def run(job: BackgroundJob) -> None:
        try:
            job.raise_if_cancelled()
            seen.append("ran")
        except asyncio.CancelledError:
            seen.append(f"stopped: {job.cancel_reason}")

    job = jobs.start("resp_1", "", run)
    assert job.cancel("cancelled")  # before the loop ran the task at all
    await jobs.cancel(job)
    assert seen == ["stopped: cancelled"]


async def test_a_job_writing_its_end_is_not_cancelled() -> None:
    jobs = BackgroundResponses()
    release = asyncio.Event()

    async def run(job: BackgroundJob) -> None:
        job.settle()
        await release.wait()
        job.result = {"status": "completed"}

    job = jobs.start("resp_1", "", run)
    await asyncio.sleep(0)
    assert not job.cancel("cancelled")
    release.set()
    await job.wait()
    assert job.result == {"status": "completed"} and job.cancel_reason is None


async def test_a_delete_wins_over_any_other_reason_even_while_the_end_is_written() -> None:
    jobs = BackgroundResponses()
    release = asyncio.Event()

    async def run(job: BackgroundJob) -> None:
        job.settle()
        await release.wait()

    job = jobs.start("resp_1", "", run)
    await asyncio.sleep(0)
    assert not job.cancel("deleted")  # the task is not cancelled: it is writing its end...
    assert job.cancel_reason == "deleted"  # ...but it knows that nothing may be stored any more
    release.set()
    await job.wait()


async def test_close_stops_every_running_job_for_shutdown_and_refuses_new_ones() -> None:
    jobs = BackgroundResponses()
    reasons: list[str | None] = []

    async def run(job: BackgroundJob) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            reasons.append(job.cancel_reason)

    for n in range(3):
        jobs.start(f"resp_{n}", "", run)
    await asyncio.sleep(0)
    await jobs.close()
    assert reasons == ["shutdown"] * 3 and jobs.closed
    with pytest.raises(ShuttingDownError):
        jobs.start("resp_9", "", run)


async def test_a_job_that_fails_unexpectedly_still_ends_and_closes_its_log() -> None:
    jobs = BackgroundResponses()

    async def run(job: BackgroundJob) -> None:
        raise RuntimeError("a bug")

    job = jobs.start("resp_1", "", run)
    await ends(job)
    assert job.log.closed and jobs.running == 0
