"""On one server the Redis store lists its live streams and sweeps its live indexes on
its own reads' connection (one join of 256 packed commands, hiredis' replies), not
through redis-py: 256 commands built and parsed in one step of the event loop cost a
replica ~10 ms of its loop at each reap (every ``lease_seconds / 2``)."""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hiredis import pack_command

from proxy.store.base import Batch, Entry, StoreLimits, StreamRecord
from proxy.store.redis import RedisStore
from proxy.store.redis_layout import BUCKETS, Layout
from proxy.store.redis_pack import pack_per_bucket


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisStore]:
    made = RedisStore(redis_url, f"t{secrets.token_hex(4)}", StoreLimits(live_ttl=600.0))
    await made.open()
    try:
        yield made
    finally:
        await made.close()


def test_a_command_per_bucket_packs_as_hiredis_does() -> None:
    layout = Layout("ns")
    packed = pack_per_bucket(layout, "ZRANGE", "(123", "+inf", "BYSCORE")
    expected = b"".join(
        pack_command(("ZRANGE", layout.live(b), "(123", "+inf", "BYSCORE")) for b in range(BUCKETS)
    )
    assert packed == expected


async def test_live_streams_and_the_sweep_go_without_redis_py(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time()
    live, ended, other = "a1a1.1", "a1a1.2", "b2b2.1"
    batch = Batch(
        [StreamRecord(k, "s1", o) for k, o in ((live, "r1"), (ended, "r1"), (other, "r2"))]
    )
    batch.appends[live] = [Entry(1, b"x")]
    batch.completed[ended] = now + 60
    await store.commit(batch, now)

    def no_pipeline(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a pipeline through redis-py")

    assert store._client is not None
    monkeypatch.setattr(store._client, "pipeline", no_pipeline)
    assert sorted(r.key for r in await store.live_streams(None, now)) == [live, other]
    assert [r.key for r in await store.live_streams("r1", now)] == [live]
    assert await store.sweep(now) == 0
    assert await store.sweep(now + 3600) == 2  # both live streams expired while live
    assert await store.live_streams(None, now + 3600) == []
