"""One contract, three stores: the ``maker`` fixture gives each test every store kind.

``redis`` runs against a real ``redis-server`` that :mod:`tests.redis_server` starts (and
``scripts/test`` installs when it is missing), ``redis-cluster`` against a real local
three-master Redis Cluster (:mod:`tests.redis_cluster`); each test gets its own key
namespace.

Each maker has a ``clock``. Memory and SQLite take every ``now`` from their caller, so a
:class:`FakeClock` moves time at once (an expiry is checked at ``now + ttl``, no wait);
Redis expires keys on its own clock, so its :class:`WallClock` really waits.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol

import pytest

from proxy.store.base import Store, StoreLimits
from proxy.store.memory import MemoryStore

_names = itertools.count()


class Clock(Protocol):
    """The time a contract case passes to the store as ``now``."""

    def now(self) -> float: ...

    async def advance(self, seconds: float) -> None: ...


class FakeClock:
    """Time that moves only when told: for the stores that have no clock of their own."""

    def __init__(self) -> None:
        self._now = time.time()

    def now(self) -> float:
        return self._now

    async def advance(self, seconds: float) -> None:
        self._now += seconds


class WallClock:
    """Real time: for Redis, whose TTLs run on the server's clock."""

    def now(self) -> float:
        return time.time()

    async def advance(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class Maker:
    """Makes stores of one kind over one set of data: fresh, reopened, or after a loss."""

    kind = ""

    def __init__(self) -> None:
        self.open_stores: list[Store] = []
        self.clock: Clock = FakeClock()

    async def _build(self, limits: StoreLimits) -> Store:
        raise NotImplementedError

    async def make(self, limits: StoreLimits | None = None) -> Store:
        store = await self._build(limits or StoreLimits())
        await store.open()
        self.open_stores.append(store)
        return store

    async def reopen(self, store: Store) -> Store:
        """The same data, seen by a new instance (a restarted process)."""
        await store.close()
        return await self.make(store.limits)

    async def lose(self, store: Store) -> Store:
        """The data is destroyed (a deleted file, a flushed Redis); a new instance opens."""
        raise NotImplementedError

    async def close_all(self) -> None:
        for store in self.open_stores:
            await store.close()


class MemoryMaker(Maker):
    kind = "memory"

    async def _build(self, limits: StoreLimits) -> Store:
        return MemoryStore(limits)

    async def reopen(self, store: Store) -> Store:
        return store  # a memory store has no second instance: the process is its life

    async def lose(self, store: Store) -> Store:
        await store.close()
        return await self.make(store.limits)


class SqliteMaker(Maker):
    kind = "sqlite"

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    async def _build(self, limits: StoreLimits) -> Store:
        from proxy.store.sqlite import SqliteStore

        return SqliteStore(self.path, limits)

    async def lose(self, store: Store) -> Store:
        await store.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        return await self.make(store.limits)


class RedisMaker(Maker):
    kind = "redis"

    def __init__(self, url: str, *, cluster: bool = False) -> None:
        super().__init__()
        self.clock = WallClock()
        self.url = url
        self.cluster = cluster
        self.namespace = f"contract{next(_names)}"

    async def _build(self, limits: StoreLimits) -> Store:
        from proxy.store.redis import RedisStore

        return RedisStore(self.url, self.namespace, limits, cluster=self.cluster)

    async def lose(self, store: Store) -> Store:
        await flushall(self.url, cluster=self.cluster)
        await store.close()
        return await self.make(store.limits)


async def flushall(url: str, *, cluster: bool = False) -> None:
    """FLUSHALL the server (a cluster: every master)."""
    import redis.asyncio as aioredis
    from redis.asyncio.cluster import RedisCluster

    client = RedisCluster.from_url(url) if cluster else aioredis.from_url(url)
    try:
        await client.flushall()
    finally:
        await client.aclose()


def _made(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Maker:
    if kind == "memory":
        return MemoryMaker()
    if kind == "sqlite":
        return SqliteMaker(tmp_path / "store.db")
    if kind == "redis":
        return RedisMaker(request.getfixturevalue("redis_url"))
    return RedisMaker(request.getfixturevalue("redis_cluster_url"), cluster=True)


@pytest.fixture(params=["memory", "sqlite", "redis", "redis-cluster"])
async def maker(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Maker]:
    made = _made(request.param, request, tmp_path)
    try:
        yield made
    finally:
        await made.close_all()


@pytest.fixture(params=["sqlite", "redis", "redis-cluster"])
async def durable(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Maker]:
    """:func:`maker` without the memory store (the reference the durable ones meet)."""
    made = _made(request.param, request, tmp_path)
    try:
        yield made
    finally:
        await made.close_all()
