"""The WebSocket upstream (U4) against a real WebSocket MCP server, with real clients.

The server is ``tests/fixtures/ws_server.py``: a ``websockets`` server on subprotocol
``mcp`` that runs ``tests/fixtures/legacy_server.py`` per connection and relays frames.
In front of it runs the real proxy; the clients are the official ``mcp`` SDK client and a
raw aiohttp client cut at seeded random points (the scenarios of test_sse_upstream.py).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request
from websockets.typing import Subprotocol

from proxy.config_upstream import UpstreamConfig
from proxy.core.errors import UpstreamStartFailed
from proxy.core.jsonrpc import Message
from proxy.upstream.base import UpstreamContext, UpstreamHealth
from proxy.upstream.websocket import WebSocketUpstream
from tests.downstream.sse_client import RawSession, read_events
from tests.support import children_of, eventually, log_events, run_proxy, tool_call
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


def ws_server_args(*flags: str) -> Callable[[int], list[str]]:
    """The command of ``tests/fixtures/ws_server.py`` with ``flags``, for a given port."""

    def for_port(port: int) -> list[str]:
        return [sys.executable, str(FIXTURES / "ws_server.py"), "--port", str(port), *flags]

    return for_port


async def test_the_sdk_client_works_through_a_websocket_upstream_that_sends_bad_frames(
    tmp_path: Path,
) -> None:
    async with (
        running(ws_server_args("--bad-frames"), tmp_path) as server,
        run_proxy(tmp_path, upstream={"url": f"ws://127.0.0.1:{server.port}/"}) as proxy,
        aiohttp.ClientSession() as http,
    ):
        await sdk_client_session(proxy.url)
        status, body = await health(http, proxy.base)
        assert status == 200 and body["upstream"]["transport"] == "websocket"
        log = proxy.log_text()
        # Before each real message the server sends three bad frames; each is skipped.
        assert log_events(log, "upstream_frame_skipped"), "binary frames are logged"
        skipped = log_events(log, "upstream_message_skipped")
        assert {e["data"] for e in skipped} == {"not json {", '{"hello": "world"}'}
        assert all(e["session"] for e in skipped), "logged with the session prefix"
        assert not children_of(proxy.process.pid), "a URL upstream starts no process"


async def test_a_cut_client_resumes_the_exact_sequence_from_a_websocket_upstream(
    tmp_path: Path, seed: int
) -> None:
    async with (
        running(ws_server_args(), tmp_path) as server,
        run_proxy(tmp_path, upstream={"url": f"ws://127.0.0.1:{server.port}/"}) as proxy,
    ):
        await cut_and_resume(proxy.url, n=1000, cuts=25, seed=seed)


async def test_a_dropped_websocket_fails_the_call_degrades_then_reconnects(
    tmp_path: Path,
) -> None:
    """The server drops the connection mid-call (its process exits: the ``crash`` tool);
    it refuses to reconnect while ``gate`` exists, so the degraded state is observable."""
    gate = tmp_path / "refuse"
    async with (
        running(ws_server_args("--refuse-while", str(gate)), tmp_path) as server,
        run_proxy(
            tmp_path,
            upstream={"url": f"ws://127.0.0.1:{server.port}/", "reconnect_max_seconds": 120},
        ) as proxy,
    ):

        async def drop(http: aiohttp.ClientSession, s: RawSession) -> None:
            gate.touch()
            crash = tool_call(9, "crash", {})
            async with http.post(proxy.url, json=crash, headers=s.headers()) as resp:
                answer = json.loads((await read_events(resp))[-1].data)
            assert answer["id"] == 9 and "connection lost" in answer["error"]["message"]

        async def restore() -> None:
            gate.unlink()  # the server takes connections again: the proxy reconnects by itself

        # The new server process knows nothing of the session: it is re-initialized.
        received, failing = await upstream_lost_then_back(proxy, drop, restore)
        assert "WebSocket closed (1011" in received[-1]["error"]["message"]
        assert "WebSocket" in failing["upstream"]["last_error"]


async def test_an_unreachable_websocket_upstream_gives_up_reconnecting(tmp_path: Path) -> None:
    """Reconnection is bounded by reconnect_max_seconds; then the client session ends."""
    async with (
        running(ws_server_args(), tmp_path) as server,
        run_proxy(
            tmp_path, upstream={"url": f"ws://127.0.0.1:{server.port}/", "reconnect_max_seconds": 1}
        ) as proxy,
        aiohttp.ClientSession() as http,
    ):
        s = RawSession(http, proxy.url)
        await s.initialize()
        await server.kill()
        await eventually(
            lambda: log_events(proxy.log_text(), "upstream_unreachable"),
            what="the proxy to give up reconnecting",
        )
        async with http.post(
            proxy.url, json=tool_call(2, "echo", {"text": "x"}), headers=s.headers()
        ) as resp:
            assert resp.status == 404, "the session ended with its upstream"
        assert (await wait_health(http, proxy.base, "failing"))["upstream"]["last_error"]


# ---------------------------------------------------------------------- the class itself
def _upstream(url: str, health: UpstreamHealth) -> tuple[WebSocketUpstream, asyncio.Queue[Message]]:
    got: asyncio.Queue[Message] = asyncio.Queue()
    up = WebSocketUpstream(
        UpstreamContext(
            UpstreamConfig(url=url, connect_timeout_seconds=5),
            "test-session-id",
            on_message=lambda msg, origin: got.put_nowait(msg),
            on_closed=lambda reason: None,
            health=health,
        )
    )
    return up, got


async def test_pause_holds_frames_back_and_stop_leaves_no_task(tmp_path: Path) -> None:
    async with running(ws_server_args(), tmp_path) as server:
        before = asyncio.all_tasks()
        up, got = _upstream(f"ws://127.0.0.1:{server.port}/", UpstreamHealth())
        await up.start()
        up.send(json.dumps(INITIALIZE).encode())
        assert (await asyncio.wait_for(got.get(), DEADLINE)).raw["id"] == 1
        up.pause()
        up.send(b'{"jsonrpc":"2.0","id":2,"method":"ping"}')
        with pytest.raises(TimeoutError):  # the answer is there, but not read while paused
            await asyncio.wait_for(got.get(), 1.0)
        up.resume()
        assert (await asyncio.wait_for(got.get(), DEADLINE)).raw == {
            "jsonrpc": "2.0",
            "id": 2,
            "result": {},
        }
        await up.stop()
        assert asyncio.all_tasks() == before, "stop() leaves no task behind"


async def test_a_refused_handshake_is_a_start_error(tmp_path: Path) -> None:
    gate = tmp_path / "refuse"
    gate.touch()
    async with running(ws_server_args("--refuse-while", str(gate)), tmp_path) as server:
        port = server.port
        health_ = UpstreamHealth()
        up, _ = _upstream(f"ws://user:secret@127.0.0.1:{port}/mcp?key=secret", health_)
        assert up.describe() == f"ws://127.0.0.1:{port}/mcp", "no credentials in logs"
        with pytest.raises(UpstreamStartFailed) as info:
            await up.start()
        assert info.value.http_status == 502 and "503" in info.value.message
        assert "secret" not in info.value.message and health_.state == "failing"
        await up.stop()


async def test_configured_headers_and_the_mcp_subprotocol_are_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("UPSTREAM_TEST_TOKEN", "s3cret")
    seen: list[tuple[str | None, str | None]] = []

    def record(connection: ServerConnection, request: Request) -> None:
        headers = request.headers
        seen.append((headers.get("Authorization"), headers.get("Sec-WebSocket-Protocol")))

    async def echo(ws: ServerConnection) -> None:
        async for frame in ws:
            msg = json.loads(frame)
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {}}))

    async with serve(
        echo, "127.0.0.1", 0, subprotocols=[Subprotocol("mcp")], process_request=record
    ) as server:
        port = server.sockets[0].getsockname()[1]
        got: asyncio.Queue[Message] = asyncio.Queue()
        up = WebSocketUpstream(
            UpstreamContext(
                UpstreamConfig(
                    url=f"ws://127.0.0.1:{port}/",
                    headers={"Authorization": "Bearer ${UPSTREAM_TEST_TOKEN}"},
                ),
                "test-session-id",
                on_message=lambda msg, origin: got.put_nowait(msg),
                on_closed=lambda reason: None,
            )
        )
        await up.start()
        up.send(b'{"jsonrpc":"2.0","id":5,"method":"ping"}')
        assert (await asyncio.wait_for(got.get(), DEADLINE)).raw["id"] == 5
        await up.stop()
    assert seen == [("Bearer s3cret", "mcp")]
