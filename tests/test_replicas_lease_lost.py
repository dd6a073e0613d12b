"""A replica whose lease key is lost (not lapsed) keeps its sessions (docs/stores.md,
Replicas; proxy/replica_lease.py): two replicas on one real Redis.

A's lease key is deleted under a live call, as a Redis master lost without a replica (or
a failover to a replica that had not received it) deletes it. A's next renewal, a third
of a lease later, finds it missing less than a lease after the last one that held: the
key was lost, nobody reaped it (``reaper:<A>`` is free), so A takes it again and keeps
its sessions and its fencing token. The call ends with its result, on A and resumed on
B; a request through B reaches A's session. (B runs with a long lease, so that its
reaper's half-lease grace is not what this test races; tests/test_replica_lease.py
shows the reaper's side with a hand-turned clock.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import redis.asyncio as aioredis

from tests.downstream.sse_client import RawSession, messages, read_events
from tests.proxy_lives import lives, progress_of, read_some, restartable_redis, shared
from tests.support import eventually, log_events, tool_call

STEPS = 100  # 5 s: A renews its lease (3 s) every second meanwhile


async def test_a_lost_lease_key_is_taken_again_and_the_call_ends_with_its_result(
    tmp_path: Path, redis_url: str
) -> None:
    store = shared(redis_url, 3.0)
    async with lives(tmp_path, store) as (proxies, http):
        a = await proxies.start()
        proxies.store = {**store, "lease_seconds": 60.0}
        b = await proxies.start()
        client = RawSession(http, a.url)
        await client.initialize()
        call = tool_call(7, "slow", {"steps": STEPS, "delay": 0.05}, "t")
        resp = await http.post(a.url, json=call, headers=client.headers())
        received, last_id = await read_some(resp, 3)
        (started,) = log_events(a.log_path.read_text(), "replica_started")
        lease = f"mrp:{store['namespace']}:{{lease:replica:{started['owner']}}}"
        r = aioredis.from_url(redis_url)
        try:
            assert await r.delete(lease) == 1
        finally:
            await r.aclose()

        def taken_again() -> list[dict[str, object]]:
            return log_events(a.log_path.read_text(), "replica_lease_taken_again")

        await eventually(taken_again, what="A to take its lease again")
        received += messages(await read_events(resp))
        assert progress_of(received) == list(range(1, STEPS + 1))
        assert [m for m in received if "id" in m] == [received[-1]]
        assert received[-1]["result"]["content"][0]["text"] == f"done {STEPS}"
        # Resumed on B from the shared log: the same, once.
        again = await http.get(b.url, headers=client.headers(**{"Last-Event-ID": last_id}))
        assert again.status == 200, await again.text()
        assert messages(await read_events(again)) == received[3:]
        # The session lives on, through either replica.
        on_b = RawSession(http, b.url, session_id=client.session_id)
        echo = messages(
            await on_b.request(8, "tools/call", tool_call(8, "echo", {"text": "k"})["params"])
        )
        assert echo[0]["result"]["content"][0]["text"] == "k"
        assert not log_events(a.log_path.read_text(), "lease_lost")
        assert taken_again()[0]["lost"] is True


async def test_a_lease_that_lapsed_while_the_store_was_down_is_not_taken_for_a_dead_holder(
    tmp_path: Path,
) -> None:
    """Redis down for longer than a lease: A's lease key expires meanwhile (its renewals
    cannot reach the store), and A takes it again at its first renewal after the store is
    back, keeping its sessions (it cannot tell a lapse from a loss after an outage). A
    request sent through B in that time is for a live session: B, which found the store
    unreachable itself, presumes A alive for half a lease, and the request reaches A.
    Was: 404 session_not_found at B's first look, while A went on serving the session
    (nemesis seed 2029525767: the answer to a question refused, the call left waiting)."""
    lease = 2.0
    with restartable_redis(tmp_path, lease_seconds=lease, unavailable_wait_seconds=10.0) as (
        server,
        store,
    ):
        async with lives(tmp_path, store) as (proxies, http):
            a, b = await asyncio.gather(proxies.start(), proxies.start())
            client = RawSession(http, a.url)
            await client.initialize()
            on_b = RawSession(http, b.url, session_id=client.session_id)
            echo = tool_call(1, "echo", {"text": "before"})["params"]
            assert messages(await on_b.request(1, "tools/call", echo))  # B saw A's lease held
            server.stop()
            await asyncio.sleep(lease * 1.5)  # A's lease key outlives no renewal
            body = tool_call(2, "echo", {"text": "after"})
            posting = asyncio.ensure_future(http.post(b.url, json=body, headers=on_b.headers()))
            await asyncio.sleep(0.3)  # B waits for the store
            server.start()
            resp = await posting
            assert resp.status == 200, await resp.text()
            got = messages(await read_events(resp))
            assert got[-1]["result"]["content"][0]["text"] == "after"
            assert not log_events(a.log_path.read_text(), "lease_lost")


async def test_a_lease_that_expired_while_redis_itself_stalled_is_taken_again(
    tmp_path: Path,
) -> None:
    """Redis frozen (SIGSTOP: a fork's stall, a starved VM) for a lease and a half, less
    than the store's timeout: A's renewal, sent on time, waits the stall out and reaches
    Redis after its lease key expired by Redis' own clock. A was not paused (it sent the
    renewal less than a lease after the last one that held), so its key was not its to
    lose: it takes it again (nobody could reap it meanwhile, and it checks
    ``reaper:<A>``) and keeps its sessions. Was: taken for a lapse, A lost every session."""
    lease = 2.0
    with restartable_redis(tmp_path, lease_seconds=lease, unavailable_wait_seconds=10.0) as (
        server,
        store,
    ):
        async with lives(tmp_path, store) as (proxies, http):
            a = await proxies.start()
            client = RawSession(http, a.url)
            await client.initialize()
            echo = tool_call(1, "echo", {"text": "before"})["params"]
            assert messages(await client.request(1, "tools/call", echo))
            await asyncio.sleep(lease)  # renewals that held
            server.pause()
            try:
                await asyncio.sleep(lease * 1.5)
            finally:
                server.resume()

            def back() -> list[dict[str, object]]:
                return log_events(a.log_path.read_text(), "replica_lease_taken_again")

            await eventually(back, what="A to take its lease again")
            lost = log_events(a.log_path.read_text(), "lease_lost")
            assert not lost and back()[0]["lost"] is True, (lost, back())
            echo = tool_call(2, "echo", {"text": "after"})["params"]
            got = messages(await client.request(2, "tools/call", echo))
            assert got[-1]["result"]["content"][0]["text"] == "after"
