"""A failover behind the name the store connects to (docs/stores.md, "Memory" and
"Failover"): real redis-servers, a master and its replica, the store reaching the master
through a relay whose target moves to the promoted replica (as a managed Redis's
endpoint or a Kubernetes Service does), while the connections already made still reach
the old master, now a replica of the new one.

Writes on those connections get ``READONLY``. The command that got it fails (its caller
retries, as after any store error), and every connection of the store is dropped, so the
retry connects anew and reaches the new master: nothing the old master had is lost, and
nothing is written twice. Was: the store kept its connections to the old master and
every commit, lease renewal and task write failed with READONLY for as long as they
lived.
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
from tests.nemesis.links import RedisLink
from tests.redis_server import RedisServer
from tests.support import eventually


def events(first: int, last: int) -> list[Entry]:
    return [Entry(seq, b'{"n":%d}' % seq) for seq in range(first, last + 1)]


async def synced(replica: aioredis.Redis) -> bool:
    """``replica`` is in step with its master (not still syncing or loading: LOADING)."""
    return (await replica.info("replication")).get("master_link_status") == "up"


async def test_after_a_failover_the_store_reaches_the_new_master(tmp_path: Path) -> None:
    with (
        RedisServer(tmp_path / "one") as one,
        RedisServer(tmp_path / "two") as two,
    ):
        first = aioredis.Redis.from_url(one.url)
        second = aioredis.Redis.from_url(two.url)
        link = RedisLink(one.port)
        await link.up()
        store = RedisStore(link.url(), f"f{secrets.token_hex(4)}")
        try:
            await second.replicaof("127.0.0.1", one.port)
            await eventually(lambda: synced(second), what="the replica's first sync")
            await store.open()
            now = time.time()
            key = f"{secrets.token_hex(6)}.1"
            assert (
                await store.commit(Batch([StreamRecord(key, "s", "o")], {key: events(1, 3)}), now)
                == []
            )
            assert await store.acquire_lease("replica:o", "o", 30.0, now)

            assert await first.wait(1, 2000) == 1  # the replica (in step) has every write
            # The failover: the replica promoted, the old master made its replica, the
            # name (the relay) pointing at the new master for new connections.
            await second.replicaof("NO", "ONE")
            await first.replicaof("127.0.0.1", two.port)
            link.target_port = two.port
            assert (await first.info("replication"))["role"] == "slave"
            await eventually(lambda: synced(first), what="the old master to sync from the new")

            with capture_logs() as logged, pytest.raises(StoreError, match="read only replica"):
                await store.commit(Batch(appends={key: events(4, 6)}), now)
            assert await store.commit(Batch(appends={key: events(4, 6)}), now) == []
            assert await store.renew_lease("replica:o", "o", 30.0, now)
            assert [e.seq for e in await store.read(key, 0, now)] == list(range(1, 7))
            assert [e["event"] for e in logged] == ["redis_server_became_replica"]
            assert await second.xlen(next(k for k in await second.keys("*log*"))) == 6
        finally:
            await store.close()
            await link.close()
            await first.aclose()
            await second.aclose()
