"""A replica stopping while it follows streams another replica holds (docs/operations.md,
"Deploys"): two real replicas on Redis. Its clients' responses that follow a stream from
the shared log (a listen ``GET`` of a session held elsewhere, a resume of a call running
elsewhere) end as it stops, before its store closes, so each client reconnects through
the balancer and resumes on another replica, and the process exits at once. Was: those
responses outlived the store's close, each tail retried the closed store for
``store.unavailable_wait_seconds``, then aiohttp waited out its shutdown timeout: a stop
took ten seconds more (a nemesis drain: 17 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed

from tests.downstream.sse_client import RawSession, read_events
from tests.downstream.ws_client import socket_beside
from tests.proxy_lives import Proxy, lives, read_some, shared
from tests.support import log_events, stop_proxy, tool_call


@contextlib.asynccontextmanager
async def two_replicas(
    tmp_path: Path, redis_url: str
) -> AsyncIterator[tuple[Proxy, Proxy, RawSession]]:
    """Replicas A and B on Redis (SIGTERM stops them at once: no drain), and a session of
    A's."""
    drain = {"MCP_RESUME_PROXY_DRAIN_SECONDS": "0"}
    async with lives(tmp_path, shared(redis_url), env=drain) as (proxies, http):
        a, b = await asyncio.gather(proxies.start(), proxies.start())
        client = RawSession(http, a.url)
        await client.initialize()
        yield a, b, client


async def test_a_stopping_replica_ends_what_it_follows_from_the_log_and_exits_at_once(
    tmp_path: Path, redis_url: str
) -> None:
    async with two_replicas(tmp_path, redis_url) as (a, b, client):
        http = client.http
        on_b = RawSession(http, b.url, session_id=client.session_id)
        listen = await http.get(b.url, headers=on_b.headers())
        assert listen.status == 200, await listen.text()
        call = tool_call(7, "slow", {"steps": 400, "delay": 0.05}, "t")
        resp = await http.post(a.url, json=call, headers=client.headers())
        assert resp.status == 200, await resp.text()
        _, last_id = await read_some(resp, 2)
        resp.close()
        resumed = await http.get(b.url, headers=on_b.headers(**{"Last-Event-ID": last_id}))
        assert resumed.status == 200, await resumed.text()
        assert await read_some(resumed, 2)  # followed from the log, live

        started = time.monotonic()
        assert await stop_proxy(b.process) == 0
        stopped = time.monotonic() - started
        # Both responses ended (the call goes on at A: nothing of it was lost).
        await asyncio.wait_for(read_events(resumed), 5)
        await asyncio.wait_for(read_events(listen), 5)
        logged = b.log_path.read_text()
        assert not log_events(logged, "stored_stream_tail_failed"), "tails outlived the store"
        assert stopped < 5.0, f"the stop took {stopped:.1f} s"
        assert log_events(logged, "remote_listen_ended")


async def test_a_stopping_replica_closes_a_socket_following_the_log_with_going_away(
    tmp_path: Path, redis_url: str
) -> None:
    """A ``/ws`` socket on B continuing A's session follows its standalone stream from
    the log: B stopping closes it 1001 (as every socket at shutdown), not 1013 ``store
    unavailable`` once its store closed."""
    async with two_replicas(tmp_path, redis_url) as (_, b, client):
        async with socket_beside(b.url, client.session_id) as socket:
            answer, _ = await socket.call(1, "ping")
            assert answer["result"] == {}
            await asyncio.sleep(0.5)  # B follows the standalone stream from the log
            started = time.monotonic()
            assert await stop_proxy(b.process) == 0
            stopped = time.monotonic() - started
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    await socket.ws.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
        assert not log_events(b.log_path.read_text(), "ws_remote_stream_store_lost")
        # (was 5 s more: the socket's release to the holder waited for a store closed)
        assert stopped < 4.0, f"the stop took {stopped:.1f} s"
