"""A Redis tail reads its next 1,000 entries ahead (``RedisStore._read_ahead``): the read
is on the wire while the entries before are with their reader; a connection broken
meanwhile is read again on a new one; a tail left with a read ahead leaves the connection
as it was. Against a real ``redis-server`` (:mod:`tests.redis_server`)."""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from proxy.store.base import Batch, Entry, StoreLimits, StreamRecord
from proxy.store.redis import RedisStore
from proxy.store.redis_reads import TAIL_BATCH

KEY = "e6e6e6.1"
EVENTS = 2 * TAIL_BATCH + 500


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisStore]:
    made = RedisStore(redis_url, f"t{secrets.token_hex(4)}", StoreLimits())
    await made.open()
    try:
        now = time.time()
        events = [Entry(seq, b'{"n":%d}' % seq, 0) for seq in range(1, EVENTS + 1)]
        await made.commit(
            Batch(
                streams=[StreamRecord(KEY, "s", "a")],
                appends={KEY: events},
                completed={KEY: now + 60},
            ),
            now,
        )
        yield made
    finally:
        await made.close()


def waiting(store: RedisStore) -> int:
    """The reads on the store's reads connection not yet answered (or not yet read)."""
    link = store._reads and store._reads._link
    assert link is not None
    return len(link._waiting)


async def test_the_next_read_is_sent_before_the_entries_are_handed_over(
    store: RedisStore,
) -> None:
    got: list[int] = []
    ahead: list[int] = []
    async for entries in store.tail(KEY, 0):
        ahead.append(waiting(store))
        got += [e.seq for e in entries]
    assert got == list(range(1, EVENTS + 1))
    assert ahead == [1, 1, 0]  # after a full batch the next read is already on the wire


async def test_a_connection_broken_under_a_read_ahead_is_read_again(store: RedisStore) -> None:
    got: list[int] = []
    async for entries in store.tail(KEY, 0):
        if not got:
            link = store._reads and store._reads._link
            assert link is not None
            link.fail(RedisConnectionError("cut"))  # the read ahead fails with it
        got += [e.seq for e in entries]
    assert got == list(range(1, EVENTS + 1))


async def test_a_tail_left_with_a_read_ahead_leaves_the_connection_in_step(
    store: RedisStore,
) -> None:
    tail = store.tail(KEY, 0)
    first = await anext(tail)
    assert len(first) == TAIL_BATCH and waiting(store) == 1
    await tail.aclose()
    # The reply left unread is dropped; the next read gets its own.
    assert [e.seq for e in await store.read(KEY, 10, time.time(), 3)] == [11, 12, 13]
