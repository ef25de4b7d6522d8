"""Admission: slots, a bounded FIFO queue, timeouts, and rejection of the waiting at shutdown."""

from __future__ import annotations

import asyncio

import pytest

from gateway.core.admission import Admission
from gateway.errors import RateLimitError, ShuttingDownError

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def admission(slots: int, queue: int, timeout: float = 1.0) -> Admission:
    return Admission(lambda model: (slots, queue), timeout)


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
