"""What the SQLite store tests share: entries, an opened store, and counts read from its
file with a connection of their own."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from proxy.store.base import Entry, StoreLimits
from proxy.store.sqlite import SqliteStore


def entries(first: int, last: int) -> list[Entry]:
    return [Entry(seq, f'{{"n":{seq}}}'.encode(), seq % 3) for seq in range(first, last + 1)]


async def opened(path: Path, limits: StoreLimits | None = None) -> SqliteStore:
    store = SqliteStore(path, limits or StoreLimits())
    await store.open()
    return store


def stored_events(path: Path, key: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM events WHERE key = ?", (key,)).fetchone()[0])


def stored_streams(path: Path, key: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM streams WHERE key = ?", (key,)).fetchone()[0])
