"""What only a Redis Cluster shows (a real local three-master one, :mod:`tests.redis_cluster`):
sessions spread over the masters while each session's keys share a slot, a batch of many
sessions applied part by part, blocking reads and inboxes routed by key, every key with a
TTL on every master, and ``store.cluster`` checked against the server. The contract
itself runs on the cluster too (test_contract.py, ``redis-cluster``)."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from proxy.store.base import (
    COMPLETED,
    LIVE,
    Batch,
    Entry,
    SessionRecord,
    StoreError,
    StoreLimits,
    StreamRecord,
)
from proxy.store.redis import RedisStore
from proxy.store.redis_layout import Layout, bucket_of
from tests.redis_cluster import LocalCluster
from tests.store.redis_support import KINDS, Follower, kind_of

SESSIONS = 40  # enough that 40 random sessions all on one of 3 masters is (2/3)^39 unlikely


def entries(first: int, last: int) -> list[Entry]:
    return [Entry(seq, f'{{"n":{seq}}}'.encode()) for seq in range(first, last + 1)]


class Stores:
    """Opens cluster RedisStores on one fresh namespace; closes every one at the end."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.namespace = f"c{secrets.token_hex(4)}"
        self.made: list[RedisStore] = []

    async def open(self, **options: float) -> RedisStore:
        store = RedisStore(self.url, self.namespace, StoreLimits(), cluster=True, **options)
        self.made.append(store)
        await store.open()
        return store


@pytest.fixture
async def stores(redis_cluster_url: str) -> AsyncIterator[Stores]:
    made = Stores(redis_cluster_url)
    try:
        yield made
    finally:
        for store in made.made:
            await store.close()


async def slots_of(url: str, groups: list[list[str]]) -> list[set[int]]:
    """The slots (CLUSTER KEYSLOT) each group of keys is in."""
    client = RedisCluster.from_url(url)
    try:
        return [{int(await client.cluster_keyslot(key)) for key in keys} for keys in groups]
    finally:
        await client.aclose()


async def test_one_batch_of_many_sessions_spreads_over_the_masters_one_slot_per_session(
    redis_cluster: LocalCluster, stores: Stores
) -> None:
    store = await stores.open()
    now = time.time()
    sessions = [secrets.token_hex(6) for _ in range(SESSIONS)]
    keys = [f"{session}.{n}" for session in sessions for n in (1, 2)]
    batch = Batch(
        streams=[StreamRecord(key, "s", "a") for key in keys],
        appends={key: entries(1, 3) for key in keys},
        completed={key: now + 60 for key in keys[::2]},  # each session's stream 1
    )
    assert len({bucket_of(key) for key in keys}) > 1  # so the batch goes in parts
    await store.commit(batch, now)
    for key in keys:
        assert [e.seq for e in await store.read(key, 0, now)] == [1, 2, 3]
    live = await store.live_streams(None, now)
    assert sorted(r.key for r in live) == sorted(keys[1::2])
    assert {r.state for r in live} == {LIVE}
    record = await store.get_stream(keys[0], now)
    assert record is not None and record.state == COMPLETED

    layout = Layout(stores.namespace)
    groups = []  # per session: its streams' keys and its bucket's live index
    for session in sessions:
        names = [layout.stream(f"{session}.{n}") for n in (1, 2)]
        groups.append([k for s in names for k in (s.record, s.log, s.wake)])
        groups[-1].append(layout.live(bucket_of(f"{session}.1")))
    assert all(len(slots) == 1 for slots in await slots_of(stores.url, groups))
    spread = redis_cluster.keys_per_node(f"mrp:{stores.namespace}:*")
    assert sum(1 for count in spread.values() if count) > 1, spread


async def test_tails_wake_and_inboxes_deliver_across_replicas_through_the_cluster(
    stores: Stores,
) -> None:
    """Blocking reads (XREAD BLOCK, BLMOVE) routed by their keys' slot: woken by writes,
    not by timeouts (the reader blocks 60 s per read)."""
    a = await stores.open()
    b = await stores.open(block=60)
    assert a.epoch == b.epoch
    now = time.time()
    key, other = f"{secrets.token_hex(6)}.1", f"{secrets.token_hex(6)}.1"
    await a.commit(Batch(streams=[StreamRecord(key, "s1", "a")], appends={key: entries(1, 2)}), now)
    follower = Follower(b, key, 0)
    try:
        await follower.has([1, 2])
        await a.commit(Batch(appends={key: entries(3, 4), other: entries(1, 1)}), now)
        await follower.has([1, 2, 3, 4])
        await a.commit(Batch(completed={key: now + 60}), now)
        await follower.end()
    finally:
        follower.stop()

    inbox = b.receive("b")
    waiting = asyncio.ensure_future(anext(inbox))
    await asyncio.sleep(0.1)
    await a.send("b", {"id": 1, "body": "é"})
    assert await asyncio.wait_for(waiting, 5) == {"id": 1, "body": "é"}
    waiting = asyncio.ensure_future(anext(inbox))
    await asyncio.sleep(0.1)
    await b.close()
    with pytest.raises(StoreError):
        await asyncio.wait_for(waiting, 5)


async def test_every_key_has_a_ttl_on_every_master(
    redis_cluster: LocalCluster, stores: Stores
) -> None:
    store = await stores.open()
    now = time.time()
    keys = [f"{secrets.token_hex(6)}.1" for _ in range(8)]
    await store.commit(
        Batch(streams=[StreamRecord(k, "s", "a") for k in keys], appends={keys[0]: entries(1, 2)}),
        now,
    )
    # A completion that adds no event wakes tails through the stream's wake key (an
    # append wakes them through the log: a call's commit makes no wake key).
    await store.commit(Batch(completed={keys[1]: now + 60}), now)
    await store.put_session(SessionRecord("s1", "ep", "a", None, now + 60))
    await store.acquire_lease("replica:a", "a", 30, now)
    await store.put_task("t1", {"status": "working"}, now + 60)
    client = RedisCluster.from_url(stores.url)
    try:
        found = [
            k.decode()
            async for k in client.scan_iter(match=f"mrp:{stores.namespace}:*", count=1000)
        ]
        ttls = {key: await client.pttl(key) for key in found}
    finally:
        await client.aclose()
    assert {kind_of(key) for key in found} == KINDS
    assert all(ttl > 0 for ttl in ttls.values()), ttls


async def test_store_cluster_must_say_what_the_server_is(
    redis_cluster_url: str, redis_url: str
) -> None:
    for url, cluster, said in (
        (redis_cluster_url, False, "is a Redis Cluster node: set store.cluster: true"),
        (redis_url, True, "is not in cluster mode"),
    ):
        store = RedisStore(url, "mismatch", cluster=cluster)
        try:
            with pytest.raises(StoreError, match=said):
                await store.open()
        finally:
            await store.close()


async def test_a_batch_in_parts_loads_its_script_again_after_a_script_flush(
    redis_cluster_url: str, redis_url: str
) -> None:
    """A restarted (or new) master has no scripts: the parts' pipeline loads them again."""
    for url, cluster in ((redis_cluster_url, True), (redis_url, False)):
        store = RedisStore(url, f"f{secrets.token_hex(4)}", cluster=cluster)
        client = RedisCluster.from_url(url) if cluster else aioredis.Redis.from_url(url)
        try:
            await store.open()
            await client.script_flush()  # a cluster client: on every master
            now = time.time()
            keys = [f"{secrets.token_hex(6)}.1" for _ in range(8)]
            assert len({bucket_of(key) for key in keys}) > 1
            await store.commit(Batch(appends={key: entries(1, 2) for key in keys}), now)
            for key in keys:
                assert [e.seq for e in await store.read(key, 0, now)] == [1, 2]
        finally:
            await client.aclose()
            await store.close()
