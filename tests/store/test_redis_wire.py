"""The Redis store's own connections to one server (``proxy/store/redis_wire.py``): many
commands in flight on one connection, their callers cancelled at random, each answered
with its own reply and the connection kept; a closed store fails what waits on them; a
flushed script cache loaded again; a Unix socket with a password and a database. Against
a real ``redis-server`` (:mod:`tests.redis_server`)."""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from proxy.store.base import Batch, Entry, StoreError, StoreLimits, StreamRecord
from proxy.store.redis import RedisStore
from tests.redis_server import RedisServer
from tests.store.redis_support import WAIT_S

KEYS = [f"e{n}e{n}e{n}.1" for n in range(8)]  # eight sessions, in several buckets


def entry(key: str, seq: int) -> Entry:
    return Entry(seq, f'{{"k":"{key}","n":{seq}}}'.encode(), 0)


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisStore]:
    made = RedisStore(redis_url, f"t{secrets.token_hex(4)}", StoreLimits())
    await made.open()
    try:
        yield made
    finally:
        await made.close()


async def test_callers_cancelled_at_random_leave_each_reply_to_its_own_command(
    store: RedisStore, seed: int
) -> None:
    """Rounds of a commit and a read per session, all written at once on the store's two
    connections; a random half of the callers cancelled 0 to 3 turns later (before or after
    their replies came). Every caller left gets its own command's reply, every commit
    written applies once, and neither connection is dropped."""
    rng = random.Random(seed)
    now = time.time()
    await store.commit(Batch(streams=[StreamRecord(key, "s", "a") for key in KEYS]), now)
    committed = dict.fromkeys(KEYS, 0)
    assert await store.read(KEYS[0], 0, now) == []
    links = (store._wire and store._wire._link, store._reads and store._reads._link)
    assert None not in links
    cancels = 0
    for _ in range(40):
        commits = {
            key: asyncio.create_task(
                store.commit(Batch(appends={key: [entry(key, committed[key] + 1)]}), now)
            )
            for key in KEYS
        }
        reads = {key: asyncio.create_task(store.read(key, 0, now)) for key in KEYS}
        await asyncio.sleep(0)  # every task has written its command
        for key in KEYS:
            committed[key] += 1
        for _ in range(rng.randrange(4)):
            await asyncio.sleep(0)
        chosen = [t for t in [*commits.values(), *reads.values()] if rng.random() < 0.5]
        cancelled = [t for t in chosen if t.cancel()]  # a task done already is not
        cancels += len(cancelled)
        for task in commits.values():
            if task in cancelled:
                with pytest.raises(asyncio.CancelledError):
                    await task
            else:
                assert await task == []
        for key, task in reads.items():
            if task in cancelled:
                with pytest.raises(asyncio.CancelledError):
                    await task
                continue
            read = await task  # on the other connection: before or after this round's commit
            assert read == [entry(key, s) for s in range(1, len(read) + 1)]
            assert committed[key] - 1 <= len(read) <= committed[key]
    assert cancels > 40 * len(KEYS) / 4  # most rounds cancel some callers still waiting
    for key in KEYS:
        assert await store.read(key, 0, now) == [
            entry(key, s) for s in range(1, committed[key] + 1)
        ]
    assert (store._wire and store._wire._link, store._reads and store._reads._link) == links


async def test_closing_the_store_fails_what_waits_on_its_connections(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis") as server:
        store = RedisStore(server.url, f"t{secrets.token_hex(4)}", StoreLimits(), timeout=60)
        await store.open()
        now = time.time()
        await store.commit(Batch(streams=[StreamRecord(KEYS[0], "s", "a")]), now)
        server.pause()  # nothing is answered
        try:
            commit = asyncio.create_task(
                store.commit(Batch(appends={KEYS[0]: [entry(KEYS[0], 1)]}), now)
            )
            read = asyncio.create_task(store.read(KEYS[0], 0, now))
            await asyncio.sleep(0.05)
            assert not commit.done() and not read.done()
            await store.close()
            for task in (commit, read):
                with pytest.raises(StoreError, match="closed"):
                    await asyncio.wait_for(task, WAIT_S)
        finally:
            server.resume()
            await store.close()


async def test_a_flushed_script_cache_is_loaded_again(redis_url: str, store: RedisStore) -> None:
    """SCRIPT FLUSH (a restarted or replaced server keeps no scripts): the next commit,
    of one part or of several (sessions in different buckets, written at once), loads
    them again and applies."""
    now = time.time()
    apart = [KEYS[1], KEYS[2]]
    client = aioredis.Redis.from_url(redis_url)
    try:
        await client.script_flush()
        await store.commit(Batch(streams=[StreamRecord(KEYS[0], "s", "a")]), now)
        await client.script_flush()
        await store.commit(Batch(streams=[StreamRecord(key, "s", "a") for key in apart]), now)
        await client.script_flush()
        await store.commit(Batch(appends={key: [entry(key, 1)] for key in apart}), now)
    finally:
        await client.aclose()
    for key in apart:
        assert await store.read(key, 0, now) == [entry(key, 1)]
    assert (await store.get_stream(KEYS[0], now)) is not None


async def test_a_unix_socket_with_a_password_and_a_database(tmp_path: Path) -> None:
    """``unix://:PASSWORD@PATH?db=N``: the store's own connections authenticate and
    select the database, as redis-py's do (its keys are in db N, none in db 0)."""
    sock = tmp_path / "redis.sock"
    password = secrets.token_hex(8)
    args = ("--unixsocket", str(sock), "--unixsocketperm", "700", "--requirepass", password)
    with RedisServer(tmp_path / "redis", args=args) as server:
        url = f"unix://:{password}@{sock}?db=3"
        store = RedisStore(url, f"t{secrets.token_hex(4)}", StoreLimits())
        await store.open()
        try:
            now = time.time()
            await store.commit(Batch(streams=[StreamRecord(KEYS[0], "s", "a")]), now)
            await store.commit(Batch(appends={KEYS[0]: [entry(KEYS[0], 1)]}), now)
            assert await store.read(KEYS[0], 0, now) == [entry(KEYS[0], 1)]
        finally:
            await store.close()
        counted = []
        for db in (0, 3):
            client = aioredis.Redis.from_url(f"{server.url}?db={db}", password=password)
            try:
                counted.append(await client.dbsize())
            finally:
                await client.aclose()
        assert counted[0] == 0 and counted[1] > 0
        wrong = RedisStore(f"unix://:wrong@{sock}?db=3", "t0", StoreLimits())
        with pytest.raises(StoreError):
            await wrong.open()
        await wrong.close()
