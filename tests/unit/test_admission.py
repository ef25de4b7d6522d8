"""Admission: slots and headroom, a bounded scheduled queue, shedding, deadlines, timeouts, and
rejection of the waiting at shutdown."""

from __future__ import annotations

import asyncio

import pytest

from gateway.core.admission import Admission, SchedulingRules
from gateway.core.schedule import Claim
from gateway.errors import QueueRefusedError, RateLimitError, ShuttingDownError

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def admission(slots: int, queue: int, timeout: float = 1.0, **rules: object) -> Admission:
    return Admission(lambda model: (slots, queue), timeout, SchedulingRules(**rules))  # type: ignore[arg-type]


def of(flow: str, band: int = 0, weight: float = 1.0) -> Claim:
    return Claim(band=band, flow=flow, weight=weight, max_tokens=100)


async def queued(gates: Admission, count: int) -> None:
    """Let the tasks just created reach the queue: each needs one turn of the loop, no time."""
    for _ in range(count + 1):
        await asyncio.sleep(0)
    assert gates.gate("m").waiting == count


async def test_waiters_get_slots_in_order() -> None:
    gates = admission(1, 5)
    held = await gates.acquire("m", None)
    order: list[int] = []

    async def wait(i: int) -> None:
        ticket = await gates.acquire("m", None)
        order.append(i)
        ticket.release()

    waiters = [asyncio.create_task(wait(i)) for i in range(3)]
    await queued(gates, 3)
    held.release()
    await asyncio.gather(*waiters)
    assert order == [0, 1, 2] and gates.in_flight == 0


async def test_full_queue_and_wait_timeout_are_429() -> None:
    gates = admission(1, 1, timeout=0.05)
    await gates.acquire("m", "a")
    waiter = asyncio.create_task(gates.acquire("m", "a"))
    await queued(gates, 1)
    with pytest.raises(RateLimitError):
        await gates.acquire("m", None)  # queue full: at once
    with pytest.raises(RateLimitError):
        await waiter  # waited its 0.05 s out
    assert gates.gate("m").waiting == 0 and dict(gates.gate("m").waiting_adapters) == {}


async def test_a_waiter_that_leaves_passes_its_slot_on() -> None:
    gates = admission(1, 5)
    held = await gates.acquire("m", None)
    leaving = asyncio.create_task(gates.acquire("m", None))
    staying = asyncio.create_task(gates.acquire("m", None))
    await queued(gates, 2)
    leaving.cancel()
    held.release()
    ticket = await staying
    assert gates.gate("m").running == 1
    ticket.release()
    ticket.release()  # idempotent
    assert gates.in_flight == 0


async def test_shutdown_rejects_everyone_waiting() -> None:
    gates = admission(1, 5)
    await gates.acquire("m", None)
    waiters = [asyncio.create_task(gates.acquire("m", None)) for _ in range(2)]
    await queued(gates, 2)
    assert gates.reject_waiting(ShuttingDownError("bye")) == 2
    for waiter in waiters:
        with pytest.raises(ShuttingDownError):
            await waiter
    assert gates.gate("m").running == 1 and gates.gate("m").waiting == 0


async def test_running_adapters_are_counted_for_lora_info() -> None:
    gates = admission(0, 0)  # unlimited
    first = await gates.acquire("m", "alpha")
    await gates.acquire("m", "beta")
    assert dict(gates.gate("m").running_adapters) == {"alpha": 1, "beta": 1}
    first.release()
    assert dict(gates.gate("m").running_adapters) == {"beta": 1}


async def admitted_order(gates: Admission, claims: list[tuple[str, Claim]]) -> list[str]:
    """Hold the one slot, queue ``claims`` in this order, then free it: the order they got it."""
    held = await gates.acquire("m", None)
    order: list[str] = []

    async def wait(name: str, claim: Claim) -> None:
        ticket = await gates.acquire("m", None, claim=claim)
        order.append(name)
        await asyncio.sleep(0)
        ticket.release((0, 100))

    tasks = [asyncio.create_task(wait(name, claim)) for name, claim in claims]
    await queued(gates, len(claims))
    held.release()
    await asyncio.gather(*tasks)
    return order


async def test_queued_keys_share_turns_and_bands_go_first() -> None:
    claims = [(f"a{i}", of("a")) for i in range(3)] + [("b0", of("b")), ("b1", of("b")), ("c", of("c", band=-1))]
    assert await admitted_order(admission(1, 10), claims) == ["c", "a0", "b0", "a1", "b1", "a2"]
    assert await admitted_order(admission(1, 10, policy="fifo"), claims) == ["c", "a0", "a1", "a2", "b0", "b1"]


async def test_a_sheddable_request_is_refused_at_once_when_saturated_and_runs_when_not() -> None:
    gates = admission(1, 10, shed_priority=1)
    held = await gates.acquire("m", None)
    with pytest.raises(QueueRefusedError) as refused:
        await gates.acquire("m", None, claim=of("a", band=1))
    assert refused.value.reason == "sheddable" and refused.value.headers["Retry-After"] == "1"
    held.release()
    (await gates.acquire("m", None, claim=of("a", band=1))).release()


async def test_shed_bands_fill_an_idle_model_but_hold_only_their_share_beside_more_urgent_requests() -> None:
    gates = admission(8, 10, shed_priority=1, shed_share=0.25, headroom=0.5, policy="fair")
    batch = [await gates.acquire("m", None, claim=of("batch", band=1)) for _ in range(8)]  # idle: all 8
    with pytest.raises(QueueRefusedError):
        await gates.acquire("m", None, claim=of("batch", band=1))
    for ticket in batch[2:]:
        ticket.release()
    chat = await gates.acquire("m", None, claim=of("chat"))  # something more urgent runs now
    with pytest.raises(QueueRefusedError) as refused:  # 2 held = floor(8 * 0.25): the share is taken
        await gates.acquire("m", None, claim=of("batch", band=1))
    assert refused.value.reason == "sheddable" and "share" in refused.value.message
    batch[0].release()
    third = await gates.acquire("m", None, claim=of("batch", band=1))  # back within its share
    assert gates.gate("m").running == 3
    chat.release()
    rest = [await gates.acquire("m", None, claim=of("batch", band=1)) for _ in range(6)]  # idle again: up to 8
    assert gates.gate("m").running == 8
    with pytest.raises(QueueRefusedError):  # a shed band never takes the headroom's slots
        await gates.acquire("m", None, claim=of("other", band=1))
    for ticket in (batch[1], third, *rest):
        ticket.release()


async def test_a_deadline_the_queue_cannot_meet_is_refused_at_once() -> None:
    gates = admission(1, 10)
    ticket = await gates.acquire("m", None)
    await asyncio.sleep(0.05)
    ticket.release()  # the gate now knows a slot is held ~50 ms
    held = await gates.acquire("m", None)
    waiters = [asyncio.create_task(gates.acquire("m", None)) for _ in range(4)]
    await queued(gates, 4)
    with pytest.raises(QueueRefusedError) as refused:
        await gates.acquire("m", None, remaining=0.1)  # ~5 holds of 50 ms ahead
    assert refused.value.reason == "deadline" and refused.value.code == "deadline_unmeetable"
    late = asyncio.create_task(gates.acquire("m", None, remaining=5.0))
    await queued(gates, 5)
    held.release()
    for waiter in waiters:
        (await waiter).release()
    (await late).release()
    assert gates.in_flight == 0


async def test_headroom_admits_an_under_share_key_and_a_more_urgent_band_but_never_a_flood() -> None:
    gates = admission(2, 10, headroom=0.5)  # one slot of headroom
    flood = [await gates.acquire("m", None, claim=of("a")) for _ in range(2)]
    more = asyncio.create_task(gates.acquire("m", None, claim=of("a")))
    await queued(gates, 1)  # a alone never exceeds the limit
    quiet = gates.try_acquire("m", None, of("b"))
    assert quiet is not None and gates.gate("m").running == 3
    assert gates.try_acquire("m", None, of("c", band=-1)) is None  # the headroom is taken
    quiet.release()
    urgent = gates.try_acquire("m", None, of("a", band=-1))
    assert urgent is not None  # a band more urgent than one running
    for ticket in [*flood, urgent]:
        ticket.release()
    (await more).release()
    assert gates.in_flight == 0 and gates.gate("m").running_flows == {}
    fifo = admission(2, 10, headroom=0.5, policy="fifo")
    held = [await fifo.acquire("m", None, claim=of("a")) for _ in range(2)]
    assert fifo.try_acquire("m", None, of("b")) is None
    for ticket in held:
        ticket.release()


async def test_a_full_queue_gives_a_quiet_keys_request_the_place_of_the_floods_newest() -> None:
    gates = admission(1, 3)
    held = await gates.acquire("m", None)
    flood = [asyncio.create_task(gates.acquire("m", None, claim=of("a"))) for _ in range(3)]
    await queued(gates, 3)
    quiet = asyncio.create_task(gates.acquire("m", None, claim=of("b")))
    await asyncio.sleep(0)
    with pytest.raises(QueueRefusedError) as displaced:
        await flood[2]
    assert displaced.value.reason == "displaced"
    with pytest.raises(QueueRefusedError) as refused:
        await gates.acquire("m", None, claim=of("a"))  # a holds the most: the newcomer is refused
    assert refused.value.reason == "queue_full"
    held.release()
    for task in [flood[0], quiet, flood[1]]:
        (await task).release()
    assert gates.in_flight == 0 and gates.gate("m").waiting == 0


async def test_a_band_queue_cap_refuses_that_band_only() -> None:
    gates = admission(1, 10, band_queue_sizes={0: 1})
    held = await gates.acquire("m", None)
    first = asyncio.create_task(gates.acquire("m", None, claim=of("a")))
    await queued(gates, 1)
    with pytest.raises(QueueRefusedError):
        await gates.acquire("m", None, claim=of("a"))
    critical = asyncio.create_task(gates.acquire("m", None, claim=of("a", band=-1)))
    await queued(gates, 2)
    held.release()
    (await critical).release()
    (await first).release()
