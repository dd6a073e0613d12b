"""The Streamable HTTP upstream (U2) against real servers on real sockets, when all goes well.

First the whole proxy in front of the official SDK's Streamable HTTP server (serving the
legacy fixture), driven by the official SDK client and by a raw client that cuts its own
connection mid-call. Then :class:`HttpUpstream` alone against a scripted aiohttp server
(``tests/fixtures/http_scripted_server.py``): origins and headers, order, resumption,
cancellation, the standalone stream, stop; and against the SDK's resumable server behind a
proxy that cuts connections. Failures (unreachable, 5xx, bad bodies, timeouts, cuts without
event ids, session expiry) are in ``test_http_upstream_failures.py``. Helpers live in
``tests/fixtures/http_harness.py``, the ``server`` and ``log`` fixtures in ``conftest.py``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from aiohttp import web

from tests.e2e.sdk_client import connect, text_of
from tests.fixtures.http_harness import (
    DEADLINE,
    Harness,
    ProgressLog,
    call,
    cut_mid_call_and_resume,
    cut_proxy,
    our_tasks,
    ping,
    sdk_http_server,
    sdk_resumable_server,
    server_tasks,
    upstream,
    wire,
)
from tests.fixtures.http_scripted_server import (
    ScriptedServer,
    open_sse,
    progress,
    result,
    send_event,
)
from tests.support import eventually, run_proxy


@pytest.mark.parametrize("version", ["2025-03-26", "2025-06-18", "2025-11-25"])
async def test_proxy_in_front_of_an_sdk_http_server(tmp_path: Path, version: str) -> None:
    async with (
        sdk_http_server(tmp_path) as url,
        run_proxy(tmp_path, upstream={"url": url}) as proxy,
    ):
        with anyio.fail_after(60):
            async with connect(proxy.url, protocol_version=version) as conn:
                assert conn.initialize_result.protocol_version == version
                tools = await conn.session.list_tools()
                assert {"echo", "slow", "burst"} <= {t.name for t in tools.tools}
                echoed = await conn.session.call_tool("echo", {"text": "héllo ✓"})
                assert text_of(echoed) == "héllo ✓"
                seen = ProgressLog()
                slow = await conn.session.call_tool(
                    "slow", {"steps": 4, "delay": 0.05}, progress_callback=seen
                )
                assert text_of(slow) == "done 4"
                await eventually(lambda: len(seen.values) >= 4)
                assert seen.values == [1, 2, 3, 4]
        await cut_mid_call_and_resume(proxy.url, proxy.base + "/healthz", version)
        log = [json.loads(line) for line in proxy.log_text().splitlines() if line.startswith("{")]
    resumed = [e for e in log if e["event"] == "stream_resumed"]
    assert len(resumed) == 1 and resumed[0]["replay"] >= 1, "nothing was kept while away"
    assert not [e for e in log if e["level"] in ("warning", "error")], log


async def test_messages_on_a_response_carry_its_request_as_origin(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch, log: Any
) -> None:
    unrelated = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "x"}}
    changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}

    async def on_request(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        resp = await open_sse(request)
        await send_event(resp, progress("p2", 1))
        await send_event(resp, unrelated)
        await send_event(resp, result(body["id"], {"content": []}))
        return resp

    async def on_get(request: web.Request) -> web.StreamResponse:
        resp = await open_sse(request)
        await send_event(resp, changed)
        await server.hold()
        return resp

    server.on_request, server.on_get = on_request, on_get
    monkeypatch.setenv("HTTP_UPSTREAM_TEST_TOKEN", "s3cret")
    headers = {"Authorization": "Bearer ${HTTP_UPSTREAM_TEST_TOKEN}"}
    async with upstream(server.url, headers=headers) as h:
        await h.handshake(server)
        h.send(call(2, "work"))
        await h.answer(2)
        await eventually(lambda: any(m.raw == changed for m, _ in h.got))
        mine = [(m.raw, o) for m, o in h.got if o == 2]
        assert mine == [(progress("p2", 1), 2), (unrelated, 2), (result(2, {"content": []}), 2)]
        assert [o for m, o in h.got if m.raw == changed] == [None]
    post = next(s for s in server.requests_of("POST") if s.body.get("id") == 2)
    assert post.headers["accept"] == "application/json, text/event-stream"
    assert post.headers["content-type"] == "application/json"
    assert post.headers["mcp-session-id"] == "sess-1"
    assert post.headers["mcp-protocol-version"] == "2025-11-25"
    assert post.headers["authorization"] == "Bearer s3cret"
    assert "mcp-session-id" not in server.requests_of("POST")[0].headers, "initialize has none"
    assert "s3cret" not in repr(log.entries), "headers are never logged"
    get = server.requests_of("GET")[0]
    assert get.headers["accept"] == "text/event-stream" and get.session == "sess-1"


async def test_posts_leave_in_send_order_and_long_answers_block_nothing(
    server: ScriptedServer,
) -> None:
    release = asyncio.Event()

    async def on_request(request: web.Request, body: dict[str, Any]) -> web.StreamResponse | None:
        name = body.get("params", {}).get("name")
        if name == "sse-hold":
            resp = await open_sse(request)
            await release.wait()
            await send_event(resp, result(body["id"], {"held": "sse"}))
            return resp
        if name == "json-hold":  # JSON mode: no headers until the answer
            await release.wait()
            return web.json_response(result(body["id"], {"held": "json"}))
        return None

    server.on_request = on_request
    async with upstream(server.url) as h:
        await h.handshake(server)
        sent = [call(2, "sse-hold"), call(3, "json-hold")]
        for i in range(4, 40):
            sent.append(ping(i) if i % 2 else {"jsonrpc": "2.0", "method": f"notifications/n{i}"})
        for obj in sent:
            h.send(obj)
        assert h.up.pending_bytes == sum(len(wire(o)) for o in sent)
        for i in range(5, 40, 2):
            await h.answer(i)  # answered while 2 and 3 are still held
        assert not h.answers(2) and not h.answers(3)
        await server.wait_for(lambda: len(server.posts()) >= 2 + len(sent))
        assert server.posts()[2:] == sent
        assert h.up.pending_bytes == 0
        release.set()
        assert (await h.answer(2))[0].raw["result"] == {"held": "sse"}
        assert (await h.answer(3))[0].raw["result"] == {"held": "json"}


async def test_a_response_cut_with_event_ids_is_resumed_exactly_once(
    server: ScriptedServer,
) -> None:
    async def on_request(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        resp = await open_sse(request)
        await send_event(resp, None, event_id="s2-0", retry_ms=20)  # priming
        await send_event(resp, progress("p2", 1), event_id="s2-1")
        return resp  # the server closes the connection, not the stream (SEP-1699)

    async def on_get(request: web.Request) -> web.StreamResponse:
        after = request.headers.get("Last-Event-ID")
        if after is None:
            return web.Response(status=405)
        resp = await open_sse(request)
        if after == "s2-1":
            await send_event(resp, progress("p2", 2), event_id="s2-2")
            assert request.transport is not None
            request.transport.close()  # a drop this time
        elif after == "s2-2":
            await send_event(resp, result(2, {"content": []}), event_id="s2-3")
        return resp

    server.on_request, server.on_get = on_request, on_get
    async with upstream(server.url) as h:
        await h.handshake(server)
        h.send(call(2, "work"))
        await h.answer(2)
        got = [(m.raw, o) for m, o in h.got if o == 2]
        assert got == [
            (progress("p2", 1), 2),
            (progress("p2", 2), 2),
            (result(2, {"content": []}), 2),
        ]
        resumes = [s.headers.get("last-event-id") for s in server.requests_of("GET")]
        assert [r for r in resumes if r] == ["s2-1", "s2-2"]
        assert all(s.session == "sess-1" for s in server.requests_of("GET"))


async def test_stop_deletes_the_session_and_leaves_no_task(server: ScriptedServer) -> None:
    async def on_request(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        return await server.open_and_hold(request)

    server.on_request, server.on_get = on_request, server.open_and_hold
    before = set(asyncio.all_tasks())
    h = Harness(server.url + "?token=s3cret")
    assert h.up.describe() == server.url + "?…"
    await h.up.start()
    try:
        await h.handshake(server)
        h.send(call(2, "hold"))
        await server.wait_for(lambda: bool(server.requests_of("GET")))
        await server.wait_for(lambda: any(b.get("id") == 2 for b in server.posts()))
        assert our_tasks()
    finally:
        await asyncio.wait_for(h.up.stop(), DEADLINE)
    assert not our_tasks()
    assert set(asyncio.all_tasks()) - before <= {asyncio.current_task()} | server_tasks()
    deletes = server.requests_of("DELETE")
    assert [d.session for d in deletes] == ["sess-1"]


async def test_a_cancelled_request_may_end_without_an_answer(server: ScriptedServer) -> None:
    """After notifications/cancelled the server answers nothing (2025-11-25 cancellation):
    its stream ending is no loss, so no error is made up and no resume is tried."""
    cancelled = asyncio.Event()

    async def on_request(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        resp = await open_sse(request)
        await send_event(resp, None, event_id="s2-0")  # resumable, yet not to be resumed
        await send_event(resp, progress("p2", 1), event_id="s2-1")
        await cancelled.wait()
        return resp

    server.on_request = on_request
    async with upstream(server.url) as h:
        await h.handshake(server)
        h.send(call(2, "work"))
        await eventually(lambda: any(o == 2 for _, o in h.got))
        h.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}})
        await server.wait_for(
            lambda: any(b.get("params") == {"requestId": 2} for b in server.posts())
        )
        cancelled.set()
        await eventually(
            lambda: not [t for t in our_tasks() if t.get_name().startswith("http-post-2")]
        )
        assert not h.answers(2)
        assert not server.requests_of("GET") or all(
            "last-event-id" not in s.headers for s in server.requests_of("GET")
        )


async def test_the_standalone_stream_is_reopened_from_its_last_event_id(
    server: ScriptedServer,
) -> None:
    def note(n: int) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "method": "notifications/message", "params": {"n": n}}

    async def on_get(request: web.Request) -> web.StreamResponse:
        after = request.headers.get("Last-Event-ID")
        resp = await open_sse(request)
        if after is None:
            await send_event(resp, note(1), event_id="g-1")
            return resp  # closed by the server: the client reopens
        await send_event(resp, note(2), event_id="g-2")
        await server.hold()
        return resp

    server.on_get = on_get
    async with upstream(server.url) as h:
        await h.handshake(server)
        await eventually(lambda: len(h.got) >= 3)
        assert h.got[1:] == [(h.got[1][0], None), (h.got[2][0], None)]
        assert [m.raw for m, _ in h.got[1:]] == [note(1), note(2)]
        gets = server.requests_of("GET")
        assert [g.headers.get("last-event-id") for g in gets] == [None, "g-1"]


async def test_upstream_streams_resumed_from_a_real_resumable_server(tmp_path: Path) -> None:
    """The SDK's own server with an event store (tests/e2e/sdk_reference_server.py) closes
    the call's stream every 0.3 s (SEP-1699 polling) and the test cuts every upstream
    connection once more mid-call: the upstream resumes with GET + Last-Event-ID each time
    and delivers every progress once, in order, then the result."""
    steps = 12
    async with (
        sdk_resumable_server(tmp_path, max_stream_seconds=0.3, retry_ms=50) as port,
        cut_proxy(port) as cutter,
        upstream(cutter.url("/mcp"), reconnect_max_seconds=60) as h,
    ):
        await h.handshake_any()
        h.send(call(2, "slow", steps=steps, delay=0.1))
        await eventually(lambda: sum(o == 2 for _, o in h.got) >= 3)
        assert cutter.cut_all() >= 1
        answer, origin = await h.answer(2)
        assert origin == 2 and answer.raw["result"]["content"][0]["text"] == f"done {steps}"
        mine = [m.raw for m, o in h.got if o == 2]
        values = [m["params"]["progress"] for m in mine if m.get("method")]
        assert values == list(range(1, steps + 1)), f"gap or duplicate: {values}"
        assert mine[-1] is answer.raw and len(h.answers(2)) == 1
        resumes = bytes(cutter.sent_to_server).lower().count(b"last-event-id")
        assert resumes >= 3, f"only {resumes} resumptions"
