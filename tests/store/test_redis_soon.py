"""A Redis commit started without a task (``RedisStore.commit_soon``,
``proxy/store/redis_wire.py``'s ``send_then``): its outcome is handed over from the
connection's ``data_received``; what it cannot do (no connection yet, a flushed script
cache, a closed store) it says, for :meth:`RedisStore.commit` to do. Against a real
``redis-server`` (:mod:`tests.redis_server`)."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from proxy.store.base import Batch, Entry, StoreError, StoreLimits, StreamRecord
from proxy.store.redis import RedisStore
from tests.redis_server import RedisServer
from tests.store.redis_support import WAIT_S

KEY = "e1e1e1.1"
APART = ["e2e2e2.1", "e3e3e3.1", "e4e4e4.1"]  # sessions in several buckets


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisStore]:
    made = RedisStore(redis_url, f"t{secrets.token_hex(4)}", StoreLimits())
    await made.open()
    try:
        yield made
    finally:
        await made.close()


class Outcomes:
    """What ``commit_soon`` hands over, and a future that resolves with the first."""

    def __init__(self) -> None:
        self.got: list[Any] = []
        self.first: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def __call__(self, outcome: Any) -> None:
        self.got.append(outcome)
        if not self.first.done():
            self.first.set_result(outcome)


async def test_no_connection_yet_nothing_is_sent(store: RedisStore) -> None:
    """Before the store's own connection is made (by a first ``commit``), commit_soon
    declines and calls nothing."""
    outcomes = Outcomes()
    batch = Batch(streams=[StreamRecord(KEY, "s", "a")])
    assert not store.commit_soon(batch, time.time(), outcomes)
    assert outcomes.got == []


async def test_the_reply_is_handed_over_as_it_is_read(store: RedisStore) -> None:
    """A commit of several parts (buckets) written at once: one outcome, the keys fencing
    refused (none), handed over by the connection's reader itself; what it wrote reads
    back; the outcome comes before any task woken by the same reply runs."""
    now = time.time()
    await store.commit(Batch(streams=[StreamRecord(key, "s", "a") for key in APART]), now)
    outcomes = Outcomes()
    batch = Batch(appends={key: [Entry(1, b'{"n":1}', 0)] for key in APART})
    assert store.commit_soon(batch, now, outcomes)
    assert outcomes.got == []  # (not before the reply)
    assert await asyncio.wait_for(outcomes.first, WAIT_S) == []
    assert outcomes.got == [[]]
    for key in APART:
        assert await store.read(key, 0, now) == [Entry(1, b'{"n":1}', 0)]


async def test_refused_keys_are_handed_over(store: RedisStore) -> None:
    now = time.time()
    await store.commit(Batch(streams=[StreamRecord(KEY, "s", "a")], fence="other"), now)
    outcomes = Outcomes()
    batch = Batch(appends={KEY: [Entry(1, b"{}", 0)]}, fence="mine", owner="a")
    assert store.commit_soon(batch, now, outcomes)
    assert await asyncio.wait_for(outcomes.first, WAIT_S) == [KEY]
    assert await store.read(KEY, 0, now) == []


async def test_a_flushed_script_cache_is_an_error_for_commit_to_mend(
    redis_url: str, store: RedisStore
) -> None:
    """NOSCRIPT is handed over as a StoreError (not retried there: commit loads the
    scripts again and applies the same batch once)."""
    now = time.time()
    await store.commit(Batch(streams=[StreamRecord(KEY, "s", "a")]), now)
    client = aioredis.Redis.from_url(redis_url)
    try:
        await client.script_flush()
    finally:
        await client.aclose()
    outcomes = Outcomes()
    batch = Batch(appends={KEY: [Entry(1, b"{}", 0)]})
    assert store.commit_soon(batch, now, outcomes)
    got = await asyncio.wait_for(outcomes.first, WAIT_S)
    assert isinstance(got, StoreError) and "No matching script" in str(got)
    assert await store.commit(batch, now) == []
    assert await store.read(KEY, 0, now) == [Entry(1, b"{}", 0)]


async def test_closing_the_store_hands_over_an_error(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis") as server:
        store = RedisStore(server.url, f"t{secrets.token_hex(4)}", StoreLimits(), timeout=60)
        await store.open()
        now = time.time()
        await store.commit(Batch(streams=[StreamRecord(KEY, "s", "a")]), now)
        server.pause()  # nothing is answered
        try:
            outcomes = Outcomes()
            assert store.commit_soon(Batch(appends={KEY: [Entry(1, b"{}", 0)]}), now, outcomes)
            await store.close()
            assert len(outcomes.got) == 1 and isinstance(outcomes.got[0], StoreError)
            assert not store.commit_soon(Batch(appends={KEY: [Entry(2, b"{}", 0)]}), now, outcomes)
        finally:
            server.resume()
            await store.close()


async def test_no_reply_within_the_timeout_is_an_error(tmp_path: Path) -> None:
    """An unanswered commit fails its connection after ``timeout`` (as ``commit`` does);
    the next ``commit`` makes a new one."""
    with RedisServer(tmp_path / "redis") as server:
        store = RedisStore(server.url, f"t{secrets.token_hex(4)}", StoreLimits(), timeout=0.2)
        await store.open()
        try:
            now = time.time()
            await store.commit(Batch(streams=[StreamRecord(KEY, "s", "a")]), now)
            server.pause()
            outcomes = Outcomes()
            try:
                assert store.commit_soon(Batch(appends={KEY: [Entry(1, b"{}", 0)]}), now, outcomes)
                got = await asyncio.wait_for(outcomes.first, WAIT_S)
            finally:
                server.resume()
            assert isinstance(got, StoreError) and "no reply" in str(got)
            assert await store.commit(Batch(appends={KEY: [Entry(1, b"{}", 0)]}), now) == []
            assert await store.read(KEY, 0, now) == [Entry(1, b"{}", 0)]
        finally:
            await store.close()
