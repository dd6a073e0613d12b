"""Who a stream belongs to (``StreamRecord.principal``), on memory, sqlite and redis.

Stored streams are served only to the principal their session belongs to
(:mod:`proxy.downstream.stored`), so the principal must come back exactly as written:
None (authentication off) and ``""`` are different values, and a name is kept as is.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import redis.asyncio as aioredis

from proxy.store.base import Batch, Entry, StoreLimits, StreamRecord
from proxy.store.redis_layout import Layout
from proxy.store.sqlite import SqliteStore
from proxy.store.sqlite_db import _STREAM_COLUMNS
from tests.store.conftest import Maker, RedisMaker

PRINCIPALS = [None, "", "alice", "bob@example.org", "ålice\u2603", "null", '"x"']


def record(key: str, principal: str | None, session: str = "s1") -> StreamRecord:
    return StreamRecord(key, session, "a", principal=principal)


async def test_the_principal_round_trips_and_survives_a_reopen(maker: Maker) -> None:
    store = await maker.make()
    now = time.time()
    keys = {f"e0e0e0.{i}": p for i, p in enumerate(PRINCIPALS)}
    batch = Batch(
        streams=[record(key, p) for key, p in keys.items()],
        appends={key: [Entry(1, b"{}")] for key in keys},
    )
    await store.commit(batch, now)
    for key, principal in keys.items():
        found = await store.get_stream(key, now)
        assert found is not None and found.principal == principal, key
    again = await maker.reopen(store)
    for key, principal in keys.items():
        found = await again.get_stream(key, now)
        assert found is not None and found.principal == principal, key
    live = {r.key: r.principal for r in await again.live_streams(None, now)}
    assert live == keys


async def test_a_record_put_again_keeps_its_log_and_takes_the_given_principal(
    maker: Maker,
) -> None:
    store = await maker.make()
    now = time.time()
    await store.commit(
        Batch(streams=[record("e1.1", "alice")], appends={"e1.1": [Entry(1, b"{}")]}), now
    )
    announced = record("e1.1", "alice")
    announced.announced = True
    await store.commit(Batch(streams=[announced]), now)
    found = await store.get_stream("e1.1", now)
    assert found is not None
    assert (found.principal, found.announced, found.last_seq) == ("alice", True, 1)


async def test_a_log_without_a_record_belongs_to_nobody(maker: Maker) -> None:
    """Appends whose record was lost (a flushed Redis) make a record naming no principal:
    only a request made without authentication may read it."""
    store = await maker.make()
    now = time.time()
    await store.commit(Batch(appends={"e2.1": [Entry(5, b"{}")]}), now)
    found = await store.get_stream("e2.1", now)
    assert found is not None and found.principal is None and found.session_id == ""


# ---------------------------------------------------------------- files and keys written before


_OLD_STREAMS = (
    "CREATE TABLE streams (key TEXT PRIMARY KEY, session_id TEXT NOT NULL,"
    " owner TEXT NOT NULL, state TEXT NOT NULL, first_seq INTEGER NOT NULL,"
    " last_seq INTEGER NOT NULL, request_ids TEXT NOT NULL, announced INTEGER NOT NULL,"
    " expires_at REAL) WITHOUT ROWID"
)


async def test_a_sqlite_file_made_before_principals_opens_and_gains_the_column(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    store = SqliteStore(path, StoreLimits())
    await store.open()
    epoch = store.epoch
    await store.close()
    # Rebuild the streams table as version 1 first had it (no principal column), with a
    # stream in it, the way a proxy of the earlier version left the file.
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE streams")
    conn.execute(_OLD_STREAMS)
    conn.execute(
        "INSERT INTO streams VALUES ('e3.1', 's1', 'a', 'live', 1, 0, '[]', 0, ?)",
        (time.time() + 600,),
    )
    conn.commit()
    columns = {row[1] for row in conn.execute("PRAGMA table_info(streams)")}
    conn.close()
    assert "principal" not in columns

    reopened = SqliteStore(path, StoreLimits())
    await reopened.open()
    try:
        assert reopened.epoch == epoch
        now = time.time()
        old = await reopened.get_stream("e3.1", now)
        assert old is not None and old.principal is None and old.session_id == "s1"
        await reopened.commit(Batch(streams=[record("e3.2", "alice")]), now)
        new = await reopened.get_stream("e3.2", now)
        assert new is not None and new.principal == "alice"
    finally:
        await reopened.close()
    conn = sqlite3.connect(path)
    columns = {row[1] for row in conn.execute("PRAGMA table_info(streams)")}
    conn.close()
    assert set(_STREAM_COLUMNS.replace(" ", "").split(",")) <= columns


async def test_a_redis_record_written_before_principals_belongs_to_nobody(
    redis_url: str,
) -> None:
    maker = RedisMaker(redis_url)
    try:
        store = await maker.make()
        now = time.time()
        await store.commit(Batch(streams=[record("e4.1", "alice")]), now)
        client = aioredis.from_url(redis_url)
        try:  # what an earlier version wrote: the same hash without the field
            record_key = Layout(maker.namespace).stream("e4.1").record
            removed = await client.hdel(record_key, "who")
        finally:
            await client.aclose()
        assert removed == 1
        found = await store.get_stream("e4.1", now)
        assert found is not None and found.principal is None
    finally:
        await maker.close_all()
