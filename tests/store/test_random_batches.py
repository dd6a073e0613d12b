"""Every durable store applies a batch as the memory store does (the reference): seeded
random batches against SQLite, a real redis-server and the local cluster. The SQLite
store works a batch out in Python (proxy/store/sqlite_commit.py), Redis in its commit
script (proxy/store/redis_lua.py): both read each record once and write it once."""

from __future__ import annotations

import random
import time

from proxy.store.base import Batch, Entry, Store, StoreLimits, StreamRecord
from proxy.store.memory import MemoryStore
from tests.store.conftest import Maker


def entries(first: int, last: int) -> list[Entry]:
    return [Entry(seq, f'{{"n":{seq}}}'.encode(), seq % 3) for seq in range(first, last + 1)]


KEYS = [f"e0e0e0.{n}" for n in range(1, 4)]


def random_batch(rng: random.Random, last: dict[str, int], now: float) -> Batch:
    batch = Batch(fence="f", owner="a")
    for key in rng.sample(KEYS, rng.randint(1, len(KEYS))):
        roll = rng.random()
        if roll < 0.25:
            ids = [rng.randint(1, 9)]
            batch.streams.append(StreamRecord(key, f"s{rng.randint(1, 3)}", "a", request_ids=ids))
        if rng.random() < 0.7:
            start = last[key] + rng.choice([1, 1, 1, 0, -2, 3])  # retried, in order, a hole
            start = max(1, start)
            stop = start + rng.randint(0, 12)
            batch.appends[key] = entries(start, stop)
            last[key] = max(last[key], stop)
        if rng.random() < 0.2:
            batch.trimmed[key] = max(1, last[key] - rng.randint(-1, 10))
        if rng.random() < 0.1:
            batch.completed[key] = now + rng.choice([60.0, -1.0])
        if rng.random() < 0.08:
            batch.dropped.append(key)
            last[key] = 0 if rng.random() < 0.5 else last[key]
    return batch


async def state_of(store: Store, key: str, now: float, pick: float = 0.0) -> object:
    """What ``key`` reads as: its record, its whole log, and (from ``pick``, a fraction
    of the way through the log) a read of at most 3 events after a position and a
    summary after it: a position inside what one commit wrote, too."""
    record = await store.get_stream(key, now)
    if record is None:
        return None
    fields = (record.session_id, record.owner, record.state, record.first_seq, record.last_seq)
    log = await store.read(key, record.first_seq - 1, now)
    after = record.first_seq - 1 + int(pick * (record.last_seq - record.first_seq + 2))
    part = await store.read(key, after, now, limit=3)
    summary = await store.summary(key, after, now)
    return fields, record.request_ids, record.announced, record.fence, log, part, summary


async def test_random_batches_leave_what_the_memory_store_leaves(durable: Maker) -> None:
    """Records given, appends in order, retried and after a hole, trims, endings (one
    already expired), drops and keys made again, with a small ``max_events``: after each
    batch every key reads as in the memory store, the reference."""
    seed = random.randrange(1 << 30)
    print(f"seed={seed}")
    rng = random.Random(seed)
    limits = StoreLimits(max_events=16)
    store = await durable.make(limits)
    memory = MemoryStore(limits)
    await memory.open()
    try:
        last = dict.fromkeys(KEYS, 0)
        now = time.time()
        for step in range(300):
            batch = random_batch(rng, last, now)
            assert await store.commit(batch, now) == await memory.commit(batch, now), step
            for key in KEYS:
                pick = rng.random()
                expected = await state_of(memory, key, now, pick)
                assert await state_of(store, key, now, pick) == expected, (seed, step, key)
    finally:
        await memory.close()
