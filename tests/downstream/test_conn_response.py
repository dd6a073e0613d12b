"""proxy/downstream/conn_response.py: the POSTs holding their headers share one timer
(HoldClock): each is woken once its window has passed, in the order they began, and a
hold that ended first is never woken; a held run of events is judged event by event."""

from __future__ import annotations

import asyncio
import functools

from proxy.client_conn import ConnQueue, Item
from proxy.core import lone_answer
from proxy.core.eventrun import EventRun
from proxy.core.sse import encode_event
from proxy.downstream.conn_response import HoldClock, _sse_frames

WINDOW = 0.05  # seconds; every wait below ends on a condition


async def test_holds_expire_in_order_and_a_finished_one_is_not_woken() -> None:
    clock = HoldClock(WINDOW)
    queues: list[ConnQueue[Item]] = [ConnQueue() for _ in range(3)]
    woken: list[int] = []
    both = asyncio.Event()

    def on_wake(n: int) -> None:
        woken.append(n)
        if len(woken) == 2:
            both.set()

    for n, queue in enumerate(queues):
        queue.listen(functools.partial(on_wake, n))
    first = clock.begin(queues[0])
    await asyncio.sleep(WINDOW / 2)  # a later deadline for the others (not a wait for them)
    second = clock.begin(queues[1])
    third = clock.begin(queues[2])
    clock.finish(second)  # answered in time
    # The order they were woken in, not what is expired at some instant: a loop held up
    # under load may pass both deadlines before either wake is seen.
    await asyncio.wait_for(both.wait(), 10)
    assert woken == [0, 2]  # the first window ends first; the finished one is not woken
    assert first.expired and third.expired and not second.expired and second.done
    assert clock._timer is None and not clock._holds  # nothing left armed


async def test_a_hold_begun_after_the_others_ended_rearms_the_timer() -> None:
    clock = HoldClock(WINDOW)
    clock.finish(clock.begin(ConnQueue()))
    queue: ConnQueue[Item] = ConnQueue()
    late = clock.begin(queue)
    await asyncio.wait_for(queue.wait(), 10)
    assert late.expired


def test_a_held_run_is_judged_event_by_event() -> None:
    """A run of events (a stdio turn's messages, issue 23) is framed one event at a time
    for the lone-answer verdict: a notification and the answer in one run stream as SSE;
    a large answer alone in its run goes as JSON, as a single event would."""
    answer = b'{"jsonrpc":"2.0","id":1,"result":{"text":"' + b"x" * 100 + b'"}}'
    notice = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{}}'
    both = _sse_frames(EventRun("e.1.", 1, [notice, answer]))
    assert both == [encode_event(notice, event_id="e.1.1"), encode_event(answer, event_id="e.1.2")]
    assert lone_answer.verdict(both, True, min_bytes=10) is lone_answer.SSE
    alone = _sse_frames(EventRun("e.1.", 1, [answer]))
    assert lone_answer.verdict(alone, True, min_bytes=10) == answer
