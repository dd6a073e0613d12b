"""A stream's appended events go to the commit script as runs of consecutive seqs
(``proxy/store/redis_layout.py``'s ``runs``; each event's stream id packed by the client),
checked against the record once per run: a run partly stored already (a retried batch)
adds only its new events, a run after a hole starts the log again, as event-by-event
checks did. Against a real ``redis-server`` (:mod:`tests.redis_server`)."""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator

import pytest

from proxy.store.base import Batch, Entry, StoreLimits, StreamRecord
from proxy.store.redis import RedisStore
from proxy.store.redis_layout import runs

KEY = "e5e5e5.1"


def events(*seqs: int) -> list[Entry]:
    return [Entry(seq, b'{"n":%d}' % seq, seq % 3) for seq in seqs]


def test_consecutive_seqs_are_one_run_and_a_gap_starts_another() -> None:
    assert runs(events(4, 5, 6)) == [events(4, 5, 6)]
    assert runs(events(7)) == [events(7)]
    assert runs(events(1, 2, 5, 6, 9)) == [events(1, 2), events(5, 6), events(9)]


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisStore]:
    made = RedisStore(redis_url, f"t{secrets.token_hex(4)}", StoreLimits())
    await made.open()
    try:
        await made.commit(Batch(streams=[StreamRecord(KEY, "s", "a")]), time.time())
        yield made
    finally:
        await made.close()


async def stored(store: RedisStore) -> tuple[list[int], int, int]:
    now = time.time()
    record = await store.get_stream(KEY, now)
    assert record is not None
    got = await store.read(KEY, record.first_seq - 1, now)
    assert got == events(*(e.seq for e in got))  # payloads and marks as written
    return [e.seq for e in got], record.first_seq, record.last_seq


@pytest.mark.parametrize("wire", [True, False], ids=["own-connection", "redis-py"])
async def test_runs_partly_stored_and_after_a_hole(store: RedisStore, wire: bool) -> None:
    if not wire:
        store._wire = None  # commit through redis-py (as a cluster's store does)
    now = time.time()
    await store.commit(Batch(appends={KEY: events(1, 2, 3, 4, 5)}), now)
    await store.commit(Batch(appends={KEY: events(1, 2, 3, 4, 5)}), now)  # retried
    assert await stored(store) == ([1, 2, 3, 4, 5], 1, 5)
    await store.commit(Batch(appends={KEY: events(4, 5, 6, 7)}), now)  # partly there
    assert await stored(store) == ([1, 2, 3, 4, 5, 6, 7], 1, 7)
    await store.commit(Batch(appends={KEY: events(8, 9, 12, 13)}), now)  # a hole at 10
    assert await stored(store) == ([12, 13], 12, 13)
    await store.commit(Batch(appends={KEY: events(20, 21)}), now)  # a hole between batches
    assert await stored(store) == ([20, 21], 20, 21)
