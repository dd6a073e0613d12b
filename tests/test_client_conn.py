"""proxy/client_conn.py: a connection's queue (a deque and one waiting reader)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from proxy.client_conn import ClientConn, CloseMarker, ConnFenced, ConnQueue
from proxy.core.events import ConnId


async def test_a_waiting_reader_gets_what_is_put_in_order() -> None:
    queue: ConnQueue[int] = ConnQueue()
    reader = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    assert not reader.done()
    queue.put_nowait(1)
    queue.put_nowait(2)
    assert await reader == 1
    assert queue.qsize() == 1 and queue.take() == [2] and queue.empty()
    with pytest.raises(IndexError):
        queue.get_nowait()


async def test_wake_ends_a_wait_without_an_item_and_a_cancelled_wait_leaves_no_waiter() -> None:
    queue: ConnQueue[int] = ConnQueue()
    waiting = asyncio.ensure_future(queue.wait())
    await asyncio.sleep(0)
    queue.wake()
    await waiting
    assert queue.empty()
    cancelled = asyncio.ensure_future(queue.wait())
    await asyncio.sleep(0)
    cancelled.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await cancelled
    queue.put_nowait(3)  # no waiter left to wake: nothing raises
    await queue.wait()  # an item is there: at once
    assert queue.get_nowait() == 3


async def test_fence_drops_what_is_queued_and_stored_raises() -> None:
    conn = ClientConn(ConnId(1))
    conn.queue.put_nowait(b"data: x\n\n")
    conn.queued_bytes = 9
    conn.fence()
    assert conn.queue.empty() and conn.queued_bytes == 0
    with pytest.raises(ConnFenced):
        await conn.stored()
    conn.queue.put_nowait(CloseMarker(None))
    assert isinstance(await conn.queue.get(), CloseMarker)
