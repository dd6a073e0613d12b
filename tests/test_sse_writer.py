"""proxy.sse_writer: the one SSE writer (headers, keepalive, liveness, batching, end)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest
from aiohttp import web

from proxy import sse_writer as sse
from proxy.core.sse import encode_event
from proxy.sse_writer import KEEPALIVE, SseWriter

END = "end"


def _is_end(item: str) -> bool:
    return item == END


def _request(transport: Any = None) -> web.Request:
    return cast(web.Request, SimpleNamespace(transport=transport))


async def test_what_is_queued_at_once_comes_in_one_batch_up_to_the_end() -> None:
    queue: asyncio.Queue[str] = asyncio.Queue()
    for item in ("a", "b", END, "c"):
        queue.put_nowait(item)
    writer = SseWriter(_request(), keepalive=10.0)
    assert await writer.next_batch(queue, _is_end) == ["a", "b", END]
    assert await writer.next_batch(queue, _is_end) == ["c"]


async def test_a_client_that_hung_up_is_noticed_while_nothing_is_queued(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sse, "LIVENESS_SECONDS", 0.01)
    queue: asyncio.Queue[str] = asyncio.Queue()
    writer = SseWriter(_request(transport=None), keepalive=10.0)
    assert writer.gone
    assert await writer.next_batch(queue, _is_end) == []


async def test_headers_keepalive_and_end(aiohttp_client: Any) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        # Later than the first keepalive is due (timers run in time order: no race).
        asyncio.get_running_loop().call_later(0.3, queue.put_nowait, encode_event(b"{}"))
        writer = SseWriter(request, keepalive=0.05, headers={"Mcp-Session-Id": "s1"})
        await writer.open()
        batch = await writer.next_batch(queue, lambda item: True)
        return await writer.end(b"".join(batch))

    app = web.Application()
    app.router.add_get("/", handler)
    client = await aiohttp_client(app)
    response = await client.get("/")
    assert response.status == 200
    assert response.headers["Content-Type"] == "text/event-stream"
    assert response.headers["Cache-Control"] == "no-cache, no-transform"
    assert response.headers["X-Accel-Buffering"] == "no"
    assert response.headers["Mcp-Session-Id"] == "s1"
    body = await response.read()
    assert body.startswith(KEEPALIVE)  # the quiet time was filled with comments
    assert body.endswith(encode_event(b"{}"))
    assert body.replace(KEEPALIVE, b"") == encode_event(b"{}")


async def test_a_reply_that_never_streams_stays_unopened() -> None:
    writer = SseWriter(_request(), keepalive=1.0)
    assert not writer.opened
    assert 0.0 < writer.due() <= 1.0


def _feed_each_turn(queue: asyncio.Queue[str], sizes: list[int]) -> None:
    """Queue ``sizes[0]`` items in the next turn of the loop, ``sizes[1]`` in the one after…
    (as the stdio reader hands over a burst, a slice a turn)."""
    if sizes:
        for i in range(sizes[0]):
            queue.put_nowait(f"t{len(sizes)}-{i}")
        asyncio.get_running_loop().call_soon(_feed_each_turn, queue, sizes[1:])


async def _bursting(queue: asyncio.Queue[str]) -> SseWriter:
    """A writer that has just taken a large batch (a burst's first)."""
    writer = SseWriter(_request(), keepalive=10.0)
    for i in range(sse.BURST_ITEMS):
        queue.put_nowait(f"first-{i}")
    # The first large batch goes at once: nothing queued in a later turn is in it.
    asyncio.get_running_loop().call_soon(_feed_each_turn, queue, [1])
    assert len(await writer.next_batch(queue, _is_end)) == sse.BURST_ITEMS
    await asyncio.sleep(0)
    queue.get_nowait()
    return writer


async def test_a_bursts_batches_after_the_first_grow_with_what_the_next_turns_queue() -> None:
    queue: asyncio.Queue[str] = asyncio.Queue()
    writer = await _bursting(queue)
    for i in range(40):
        queue.put_nowait(f"second-{i}")
    asyncio.get_running_loop().call_soon(_feed_each_turn, queue, [40, 40, 5, 40])
    batch = await writer.next_batch(queue, _is_end)
    # Its 40, then 40 and 40 more a turn, then 5: the burst is over, the rest waits.
    assert len(batch) == 40 + 40 + 40 + 5
    assert len(batch) == len(set(batch))


async def test_a_bursts_batch_grows_to_at_most_merge_items() -> None:
    queue: asyncio.Queue[str] = asyncio.Queue()
    writer = await _bursting(queue)
    for i in range(40):
        queue.put_nowait(f"second-{i}")
    asyncio.get_running_loop().call_soon(_feed_each_turn, queue, [100] * 20)
    batch = await writer.next_batch(queue, _is_end)
    assert sse.MERGE_ITEMS <= len(batch) < sse.MERGE_ITEMS + 100


async def test_a_small_batch_in_a_burst_is_not_held_back() -> None:
    queue: asyncio.Queue[str] = asyncio.Queue()
    writer = await _bursting(queue)
    queue.put_nowait("answer")
    asyncio.get_running_loop().call_soon(_feed_each_turn, queue, [40])
    assert await writer.next_batch(queue, _is_end) == ["answer"]


async def test_a_bursts_end_is_not_held_back() -> None:
    queue: asyncio.Queue[str] = asyncio.Queue()
    writer = await _bursting(queue)
    for i in range(40):
        queue.put_nowait(f"b{i}")
    queue.put_nowait(END)
    asyncio.get_running_loop().call_soon(_feed_each_turn, queue, [40])
    batch = await writer.next_batch(queue, _is_end)
    assert batch[-1] == END and len(batch) == 41
