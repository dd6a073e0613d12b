"""The Streamable HTTP upstream (U2) when things go wrong, against real sockets.

:class:`HttpUpstream` alone, against a scripted aiohttp server
(``tests/fixtures/http_scripted_server.py``) or a port where nothing listens or connects
hang: refused connections, HTTP 5xx, bad bodies and connect timeouts fail the request and
mark the upstream's health ``failing`` until it answers again; unreachable for too long
ends the session; a response cut without event ids fails its request; a 404 (session
expired) re-initializes with nothing in flight and ends the session otherwise. What works
is in ``test_http_upstream.py``; helpers live in ``tests/fixtures/http_harness.py``, the
``server`` and ``log`` fixtures in ``conftest.py`` beside this file.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from proxy.core.sse import encode_event
from tests.fixtures.http_harness import (
    INIT,
    black_hole,
    call,
    ping,
    upstream,
)
from tests.fixtures.http_scripted_server import (
    ScriptedServer,
    open_sse,
    progress,
    result,
    send_event,
)
from tests.support import eventually, reserved_port

REFUSAL = {"code": -32602, "message": "no such thing"}


async def bad_bodies(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
    if body["id"] == 5:
        return web.Response(text="{not json", content_type="application/json")
    error = {"jsonrpc": "2.0", "id": body["id"], "error": REFUSAL}
    return web.json_response(error, status=400)


async def test_refused_5xx_and_bad_bodies_then_recovered(log: Any) -> None:
    with reserved_port() as port:  # nothing listens here yet
        async with upstream(f"http://127.0.0.1:{port}/mcp", reconnect_max_seconds=300) as h:
            h.send(INIT)
            error, _ = await h.answer(1)
            assert error.raw["error"]["code"] == -32000
            assert "upstream unreachable: cannot connect" in error.raw["error"]["message"]
            assert h.health.state == "failing"
            h.send({"jsonrpc": "2.0", "method": "notifications/dropped"})
            await eventually(
                lambda: any(e["event"] == "upstream_message_dropped" for e in log.entries)
            )
            server = ScriptedServer(port)
            await server.start()
            try:
                h.send({**INIT, "id": 2})
                assert "result" in (await h.answer(2))[0].raw
                assert h.health.state == "ok"
                server.fail_status = 503
                h.send(ping(3))
                assert "HTTP 503" in (await h.answer(3))[0].raw["error"]["message"]
                assert h.health.state == "failing"
                server.fail_status = None
                h.send(ping(4))
                assert "result" in (await h.answer(4))[0].raw
                assert h.health.state == "ok"
                server.on_request = bad_bodies
                h.send(ping(5))
                assert "bad response" in (await h.answer(5))[0].raw["error"]["message"]
                assert h.health.state == "failing"
                h.send(ping(6))  # a 400 with the server's own JSON-RPC error: passed on as is
                assert (await h.answer(6))[0].raw == {"jsonrpc": "2.0", "id": 6, "error": REFUSAL}
                assert h.health.state == "ok"
                assert not h.closed
            finally:
                await h.up.stop()
                await server.stop()
        failures = [e for e in log.entries if e["event"] in ("upstream_unreachable",)]
        assert failures and all(e["session"] == "test-ses" for e in failures)


async def test_a_connect_timeout_fails_the_request(log: Any) -> None:
    with black_hole() as url:
        async with upstream(url, connect_timeout_seconds=0.5) as h:
            h.send(INIT)
            error, _ = await h.answer(1)
            assert error.raw["error"]["message"] == "upstream unreachable: timed out"
            assert h.health.state == "failing" and h.health.last_error is not None
            assert "s3cret" not in h.health.last_error and "s3cret" not in repr(log.entries)


async def test_unreachable_for_too_long_ends_the_session() -> None:
    with reserved_port() as port:  # nothing listens here
        async with upstream(f"http://127.0.0.1:{port}/mcp", reconnect_max_seconds=0.3) as h:
            rid = 0
            while not h.closed:
                rid += 1
                h.send(ping(rid))
                await h.answer(rid)  # each fails at once: "cannot connect"
                assert rid < 10_000
            assert h.closed == ["upstream unreachable for over 0.3 s"]
            h.send(ping(rid + 1))
            error, _ = await h.answer(rid + 1)
            assert error.raw["error"]["message"].startswith("upstream unreachable for over 0.3 s")


async def test_a_response_cut_without_event_ids_fails_its_request(server: ScriptedServer) -> None:
    async def on_request(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        resp = await open_sse(request)
        await send_event(resp, progress("p2", 1))
        assert request.transport is not None
        request.transport.close()  # a drop, before the answer
        return resp

    server.on_request = on_request
    async with upstream(server.url) as h:
        await h.handshake(server)
        h.send(call(2, "work"))
        error, _ = await h.answer(2)
        assert "upstream connection lost before the answer" in error.raw["error"]["message"]
        assert [m.raw for m, o in h.got if o == 2] == [progress("p2", 1)]
        server.on_request = None
        h.send(ping(3))
        assert "result" in (await h.answer(3))[0].raw
        assert not h.closed
        assert len(h.answers(2)) == 1


async def test_the_answer_before_an_unreadable_line_is_delivered(server: ScriptedServer) -> None:
    """Issue 23: the events read in the same chunk as a bad line were lost with it, the
    answer among them."""

    async def on_request(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        resp = await open_sse(request)
        events = [(progress("p2", 1), "r-1"), (result(body["id"], {"n": 2}), "r-2")]
        wire = b"".join(encode_event(json.dumps(m).encode(), event_id=i) for m, i in events)
        await resp.write(wire + b"data: \xff\n\n")  # in one write: one chunk
        await server.hold()
        return resp

    server.on_request = on_request
    async with upstream(server.url) as h:
        await h.handshake(server)
        h.send(call(2, "work"))
        answer, _ = await h.answer(2)
        assert answer.raw == result(2, {"n": 2})
        assert [m.raw for m, o in h.got if o == 2] == [progress("p2", 1), result(2, {"n": 2})]
        assert not h.closed


async def test_404_with_nothing_in_flight_reinitializes_upstream(
    server: ScriptedServer,
) -> None:
    async with upstream(server.url) as h:
        await h.handshake(server)
        server.expired.add("sess-1")
        h.send(ping(5))
        assert "result" in (await h.answer(5))[0].raw
        h.send(ping(6))
        assert "result" in (await h.answer(6))[0].raw
        assert not h.closed
        inits = [b for b in server.posts() if b.get("method") == "initialize"]
        assert [b["id"] for b in inits] == [1, "mcp-resume-proxy-reinit-1"]
        assert inits[1]["params"] == INIT["params"]
        seen = server.requests_of("POST")
        posts = [(s.session, s.body.get("method"), s.body.get("id")) for s in seen]
        assert posts[-5:] == [
            ("sess-1", "ping", 5),
            (None, "initialize", "mcp-resume-proxy-reinit-1"),
            ("sess-2", "notifications/initialized", None),
            ("sess-2", "ping", 5),
            ("sess-2", "ping", 6),
        ]
        assert all(m.id != "mcp-resume-proxy-reinit-1" for m, _ in h.got)
        assert len(h.answers(5)) == 1


async def test_404_with_a_request_in_flight_ends_the_session(server: ScriptedServer) -> None:
    async def on_request(request: web.Request, body: dict[str, Any]) -> web.StreamResponse | None:
        return await server.open_and_hold(request) if body["method"] == "tools/call" else None

    server.on_request = on_request
    async with upstream(server.url) as h:
        await h.handshake(server)
        h.send(call(2, "hold"))
        await server.wait_for(lambda: any(b.get("id") == 2 for b in server.posts()))
        server.expired.add("sess-1")
        h.send(ping(3))
        for rid in (2, 3):
            error, _ = await h.answer(rid)
            assert error.raw["error"]["message"].startswith("upstream session expired")
        await eventually(lambda: bool(h.closed))
        assert h.closed == ["upstream session expired"]
        assert len(server.sessions) == 1, "no re-initialize with work in flight"
