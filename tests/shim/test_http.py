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


def _refusal(reason: str) -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"x","data":{"reason":"'
        + reason.encode()
        + b'"}}}'
    )


@pytest.fixture
async def answering() -> AsyncIterator[str]:
    """A server answering ``POST /STATUS/KIND`` with that status and a body: the proxy's
    refusal of that ``reason`` (JSON-RPC) or, for ``page``, a balancer's HTML page."""

    async def handler(request: web.Request) -> web.Response:
        status, kind = int(request.match_info["status"]), request.match_info["kind"]
        if kind == "page":
            return web.Response(
                status=status, text="<html>gateway</html>", content_type="text/html"
            )
        return web.Response(status=status, body=_refusal(kind), content_type="application/json")

    app = web.Application()
    app.router.add_post("/{status}/{kind}", handler)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("status", "kind", "raised"),
    [
        (503, "proxy_draining", "NotSent"),  # refused before it ran: send again
        (503, "store_unavailable", "NotSent"),
        (503, "page", "NotSent"),  # a balancer with no replica up: nothing ran
        (503, "owner_unreachable", None),  # may have run: the answer as it is
        (502, "page", "Lost"),  # a balancer lost the replica: it may have got it
        (504, "page", "Lost"),
        (502, "upstream_start_failed", None),  # the proxy's own 502: an answer
        (404, "session_not_found", None),
        (202, "page", None),
    ],
)
async def test_which_answers_to_a_notification_or_response_say_send_it_again(
    answering: str, status: int, kind: str, raised: str | None
) -> None:
    from proxy.shim.http import NotSent
    from proxy.shim.session import ShimSession

    async with aiohttp.ClientSession() as http, http.post(f"{answering}/{status}/{kind}") as resp:
        if raised is None:
            await ShimSession._not_taken(resp)
            return
        with pytest.raises({"NotSent": NotSent, "Lost": Lost}[raised]):
            await ShimSession._not_taken(resp)
