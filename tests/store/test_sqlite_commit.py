"""How the SQLite store applies a batch (proxy/store/sqlite_commit.py): the statements a
call's commit costs, a dropped stream's events deleted after its commit. That it applies
every batch as the memory store does is in test_random_batches.py."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.errors import ResumeError
from proxy.store import sqlite_commit, sqlite_fresh
from proxy.store.base import Batch, Entry, StreamRecord, Takeover
from proxy.store.sqlite import SqliteStore
from proxy.store.sqlite_commit import DROP_AT_ONCE
from tests.store.sqlite_support import entries, opened, stored_events, stored_streams

KEY = "e0e0e0.1"
DEADLINE_S = 30.0


async def tidied(store: SqliteStore) -> None:
    """Wait (a condition, with a generous deadline) until no dropped stream's events are left."""
    assert store._db is not None
    async with asyncio.timeout(DEADLINE_S):
        while store._db.tombstones or store._tidy is not None:
            await asyncio.sleep(0.01)


def call_batch(key: str, fence: str = "f") -> Batch:
    """A call's commit: a new record, its answer, its ending."""
    return Batch(
        streams=[StreamRecord(key, "s1", "a")],
        appends={key: entries(1, 1)},
        completed={key: time.time() + 60},
        fence=fence,
        owner="a",
    )


async def verbs_of(store: SqliteStore, batch: Batch) -> list[str]:
    """The first words of each statement ``batch``'s commit ran."""
    assert store._db is not None
    statements: list[str] = []
    store._db.conn.set_trace_callback(statements.append)
    try:
        assert await store.commit(batch, time.time()) == []
    finally:
        store._db.conn.set_trace_callback(None)
    return [" ".join(s.split()[:3]) for s in statements]


async def test_a_calls_commit_is_two_writes_and_at_most_one_read(tmp_path: Path) -> None:
    """A new record, its answer and its ending: BEGIN, the event, the record, COMMIT. The
    session's first commit reads once whether its epoch has any row (a session made before
    a restart); a later call's new key (numbered above every one written since) is known
    to have none: no SELECT (the store is the file's one writer)."""
    store = await opened(tmp_path / "s.db")
    try:
        first = await verbs_of(store, call_batch(KEY))
        assert first == [
            "BEGIN IMMEDIATE",
            "SELECT EXISTS (SELECT",
            "INSERT OR REPLACE",
            "INSERT OR REPLACE",
            "COMMIT",
        ]
        second = await verbs_of(store, call_batch("e0e0e0.2"))
        assert second == ["BEGIN IMMEDIATE", "INSERT OR REPLACE", "INSERT OR REPLACE", "COMMIT"]
        for key in (KEY, "e0e0e0.2"):
            record = await store.get_stream(key, time.time())
            assert record is not None and record.state == "completed" and record.fence == "f"
            assert await store.read(key, 0, time.time()) == entries(1, 1)
    finally:
        await store.close()


async def test_a_key_named_before_or_of_a_session_with_rows_is_read(tmp_path: Path) -> None:
    """The load is skipped only when it would find nothing: a key numbered at or below
    one written since (made again) is read, and so is every key of a session that had
    rows when the store opened (made before a restart)."""
    store = await opened(tmp_path / "s.db")
    try:
        await store.commit(call_batch("e0e0e0.5"), time.time())
        assert "SELECT key, session_id," in await verbs_of(store, call_batch("e0e0e0.3"))
        again = Batch(appends={"e0e0e0.5": entries(2, 3)}, fence="f", owner="a")
        assert "SELECT key, session_id," in await verbs_of(store, again)
        assert await store.read("e0e0e0.5", 0, time.time()) == entries(1, 3)
    finally:
        await store.close()
    store = await opened(tmp_path / "s.db")  # (a restart: the session has rows)
    try:
        verbs = await verbs_of(store, call_batch("e0e0e0.6"))
        assert verbs[1:3] == ["SELECT EXISTS (SELECT", "SELECT key, session_id,"]
        verbs = await verbs_of(store, call_batch("e0e0e0.7"))
        assert verbs[1] == "SELECT key, session_id,"  # (known to have rows: not asked again)
        other = await verbs_of(store, call_batch("f1f1f1.1"))
        assert other[1] == "SELECT EXISTS (SELECT"  # (a session of its own: no row)
    finally:
        await store.close()


async def test_a_takeovers_new_key_is_read_by_the_next_commit(tmp_path: Path) -> None:
    """A batch with takeovers reads every key, and a new key it writes is not taken for
    absent afterwards: the next commit reads it and continues its log."""
    store = await opened(tmp_path / "s.db")
    try:
        await store.commit(call_batch(KEY), time.time())
        live = Batch(
            streams=[StreamRecord("e0e0e0.2", "s1", "a")],
            appends={"e0e0e0.2": entries(1, 1)},
            fence="f",
            owner="a",
        )
        await store.commit(live, time.time())
        taken = Batch(
            streams=[StreamRecord("e0e0e0.9", "s1", "b")],
            appends={"e0e0e0.2": entries(2, 2), "e0e0e0.9": entries(1, 2)},
            fence="g",
            owner="b",
            takeovers={"e0e0e0.2": Takeover("f", 1)},
        )
        assert await store.commit(taken, time.time()) == []
        more = Batch(appends={"e0e0e0.9": entries(3, 3)}, fence="g", owner="b")
        assert "SELECT key, session_id," in await verbs_of(store, more)
        assert await store.read("e0e0e0.9", 0, time.time()) == entries(1, 3)
        record = await store.get_stream("e0e0e0.9", time.time())
        assert record is not None and (record.first_seq, record.last_seq) == (1, 3)
    finally:
        await store.close()


def held_tidy(store: SqliteStore) -> asyncio.Event:
    """Hold the store's tidy until the returned event is set (no timing: a loaded
    machine once ran the 20 ms tidy before a "still stored" assertion)."""
    go = asyncio.Event()

    async def pause() -> None:
        await go.wait()

    store.tidy_pause = pause
    return go


async def test_a_dropped_streams_events_are_deleted_after_its_commit(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = await opened(path)
    go = held_tidy(store)
    try:
        now = time.time()
        first = Batch(streams=[StreamRecord(KEY, "s1", "a")], appends={KEY: entries(1, 5000)})
        await store.commit(first, now)
        await store.commit(Batch(dropped=[KEY]), now)
        # Gone for every read at once; its events are still stored until the tidy runs.
        assert await store.get_stream(KEY, now) is None
        try:
            await store.read(KEY, 0, now)
            raise AssertionError("a dropped stream was read")
        except ResumeError as exc:
            assert exc.reason == "unknown_stream"
        assert stored_events(path, KEY) == 5000
        assert store._tidy is not None  # started, and held
        go.set()
        await tidied(store)
        assert stored_events(path, KEY) == 0
        assert stored_streams(path, KEY) == 0
    finally:
        await store.close()


async def test_a_key_made_again_before_the_tidy_keeps_its_new_log(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = await opened(path)
    go = held_tidy(store)
    try:
        now = time.time()
        await store.commit(Batch([StreamRecord(KEY, "s1", "a")], {KEY: entries(1, 3000)}), now)
        await store.commit(Batch(dropped=[KEY]), now)
        await store.commit(Batch([StreamRecord(KEY, "s2", "a")], {KEY: entries(1, 2)}), now)
        assert await store.read(KEY, 0, now) == entries(1, 2)
        go.set()
        await tidied(store)
        assert await store.read(KEY, 0, now) == entries(1, 2)
        assert stored_events(path, KEY) == 2
    finally:
        await store.close()


async def test_a_drop_left_by_a_closed_store_is_an_expired_record(tmp_path: Path) -> None:
    """The store closes before its tidy: the tombstone is absent to every read, the key
    made again starts without the old log, and a sweep deletes what is left."""
    path = tmp_path / "s.db"
    store = await opened(path)
    now = time.time()
    await store.commit(Batch([StreamRecord(KEY, "s1", "a")], {KEY: entries(1, 100)}), now)
    await store.commit(Batch([StreamRecord("e0e0e0.2", "s1", "a")], {}, dropped=[KEY]), now)
    await store.close()
    store = await opened(path)
    try:
        assert await store.get_stream(KEY, now) is None
        assert await store.sweep(now) >= 1
        assert stored_events(path, KEY) == 0
        await store.commit(Batch(appends={KEY: entries(101, 102)}), now)
        assert await store.read(KEY, 100, now) == entries(101, 102)
    finally:
        await store.close()


async def test_a_small_dropped_stream_goes_in_its_commit(tmp_path: Path) -> None:
    """A call's stream evicted by the next call's commit: row and events deleted in that
    commit (pages it writes anyway), no tombstone and no later transaction for it; one
    of DROP_AT_ONCE + 1 events still leaves a tombstone for the tidy."""
    path = tmp_path / "s.db"
    store = await opened(path)
    try:
        now = time.time()
        small, large = "e0e0e0.7", "e0e0e0.8"
        await store.commit(Batch([StreamRecord(small, "s1", "a")], {small: entries(1, 3)}), now)
        await store.commit(
            Batch([StreamRecord(large, "s1", "a")], {large: entries(1, DROP_AT_ONCE + 1)}), now
        )
        assert store._db is not None
        await store.commit(Batch([StreamRecord(KEY, "s1", "a")], dropped=[small]), now)
        assert stored_streams(path, small) == 0 and stored_events(path, small) == 0
        assert store._db.tombstones == [] and store._tidy is None
        await store.commit(Batch(dropped=[large]), now)
        assert store._db.tombstones == [large] and stored_streams(path, large) == 1
        await tidied(store)
        assert stored_streams(path, large) == 0 and stored_events(path, large) == 0
    finally:
        await store.close()


async def test_payloads_bind_through_the_registered_bytes_adapter_unchanged(
    tmp_path: Path,
) -> None:
    """``bytes`` is registered as its own adapter (a bytes payload is otherwise looked up
    the slow way on every bind); what is stored is the same bytes, whatever they hold."""
    import sqlite3

    assert sqlite3.adapters[(bytes, sqlite3.PrepareProtocol)] is bytes.__bytes__
    store = await opened(tmp_path / "s.db")
    try:
        payloads = [b"", b"\x00\xff\xfe binary", '{"é":"ü"}'.encode(), b"x" * 70_000]
        batch = Batch(
            streams=[StreamRecord(KEY, "s1", "a")],
            appends={KEY: [Entry(n, p) for n, p in enumerate(payloads, 1)]},
        )
        assert await store.commit(batch, time.time()) == []
        got = await store.read(KEY, 0, time.time())
        assert [e.payload for e in got] == payloads
        assert all(type(e.payload) is bytes for e in got)
    finally:
        await store.close()


def test_a_records_copy_keeps_every_field_but_its_expiry_and_token() -> None:
    """``_copy`` names the fields one by one: a field added to StreamRecord and not to
    it fails here."""
    import dataclasses

    from proxy.store.sqlite_commit import _copy

    values: dict[str, object] = {}
    for n, f in enumerate(dataclasses.fields(StreamRecord)):
        values[f.name] = [n] if f.name == "request_ids" else n if f.type in ("int",) else str(n)
    values["announced"], values["expires_at"] = True, 5.0
    given = StreamRecord(**values)  # type: ignore[arg-type]
    copied = _copy(given, 9.0, "tok")
    assert copied == dataclasses.replace(given, expires_at=9.0, fence="tok")
    assert given.expires_at == 5.0 and given.fence != "tok"  # the batch's own is unchanged


@given(
    st.lists(
        st.one_of(st.integers(), st.text(), st.booleans(), st.none(), st.floats(allow_nan=False)),
        max_size=3,
    )
)
def test_request_ids_are_written_as_json_dumps_writes_them(ids: list[object]) -> None:
    """The one-id fast path (a call's) writes the very text ``json.dumps`` would."""
    import json

    from proxy.store.sqlite_commit import ids_json

    assert ids_json(ids) == json.dumps(ids)
    assert ids_json(['é"\\\n\u2028']) == json.dumps(['é"\\\n\u2028'])


def test_fresh_epochs_are_bounded_and_a_forgotten_one_is_read_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The oldest epoch goes when the bound is reached; asked again, it is looked up
    again (here: it has rows, so its keys are read from then on)."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE streams (key TEXT PRIMARY KEY)")
    conn.execute("CREATE TABLE events (key TEXT, seq INTEGER, PRIMARY KEY (key, seq))")
    cursor = conn.cursor()
    fresh = sqlite_fresh.FreshEpochs()
    monkeypatch.setattr(sqlite_fresh, "FRESH_EPOCHS", 3)
    assert fresh.absent(cursor, "a.1")
    conn.execute("INSERT INTO streams VALUES ('a.1')")  # (what that commit wrote)
    assert all(fresh.absent(cursor, f"{e}.1") for e in "bcd")  # (a goes)
    assert not fresh.absent(cursor, "a.2")  # looked up again: it has rows
    assert not fresh.absent(cursor, "a.3")  # and is read from then on
    assert fresh.absent(cursor, "d.2") and not fresh.absent(cursor, "d.2")


def _rows(path: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        streams = conn.execute("SELECT * FROM streams ORDER BY key").fetchall()
        events = conn.execute("SELECT key, seq, mark, payload FROM events ORDER BY key, seq")
        return streams, events.fetchall()


@pytest.mark.parametrize(
    ("ended", "ids", "principal", "server", "announced", "seq"),
    [
        (True, [], None, "default", False, 1),
        (False, [], None, "default", False, 1),
        (True, [7], "alice", None, True, 1),
        (False, ["r-1", 2], "", "other", False, 1),
        (True, [], None, "default", False, 2),  # not a call's answer: worked out
    ],
)
async def test_a_calls_batch_is_written_as_the_worked_out_commit_writes_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ended: bool,
    ids: list[object],
    principal: str | None,
    server: str | None,
    announced: bool,
    seq: int,
) -> None:
    """A call's batch on a key known to have no row is written without working the keys
    out (``sqlite_commit._a_call``): the same rows as the worked-out commit (a store
    that reads every key) writes, for the session's first call and a later one."""
    written: list[bool] = []

    def spied(*args: Any) -> bool:
        written.append(a_call(*args))
        return written[-1]

    a_call = sqlite_commit._a_call
    monkeypatch.setattr(sqlite_commit, "_a_call", spied)
    fast, slow = await opened(tmp_path / "fast.db"), await opened(tmp_path / "slow.db")
    assert slow._db is not None
    slow._db.fresh = None  # type: ignore[assignment]  # every key read and worked out
    now = time.time()
    try:
        for number in (1, 2):
            key = f"e0e0e0.{number}"

            def batch(key: str = key) -> Batch:
                record = StreamRecord(key, "s1", "a", request_ids=list(ids), server=server)
                record.principal, record.announced = principal, announced
                return Batch(
                    streams=[record],
                    appends={key: [Entry(seq, b'{"id":1}', 2)]},
                    completed={key: now + 60} if ended else {},
                    fence="f",
                    owner="b",  # (a record names its own owner)
                )

            assert await fast.commit(batch(), now) == []
            assert await slow.commit(batch(), now) == []
    finally:
        await fast.close()
        await slow.close()
    assert _rows(tmp_path / "fast.db") == _rows(tmp_path / "slow.db")
    streams, events = _rows(tmp_path / "fast.db")
    assert len(streams) == 2 and len(events) == 2
    assert written == ([True, True] if seq == 1 else [False, False])
