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
