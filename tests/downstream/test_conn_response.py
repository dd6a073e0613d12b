"""proxy/downstream/conn_response.py: the POSTs holding their headers share one timer
(HoldClock): each is woken once its window has passed, in the order they began, and a
hold that ended first is never woken."""

from __future__ import annotations

import asyncio

from proxy.client_conn import ConnQueue, Item
from proxy.downstream.conn_response import HoldClock

WINDOW = 0.05  # seconds; every wait below ends on a condition


async def test_holds_expire_in_order_and_a_finished_one_is_not_woken() -> None:
    clock = HoldClock(WINDOW)
    queues: list[ConnQueue[Item]] = [ConnQueue() for _ in range(3)]
    first = clock.begin(queues[0])
    await asyncio.sleep(WINDOW / 2)
    second = clock.begin(queues[1])
    third = clock.begin(queues[2])
    clock.finish(second)  # answered in time
    waits = [asyncio.ensure_future(q.wait()) for q in (queues[0], queues[2])]
    await asyncio.wait_for(waits[0], 10)
    assert first.expired and not third.expired  # the first window ends first
    await asyncio.wait_for(waits[1], 10)
    assert third.expired and not second.expired and second.done
    assert clock._timer is None and not clock._holds  # nothing left armed


async def test_a_hold_begun_after_the_others_ended_rearms_the_timer() -> None:
    clock = HoldClock(WINDOW)
    clock.finish(clock.begin(ConnQueue()))
    queue: ConnQueue[Item] = ConnQueue()
    late = clock.begin(queue)
    await asyncio.wait_for(queue.wait(), 10)
    assert late.expired
