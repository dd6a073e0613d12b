"""A cancelled caller of the Redis store ends cancelled, at once, and leaves no command
running: against a real ``redis-server`` (:mod:`tests.redis_server`).

redis-py sends every command under ``asyncio.wait_for``; on Python 3.11 that returns the
command's result, instead of raising, to a caller cancelled in the loop iteration in
which the write ends (CPython gh-86296, fixed in 3.12). A tail's read taken there went on
as if never cancelled: the tail ran until its stream ended.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections.abc import AsyncIterator

import pytest

from proxy.store.base import Batch, Entry, StoreLimits, StreamRecord
from proxy.store.redis import RedisStore
from tests.store.redis_support import WAIT_S, Follower
from tests.support import eventually

KEY = "e0e0e0.1"
CANCELS = 300
# Cancel points: this many loop iterations after the tail yielded a batch. The tail's
# next read is sent within them; a cancel that lands as its write ends was lost.
MAX_STEPS = 12


@pytest.fixture
async def replicas(redis_url: str) -> AsyncIterator[tuple[RedisStore, RedisStore]]:
    """Two stores on one namespace; the reader's reads block 60 s, so a read left
    running would still be running at the end of the test."""
    namespace = f"t{secrets.token_hex(4)}"
    writer = RedisStore(redis_url, namespace, StoreLimits())
    reader = RedisStore(redis_url, namespace, StoreLimits(), block=60)
    try:
        await writer.open()
        await reader.open()
        yield writer, reader
    finally:
        await reader.close()
        await writer.close()


async def append_every(store: RedisStore, seconds: float) -> None:
    """Open the stream and append one entry every ``seconds``, until cancelled."""
    await store.commit(Batch(streams=[StreamRecord(KEY, "s1", "a")]), time.time())
    for seq in range(1, 1 << 30):
        await store.commit(Batch(appends={KEY: [Entry(seq, b'{"n":1}', 0)]}), time.time())
        await asyncio.sleep(seconds)


async def cancelled_after_a_batch(reader: RedisStore, steps: int) -> Follower:
    """A tail of the stream, cancelled ``steps`` loop iterations after a batch that
    follows its first."""
    follower = Follower(reader, KEY, 0)
    try:
        await eventually(lambda: follower.seqs, timeout=WAIT_S, what="a first batch")
        seen = len(follower.seqs)
        await eventually(lambda: len(follower.seqs) > seen, timeout=WAIT_S, what="a batch")
        for _ in range(steps):
            await asyncio.sleep(0)
    finally:
        follower.stop()
    return follower


async def test_a_cancelled_tail_ends_cancelled_and_leaves_no_read_behind(
    replicas: tuple[RedisStore, RedisStore], seed: int
) -> None:
    """A tail of a stream another replica appends to every 30 ms, cancelled 300 times at
    seeded points just after a batch: each cancel ends the tail with CancelledError, and
    no Redis command of the reader outlives its caller."""
    writer, reader = replicas
    rng = random.Random(seed)
    appending = asyncio.create_task(append_every(writer, 0.03))
    try:
        for attempt in range(CANCELS):
            follower = await cancelled_after_a_batch(reader, rng.randrange(MAX_STEPS))
            await asyncio.wait({follower.task}, timeout=WAIT_S)
            assert follower.task.cancelled(), f"cancel {attempt} did not take"
            await eventually(
                lambda: not len(reader._commands), timeout=WAIT_S, what="the commands ended"
            )
    finally:
        appending.cancel()
        await asyncio.wait({appending})
