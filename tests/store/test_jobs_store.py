"""The Batch API's tables (``jobs.store``) against real databases: every test runs on SQLite and
on PostgreSQL.

What the runners and routes rely on: files and batches only to their owner, until they expire;
lines leased by one runner at a time (however many gateways lease together), each batch held to
its concurrency; a lease that runs out taken over, after which only the new holder's answer is
kept; a batch closed once, its output and error files in OpenAI's line format, also when the
gateway closing it dies halfway. Every time is an explicit ``now``: no test sleeps.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import psycopg
import pytest

from gateway.config import Settings
from gateway.jobs.lines import InputLine
from gateway.jobs.records import BatchRecord, FileRecord, LeasedLine, RequestCounts, new_id
from gateway.jobs.store import INSERT_CHUNK, MIGRATIONS, JobStore
from gateway.store import ResponseStore, open_store
from tests.postgres import PostgresServer
from tests.store.conftest import StoreTarget, create_database

pytestmark = pytest.mark.anyio

OWNER = "key:team-a"
OTHER = "key:team-b"
T0 = 1_700_000_000.0
LEASE = 30.0
RETAIN = 7 * 24 * 3600.0
CAP = 8
Opener = Callable[..., Any]


async def jobs_on(opened: Opener) -> JobStore:
    """A gateway's job store: its own connections to the target database, migrated."""
    database: ResponseStore = await opened()
    jobs = JobStore(database)
    await jobs.start()
    return jobs


def input_lines(count: int) -> list[InputLine]:
    return [
        InputLine(i, f"req-{i}", "/v1/chat/completions", json.dumps({"model": "m", "line": i}, separators=(",", ":")))
        for i in range(1, count + 1)
    ]


async def new_batch(
    jobs: JobStore,
    lines: int | list[InputLine] = 3,
    *,
    owner: str = OWNER,
    created_at: float = T0,
    window: float = 3600.0,
    max_concurrency: int = CAP,
    retain: float = RETAIN,
) -> BatchRecord:
    record = BatchRecord(
        id=new_id("batch_"),
        owner=owner,
        endpoint="/v1/chat/completions",
        input_file_id="file-input",
        completion_window="1h",
        status="in_progress",
        created_at=created_at,
        expires_at=created_at + window,
        max_concurrency=max_concurrency,
        metadata={"team": "a"},
        times={"in_progress": created_at},
    )
    await jobs.create_batch(record, input_lines(lines) if isinstance(lines, int) else lines, created_at + retain)
    return record


async def lease_all(jobs: JobStore, runner: str, now: float, wanted: int = 100) -> list[LeasedLine]:
    return await jobs.lease(runner, now, LEASE, wanted, CAP)


def answer(line: LeasedLine) -> str:
    return json.dumps({"id": f"chatcmpl-{line.line}", "n": 2**70 + line.line, "text": '✓ \u2028 "q"'})


async def finish_all(jobs: JobStore, runner: str, leased: list[LeasedLine], status: int = 200) -> None:
    for line in leased:
        state = "done" if status == 200 else "error"
        assert await jobs.finish_line(runner, line, state, status, answer(line))


def states(target: StoreTarget, batch_id: str) -> list[tuple[int, str]]:
    rows = target.query(f"SELECT line, state FROM gateway_batch_lines WHERE batch_id = '{batch_id}' ORDER BY line")
    return [(int(line), str(state)) for line, state in rows]


async def read_lines(jobs: JobStore, file_id: str | None, now: float) -> list[dict[str, Any]]:
    assert file_id is not None
    content = await jobs.file_content(file_id, OWNER, now)
    assert content is not None and content.endswith("\n")
    return [json.loads(line) for line in content.splitlines()]


async def close_now(jobs: JobStore, now: float) -> list[tuple[str, str, str]]:
    """One runner's closing pass: everything closable, claimed and closed at ``now``."""
    ready = await jobs.closable(now, now - LEASE)
    for batch_id, status, target in ready:
        assert await jobs.claim_close(batch_id, status, target, now, now - LEASE)
        await jobs.close_batch(batch_id, target, now, now)
    return ready


def intercept(jobs: JobStore, marker: str, hook: Callable[[], Awaitable[None]]) -> None:
    """Run ``hook`` just before this store's first statement that starts with ``marker``: another
    gateway acting, or this one dying, at that very point of a close."""
    real = jobs.db.execute
    fired = False

    async def execute(sql: str, params: tuple[object, ...] = ()) -> int:
        nonlocal fired
        if not fired and sql.startswith(marker):
            fired = True
            await hook()
        return await real(sql, params)

    jobs.db.execute = execute  # type: ignore[method-assign]


class GatewayDiedError(Exception):
    pass


async def die() -> None:
    raise GatewayDiedError


# -- migration ----------------------------------------------------------------------------------


async def test_start_creates_the_tables_and_records_the_jobs_schema_once(opened: Opener, target: StoreTarget) -> None:
    jobs = await jobs_on(opened)
    for table in ("gateway_files", "gateway_batches", "gateway_batch_lines", "gateway_background"):
        assert target.query(f"SELECT count(*) FROM {table}") == [(0,)]
    assert target.query("SELECT version FROM gateway_schema WHERE component = 'jobs'") == [(len(MIGRATIONS),)]
    await new_batch(jobs)
    await jobs.start()  # again, on the same connections
    again = await jobs_on(opened)  # another gateway starting on the migrated database
    first, second = await asyncio.gather(jobs_on(opened), jobs_on(opened))  # two starting together
    assert target.query("SELECT component, version FROM gateway_schema WHERE component = 'jobs'") == [
        ("jobs", len(MIGRATIONS))
    ]
    assert target.query("SELECT count(*) FROM gateway_batch_lines") == [(3,)]
    assert len(await lease_all(again, "r", T0)) == 3
    assert await lease_all(first, "r2", T0) == [] and await lease_all(second, "r3", T0) == []


# -- files --------------------------------------------------------------------------------------


def file_record(
    file_id: str, *, owner: str = OWNER, purpose: str = "batch", at: float = T0, expires: float | None = None
) -> FileRecord:
    return FileRecord(file_id, owner, purpose, f"{file_id}.jsonl", 10, at, expires)


async def test_a_file_comes_back_with_its_content_to_its_owner_only(opened: Opener) -> None:
    jobs = await jobs_on(opened)
    content = '{"custom_id": "✓ \u2028 🦙"}\n' * 3
    record = FileRecord("file-1", OWNER, "batch", "in.jsonl", len(content.encode()), T0, T0 + 3600)
    await jobs.add_file(record, content)
    assert await jobs.get_file("file-1", OWNER, T0) == record
    assert await jobs.file_content("file-1", OWNER, T0) == content
    assert await jobs.get_file("file-1", OTHER, T0) is None
    assert await jobs.file_content("file-1", OTHER, T0) is None
    assert await jobs.list_files(OTHER, T0, purpose=None, after=None, limit=10, order="desc") == []
    assert await jobs.delete_file("file-1", OTHER) is False
    assert await jobs.get_file("file-nope", OWNER, T0) is None
    assert await jobs.delete_file("file-1", OWNER) is True
    assert await jobs.get_file("file-1", OWNER, T0) is None
    assert await jobs.file_content("file-1", OWNER, T0) is None
    assert await jobs.delete_file("file-1", OWNER) is False


async def test_an_expired_file_is_invisible_from_its_expiry_on(opened: Opener, target: StoreTarget) -> None:
    jobs = await jobs_on(opened)
    await jobs.add_file(file_record("file-1", expires=T0 + 100), "x")
    await jobs.add_file(file_record("file-forever", expires=None), "y")
    assert await jobs.get_file("file-1", OWNER, T0 + 99.9) is not None
    assert await jobs.get_file("file-1", OWNER, T0 + 100) is None
    assert await jobs.file_content("file-1", OWNER, T0 + 100) is None
    listed = await jobs.list_files(OWNER, T0 + 100, purpose=None, after=None, limit=10, order="asc")
    assert [f.id for f in listed] == ["file-forever"]
    assert (await jobs.get_file("file-forever", OWNER, T0 + 1e9)) is not None
    assert target.query("SELECT count(*) FROM gateway_files") == [(2,)]  # invisible, not yet deleted


async def test_files_list_newest_or_oldest_first_after_a_cursor_and_by_purpose(opened: Opener) -> None:
    jobs = await jobs_on(opened)
    # same created_at for c and d: the id decides between them, in both directions
    for file_id, at, purpose in [("file-b", 2, "batch"), ("file-a", 1, "batch_output"), ("file-d", 3, "batch")]:
        await jobs.add_file(file_record(file_id, purpose=purpose, at=T0 + at), "x")
    await jobs.add_file(file_record("file-c", at=T0 + 3), "x")
    await jobs.add_file(file_record("file-theirs", owner=OTHER, at=T0 + 2), "x")

    async def ids(order: str, after: str | None = None, purpose: str | None = None, limit: int = 10) -> list[str]:
        found = await jobs.list_files(OWNER, T0, purpose=purpose, after=after, limit=limit, order=order)
        return [f.id for f in found]

    assert await ids("desc") == ["file-d", "file-c", "file-b", "file-a"]
    assert await ids("asc") == ["file-a", "file-b", "file-c", "file-d"]
    assert await ids("desc", limit=2) == ["file-d", "file-c"]
    assert await ids("desc", after="file-c") == ["file-b", "file-a"]
    assert await ids("desc", after="file-d", limit=1) == ["file-c"]
    assert await ids("asc", after="file-b") == ["file-c", "file-d"]
    assert await ids("asc", after="file-c") == ["file-d"]
    assert await ids("asc", after="file-d") == []
    assert await ids("desc", purpose="batch") == ["file-d", "file-c", "file-b"]
    assert await ids("desc", purpose="batch_output") == ["file-a"]
    assert await ids("desc", after="file-c", purpose="batch") == ["file-b"]


# -- batches ------------------------------------------------------------------------------------


async def test_a_created_batch_comes_back_whole_with_its_counts(opened: Opener, target: StoreTarget) -> None:
    jobs = await jobs_on(opened)
    record = await new_batch(jobs, 2 * INSERT_CHUNK + 7)  # more lines than one INSERT takes
    assert await jobs.get_batch(record.id, OWNER) == replace(record, counts=RequestCounts(2 * INSERT_CHUNK + 7, 0, 0))
    assert await jobs.get_batch(record.id, OTHER) is None
    assert await jobs.get_batch("batch_nope", OWNER) is None
    assert target.query(
        f"SELECT min(line), max(line), count(*) FROM gateway_batch_lines WHERE batch_id = '{record.id}'"
    ) == [(1, 2 * INSERT_CHUNK + 7, 2 * INSERT_CHUNK + 7)]
    leased = await jobs.lease("r", T0, LEASE, 3, CAP)
    assert await jobs.finish_line("r", leased[0], "done", 200, "{}")
    assert await jobs.finish_line("r", leased[1], "error", 400, "{}")
    counted = await jobs.get_batch(record.id, OWNER)
    assert counted is not None and counted.counts == RequestCounts(2 * INSERT_CHUNK + 7, 1, 1)


async def test_batches_list_newest_first_after_a_cursor_for_their_owner(opened: Opener) -> None:
    jobs = await jobs_on(opened)
    made = [await new_batch(jobs, 1, created_at=T0 + i) for i in range(4)]
    await new_batch(jobs, 1, owner=OTHER, created_at=T0 + 2)
    newest_first = [b.id for b in reversed(made)]
    assert [b.id for b in await jobs.list_batches(OWNER, after=None, limit=10)] == newest_first
    assert [b.id for b in await jobs.list_batches(OWNER, after=newest_first[1], limit=1)] == [newest_first[2]]
    assert [b.id for b in await jobs.list_batches(OTHER, after=None, limit=10)] != newest_first
    listed = await jobs.list_batches(OWNER, after=None, limit=1)
    assert listed[0].counts == RequestCounts(1, 0, 0)


async def test_cancel_marks_an_open_batch_cancelling_and_leaves_others_as_they_are(opened: Opener) -> None:
    jobs = await jobs_on(opened)
    record = await new_batch(jobs)
    assert await jobs.cancel_batch(record.id, OTHER, T0 + 5) is None
    cancelling = await jobs.cancel_batch(record.id, OWNER, T0 + 5)
    assert cancelling is not None and cancelling.status == "cancelling"
    assert cancelling.times == {"in_progress": T0, "cancelling": T0 + 5}
    again = await jobs.cancel_batch(record.id, OWNER, T0 + 9)
    assert again is not None and again.times["cancelling"] == T0 + 5
    assert await lease_all(jobs, "r", T0 + 10) == []  # a cancelling batch's lines are not run
    assert await jobs.statuses([record.id, "batch_nope"]) == {record.id: ("cancelling", T0 + 3600)}
    assert await jobs.statuses([]) == {}


# -- leases -------------------------------------------------------------------------------------


async def test_runners_leasing_together_never_get_the_same_line(opened: Opener, target: StoreTarget) -> None:
    first, second = await jobs_on(opened), await jobs_on(opened)  # two gateways, their own connections
    batches = [await new_batch(j, 40, created_at=T0 + i, max_concurrency=100) for i, j in enumerate((first, second))]
    taken: dict[tuple[str, int], str] = {}
    now = T0
    for _ in range(20):
        rounds = await asyncio.gather(
            *(
                jobs.lease(f"runner-{n}", now, LEASE, 7, 100)
                for n, jobs in enumerate([first, second, first, second, first, second])
            )
        )
        if not any(rounds):
            break
        for n, leased in enumerate(rounds):
            for line in leased:
                key = (line.batch_id, line.line)
                assert key not in taken, f"{key} leased by runner-{n} and {taken.get(key)}"
                taken[key] = f"runner-{n}"
        now += 1  # the leases are live: what is taken stays taken
    assert sorted(taken) == sorted((b.id, i) for b in batches for i in range(1, 41))
    owners = target.query("SELECT count(DISTINCT lease_owner) FROM gateway_batch_lines")
    assert owners[0][0] > 1  # the work was shared


async def test_on_postgresql_a_lease_skips_the_lines_another_lease_holds_without_waiting(
    postgres: PostgresServer,
) -> None:
    """SQLite has one writer at a time; PostgreSQL runs leases together, each taking other lines."""
    url = create_database(postgres)
    database = open_store(Settings(responses_store=url))
    assert database is not None
    await database.start()
    try:
        jobs = JobStore(database)
        await jobs.start()
        await new_batch(jobs, 6)
        async with await psycopg.AsyncConnection.connect(url) as other, other.transaction():
            # another gateway's lease, between taking its lines and committing
            await other.execute("SELECT line FROM gateway_batch_lines WHERE line <= 3 FOR UPDATE")
            leased = await asyncio.wait_for(lease_all(jobs, "r", T0), 2.0)
        assert [line.line for line in leased] == [4, 5, 6]
    finally:
        await database.close()


async def test_a_batch_is_held_to_its_max_concurrency_and_to_the_cap(opened: Opener) -> None:
    jobs = await jobs_on(opened)
    three = await new_batch(jobs, 10, max_concurrency=3, created_at=T0)
    capped = await new_batch(jobs, 10, max_concurrency=50, created_at=T0 + 1)
    first = await jobs.lease("r1", T0 + 2, LEASE, 100, 4)
    assert [(line.batch_id, line.line) for line in first] == [(three.id, i) for i in (1, 2, 3)] + [
        (capped.id, i) for i in (1, 2, 3, 4)
    ]
    assert await jobs.lease("r2", T0 + 3, LEASE, 100, 4) == []  # all runners together
    assert await jobs.finish_line("r1", first[0], "done", 200, "{}")
    assert [(line.batch_id, line.line) for line in await jobs.lease("r2", T0 + 4, LEASE, 100, 4)] == [(three.id, 4)]
    # the full batches are passed over for a newer one with room, and wanted is honoured
    fresh = await new_batch(jobs, 5, max_concurrency=5, created_at=T0 + 5)
    assert [(line.batch_id, line.line) for line in await jobs.lease("r3", T0 + 6, LEASE, 2, 4)] == [
        (fresh.id, 1),
        (fresh.id, 2),
    ]
    assert [line.line for line in await jobs.lease("r3", T0 + 6, LEASE, 5, 4)] == [3, 4]  # the cap: 4 live


async def test_lines_of_a_batch_past_its_window_are_not_leased(opened: Opener) -> None:
    jobs = await jobs_on(opened)
    record = await new_batch(jobs, 2, window=100.0)
    assert await lease_all(jobs, "r", T0 + 100) == []
    assert [line.line for line in await lease_all(jobs, "r", T0 + 99)] == [1, 2]
    assert record.expires_at == T0 + 100


async def test_a_leased_line_carries_what_running_it_needs(opened: Opener) -> None:
    jobs = await jobs_on(opened)
    record = await new_batch(jobs, 2)
    leased = await lease_all(jobs, "r", T0)
    assert leased == [
        LeasedLine(record.id, i, f"req-{i}", "/v1/chat/completions", f'{{"model":"m","line":{i}}}', OWNER, 0)
        for i in (1, 2)
    ]


async def test_an_expired_lease_is_taken_over_and_only_the_new_holders_answer_is_kept(
    opened: Opener, target: StoreTarget
) -> None:
    stalled, other = await jobs_on(opened), await jobs_on(opened)
    record = await new_batch(stalled, 1)
    (mine,) = await lease_all(stalled, "stalled", T0)
    assert await lease_all(other, "other", T0 + LEASE - 0.5) == []  # live: nobody else gets it
    (theirs,) = await lease_all(other, "other", T0 + LEASE)  # past: taken over
    assert theirs.line == mine.line
    assert await stalled.finish_line("stalled", mine, "done", 200, '{"by":"stalled"}') is False
    # nor does its late release change anything
    await stalled.release_line("stalled", mine, T0 + 1000, attempted=True)
    assert target.query("SELECT lease_owner, attempts FROM gateway_batch_lines") == [("other", 0)]
    assert await other.finish_line("other", theirs, "done", 200, '{"by":"other"}') is True
    assert await other.finish_line("other", theirs, "done", 200, '{"by":"twice"}') is False  # kept once
    assert await close_now(other, T0 + LEASE + 1) == [(record.id, "in_progress", "completed")]
    closed = await other.get_batch(record.id, OWNER)
    assert closed is not None and closed.status == "completed" and closed.error_file_id is None
    (kept,) = await read_lines(other, closed.output_file_id, T0 + LEASE + 1)
    assert kept["response"]["body"] == {"by": "other"}


async def test_a_renewed_lease_is_kept_and_runs_out_from_its_new_end(opened: Opener) -> None:
    jobs = await jobs_on(opened)
    await new_batch(jobs, 2)
    leased = await lease_all(jobs, "holder", T0)
    await jobs.renew("holder", [(line.batch_id, line.line) for line in leased[:1]], T0 + 20 + LEASE)
    await jobs.renew("intruder", [(line.batch_id, line.line) for line in leased[1:]], T0 + 1000)  # not its lease
    assert await lease_all(jobs, "other", T0 + LEASE + 1) == [leased[1]]
    assert await lease_all(jobs, "other", T0 + 20 + LEASE - 1) == []
    (taken,) = await lease_all(jobs, "other", T0 + 20 + LEASE)
    assert taken.line == leased[0].line
    await jobs.renew("holder", [], T0 + 5000)  # nothing to renew: nothing happens


async def test_a_released_line_waits_until_not_before_and_counts_an_attempt_only_if_attempted(
    opened: Opener, target: StoreTarget
) -> None:
    jobs = await jobs_on(opened)
    record = await new_batch(jobs, 1)
    (first,) = await lease_all(jobs, "r1", T0)
    await jobs.release_line("r1", first, T0 + 10, attempted=True)
    assert await lease_all(jobs, "r2", T0 + 9.9) == []
    (second,) = await lease_all(jobs, "r2", T0 + 10)
    assert second.attempts == 1
    await jobs.release_line("r2", second, T0 + 10, attempted=False)  # "not now": no attempt spent
    (third,) = await lease_all(jobs, "r1", T0 + 10)
    assert third.attempts == 1
    await jobs.release_line("r1", third, T0 + 12, attempted=True)
    assert target.query(
        f"SELECT attempts, lease_owner, lease_until FROM gateway_batch_lines WHERE batch_id = '{record.id}'"
    ) == [(2, None, T0 + 12)]
    # a released line is neither running (the batch may close past its window) nor done
    assert await jobs.closable(T0 + 3600, T0) == [(record.id, "in_progress", "expired")]


# -- closing ------------------------------------------------------------------------------------


async def test_a_completed_batch_renders_its_output_and_error_files_in_openais_line_format(
    opened: Opener, target: StoreTarget
) -> None:
    jobs = await jobs_on(opened)
    lines = [
        InputLine(1, "first", "/v1/chat/completions", "{}"),
        InputLine(2, 'second "quoted" ✓', "/v1/chat/completions", "{}"),
        InputLine(4, "fourth", "/v1/chat/completions", "{}"),
        InputLine(5, "fifth", "/v1/embeddings", "{}"),
    ]
    record = await new_batch(jobs, lines)
    leased = {line.custom_id: line for line in await lease_all(jobs, "r", T0)}
    bodies = {
        "first": '{"id":"chatcmpl-1","big":1180591620717411303424,"text":"🦙\\u2028"}',
        "fourth": '{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":null}}',
        "fifth": '{"object":"list","data":[]}',
        'second "quoted" ✓': '{"error":{"message":"down","type":"server_error","param":null,"code":null}}',
    }
    codes = {"first": 200, "fourth": 400, "fifth": 200, 'second "quoted" ✓': 503}
    for custom_id, line in leased.items():
        state = "done" if codes[custom_id] == 200 else "error"
        assert await jobs.finish_line("r", line, state, codes[custom_id], bodies[custom_id])
    assert await jobs.closable(T0 + 1, T0 + 1 - LEASE) == [(record.id, "in_progress", "completed")]
    assert await jobs.claim_close(record.id, "in_progress", "completed", T0 + 1, T0 + 1 - LEASE)
    assert not await jobs.claim_close(record.id, "in_progress", "completed", T0 + 1, T0 + 1 - LEASE)  # one wins
    assert not await jobs.claim_close(record.id, "finalizing", "completed", T0 + 1, T0 + 1 - LEASE)
    assert await jobs.closable(T0 + 2, T0 + 2 - LEASE) == []  # claimed: no one else closes it
    during = await jobs.get_batch(record.id, OWNER)
    assert during is not None and during.status == "finalizing"
    await jobs.close_batch(record.id, "completed", T0 + 1, T0 + 2)

    closed = await jobs.get_batch(record.id, OWNER)
    assert closed is not None and closed.status == "completed"
    assert closed.times == {"in_progress": T0, "finalizing": T0 + 1, "completed": T0 + 2}
    assert closed.counts == RequestCounts(4, 2, 2)
    output = await read_lines(jobs, closed.output_file_id, T0 + 2)
    errors = await read_lines(jobs, closed.error_file_id, T0 + 2)
    assert [item["custom_id"] for item in output] == ["first", "fifth"]  # line order
    assert [item["custom_id"] for item in errors] == ['second "quoted" ✓', "fourth"]
    for item in output + errors:
        assert set(item) == {"id", "custom_id", "response", "error"}
        assert item["error"] is None
        assert set(item["response"]) == {"status_code", "request_id", "body"}
        assert item["response"]["status_code"] == codes[item["custom_id"]]
        assert item["response"]["body"] == json.loads(bodies[item["custom_id"]])
        assert item["id"].startswith("batch_req_") and item["response"]["request_id"] == item["id"]
    assert isinstance(output[0]["response"]["body"]["big"], int)
    assert output[0]["response"]["body"]["big"] == 2**70
    assert len({item["id"] for item in output + errors}) == 4

    out_file = await jobs.get_file(str(closed.output_file_id), OWNER, T0 + 2)
    assert out_file is not None and out_file.purpose == "batch_output"
    assert out_file.filename == f"{record.id}_output.jsonl" and out_file.expires_at == T0 + RETAIN
    content = await jobs.file_content(out_file.id, OWNER, T0 + 2)
    assert content is not None and out_file.bytes == len(content.encode())
    assert await jobs.get_file(str(closed.output_file_id), OTHER, T0 + 2) is None
    # the lines are emptied: the files hold their answers
    assert target.query(f"SELECT DISTINCT body, result FROM gateway_batch_lines WHERE batch_id = '{record.id}'") == [
        ("", None)
    ]
    assert await jobs.closable(T0 + 3, T0 + 3 - LEASE) == []  # closed once


async def test_a_batch_with_every_line_answered_ok_has_no_error_file(opened: Opener) -> None:
    jobs = await jobs_on(opened)
    record = await new_batch(jobs, 3)
    await finish_all(jobs, "r", await lease_all(jobs, "r", T0))
    await close_now(jobs, T0 + 1)
    closed = await jobs.get_batch(record.id, OWNER)
    assert closed is not None and closed.error_file_id is None and closed.output_file_id is not None
    assert [item["custom_id"] for item in await read_lines(jobs, closed.output_file_id, T0 + 1)] == [
        "req-1",
        "req-2",
        "req-3",
    ]


async def test_a_cancelled_batch_closes_once_no_line_runs_with_the_rest_marked_cancelled(
    opened: Opener, target: StoreTarget
) -> None:
    jobs = await jobs_on(opened)
    record = await new_batch(jobs, 4)
    done, running = await jobs.lease("r", T0, LEASE, 2, CAP)
    await finish_all(jobs, "r", [done])
    await jobs.cancel_batch(record.id, OWNER, T0 + 1)
    assert await jobs.closable(T0 + 2, T0 + 2 - LEASE) == []  # a line still runs
    assert await jobs.finish_line("r", running, "cancelled", None, "")  # its runner stopped it
    await close_now(jobs, T0 + 3)
    closed = await jobs.get_batch(record.id, OWNER)
    assert closed is not None and closed.status == "cancelled"
    assert closed.times == {"in_progress": T0, "cancelling": T0 + 1, "cancelled": T0 + 3}
    assert closed.counts == RequestCounts(4, 1, 3)
    assert states(target, record.id) == [(1, "done"), (2, "cancelled"), (3, "cancelled"), (4, "cancelled")]
    assert [item["custom_id"] for item in await read_lines(jobs, closed.output_file_id, T0 + 3)] == ["req-1"]
    errors = await read_lines(jobs, closed.error_file_id, T0 + 3)
    assert [item["custom_id"] for item in errors] == ["req-2", "req-3", "req-4"]
    for item in errors:
        assert item["response"] is None
        assert item["error"]["code"] == "batch_cancelled" and item["error"]["message"]


async def test_a_batch_past_its_window_closes_expired_once_no_line_runs(opened: Opener, target: StoreTarget) -> None:
    jobs = await jobs_on(opened)
    record = await new_batch(jobs, 3, window=100.0)
    done, running = await jobs.lease("r", T0 + 90, LEASE, 2, CAP)
    await finish_all(jobs, "r", [done])
    assert await jobs.closable(T0 + 99, T0 + 99 - LEASE) == []  # in its window
    assert await jobs.closable(T0 + 100, T0 + 100 - LEASE) == []  # past it, but a line still runs
    assert await jobs.finish_line("r", running, "error", 500, '{"error":{"message":"late"}}')  # its answer kept
    await close_now(jobs, T0 + 101)
    closed = await jobs.get_batch(record.id, OWNER)
    assert closed is not None and closed.status == "expired"
    assert closed.times == {"in_progress": T0, "expired": T0 + 101}
    assert states(target, record.id) == [(1, "done"), (2, "error"), (3, "expired")]
    errors = await read_lines(jobs, closed.error_file_id, T0 + 101)
    assert [(item["custom_id"], item["error"]) for item in errors[:1]] == [("req-2", None)]
    assert errors[0]["response"]["status_code"] == 500
    assert errors[1]["custom_id"] == "req-3" and errors[1]["response"] is None
    assert errors[1]["error"]["code"] == "batch_expired"


async def test_a_lease_running_out_past_the_window_lets_the_batch_expire(opened: Opener) -> None:
    jobs = await jobs_on(opened)
    record = await new_batch(jobs, 1, window=100.0)
    await lease_all(jobs, "dead", T0 + 90)  # its gateway died with it
    assert await jobs.closable(T0 + 90 + LEASE - 1, T0) == []
    assert await jobs.closable(T0 + 90 + LEASE, T0) == [(record.id, "in_progress", "expired")]


async def test_a_stale_claim_is_taken_over_and_the_first_closers_late_work_is_dropped(
    opened: Opener, target: StoreTarget
) -> None:
    first, second = await jobs_on(opened), await jobs_on(opened)
    record = await new_batch(first, 2)
    ok, bad = await lease_all(first, "r", T0)
    await finish_all(first, "r", [ok])
    await finish_all(first, "r", [bad], status=400)
    assert await first.claim_close(record.id, "in_progress", "completed", T0 + 1, T0 + 1 - LEASE)
    assert await second.closable(T0 + 1 + LEASE - 1, T0) == []  # a fresh claim is left to its holder
    later = T0 + 1 + LEASE + 1

    async def take_over() -> None:  # while the first closer writes its files, the second takes the close
        assert await second.closable(later, later - LEASE) == [(record.id, "finalizing", "completed")]
        assert await second.claim_close(record.id, "finalizing", "completed", later, later - LEASE)

    intercept(first, "INSERT INTO gateway_files", take_over)
    await first.close_batch(record.id, "completed", T0 + 1, T0 + 2)
    still = await first.get_batch(record.id, OWNER)
    assert still is not None and still.status == "finalizing" and still.output_file_id is None
    assert target.query("SELECT count(*) FROM gateway_files") == [(0,)]  # its files deleted again
    await second.close_batch(record.id, "completed", later, later)
    await first.close_batch(record.id, "completed", T0 + 1, later)  # a late repeat changes nothing
    closed = await second.get_batch(record.id, OWNER)
    assert closed is not None and closed.status == "completed"
    assert sorted(row[0] for row in target.query("SELECT id FROM gateway_files")) == sorted(
        [str(closed.output_file_id), str(closed.error_file_id)]
    )
    assert [item["custom_id"] for item in await read_lines(second, closed.output_file_id, later)] == ["req-1"]
    assert [item["custom_id"] for item in await read_lines(second, closed.error_file_id, later)] == ["req-2"]


@pytest.mark.parametrize("final", ["completed", "cancelled", "expired"])
async def test_a_close_abandoned_halfway_is_finished_by_another_gateway_in_the_same_status(
    opened: Opener, target: StoreTarget, final: str
) -> None:
    dying, other = await jobs_on(opened), await jobs_on(opened)
    record = await new_batch(dying, 3, window=100.0)
    done = (await lease_all(dying, "r", T0))[: 1 if final != "completed" else 3]
    await finish_all(dying, "r", done)
    if final == "cancelled":
        await dying.cancel_batch(record.id, OWNER, T0 + 1)
    at = T0 + 100
    ((batch_id, status, target_status),) = await dying.closable(at, at - LEASE)
    assert target_status == final
    assert await dying.claim_close(batch_id, status, final, at, at - LEASE)
    intercept(dying, "INSERT INTO gateway_files", die)
    with pytest.raises(GatewayDiedError):
        await dying.close_batch(batch_id, final, at, at)
    later = at + LEASE + 1
    closed_now = await close_now(other, later)
    assert [target_status for _, _, target_status in closed_now] == [final]
    closed = await other.get_batch(record.id, OWNER)
    assert closed is not None and closed.status == final
    assert [item["custom_id"] for item in await read_lines(other, closed.output_file_id, later)] == [
        line.custom_id for line in done
    ]
    if final != "completed":
        errors = await read_lines(other, closed.error_file_id, later)
        codes = {"cancelled": "batch_cancelled", "expired": "batch_expired"}
        assert [(item["custom_id"], item["error"]["code"]) for item in errors] == [
            ("req-2", codes[final]),
            ("req-3", codes[final]),
        ]


# -- housekeeping -------------------------------------------------------------------------------


async def test_prune_deletes_expired_files_and_closed_batches_past_their_retention(
    opened: Opener, target: StoreTarget
) -> None:
    jobs = await jobs_on(opened)
    await jobs.add_file(file_record("file-old", expires=T0 + 10), "x")
    await jobs.add_file(file_record("file-new", expires=T0 + RETAIN + 10), "x")
    await jobs.add_file(file_record("file-forever"), "x")
    closed = await new_batch(jobs, 2)
    later_closed = await new_batch(jobs, 1, created_at=T0 + 100, retain=2 * RETAIN)
    await finish_all(jobs, "r", await lease_all(jobs, "r", T0 + 100))
    await close_now(jobs, T0 + 101)
    # its retention passes while it still runs: an open batch is never pruned
    still_open = await new_batch(jobs, 2, created_at=T0 + 200, window=2 * RETAIN, retain=0.0)

    await jobs.prune(T0 + RETAIN)
    assert await jobs.get_batch(closed.id, OWNER) is None
    assert target.query(f"SELECT count(*) FROM gateway_batch_lines WHERE batch_id = '{closed.id}'") == [(0,)]
    assert await jobs.get_batch(still_open.id, OWNER) is not None
    assert await jobs.get_batch(later_closed.id, OWNER) is not None
    remaining = {str(row[0]) for row in target.query("SELECT id FROM gateway_files")}
    assert {"file-new", "file-forever"} <= remaining and "file-old" not in remaining
    kept = await jobs.get_batch(later_closed.id, OWNER)
    assert kept is not None and kept.output_file_id in remaining  # its output file lives as long as it
    assert len(remaining) == 3  # the first batch's output file went with it
    census = await jobs.census()
    assert census == ({"in_progress": 1, "completed": 1}, {"pending": 2})


async def test_prune_deletes_the_lines_of_a_creation_cut_short(opened: Opener, target: StoreTarget) -> None:
    """A batch whose creation died after its lines stays ``validating``: nobody runs it, and prune
    deletes it with its lines once it is older than an hour."""
    jobs = await jobs_on(opened)
    intercept(jobs, "UPDATE gateway_batches SET status", die)
    with pytest.raises(GatewayDiedError):
        await new_batch(jobs, 3)
    assert await lease_all(jobs, "r", T0) == []  # nobody runs them
    await jobs.prune(T0 + 60)  # a creation may still be under way a minute on: kept
    assert target.query("SELECT count(*) FROM gateway_batch_lines") == [(3,)]
    await jobs.prune(T0 + 3601)
    assert target.query("SELECT count(*) FROM gateway_batch_lines") == [(0,)]
    assert target.query("SELECT count(*) FROM gateway_batches") == [(0,)]


# -- background responses' leases -----------------------------------------------------------------


async def test_a_background_lease_is_held_renewed_and_released(opened: Opener) -> None:
    jobs = await jobs_on(opened)
    assert not await jobs.background_held("resp_1", T0)
    await jobs.hold_background("resp_1", "a", T0 + 30)
    assert await jobs.background_held("resp_1", T0 + 29)
    assert not await jobs.background_held("resp_1", T0 + 30)  # past: its process is gone
    await jobs.hold_background("resp_1", "a", T0 + 60)  # renewed
    assert await jobs.background_held("resp_1", T0 + 45)
    await jobs.release_background("resp_1")
    assert not await jobs.background_held("resp_1", T0)
    await jobs.hold_background("resp_2", "b", T0)
    await jobs.prune(T0 + 86400.0 + 1)  # a day past its lease: deleted
    await jobs.hold_background("resp_2", "b", T0 + 5)  # and can be taken again
    assert await jobs.background_held("resp_2", T0)
