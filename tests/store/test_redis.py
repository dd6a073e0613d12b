"""What only the Redis store has: replicas sharing one namespace, a Redis that is flushed
or restarted under it, TTLs on every key, namespaces apart. Against a real
``redis-server`` (:mod:`tests.redis_server`); the contract itself is in test_contract.py."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from structlog.testing import capture_logs

from proxy.core.errors import ResumeError
from proxy.core.stream import Mark, Unacknowledged
from proxy.store.base import (
    COMPLETED,
    Batch,
    Entry,
    SessionRecord,
    StoreError,
    StoreLimits,
    StreamRecord,
)
from proxy.store.redis import RedisStore
from tests.redis_server import RedisServer
from tests.store.redis_support import KINDS, Follower, kind_of
from tests.support import eventually

KEY = "e0e0e0.1"


def entries(first: int, last: int, mark: int = 0) -> list[Entry]:
    return [Entry(seq, f'{{"n":{seq}}}'.encode(), mark) for seq in range(first, last + 1)]


def opened(key: str = KEY, session: str = "s1", owner: str = "a") -> StreamRecord:
    return StreamRecord(key, session, owner)


class Stores:
    """Opens RedisStores on fresh namespaces and closes every one at the end."""

    def __init__(self) -> None:
        self.made: list[RedisStore] = []

    @staticmethod
    def namespace() -> str:
        return f"t{secrets.token_hex(4)}"

    async def open(self, url: str, namespace: str, **options: float) -> RedisStore:
        store = RedisStore(url, namespace, StoreLimits(), **options)
        self.made.append(store)
        await store.open()
        return store


@pytest.fixture
async def stores() -> AsyncIterator[Stores]:
    made = Stores()
    try:
        yield made
    finally:
        for store in made.made:
            await store.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own, to flush, stop, pause and restart."""
    with RedisServer(tmp_path / "redis") as running:
        yield running


async def flushall(url: str) -> None:
    client = aioredis.Redis.from_url(url)
    try:
        await client.flushall()
    finally:
        await client.aclose()


async def test_two_replicas_share_logs_records_sessions_and_leases(
    redis_url: str, stores: Stores
) -> None:
    namespace = stores.namespace()
    a = await stores.open(redis_url, namespace)
    b = await stores.open(redis_url, namespace, block=60)  # wake-ups, not timeouts
    assert a.epoch == b.epoch
    now = time.time()
    await a.commit(Batch(streams=[opened()], appends={KEY: entries(1, 2)}), now)
    follower = Follower(b, KEY, 0)
    try:
        await follower.has([1, 2])
        await a.commit(Batch(appends={KEY: entries(3, 5)}), now)
        await follower.has([1, 2, 3, 4, 5])
        await a.commit(Batch(completed={KEY: now + 60}), now)
        await follower.end()  # woken by the completion: b blocks 60 s per read
    finally:
        follower.stop()
    record = await b.get_stream(KEY, now)
    assert record is not None
    assert (record.session_id, record.owner, record.state, record.last_seq) == (
        "s1",
        "a",
        COMPLETED,
        5,
    )
    await a.put_session(SessionRecord("s1", "ep", "a", "2025-11-25", now + 60))
    assert await b.get_session("s1", now) == SessionRecord(
        "s1", "ep", "a", "2025-11-25", pytest.approx(now + 60)
    )
    assert await a.acquire_lease("s1", "a", 30, now)
    assert not await b.acquire_lease("s1", "b", 30, now)
    assert await b.lease_owner("s1", now) == "a"
    await b.release_lease("s1", "b")  # not b's: nothing happens
    assert await a.lease_owner("s1", now) == "a"
    await a.release_lease("s1", "a")
    assert await b.acquire_lease("s1", "b", 30, now)
    assert not await a.acquire_lease("s1", "a", 30, now)


async def test_a_commit_that_adds_to_a_log_wakes_its_tails_through_the_log_alone(
    redis_url: str, stores: Stores
) -> None:
    """A call's commit (its record, its answer, its end) and a commit of a stream's last
    events with its end write no wake entry: the log's new entry wakes a blocked tail,
    which reads the record with the entries after it (two commands fewer, and one key
    fewer per call, on the server). A completion alone still wakes it."""
    namespace = stores.namespace()
    a = await stores.open(redis_url, namespace)
    b = await stores.open(redis_url, namespace, block=60)  # wake-ups, not timeouts
    now = time.time()
    call = "e0e0e0.2"
    await a.commit(Batch([opened(call)], {call: entries(1, 1)}, completed={call: now + 60}), now)
    await a.commit(Batch(streams=[opened()], appends={KEY: entries(1, 2)}), now)
    client = aioredis.Redis.from_url(redis_url)
    try:
        assert await client.exists(a._stream_keys(call).wake, a._stream_keys(KEY).wake) == 0
        follower = Follower(b, KEY, 0)
        try:
            await follower.has([1, 2])
            await a.commit(Batch(appends={KEY: entries(3, 4)}, completed={KEY: now + 60}), now)
            await follower.end()  # woken by entry 4: b blocks 60 s per read
            assert follower.seqs == [1, 2, 3, 4]
        finally:
            follower.stop()
        assert await client.exists(a._stream_keys(KEY).wake) == 0
        assert [e.seq for e in await b.read(call, 0, now)] == [1]
    finally:
        await client.aclose()


async def test_a_tail_wakes_at_once_when_its_stream_is_dropped(
    redis_url: str, stores: Stores
) -> None:
    namespace = stores.namespace()
    a = await stores.open(redis_url, namespace)
    b = await stores.open(redis_url, namespace, block=60)
    now = time.time()
    await a.commit(Batch(streams=[opened()], appends={KEY: entries(1, 2)}), now)
    follower = Follower(b, KEY, 0)
    try:
        await follower.has([1, 2])
        await a.commit(Batch(dropped=[KEY]), now)
        with pytest.raises(ResumeError) as caught:
            await follower.end()
        assert caught.value.reason == "unknown_stream"
    finally:
        follower.stop()


async def test_a_flushed_redis_ends_tails_changes_the_epoch_and_truncates_history(
    server: RedisServer, stores: Stores
) -> None:
    store = await stores.open(server.url, stores.namespace(), block=0.3)
    first_epoch = store.epoch
    now = time.time()
    await store.commit(Batch(streams=[opened()], appends={KEY: entries(1, 3)}), now)
    follower = Follower(store, KEY, 0)
    try:
        await follower.has([1, 2, 3])
        await flushall(server.url)
        with pytest.raises(ResumeError) as caught:
            await follower.end()  # noticed when its blocking read times out
        assert caught.value.reason == "unknown_stream"
    finally:
        follower.stop()
    assert follower.seqs == [1, 2, 3]
    assert await store.current_epoch() != first_epoch
    await store.commit(Batch(appends={KEY: entries(6, 7)}), time.time())
    with pytest.raises(ResumeError) as truncated:
        await store.read(KEY, 3, time.time())
    assert truncated.value.reason == "history_truncated"
    assert [e.seq for e in await store.read(KEY, 5, time.time())] == [6, 7]


async def test_a_tail_blocked_across_a_flush_never_skips_the_hole(
    server: RedisServer, stores: Stores
) -> None:
    """Flushed, then later seqs come at once: the woken tail refuses them (truncated)."""
    store = await stores.open(server.url, stores.namespace(), block=60)
    now = time.time()
    await store.commit(Batch(streams=[opened()], appends={KEY: entries(1, 3)}), now)
    follower = Follower(store, KEY, 0)
    try:
        await follower.has([1, 2, 3])
        await flushall(server.url)
        await store.commit(Batch(appends={KEY: entries(6, 7)}), now)
        with pytest.raises(ResumeError) as caught:
            await follower.end()
        assert caught.value.reason == "history_truncated"
    finally:
        follower.stop()
    assert follower.seqs == [1, 2, 3]


async def test_a_stopped_redis_fails_fast_and_the_store_recovers_after_a_restart(
    server: RedisServer, stores: Stores
) -> None:
    store = await stores.open(server.url, stores.namespace(), timeout=1.0, block=60)
    first_epoch = store.epoch
    now = time.time()
    await store.commit(Batch(streams=[opened()], appends={KEY: entries(1, 2)}), now)
    follower = Follower(store, KEY, 2)
    try:
        await asyncio.sleep(0.1)  # let it block
        server.stop()
        with pytest.raises(StoreError):
            await follower.end()
    finally:
        follower.stop()
    started = time.monotonic()
    with pytest.raises(StoreError, match="commit failed"):
        await store.commit(Batch(appends={KEY: entries(3, 3)}), now)
    with pytest.raises(StoreError):
        await store.read(KEY, 0, now)
    assert time.monotonic() - started < 5.0
    server.start()  # the same port; nothing was persisted
    await store.commit(Batch(streams=[opened()], appends={KEY: entries(1, 1)}), time.time())
    assert [e.seq for e in await store.read(KEY, 0, time.time())] == [1]
    assert await store.current_epoch() != first_epoch


async def test_an_unresponsive_redis_costs_the_socket_timeout_not_a_hang(
    server: RedisServer, stores: Stores
) -> None:
    store = await stores.open(server.url, stores.namespace(), timeout=1.0)
    now = time.time()
    await store.commit(Batch(streams=[opened()], appends={KEY: entries(1, 1)}), now)
    server.pause()
    try:
        started = time.monotonic()
        with pytest.raises(StoreError, match="commit failed"):
            await store.commit(Batch(appends={KEY: entries(2, 2)}), now)
        assert time.monotonic() - started < 4.0
    finally:
        server.resume()
    await store.commit(Batch(appends={KEY: entries(2, 2)}), now)
    assert [e.seq for e in await store.read(KEY, 0, now)] == [1, 2]


async def test_every_key_the_store_makes_has_a_ttl(redis_url: str, stores: Stores) -> None:
    namespace = stores.namespace()
    store = await stores.open(redis_url, namespace)
    now = time.time()
    keys = [f"e3.{n}" for n in range(1, 5)]
    batch = Batch(
        streams=[opened(k) for k in keys[:3]],
        appends={k: entries(1, 4, int(Mark.REQUEST)) for k in keys},  # e3.4: no record
        completed={keys[1]: now + 60},
        dropped=[keys[2]],
    )
    await store.commit(batch, now)
    await store.commit(Batch(appends={keys[0]: entries(7, 8)}), now)  # a hole
    await store.put_session(SessionRecord("s1", "ep", "a", None, None))
    await store.put_session(SessionRecord("s2", "ep", "a", None, now + 60))
    await store.acquire_lease("s1", "a", 30, now)
    await store.put_task("t1", {"status": "working"}, now + 60)
    client = aioredis.Redis.from_url(redis_url)
    try:
        found = [k.decode() async for k in client.scan_iter(match=f"mrp:{namespace}:*")]
        ttls = {key: await client.pttl(key) for key in found}
    finally:
        await client.aclose()
    assert {kind_of(key) for key in found} == KINDS
    assert all(ttl > 0 for ttl in ttls.values()), ttls


async def test_an_int_flag_mark_is_stored_as_its_number(redis_url: str, stores: Stores) -> None:
    store = await stores.open(redis_url, stores.namespace())
    now = time.time()
    marked = [Entry(1, b"{}", Mark.REQUEST), Entry(2, b"{}", Mark.REQUEST | Mark.ERROR)]
    await store.commit(Batch(streams=[opened()], appends={KEY: marked}), now)
    assert await store.summary(KEY, 0, now) == Unacknowledged(2, 2, 1)


async def test_namespaces_do_not_see_each_other(redis_url: str, stores: Stores) -> None:
    a = await stores.open(redis_url, stores.namespace())
    b = await stores.open(redis_url, stores.namespace())
    assert a.epoch != b.epoch
    now = time.time()
    await a.commit(Batch(streams=[opened()], appends={KEY: entries(1, 3)}), now)
    await a.put_session(SessionRecord("s1", "ep", "a", None, now + 60))
    await a.put_task("t1", {"status": "working"}, now + 60)
    assert await a.acquire_lease("s1", "a", 30, now)
    assert await b.get_stream(KEY, now) is None
    with pytest.raises(ResumeError):
        await b.read(KEY, 0, now)
    assert await b.live_streams(None, now) == []
    assert await b.get_session("s1", now) is None
    assert await b.get_task("t1", now) is None
    assert await b.lease_owner("s1", now) is None
    assert await b.acquire_lease("s1", "b", 30, now)
    await b.commit(Batch(dropped=[KEY]), now)
    assert [e.seq for e in await a.read(KEY, 0, now)] == [1, 2, 3]


def test_a_namespace_holds_no_hash_tag() -> None:
    for bad in ("", "a{b", "a}b"):
        with pytest.raises(ValueError):
            RedisStore("redis://127.0.0.1:1/0", bad)


async def test_a_namespace_of_the_one_slot_layout_starts_afresh_with_a_new_epoch(
    redis_url: str, stores: Stores
) -> None:
    """Keys an earlier version wrote (``mrp:{<ns>}:…``) are not read: a new epoch, and an
    old stream's id gets unknown_stream (as after a flush); the log says so."""
    namespace = stores.namespace()
    old = f"mrp:{{{namespace}}}:"
    client = aioredis.Redis.from_url(redis_url)
    try:
        await client.set(old + "epoch", "0ld0ld0ld0ld", px=60_000)
        fields = {"session": "s1", "owner": "a", "state": "live", "first": 1, "last": 1}
        await client.hset(old + f"rec:{KEY}", mapping={**fields, "rids": "[]", "ann": 0})
        await client.hset(old + f"rec:{KEY}", "exp", round((time.time() + 60) * 1000))
        await client.pexpire(old + f"rec:{KEY}", 60_000)
        await client.xadd(old + f"log:{KEY}", {"p": b"{}"}, id="1-1")
        await client.pexpire(old + f"log:{KEY}", 60_000)
        with capture_logs() as logged:
            store = await stores.open(redis_url, namespace)
    finally:
        await client.aclose()
    assert store.epoch != "0ld0ld0ld0ld"
    with pytest.raises(ResumeError) as caught:
        await store.read(KEY, 0, time.time())
    assert caught.value.reason == "unknown_stream"
    assert await store.live_streams(None, time.time()) == []
    assert [e["event"] for e in logged] == ["store_old_layout_ignored"]


async def test_messages_cross_replicas_and_close_ends_a_receiver(
    redis_url: str, stores: Stores
) -> None:
    """A sends to B's inbox through Redis (separate clients: nothing in-process)."""
    namespace = stores.namespace()
    a = await stores.open(redis_url, namespace)
    b = await stores.open(redis_url, namespace, block=60)  # a blocking pop, not a timeout
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


async def test_a_cancelled_receiver_returns_at_once_and_its_command_is_cancelled_again(
    redis_url: str, stores: Stores
) -> None:
    """A replica's stop cancels its inbox's blocking pop. redis-py's clean-up of a
    cancelled read once held a stop for good, and redis-py can swallow a cancel
    (tests/store/test_redis_cancel.py): the caller ends at once, and its command (here
    one that swallows two cancels: a fault no real server causes on demand) is cancelled
    again until it ends, with no close()."""
    store = await stores.open(redis_url, stores.namespace(), block=60)
    ended = asyncio.Event()

    async def stubborn(_client: object) -> None:
        for swallowed in range(3):
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if swallowed == 2:
                    ended.set()
                    raise

    caller = asyncio.ensure_future(store._run("receive messages", stubborn, blocking=True))
    await asyncio.sleep(0.05)
    caller.cancel()
    done, _ = await asyncio.wait({caller}, timeout=10)
    assert done and caller.cancelled()
    await asyncio.wait_for(ended.wait(), 10)
    await eventually(lambda: not len(store._commands), what="the command forgotten")


async def test_a_read_whose_transaction_fails_raises_and_the_next_one_reads(
    redis_url: str, stores: Stores
) -> None:
    """A stream read is one raw MULTI/EXEC (redis_fast.transaction): an error reply in it
    is a StoreError, and the pooled connection it left answers the next read rightly."""
    store = await stores.open(redis_url, stores.namespace())
    now = time.time()
    await store.commit(Batch(streams=[opened()], appends={KEY: entries(1, 3, 1)}), now)
    other = "e0e0e0.2"
    client = aioredis.Redis.from_url(redis_url)
    try:
        await client.set(store._stream_keys(other).record, "not a hash")
        with pytest.raises(StoreError, match="WRONGTYPE"):
            await store.read(other, 0, now)
        for _ in range(3):  # every pooled connection answers its own command
            assert await store.read(KEY, 1, now) == entries(2, 3, 1)
            assert await store.summary(KEY, 0, now) == Unacknowledged(3, 3, 0)
    finally:
        await client.aclose()
