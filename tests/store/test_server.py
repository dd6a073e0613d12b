"""Which server a stream was made at (``StreamRecord.server``), on memory, sqlite and redis.

Stored streams are served only at the path of the server their session was made at
(:mod:`proxy.core.stream_access`), so the server must come back exactly as written, a
record put again takes the server given, and a record written before servers were
recorded (a SQLite file without the column, a Redis hash without the field) reads as
None: served only when the proxy fronts exactly one server.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import redis.asyncio as aioredis

from proxy.store.base import Batch, Entry, StoreLimits, StreamRecord
from proxy.store.redis_layout import Layout
from proxy.store.sqlite import SqliteStore
from tests.store.conftest import Maker, RedisMaker

# The streams table as version 1 first had it: neither principal nor server.
OLDEST_STREAMS = (
    "CREATE TABLE streams (key TEXT PRIMARY KEY, session_id TEXT NOT NULL,"
    " owner TEXT NOT NULL, state TEXT NOT NULL, first_seq INTEGER NOT NULL,"
    " last_seq INTEGER NOT NULL, request_ids TEXT NOT NULL, announced INTEGER NOT NULL,"
    " expires_at REAL) WITHOUT ROWID"
)

SERVERS = [None, "default", "a", "b.c-d_e", "ünï", "null", ""]


def record(key: str, server: str | None, principal: str | None = "alice") -> StreamRecord:
    return StreamRecord(key, "s1", "a", principal=principal, server=server)


async def test_the_server_round_trips_and_survives_a_reopen(maker: Maker) -> None:
    store = await maker.make()
    now = time.time()
    keys = {f"e5e5e5.{i}": s for i, s in enumerate(SERVERS)}
    batch = Batch(
        streams=[record(key, s) for key, s in keys.items()],
        appends={key: [Entry(1, b"{}")] for key in keys},
    )
    await store.commit(batch, now)
    # An append alone (its record known) keeps the server; so does completing.
    await store.commit(Batch(appends={key: [Entry(2, b"{}")] for key in keys}), now)
    done = "e5e5e5.0"
    await store.commit(Batch(completed={done: now + 60}), now)
    again = await maker.reopen(store)
    for key, server in keys.items():
        found = await again.get_stream(key, now)
        assert found is not None, key
        assert (found.server, found.principal, found.last_seq) == (server, "alice", 2), key
    live = {r.key: r.server for r in await again.live_streams(None, now)}
    assert live == {key: s for key, s in keys.items() if key != done}


async def test_a_record_put_again_takes_the_given_server_and_keeps_its_log(
    maker: Maker,
) -> None:
    store = await maker.make()
    now = time.time()
    await store.commit(
        Batch(streams=[record("e6.1", "a")], appends={"e6.1": [Entry(1, b"x")]}), now
    )
    await store.commit(Batch(streams=[record("e6.1", "b")]), now)
    found = await store.get_stream("e6.1", now)
    assert found is not None and (found.server, found.last_seq) == ("b", 1)
    assert [e.payload for e in await store.read("e6.1", 0, now)] == [b"x"]


async def test_a_log_without_a_record_names_no_server(maker: Maker) -> None:
    """Appends whose record was lost (a flushed Redis) make a record naming no server."""
    store = await maker.make()
    now = time.time()
    await store.commit(Batch(appends={"e7.1": [Entry(3, b"{}")]}), now)
    found = await store.get_stream("e7.1", now)
    assert found is not None and found.server is None


# ---------------------------------------------------------------- files and keys written before


async def test_a_sqlite_file_made_before_servers_opens_and_gains_the_column(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    store = SqliteStore(path, StoreLimits())
    await store.open()
    await store.close()
    # The streams table as the file first had it (neither principal nor server), with a
    # stream in it, the way a proxy of an earlier version left the file.
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE streams")
    conn.execute(OLDEST_STREAMS)
    conn.execute(
        "INSERT INTO streams VALUES ('e8.1', 's1', 'a', 'live', 1, 0, '[]', 0, ?)",
        (time.time() + 600,),
    )
    conn.commit()
    conn.close()

    reopened = SqliteStore(path, StoreLimits())
    await reopened.open()
    try:
        now = time.time()
        old = await reopened.get_stream("e8.1", now)
        assert old is not None and old.server is None and old.principal is None
        await reopened.commit(Batch(streams=[record("e8.2", "b")]), now)
        new = await reopened.get_stream("e8.2", now)
        assert new is not None and new.server == "b"
    finally:
        await reopened.close()
    conn = sqlite3.connect(path)
    columns = {row[1] for row in conn.execute("PRAGMA table_info(streams)")}
    conn.close()
    assert {"principal", "server"} <= columns


async def test_a_redis_record_written_before_servers_names_none(redis_url: str) -> None:
    maker = RedisMaker(redis_url)
    try:
        store = await maker.make()
        now = time.time()
        await store.commit(Batch(streams=[record("e9.1", "a")]), now)
        client = aioredis.from_url(redis_url)
        try:  # what an earlier version wrote: the same hash without the field
            record_key = Layout(maker.namespace).stream("e9.1").record
            removed = await client.hdel(record_key, "srv")
        finally:
            await client.aclose()
        assert removed == 1
        found = await store.get_stream("e9.1", now)
        assert found is not None and found.server is None and found.principal == "alice"
    finally:
        await maker.close_all()
