"""A key's events as rows of runs (proxy/store/sqlite_runs.py), in a real SQLite table of
the store's schema: whatever the sizes and marks, every read after any position, with
any limit, a summary after any position and a cut at any position give what the events
themselves give; and a version 1 file (a row per event) is read, extended and cut as it
is brought to version 2."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.stream import Mark, Unacknowledged
from proxy.store import sqlite_runs
from proxy.store.base import Batch, Entry, StoreLimits, StreamRecord
from proxy.store.sqlite import SqliteStore
from proxy.store.sqlite_db import _SCHEMA, SCHEMA_VERSION
from tests.store.sqlite_support import opened, stored_events

KEY = "e0e0e0.1"
EVENTS_TABLE = next(s for s in _SCHEMA if s.startswith("CREATE TABLE events"))


def table() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute(EVENTS_TABLE)
    conn.execute(EVENTS_TABLE.replace("TABLE events", "TABLE other"))
    return conn


def stored(conn: sqlite3.Connection, after: int, limit: int | None = None) -> list[Entry]:
    return sqlite_runs.entries(conn.execute(sqlite_runs.ENTRIES, (KEY, after)), after, limit)


def summary(conn: sqlite3.Connection, after: int) -> tuple[int, int, int]:
    return sqlite_runs.summary(conn.execute(sqlite_runs.SUMMARY, (KEY, after)), after)


def expected_summary(events: list[Entry], after: int) -> tuple[int, int, int]:
    later = [e for e in events if e.seq > after]
    requests = sum(1 for e in later if e.mark & Mark.REQUEST)
    return len(later), requests, sum(1 for e in later if e.mark & Mark.ERROR)


sizes = st.one_of(st.integers(0, 300), st.integers(3_000, 5_000), st.just(0))
event = st.tuples(sizes, st.integers(0, 3), st.binary(min_size=1, max_size=1))


@settings(max_examples=150, deadline=None)
@given(
    first=st.integers(1, 5),
    shapes=st.lists(event, min_size=1, max_size=60),
    batches=st.integers(1, 4),
    data=st.data(),
)
def test_runs_read_summarize_and_cut_as_the_events_do(
    first: int, shapes: list[tuple[int, int, bytes]], batches: int, data: st.DataObject
) -> None:
    events = [Entry(first + n, fill * size, mark) for n, (size, mark, fill) in enumerate(shapes)]
    conn = table()
    cursor = conn.cursor()
    step = -(-len(events) // batches)  # several commits: runs end where a commit ends
    for at in range(0, len(events), step):
        sqlite_runs.insert(cursor, KEY, events[at : at + step])
    rows = conn.execute("SELECT run FROM events").fetchall()
    assert len(rows) <= len(events)
    last = events[-1].seq
    for after in range(first - 1, last + 1):
        assert stored(conn, after) == [e for e in events if e.seq > after]
        assert summary(conn, after) == expected_summary(events, after)
    after = data.draw(st.integers(first - 1, last))
    limit = data.draw(st.integers(1, len(events) + 1))
    assert stored(conn, after, limit) == [e for e in events if e.seq > after][:limit]
    below = data.draw(st.integers(first - 1, last + 2))
    sqlite_runs.cut(cursor, KEY, below)
    kept = [e for e in events if e.seq >= below]
    assert stored(conn, 0) == kept
    oldest = conn.execute("SELECT min(seq) FROM events WHERE key = ?", (KEY,)).fetchone()[0]
    assert oldest == (kept[0].seq if kept else None)  # no row starts before what is kept
    assert conn.execute("SELECT count(*) FROM other").fetchone()[0] == 0


def test_a_burst_of_small_events_is_a_few_rows_and_large_ones_are_rows_of_their_own() -> None:
    small = [Entry(n, b"x" * 100, 0) for n in range(1, 101)]
    rows = sqlite_runs.runs(small)
    assert len(rows) == 3  # 40 events of 100 bytes to a run of at most 4,096
    assert [r[0] for r in rows] == [1, 41, 81] and rows[2][3] is not None
    large = [Entry(1, b"y" * 5_000, 1), Entry(2, b"z" * 10, 2), Entry(3, b"w" * 5_000, 0)]
    assert sqlite_runs.runs(large) == [
        (1, b"y" * 5_000, 1, None),
        (2, b"z" * 10, 2, None),
        (3, b"w" * 5_000, 0, None),
    ]


def test_an_event_whose_mark_is_not_a_run_word_is_a_row_of_its_own() -> None:
    odd = [Entry(1, b"a", 0), Entry(2, b"b", 4), Entry(3, b"c", 1), Entry(4, b"d", 0)]
    rows = sqlite_runs.runs(odd)
    assert [(r[0], r[3] is None) for r in rows] == [(1, True), (2, True), (3, False)]
    conn = table()
    sqlite_runs.insert(conn.cursor(), KEY, odd)
    assert stored(conn, 0) == odd


def _version_1_file(path: Path, now: float) -> None:
    """A file as version 1 wrote it: a row per event, no ``run`` column."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        for statement in _SCHEMA:
            if statement.startswith("CREATE TABLE events"):
                statement = statement.replace(" run BLOB,", "")
            conn.execute(statement)
        conn.execute("INSERT INTO meta VALUES ('epoch', 'e1e1e1')")
        conn.execute(
            "INSERT INTO streams (key, session_id, owner, state, first_seq, last_seq,"
            " request_ids, announced, expires_at) VALUES (?, 's1', 'a', 'live', 1, 5, '[]', 0, ?)",
            (KEY, now + 600),
        )
        for seq in range(1, 6):
            conn.execute(
                "INSERT INTO events (key, seq, mark, payload) VALUES (?, ?, ?, ?)",
                (KEY, seq, seq % 3, f'{{"old":{seq}}}'.encode()),
            )
        conn.execute("PRAGMA user_version = 1")


async def test_a_version_1_file_is_read_extended_and_cut_as_version_2(tmp_path: Path) -> None:
    path, now = tmp_path / "store.db", time.time()
    _version_1_file(path, now)
    old = [Entry(seq, f'{{"old":{seq}}}'.encode(), seq % 3) for seq in range(1, 6)]
    new = [Entry(seq, f'{{"new":{seq}}}'.encode(), seq % 3) for seq in range(6, 40)]
    store = await opened(path, StoreLimits(max_events=30))
    try:
        assert store.epoch == "e1e1e1"
        assert await store.read(KEY, 0, now) == old
        record = StreamRecord(KEY, "s1", "a", first_seq=1, last_seq=5)
        await store.commit(Batch([record], {KEY: new}), now)  # 39 events: the first 9 go
        assert await store.read(KEY, 9, now) == (old + new)[9:]
        assert await store.read(KEY, 20, now, limit=4) == new[15:19]  # seqs 21 to 24
        later = new[15:]
        assert await store.summary(KEY, 20, now) == Unacknowledged(*expected_summary(later, 20))
        assert stored_events(path, KEY) == 30
    finally:
        await store.close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2
    store = SqliteStore(path, StoreLimits())  # and again, as version 2
    await store.open()
    try:
        assert await store.read(KEY, 9, now) == (old + new)[9:]
    finally:
        await store.close()
