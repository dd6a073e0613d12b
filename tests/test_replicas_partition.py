"""A replica cut off from Redis alone (a network partition between it and the store),
two replicas on one real Redis, A's link through a relay the test takes down
(tests/nemesis/links.py).

While A is cut off past its lease, B cannot tell it from a dead replica: a request
through B for A's session gets ``404`` (session not found). That answer must hold: B
claims ``reaper:<A>`` before it gives it, so A, back on the store, finds its sessions
reaped and loses them as a paused replica does (``lease_lost``), and the session is gone
through A too. Was: A took its lease again and kept the session (it could not tell a
lapse from a loss after its outage), serving a session a client had been told was gone.
A partition shorter than the lease's rest costs nothing: A keeps its sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from tests.downstream.sse_client import RawSession, messages
from tests.nemesis.links import RedisLink
from tests.proxy_lives import Proxy, lives, restartable_redis
from tests.support import eventually, log_events, tool_call

LEASE = 2.0


@dataclass
class Two:
    link: RedisLink  # A's own link to Redis
    a: Proxy
    b: Proxy
    http: aiohttp.ClientSession
    client: RawSession  # a session A holds, through A
    on_b: RawSession  # the same session, through B


@contextlib.asynccontextmanager
async def two_replicas(tmp_path: Path) -> AsyncIterator[Two]:
    """Two replicas on one real Redis, A's link through a relay, B's direct, and a
    session A holds."""
    with restartable_redis(tmp_path, lease_seconds=LEASE, unavailable_wait_seconds=1.0) as (
        server,
        store,
    ):
        link = RedisLink(server.port)
        await link.up()
        try:
            async with lives(tmp_path, store) as (proxies, http):
                proxies.store = {**store, "url": link.url()}
                a = await proxies.start()
                proxies.store = store
                b = await proxies.start()
                client = RawSession(http, a.url)
                await client.initialize()
                on_b = RawSession(http, b.url, session_id=client.session_id)
                yield Two(link, a, b, http, client, on_b)
        finally:
            await link.close()


async def test_a_session_a_client_was_told_is_gone_stays_gone_when_its_holder_is_back(
    tmp_path: Path,
) -> None:
    async with two_replicas(tmp_path) as two:
        echo = tool_call(1, "echo", {"text": "before"})["params"]
        assert messages(await two.on_b.request(1, "tools/call", echo))  # A's lease held
        two.link.down()
        await asyncio.sleep(LEASE * 2.5)  # A's lease lapsed, seen held long ago
        body = tool_call(2, "echo", {"text": "through B"})
        resp = await two.http.post(two.b.url, json=body, headers=two.on_b.headers())
        assert resp.status == 404, await resp.text()
        await two.link.up()

        def back() -> list[dict[str, object]]:
            return log_events(two.a.log_path.read_text(), "replica_lease_taken_again")

        await eventually(back, what="A to take its lease again")
        assert log_events(two.a.log_path.read_text(), "lease_lost")
        body = tool_call(3, "echo", {"text": "through A"})
        resp = await two.http.post(two.a.url, json=body, headers=two.client.headers())
        assert resp.status == 404, await resp.text()


async def test_a_partition_shorter_than_the_lease_costs_nothing(tmp_path: Path) -> None:
    """Cut off for half a lease: A's lease outlives it, its next renewal holds, and the
    session goes on through B (forwarded to A over the store)."""
    async with two_replicas(tmp_path) as two:
        two.link.down()
        await asyncio.sleep(LEASE / 2)
        await two.link.up()
        echo = tool_call(4, "echo", {"text": "kept"})["params"]
        got = messages(await two.on_b.request(4, "tools/call", echo))
        assert got[-1]["result"]["content"][0]["text"] == "kept"
        await asyncio.sleep(LEASE)  # renewals after the partition
        got = messages(await two.on_b.request(5, "tools/call", echo))
        assert got[-1]["result"]["content"][0]["text"] == "kept"
        assert not log_events(two.a.log_path.read_text(), "lease_lost")
