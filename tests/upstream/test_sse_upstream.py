"""The 2024-11-05 HTTP+SSE upstream (U3) against the SDK's own SSE server, with real clients.

The server is ``tests/fixtures/serve_http.py --transport sse`` serving
``tests/fixtures/legacy_server.py``: the SDK's ``SseServerTransport`` (``GET /sse``, the
``endpoint`` event, ``POST /messages/``). In front of it runs the real proxy; the clients
are the official ``mcp`` SDK client and a raw aiohttp client that cuts its connection at
seeded random points. The helpers and scenarios it shares with ``test_ws_upstream.py``
are in ``tests/upstream/support.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from proxy.config_upstream import UpstreamConfig
from proxy.core.errors import UpstreamStartFailed
from proxy.core.jsonrpc import Message
from proxy.upstream.base import UpstreamContext, UpstreamHealth
from proxy.upstream.sse import SseUpstream
from tests.downstream.sse_client import RawSession
from tests.support import (
    children_of,
    eventually,
    log_events,
    reserved_port,
    run_proxy,
)
from tests.upstream.support import (
    DEADLINE,
    FIXTURES,
    INITIALIZE,
    cut_and_resume,
    health,
    running,
    sdk_client_session,
    upstream_lost_then_back,
    wait_health,
)


def sse_server_args(port: int) -> list[str]:
    return [
        sys.executable,
        str(FIXTURES / "serve_http.py"),
        "--port",
        str(port),
        "--transport",
        "sse",
        "--fixture",
        str(FIXTURES / "legacy_server.py"),
    ]


# ---------------------------------------------------------------------- tests
async def test_the_sdk_client_works_through_an_sse_upstream(tmp_path: Path) -> None:
    async with (
        running(sse_server_args, tmp_path) as server,
        run_proxy(tmp_path, upstream={"url": f"http://127.0.0.1:{server.port}/sse"}) as proxy,
        aiohttp.ClientSession() as http,
    ):
        await sdk_client_session(proxy.url)
        status, body = await health(http, proxy.base)
        assert status == 200 and body["upstream"]["transport"] == "sse"
        assert not children_of(proxy.process.pid), "a URL upstream starts no process"


async def test_a_cut_client_resumes_the_exact_sequence_from_an_sse_upstream(
    tmp_path: Path, seed: int
) -> None:
    async with (
        running(sse_server_args, tmp_path) as server,
        run_proxy(tmp_path, upstream={"url": f"http://127.0.0.1:{server.port}/sse"}) as proxy,
    ):
        await cut_and_resume(proxy.url, n=1000, cuts=25, seed=seed)


async def test_a_lost_sse_upstream_fails_the_call_degrades_then_reconnects(
    tmp_path: Path,
) -> None:
    async with (
        running(sse_server_args, tmp_path) as server,
        run_proxy(
            tmp_path,
            upstream={"url": f"http://127.0.0.1:{server.port}/sse", "reconnect_max_seconds": 120},
        ) as proxy,
    ):

        async def kill(http: aiohttp.ClientSession, s: RawSession) -> None:
            await server.kill()

        # server.start(): back on the same port, where the proxy reconnects by itself.
        _, failing = await upstream_lost_then_back(proxy, kill, server.start)
        assert failing["upstream"]["last_error"]
        assert len(log_events(proxy.log_text(), "upstream_connection_lost")) == 1
        assert not children_of(proxy.process.pid)


async def test_an_unreachable_sse_upstream_refuses_initialize_with_502(tmp_path: Path) -> None:
    async with (
        reserved_port() as port,  # nothing listens there
        run_proxy(
            tmp_path,
            upstream={"url": f"http://127.0.0.1:{port}/sse", "connect_timeout_seconds": 5},
        ) as proxy,
        aiohttp.ClientSession() as http,
    ):
        async with http.post(
            proxy.url, json=INITIALIZE, headers=RawSession(http, "").headers()
        ) as resp:
            assert resp.status == 502
            error = (await resp.json())["error"]
        assert error["data"]["reason"] == "upstream_start_failed"
        assert f"127.0.0.1:{port}/sse" in error["message"]
        body = await wait_health(http, proxy.base, "failing")
        assert f"127.0.0.1:{port}/sse" in body["upstream"]["last_error"]


# ---------------------------------------------------------------------- the class itself
def _upstream(
    url: str, health: UpstreamHealth | None = None, **config: Any
) -> tuple[SseUpstream, asyncio.Queue[Message], list[str]]:
    got: asyncio.Queue[Message] = asyncio.Queue()
    closed: list[str] = []
    up = SseUpstream(
        UpstreamContext(
            UpstreamConfig(url=url, **config),
            "test-session-id",
            on_message=lambda msg, origin: got.put_nowait(msg),
            on_closed=closed.append,
            health=health or UpstreamHealth(),
        )
    )
    return up, got, closed


async def test_a_refused_post_fails_its_request_and_stop_leaves_no_task(tmp_path: Path) -> None:
    async with running(sse_server_args, tmp_path) as server:
        before = asyncio.all_tasks()
        up, got, closed = _upstream(f"http://127.0.0.1:{server.port}/sse")
        await up.start()
        up.send(json.dumps(INITIALIZE).encode())
        answer = await asyncio.wait_for(got.get(), DEADLINE)
        assert answer.raw["result"]["serverInfo"]["name"] == "legacy-fixture"
        # JSON-RPC allows array params, MCP does not: the SDK server answers 400.
        up.send(b'{"jsonrpc":"2.0","id":2,"method":"tools/list","params":[1]}')
        refused = await asyncio.wait_for(got.get(), DEADLINE)
        assert refused.raw["id"] == 2 and "HTTP 400" in refused.raw["error"]["message"]
        await up.stop()
        assert asyncio.all_tasks() == before, "stop() leaves no task behind"
        assert closed == ["stopped"] and up.pending_bytes == 0


async def _bad_sse_server(events: bytes) -> tuple[web.AppRunner, int]:
    """A tiny real HTTP server whose GET stream says ``events`` and then nothing."""

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(events)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(3600)  # the scenario: silence, until the client hangs up
        return response

    app = web.Application()
    app.router.add_get("/sse", handler)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, int(runner.addresses[0][1])


@pytest.mark.parametrize(
    ("events", "error"),
    [
        (b"event: endpoint\ndata: http://elsewhere.example/messages\n\n", "another origin"),
        (b": no endpoint event, ever\n\n", "no connection within"),
    ],
)
async def test_a_bad_endpoint_event_is_a_start_error(events: bytes, error: str) -> None:
    runner, port = await _bad_sse_server(events)
    try:
        health = UpstreamHealth()
        url = f"http://127.0.0.1:{port}/sse"
        up, _, _ = _upstream(url, health, connect_timeout_seconds=1.0)
        with pytest.raises(UpstreamStartFailed) as info:
            await up.start()
        assert info.value.http_status == 502 and error in info.value.message
        assert health.state == "failing"
        await up.stop()
    finally:
        await runner.cleanup()


async def test_the_messages_before_an_unreadable_line_are_delivered() -> None:
    """Issue 23: an unreadable line in the chunk of the ``endpoint`` event failed the
    start, and the messages before it were lost."""
    note = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"n": 1}}
    events = b"event: endpoint\ndata: /messages\n\ndata: " + json.dumps(note).encode()
    runner, port = await _bad_sse_server(events + b"\n\ndata: \xff\n\n")  # one chunk
    try:
        health = UpstreamHealth()
        up, got, _ = _upstream(f"http://127.0.0.1:{port}/sse", health)
        await up.start()
        assert (await asyncio.wait_for(got.get(), DEADLINE)).raw == note
        await eventually(lambda: "SSE stream unreadable" in (health.last_error or ""))
        await up.stop()
    finally:
        await runner.cleanup()


async def test_configured_headers_go_with_the_get_and_every_post(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A small real server that records what it is sent and echoes each POST on the stream."""
    monkeypatch.setenv("UPSTREAM_TEST_TOKEN", "s3cret")
    seen: list[tuple[str, str | None, str | None]] = []
    outbox: asyncio.Queue[bytes] = asyncio.Queue()

    async def get(request: web.Request) -> web.StreamResponse:
        seen.append(("GET", request.headers.get("Authorization"), request.headers.get("Accept")))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"event: endpoint\ndata: messages?sid=1\n\n")
        while True:
            await response.write(b"data: " + await outbox.get() + b"\n\n")

    async def post(request: web.Request) -> web.Response:
        seen.append(("POST", request.headers.get("Authorization"), request.query.get("sid")))
        msg = await request.json()
        outbox.put_nowait(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {}}).encode())
        return web.Response(status=202)

    app = web.Application()
    app.router.add_get("/mcp/sse", get)
    app.router.add_post("/mcp/messages", post)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = int(runner.addresses[0][1])
    try:
        up, got, _ = _upstream(
            f"http://127.0.0.1:{port}/mcp/sse",
            headers={"Authorization": "Bearer ${UPSTREAM_TEST_TOKEN}"},
        )
        await up.start()
        up.send(b'{"jsonrpc":"2.0","id":5,"method":"ping"}')
        assert (await asyncio.wait_for(got.get(), DEADLINE)).raw["id"] == 5
        await up.stop()
        assert seen == [
            ("GET", "Bearer s3cret", "text/event-stream"),
            ("POST", "Bearer s3cret", "1"),  # the endpoint, resolved against the SSE URL
        ]
    finally:
        await runner.cleanup()
