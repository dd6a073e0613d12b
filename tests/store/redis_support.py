"""What the Redis store's tests share (test_redis.py, test_redis_cluster.py): a tail run
in a task, and what kind of key a key of the layout is."""

from __future__ import annotations

import asyncio

from proxy.store.redis import RedisStore
from tests.support import eventually

WAIT_S = 10.0  # a wake-up arrives within milliseconds; the deadline only guards a hang


class Follower:
    """Runs ``store.tail(key, after)`` in a task and keeps the seqs it yields."""

    def __init__(self, store: RedisStore, key: str, after: int) -> None:
        self.seqs: list[int] = []
        self.task = asyncio.create_task(self._follow(store, key, after))

    async def _follow(self, store: RedisStore, key: str, after: int) -> None:
        async for batch in store.tail(key, after):
            self.seqs.extend(e.seq for e in batch)

    async def has(self, seqs: list[int]) -> None:
        await eventually(lambda: self.seqs == seqs, timeout=WAIT_S, what=f"the tail at {seqs}")

    async def end(self) -> None:
        await asyncio.wait_for(self.task, WAIT_S)

    def stop(self) -> None:
        self.task.cancel()


KINDS = {"epoch", "live", "rec", "log", "wake", "session", "lease", "task"}


def kind_of(key: str) -> str:
    """What a key of the layout is: ``mrp:<ns>:{b<n>}:<kind>…`` in a bucket, else the
    first word of its own tag ``mrp:<ns>:{<kind>:<name>}``."""
    tag, _, rest = key.partition("{")[2].partition("}")
    return rest.split(":")[1] if tag.startswith("b") and rest else tag.split(":")[0]
