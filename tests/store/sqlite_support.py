"""What the SQLite store tests share: entries, an opened store (:func:`filled`: one that
holds what a sweep looks at), and counts read from its file with a connection of their
own."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

from proxy.store.base import Batch, Entry, Store, StoreLimits, StreamRecord
from proxy.store.sqlite import SqliteStore
from proxy.store.sqlite_runs import EVENTS_OF_ROW

DONE = "e0e0e0.1"  # a completed stream (see fill)
LIVE_KEY = "e0e0e0.2"  # a live one


def entries(first: int, last: int) -> list[Entry]:
    return [Entry(seq, f'{{"n":{seq}}}'.encode(), seq % 3) for seq in range(first, last + 1)]


async def opened(
    path: Path, limits: StoreLimits | None = None, *, synchronous: str = "normal"
) -> SqliteStore:
    """A SQLite store on ``path``, opened (its caller closes it)."""
    store = SqliteStore(path, limits or StoreLimits(), synchronous=synchronous)
    await store.open()
    return store


def stored_events(path: Path, key: str) -> int:
    with sqlite3.connect(path) as conn:
        query = f"SELECT coalesce(sum({EVENTS_OF_ROW}), 0) FROM events WHERE key = ?"
        return int(conn.execute(query, (key,)).fetchone()[0])


def stored_streams(path: Path, key: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM streams WHERE key = ?", (key,)).fetchone()[0])


async def fill(store: Store, now: float, events: int = 3) -> None:
    """A stream completed until ``now + 10`` with ``events`` events, a live one (its
    ttl: an hour), a task until ``now + 10``."""
    await store.commit(
        Batch(
            [StreamRecord(DONE, "s1", "a"), StreamRecord(LIVE_KEY, "s1", "a")],
            {DONE: entries(1, events), LIVE_KEY: entries(1, 2)},
            completed={DONE: now + 10},
        ),
        now,
    )
    await store.put_task("t1", {"status": "completed"}, now + 10)


@contextlib.asynccontextmanager
async def filled(path: Path, now: float, events: int = 3) -> AsyncIterator[SqliteStore]:
    """A SQLite store on ``path`` holding what :func:`fill` puts there at ``now``; closed
    on the way out."""
    store = await opened(path)
    try:
        await fill(store, now, events)
        yield store
    finally:
        await store.close()
