"""The scheduler's order, pure: bands, start-time fair queueing of tokens between flows, settling."""

from __future__ import annotations

from gateway.core.schedule import Claim, FairQueue


def claim(flow: str, band: int = 0, weight: float = 1.0, tokens: int = 100) -> Claim:
    return Claim(band=band, flow=flow, weight=weight, prompt_tokens=0, max_tokens=tokens)


def drain(queue: FairQueue) -> list[str]:
    order = []
    while (waiter := queue.pop()) is not None:
        order.append(waiter.payload)
    return order


def test_a_more_urgent_band_always_goes_first() -> None:
    queue = FairQueue()
    queue.push(claim("a", band=1), "a-sheddable")
    queue.push(claim("a"), "a-standard")
    queue.push(claim("b", band=-1), "b-critical")
    assert drain(queue) == ["b-critical", "a-standard", "a-sheddable"]


def test_equal_flows_alternate_whatever_the_arrival_order() -> None:
    queue = FairQueue()
    for i in range(4):
        queue.push(claim("a"), f"a{i}")
    queue.push(claim("b"), "b0")
    queue.push(claim("b"), "b1")
    assert drain(queue) == ["a0", "b0", "a1", "b1", "a2", "a3"]


def test_fifo_keeps_arrival_order_inside_a_band() -> None:
    queue = FairQueue("fifo")
    for i in range(4):
        queue.push(claim("a"), f"a{i}")
    queue.push(claim("b"), "b0")
    queue.push(claim("b", band=-1), "b-critical")
    assert drain(queue) == ["b-critical", "a0", "a1", "a2", "a3", "b0"]


def test_a_weight_of_two_gets_twice_the_turns() -> None:
    queue = FairQueue()
    for i in range(6):
        queue.push(claim("a"), f"a{i}")
    for i in range(6):
        queue.push(claim("b", weight=2.0), f"b{i}")
    assert [x[0] for x in drain(queue)[:6]] == ["a", "b", "b", "a", "b", "b"]


def test_tokens_not_requests_are_shared() -> None:
    """A flow of requests four times as large gets a quarter of the turns."""
    queue = FairQueue()
    for i in range(4):
        queue.push(claim("big", tokens=400), f"big{i}")
    for i in range(8):
        queue.push(claim("small", tokens=100), f"small{i}")
    order = drain(queue)
    assert order.index("big1") > order.index("small3")


def test_an_idle_flow_neither_banks_credit_nor_waits_behind_a_backlog() -> None:
    queue = FairQueue()
    for i in range(10):
        queue.push(claim("a"), f"a{i}")
    for _ in range(5):
        queue.pop()  # a5 is next; b was idle all along
    queue.push(claim("b"), "b0")
    queue.push(claim("b"), "b1")
    queue.push(claim("b"), "b2")
    # b starts at the virtual time (a4's tag): ahead of a's backlog by one turn, no more
    assert drain(queue)[:6] == ["b0", "a5", "b1", "a6", "b2", "a7"]


def test_settling_charges_what_a_request_really_took() -> None:
    queue = FairQueue()
    # a's first request was admitted at once (accounted) and then generated 900 tokens more than expected
    first = claim("a")
    cost = queue.account(first)
    queue.settle(first, cost, 0, 1000)
    queue.push(claim("a"), "a1")
    for i in range(5):
        queue.push(claim("b"), f"b{i}")
    assert drain(queue)[-1] == "a1"


def test_the_expected_completion_follows_a_flows_mean_under_its_max_tokens() -> None:
    queue = FairQueue()
    asks = claim("a", tokens=4000)
    assert queue.expected_cost(asks) == 4000
    queue.settle(asks, queue.account(asks), 0, 50)
    assert queue.expected_cost(asks) == 50
    assert queue.expected_cost(claim("a", tokens=20)) == 20


def test_a_discarded_waiter_is_skipped_and_counted_out() -> None:
    queue = FairQueue()
    gone = queue.push(claim("a"), "a0")
    queue.push(claim("b"), "b0")
    queue.discard(gone)
    assert queue.live == 1 and queue.waiting_in(0) == 1
    assert drain(queue) == ["b0"]
    queue.discard(gone)  # twice: nothing
    assert queue.live == 0


def test_ahead_counts_more_urgent_bands_and_a_fair_share_of_its_own() -> None:
    queue = FairQueue()
    for i in range(10):
        queue.push(claim("a"), f"a{i}")
    queue.push(claim("c", band=-1), "c0")
    assert queue.ahead(claim("b")) == 2  # the critical one, and one of a's before b's first
    assert queue.ahead(claim("a")) == 11
    assert FairQueue("fifo").ahead(claim("b")) == 0


def test_a_full_queue_gives_up_the_newest_waiter_of_the_flow_holding_most() -> None:
    queue = FairQueue()
    for i in range(3):
        queue.push(claim("a"), f"a{i}")
    queue.push(claim("b"), "b0")
    victim = queue.victim(claim("b"), same_band=True)
    assert victim is not None and victim.payload == "a2"
    assert queue.victim(claim("a"), same_band=True) is None  # a itself holds the most
    queue.push(claim("b"), "b1")
    assert queue.victim(claim("b"), same_band=True) is None  # b with a third would hold as many as a
    sheddable = queue.push(claim("s", band=1), "s0")
    assert queue.victim(claim("b"), same_band=False) is sheddable  # a less urgent band goes first
    assert queue.victim(claim("x", band=2), same_band=False) is None
