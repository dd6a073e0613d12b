"""SIGTERM with calls in flight: each gets an error answer before its stream ends.

End to end: a real proxy process in front of the legacy stdio fixture, with the raw SSE
client (it sees exactly what reaches the wire before the connection ends) and a WebSocket
client. Then the runtime alone: ``Registry.shutdown`` waits, within its bound, until the
connections have written the answers out, since the HTTP server's cleanup comes next.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from websockets.exceptions import ConnectionClosed

from proxy import registry as registry_module
from proxy.config import Config, config_from_mapping
from proxy.context import ProxyContext
from proxy.core import jsonrpc
from proxy.core.events import ClientPost
from proxy.core.sse import SSEDecoder, SSEEvent
from proxy.registry import Registry
from proxy.runtime import ClientConn, CloseMarker, Frame, SessionRunner
from tests.downstream.sse_client import RawSession
from tests.downstream.ws_client import initialize, socket
from tests.support import FIXTURE, alive, initialize_request, log_events, run_proxy, tool_call


def slow_call(rid: int, token: str) -> dict[str, Any]:
    # A minute: far longer than the test.
    return tool_call(rid, "slow", {"steps": 600, "delay": 0.1}, token)


async def read_until_progress(resp: aiohttp.ClientResponse, dec: SSEDecoder) -> list[SSEEvent]:
    """Read the stream until the first progress notification: the call is running."""
    events: list[SSEEvent] = []
    while not any(e.data and "notifications/progress" in e.data for e in events):
        chunk = await resp.content.readany()
        assert chunk, f"the stream ended before any progress: {events}"
        events += dec.feed(chunk)
    return events


async def read_to_end(resp: aiohttp.ClientResponse, dec: SSEDecoder) -> list[SSEEvent]:
    events: list[SSEEvent] = []
    async for chunk in resp.content.iter_any():
        events += dec.feed(chunk)
    return events


async def test_sigterm_answers_in_flight_calls_before_their_streams_end(tmp_path: Path) -> None:
    async with run_proxy(tmp_path, FIXTURE) as proxy, aiohttp.ClientSession() as http:
        clients = [RawSession(http, proxy.url) for _ in range(2)]
        for s in clients:
            await s.initialize()
        pids = proxy.upstream_pids()
        assert len(pids) == 2 and all(alive(p) for p in pids)
        responses = []
        decoders = []
        for n, s in enumerate(clients, 1):
            resp = await http.post(proxy.url, json=slow_call(n, f"t{n}"), headers=s.headers())
            assert resp.status == 200
            dec = SSEDecoder()
            await asyncio.wait_for(read_until_progress(resp, dec), 30)
            responses.append(resp)
            decoders.append(dec)

        proxy.process.send_signal(signal.SIGTERM)
        for n, (resp, dec) in enumerate(zip(responses, decoders, strict=True), 1):
            rest = await asyncio.wait_for(read_to_end(resp, dec), 30)
            resp.close()
            answers = [json.loads(e.data) for e in rest if e.data and '"id"' in e.data]
            assert answers, f"call {n}: its stream ended without an answer: {rest}"
            error = answers[-1]
            assert error["id"] == n and error["error"]["code"] == -32000, error
            assert error["error"]["data"] == {"reason": "proxy_shutdown"}, error
            assert "shutting down" in error["error"]["message"]
        assert await asyncio.wait_for(proxy.process.wait(), 30) == 0
    assert not any(alive(p) for p in pids), "a server process outlived the proxy"
    log = proxy.log_text()
    forgotten = log_events(log, "session_forgotten")
    assert [f["reason"] for f in forgotten] == ["proxy shutting down"] * 2, forgotten
    assert "shutdown_connections_not_drained" not in log, "the answers were written out"


async def test_sigterm_answers_an_in_flight_call_on_a_websocket(tmp_path: Path) -> None:
    async with run_proxy(tmp_path, FIXTURE) as proxy, socket(proxy) as c:
        await initialize(c)
        await c.send(slow_call(5, "w"))
        while (await c.recv()).get("method") != "notifications/progress":
            pass
        proxy.process.send_signal(signal.SIGTERM)
        frames: list[dict[str, Any]] = []
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                frames.append(json.loads(await asyncio.wait_for(c.ws.recv(), 30)))
        answers = [f for f in frames if f.get("id") == 5]
        assert len(answers) == 1, frames
        assert answers[0]["error"]["data"] == {"reason": "proxy_shutdown"}, answers
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
        assert await asyncio.wait_for(proxy.process.wait(), 30) == 0


# ---------------------------------------------------------------------- the runtime alone
def _config() -> Config:
    return config_from_mapping(
        {"upstream": {"command": FIXTURE, "stop_grace_seconds": 3}, "log": {"level": "error"}}
    )


def _post(runner: SessionRunner, *messages: dict[str, Any]) -> ClientConn:
    conn = runner.open_conn()
    runner.feed(ClientPost(conn.id, [jsonrpc.classify(m) for m in messages]))
    return conn


async def _until_closed(conn: ClientConn) -> list[bytes | Frame | CloseMarker]:
    items: list[bytes | Frame | CloseMarker] = []
    while not items or not isinstance(items[-1], CloseMarker):
        items.append(await asyncio.wait_for(conn.queue.get(), 30))
    return items


async def _running_call(registry: Registry) -> tuple[SessionRunner, ClientConn]:
    """A session with a slow tools/call in flight on an open connection nobody writes."""
    runner = await registry.create()
    init = _post(runner, initialize_request(0, version="2025-06-18"))
    reply = await _until_closed(init)
    assert any(isinstance(x, bytes) and b'"result"' in x for x in reply), reply
    runner.conn_gone(init)
    runner.conn_gone(_post(runner, {"jsonrpc": "2.0", "method": "notifications/initialized"}))
    return runner, _post(runner, slow_call(1, "t"))


def _answers(items: list[bytes | Frame | CloseMarker]) -> list[dict[str, Any]]:
    return [
        json.loads(x.split(b"data: ", 1)[1]) for x in items if isinstance(x, bytes) and b'"id"' in x
    ]


async def test_shutdown_waits_until_the_answers_are_written_out() -> None:
    registry = Registry(ProxyContext(_config()))
    try:
        runner, conn = await _running_call(registry)
        written: list[bytes | Frame | CloseMarker] = []

        async def slow_writer() -> None:
            # A socket that takes its time: it writes only once the server has stopped.
            await runner.wait_stopped()
            await asyncio.sleep(0.1)
            written.extend(await _until_closed(conn))
            runner.conn_gone(conn)

        writer = asyncio.create_task(slow_writer())
        await asyncio.wait_for(registry.shutdown(), 30)
        assert written, "shutdown returned before the connection was written out"
        (answer,) = _answers(written)
        assert answer["id"] == 1 and answer["error"]["data"] == {"reason": "proxy_shutdown"}
        assert isinstance(written[-1], CloseMarker) and runner.open_connections == 0
        assert not alive(runner.upstream.pid or 0)
        await writer
    finally:
        await registry.shutdown()


async def test_shutdown_does_not_wait_forever_for_a_stalled_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry_module, "SHUTDOWN_DRAIN_SECONDS", 0.2)
    registry = Registry(ProxyContext(_config()))
    try:
        runner, conn = await _running_call(registry)  # nobody ever writes ``conn`` out
        await asyncio.wait_for(registry.shutdown(), 30)
        assert runner.open_connections == 1 and conn.closed
        assert not alive(runner.upstream.pid or 0)
    finally:
        await registry.shutdown()
