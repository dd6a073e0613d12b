"""The Redis store's housekeeping and bounded reads, against a real ``redis-server`` (one
server, and the local three-master cluster): its sweep takes expired streams out of the
buckets' live indexes; a ``stream/poll``'s summary reads a long log a chunk at a time."""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from proxy.core.stream import Mark, Unacknowledged
from proxy.store import redis as redis_store
from proxy.store.base import Batch, Entry, StoreLimits, StreamRecord
from proxy.store.redis import RedisStore
from proxy.store.redis_layout import Layout, bucket_of
from proxy.store.sweeper import Sweeper

TTL_S = 600.0  # the live streams' ttl (StoreLimits.live_ttl)


def entries(first: int, last: int, mark: int = 0) -> list[Entry]:
    return [Entry(seq, f'{{"n":{seq}}}'.encode(), mark) for seq in range(first, last + 1)]


@pytest.fixture(params=["one server", "cluster"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[RedisStore]:
    cluster = request.param == "cluster"
    url = request.getfixturevalue("redis_cluster_url" if cluster else "redis_url")
    made = RedisStore(url, f"t{secrets.token_hex(4)}", StoreLimits(live_ttl=TTL_S), cluster=cluster)
    await made.open()
    try:
        yield made
    finally:
        await made.close()


async def live_members(store: RedisStore, bucket: int) -> set[str]:
    """The members of ``bucket``'s live index, read from outside the store."""
    url = store.url
    client = RedisCluster.from_url(url) if store.cluster else aioredis.from_url(url)
    try:
        members = await client.zrange(Layout(store.namespace).live(bucket), 0, -1)
    finally:
        await client.aclose()
    return {bytes(m).decode() for m in members}


async def test_the_sweep_takes_streams_that_expired_live_out_of_their_bucket_index(
    store: RedisStore,
) -> None:
    """The bug: a stream that expired while LIVE (its session abandoned mid-call) stayed
    in its bucket's live index until the next commit in that bucket, or until the index
    itself expired with its latest member: the sweep did nothing on Redis."""
    old, new = "e0e0e0.1", "e0e0e0.2"  # one session: one bucket
    t0 = time.time()  # the records' expiries are real ones: both keys outlive the test
    await store.commit(Batch([StreamRecord(old, "s1", "a")], {old: entries(1, 2)}), t0)
    await store.commit(Batch([StreamRecord(new, "s1", "a")], {new: entries(1, 1)}), t0 + 60)
    bucket = bucket_of(old)
    assert await live_members(store, bucket) == {old, new}

    sweeper = Sweeper(store, clock=lambda: t0 + TTL_S + 1)  # old's expiry passed, not new's
    assert await sweeper.sweep() == 1

    assert await live_members(store, bucket) == {new}
    live = await store.live_streams(None, t0 + TTL_S + 1)
    assert [r.key for r in live] == [new]
    assert await sweeper.sweep() == 0  # nothing more to take


async def test_a_poll_of_a_long_log_reads_it_a_chunk_at_a_time(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bug: ``summary`` read the whole remaining log in one command, so a poll of a
    50,000-event stream parsed one ~10 MB reply (and made 50,000 entries) in one step of
    the event loop. Now at most SUMMARY_CHUNK entries per read; the counts are the same."""
    monkeypatch.setattr(redis_store, "SUMMARY_CHUNK", 4)
    key = "e0e0e0.1"
    now = time.time()
    logged = entries(1, 10)
    logged[2] = Entry(3, b"{}", Mark.REQUEST)
    logged[7] = Entry(8, b"{}", Mark.REQUEST | Mark.ERROR)
    logged[9] = Entry(10, b"{}", Mark.ERROR)
    await store.commit(Batch([StreamRecord(key, "s1", "a")], {key: logged}), now)

    limits: list[int | None] = []
    read = store.read

    async def counted(key: str, after: int, now: float, limit: int | None = None) -> list[Entry]:
        limits.append(limit)
        return await read(key, after, now, limit)

    monkeypatch.setattr(store, "read", counted)
    assert await store.summary(key, 0, now) == Unacknowledged(10, 2, 2)
    assert limits == [4, 4, 4]
    limits.clear()
    assert await store.summary(key, 2, now) == Unacknowledged(8, 2, 2)
    assert limits == [4, 4, 4]  # 4, 4, then an empty read ends it
    limits.clear()
    assert await store.summary(key, 10, now) == Unacknowledged(0, 0, 0)
    assert limits == [4]
