"""The shim's HTTP reading (``proxy/shim/http.py``): what :class:`SseReader` hands out of a
response that turns unreadable, against a real local aiohttp server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from proxy.core.sse import SSEEvent, encode_event
from proxy.shim.http import Lost, SseReader
from tests.support import DEADLINE_S


@pytest.fixture
async def bad_after_two() -> AsyncIterator[str]:
    """A server whose SSE response sends two events and a line that is not UTF-8, in one
    write (one chunk), then holds the response open."""
    closing = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        wire = encode_event(b"one", event_id="e-1") + encode_event(b"two", event_id="e-2")
        await resp.write(wire + b"data: \xff\n\n" + encode_event(b"three", event_id="e-3"))
        await closing.wait()
        return resp

    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/"
    finally:
        closing.set()
        await runner.cleanup()


async def test_the_events_before_an_unreadable_line_are_read_then_the_stream_is_lost(
    bad_after_two: str,
) -> None:
    """Issue 23: the read that met the bad line raised, and the events before it were lost
    (the shim resumed from before them, the proxy sent them again)."""
    async with aiohttp.ClientSession() as http, http.get(bad_after_two) as response:
        reader = SseReader(response)
        got: list[SSEEvent] = []
        with pytest.raises(Lost):  # once the bad line is met: the server sends nothing more
            while (events := await asyncio.wait_for(reader.read(), DEADLINE_S)) is not None:
                got += events
        assert got == [SSEEvent(data="one", id="e-1"), SSEEvent(data="two", id="e-2")]
