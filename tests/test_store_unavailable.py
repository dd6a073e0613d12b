"""While the store is unreachable every request waits a bounded time, then gets a
documented error (proxy/store/unavailable.py): two replicas on a real ``redis-server``
that is stopped, then started again (empty: it keeps nothing).

During the outage, whatever path a request takes to the store (a stored stream's
``GET`` + ``Last-Event-ID``, a request forwarded to the session's holder, ``DELETE``,
``initialize``) is answered after ``store.unavailable_wait_seconds`` with HTTP 503,
``Retry-After`` and a JSON-RPC -32000 ``store_unavailable`` body; never a 500. Once Redis
is back, everything works again, and neither proxy logged an unhandled error.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp

from tests.downstream.sse_client import RawSession, messages
from tests.proxy_lives import lives
from tests.redis_server import RedisServer
from tests.support import initialize_request, log_events, tool_call

WAIT = 1.0  # store.unavailable_wait_seconds


async def refused(resp: aiohttp.ClientResponse, request_id: Any = None) -> None:
    """``resp`` is the documented refusal: 503, Retry-After, JSON-RPC store_unavailable."""
    assert resp.status == 503, await resp.text()
    assert int(resp.headers["Retry-After"]) >= 1
    body = await resp.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == request_id
    assert body["error"]["code"] == -32000
    assert body["error"]["data"] == {"reason": "store_unavailable"}


async def test_requests_while_redis_is_down_get_503_store_unavailable_then_work_again(
    tmp_path: Path,
) -> None:
    with RedisServer(tmp_path / "redis") as server:
        store = {
            "kind": "redis",
            "url": server.url,
            "namespace": "outage",
            "lease_seconds": 5,
            "unavailable_wait_seconds": WAIT,
        }
        async with lives(tmp_path, store) as (proxies, http):
            a, b = await proxies.start(), await proxies.start()
            client = RawSession(http, a.url)
            await client.initialize()
            done = await client.request(
                7, "tools/call", tool_call(7, "echo", {"text": "x"})["params"]
            )
            last_id = next(e.id for e in done if e.id)
            server.stop()
            loop = asyncio.get_running_loop()
            began = loop.time()
            headers = client.headers
            echo = tool_call(8, "echo", {"text": "via B"})
            init = initialize_request(0, version="2025-11-25", client="raw")
            async with asyncio.TaskGroup() as group:
                stored = group.create_task(
                    http.get(b.url, headers=headers(**{"Last-Event-ID": last_id}))
                )
                forwarded = group.create_task(http.post(b.url, json=echo, headers=headers()))
                deleted = group.create_task(http.delete(b.url, headers=headers()))
                listened = group.create_task(http.get(b.url, headers=headers()))
                opened = group.create_task(
                    http.post(b.url, json=init, headers=RawSession(http, b.url).headers())
                )
            await refused(stored.result())
            await refused(forwarded.result(), 8)
            await refused(deleted.result())
            await refused(listened.result())
            await refused(opened.result(), 0)
            assert loop.time() - began >= WAIT  # each waited for the store first
            server.start()
            # Back (empty): new sessions work, and A's own session goes on (the lease it
            # lost with Redis' data is taken again: nothing of it was lost to a reaper).
            fresh = RawSession(http, b.url)
            await fresh.initialize()
            got = messages(
                await fresh.request(2, "tools/call", {"name": "echo", "arguments": {"text": "k"}})
            )
            assert got[0]["result"]["content"][0]["text"] == "k"
            again = messages(
                await client.request(9, "tools/call", {"name": "echo", "arguments": {"text": "y"}})
            )
            assert again[0]["result"]["content"][0]["text"] == "y"
            assert not log_events(a.log_path.read_text(errors="replace"), "lease_lost")
        for proxy in (a, b):
            text = proxy.log_path.read_text(errors="replace")
            assert "aiohttp.server" not in text and "Error handling request" not in text, text
