"""What the Streamable HTTP upstream sessions of one process share, and what each keeps
(issue 23: 10,000 idle sessions): one ``aiohttp`` client and its connection pool
(:mod:`proxy.upstream.http_client`), but each its own ``Mcp-Session-Id`` and cookies; the
standalone ``GET`` stream with ``upstream.standalone_stream: on_client_get`` only once the
client listens; an idle session runs no task. Against the scripted server
(``tests/fixtures/http_scripted_server.py``) and, end to end, the proxy in front of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from proxy.upstream import http_client
from tests.downstream.sse_client import RawSession
from tests.fixtures.http_harness import DEADLINE, Harness, our_tasks, ping, upstream
from tests.fixtures.http_scripted_server import ScriptedServer, open_sse, send_event
from tests.support import run_proxy


async def test_sessions_share_one_client_but_keep_their_own_ids_and_cookies(
    server: ScriptedServer,
) -> None:
    server.set_cookie = True
    assert http_client.users() == 0
    async with upstream(server.url) as one, upstream(server.url) as two:
        await one.handshake(server)
        await two.handshake(server)
        assert http_client.users() == 2  # one client for both, not one each
        one.send(ping(2))
        two.send(ping(2))
        await one.answer(2)
        await two.answer(2)
        pings = [s for s in server.seen if s.body and s.body.get("method") == "ping"]
        assert sorted((s.session, s.headers.get("cookie")) for s in pings) == [
            ("sess-1", "lb=sess-1"),
            ("sess-2", "lb=sess-2"),
        ]
        assert not our_tasks(), "an idle session runs no task (no writer, no listener)"
    assert http_client.users() == 0  # the last one to stop closed it
    deletes = server.requests_of("DELETE")
    assert sorted((d.session, d.headers.get("cookie")) for d in deletes) == [
        ("sess-1", "lb=sess-1"),
        ("sess-2", "lb=sess-2"),
    ]


async def test_a_failed_start_gives_the_client_back() -> None:
    h = Harness("http://127.0.0.1:9/mcp", headers={"X-Key": "${SCALE_TEST_UNSET_VARIABLE}"})
    with contextlib.suppress(Exception):
        await h.up.start()
    assert http_client.users() == 0
    await asyncio.wait_for(h.up.stop(), DEADLINE)
    assert http_client.users() == 0


async def test_on_client_get_opens_the_standalone_stream_when_the_client_listens(
    server: ScriptedServer,
) -> None:
    server.on_get = server.open_and_hold
    async with upstream(server.url, standalone_stream="on_client_get") as later:
        await later.handshake(server)
        later.send(ping(2))
        await later.answer(2)
        assert not server.requests_of("GET"), "no GET before the client listens"
        later.up.listen_standalone()
        await server.wait_for(lambda: len(server.requests_of("GET")) == 1, "later's GET")
    async with upstream(server.url, standalone_stream="on_client_get") as early:
        early.up.listen_standalone()  # before its upstream session exists: waits for it
        await early.handshake(server)
        await server.wait_for(lambda: len(server.requests_of("GET")) == 2, "early's GET")
    assert [g.session for g in server.requests_of("GET")] == ["sess-1", "sess-2"]


async def test_the_proxy_listens_upstream_once_its_client_does(
    tmp_path: Path, server: ScriptedServer
) -> None:
    note = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}

    async def on_get(request: web.Request) -> web.StreamResponse:
        resp = await open_sse(request)
        await send_event(resp, note)
        await server.hold()
        return resp

    server.on_get = on_get
    config = {"url": server.url, "standalone_stream": "on_client_get"}
    async with run_proxy(tmp_path, upstream=config) as proxy, aiohttp.ClientSession() as http:
        client = RawSession(http, proxy.url)
        await client.initialize()
        await client.request(2, "ping")
        assert not server.requests_of("GET"), "no GET upstream while the client has none"
        headers = client.headers(Accept="text/event-stream")
        async with http.get(proxy.url, headers=headers) as resp:
            assert resp.status == 200
            got: list[dict[str, Any]] = []
            async for line in resp.content:
                if line.startswith(b"data: {"):
                    got.append(json.loads(line[6:]))
                    break
        assert got == [note]
        assert [g.session for g in server.requests_of("GET")] == ["sess-1"]
