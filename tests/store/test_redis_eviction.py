"""A Redis that is full, or that evicts keys when full (docs/stores.md, "Running Redis"):
real redis-servers.

Every key of the store has a TTL, so any ``maxmemory-policy`` but ``noeviction`` may drop
a stream's events, a session or a lease: the store warns of it when it opens
(``redis_evicts_keys``). A full Redis under ``noeviction`` refuses a commit whole (the
commit script is flagged, so Redis refuses it before it runs: nothing half-written), and
the same commit lands once there is room.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from structlog.testing import capture_logs

from proxy.store.base import Batch, Entry, StoreError, StreamRecord
from proxy.store.redis import RedisStore
from proxy.store.redis_client import eviction_warning
from tests.redis_server import RedisServer


def test_every_policy_but_noeviction_is_warned_of() -> None:
    assert eviction_warning({"maxmemory_policy": "noeviction", "maxmemory": 1 << 20}) is None
    assert eviction_warning({}) is None  # a server that does not say
    said = eviction_warning({"maxmemory_policy": "allkeys-lru", "maxmemory": 104857600})
    assert said is not None and "allkeys-lru" in said and "104857600 bytes" in said
    said = eviction_warning({"maxmemory_policy": "volatile-ttl", "maxmemory": 0})
    assert said is not None and "if maxmemory is ever set" in said
    assert "noeviction" in said


async def test_a_redis_that_evicts_keys_is_warned_of_when_the_store_opens(tmp_path: Path) -> None:
    args = ("--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")
    with RedisServer(tmp_path / "redis", args=args) as server:
        store = RedisStore(server.url, "evicts")
        try:
            with capture_logs() as logged:
                await store.open()
        finally:
            await store.close()
    (warned,) = [e for e in logged if e["event"] == "redis_evicts_keys"]
    assert "allkeys-lru" in warned["note"] and warned["log_level"] == "warning"


async def test_a_redis_that_never_evicts_is_not_warned_of(redis_url: str) -> None:
    store = RedisStore(redis_url, f"n{secrets.token_hex(4)}")
    try:
        with capture_logs() as logged:
            await store.open()
    finally:
        await store.close()
    assert not [e for e in logged if e["event"] == "redis_evicts_keys"]


async def test_a_full_redis_refuses_a_commit_whole_and_takes_it_once_it_has_room(
    tmp_path: Path,
) -> None:
    with RedisServer(tmp_path / "redis") as server:
        store = RedisStore(server.url, "full")
        admin = aioredis.Redis.from_url(server.url)
        try:
            await store.open()
            now = time.time()
            key = f"{secrets.token_hex(6)}.1"
            events = {key: [Entry(seq, b'{"x":%d}' % seq) for seq in range(1, 51)]}
            batch = Batch([StreamRecord(key, "s", "o")], appends=events)
            used = (await admin.info("memory"))["used_memory"]
            await admin.config_set("maxmemory", str(used // 2))
            with pytest.raises(StoreError, match="maxmemory"):
                await store.commit(batch, now)
            await admin.config_set("maxmemory", "0")
            assert await store.get_stream(key, now) is None  # nothing half-written
            assert await store.commit(batch, now) == []
            assert [e.seq for e in await store.read(key, 0, now)] == list(range(1, 51))
        finally:
            await admin.aclose()
            await store.close()
