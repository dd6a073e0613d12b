"""What only the SQLite store has: a real file that outlives its process (SIGKILL
included), its ``synchronous`` setting, files it must refuse, a reopen that keeps every
kind of record. The contract itself is in test_contract.py."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path

import pytest

from proxy.core.stream import Mark, Unacknowledged
from proxy.store import sqlite_db
from proxy.store.base import (
    COMPLETED,
    Batch,
    Entry,
    SessionRecord,
    StoreError,
    StoreLimits,
    StreamRecord,
)
from proxy.store.sqlite import SqliteStore
from proxy.store.sqlite_db import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[2]
KEY = "e0e0e0.1"
DEADLINE_S = 60.0  # generous: a child on a busy machine may be slow to start

# Commits ``batches`` batches of ``size`` entries to each of three logs and prints a line
# after each commit has returned; then waits to be killed.
WRITER = r"""
import asyncio, sys, time
from proxy.store.base import Batch, Entry, StoreLimits, StreamRecord
from proxy.store import sqlite_db
from proxy.store.sqlite import SqliteStore

KEYS = ["ab12.1", "ab12.2", "ab12.3"]

async def main(path, batches, size):
    store = SqliteStore(path, StoreLimits())
    await store.open()
    print("epoch", store.epoch, flush=True)
    for n in range(batches):
        first = n * size + 1
        appends = {
            k: [Entry(s, f"{k}:{s}".encode(), s % 4) for s in range(first, first + size)]
            for k in KEYS
        }
        streams = [StreamRecord(k, "s1", "a") for k in KEYS] if n == 0 else []
        await store.commit(Batch(streams=streams, appends=appends), time.time())
        print("committed", n + 1, flush=True)
    print("done", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""
WRITER_KEYS = ["ab12.1", "ab12.2", "ab12.3"]


def entries(first: int, last: int, mark: int = 0) -> list[Entry]:
    return [Entry(seq, f'{{"n":{seq}}}'.encode(), mark) for seq in range(first, last + 1)]


async def opened_store(path: Path, limits: StoreLimits | None = None, **kw: str) -> SqliteStore:
    store = SqliteStore(path, limits or StoreLimits(), **kw)
    await store.open()
    return store


async def run_writer_until_killed(
    tmp_path: Path, path: Path, batches: int, size: int, rng: random.Random
) -> list[str]:
    """Start the writer, SIGKILL it after a random number of commits, give all it printed."""
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    kill_after = rng.randrange(1, batches)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, str(script), str(path), str(batches), str(size)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    printed = b""
    try:
        while printed.count(b"committed") < kill_after:
            line = await asyncio.wait_for(proc.stdout.readline(), DEADLINE_S)
            if not line:
                error = await proc.stderr.read()
                raise AssertionError(f"the writer ended early: {error.decode()}")
            printed += line
        await asyncio.sleep(rng.uniform(0, 0.01))  # lands anywhere in a later commit
        proc.send_signal(signal.SIGKILL)
        printed += await asyncio.wait_for(proc.stdout.read(), DEADLINE_S)
        assert await asyncio.wait_for(proc.wait(), DEADLINE_S) == -signal.SIGKILL
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return printed.decode().split("\n")[:-1]  # whole lines only


async def test_every_commit_that_returned_survives_a_sigkill_whole(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    path = tmp_path / "store.db"
    size = rng.choice([1, 20, 200])  # at most 80,000 entries: none trimmed
    lines = await run_writer_until_killed(tmp_path, path, 400, size, rng)
    epoch = lines[0].split()[1]
    returned = max(int(line.split()[1]) for line in lines if line.startswith("committed"))

    store = await opened_store(path)
    try:
        assert store.epoch == epoch
        now = time.time()
        stored = set()
        for key in WRITER_KEYS:
            record = await store.get_stream(key, now)
            assert record is not None and record.first_seq == 1
            assert record.last_seq % size == 0, "a batch was stored in part"
            stored.add(record.last_seq // size)
            got = await store.read(key, 0, now)
            assert got == [
                Entry(s, f"{key}:{s}".encode(), s % 4) for s in range(1, record.last_seq + 1)
            ]
        assert len(stored) == 1, f"the logs disagree on how many batches went in: {stored}"
        # The commit after the last printed line may have gone in too, never more.
        assert stored.pop() in (returned, returned + 1)
    finally:
        await store.close()
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


async def test_synchronous_full_is_applied_and_commits_durably(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    now = time.time()
    store = await opened_store(path, synchronous="full")
    try:
        pragma = await store._call(lambda db: db.conn.execute("PRAGMA synchronous").fetchone())
        assert pragma == (2,)  # FULL
        await store.commit(
            Batch(streams=[StreamRecord(KEY, "s1")], appends={KEY: entries(1, 3)}), now
        )
    finally:
        await store.close()
    again = await opened_store(path)
    try:
        pragma = await again._call(lambda db: db.conn.execute("PRAGMA synchronous").fetchone())
        assert pragma == (1,)  # NORMAL, the default
        assert await again.read(KEY, 0, now) == entries(1, 3)
    finally:
        await again.close()


def test_an_unknown_synchronous_setting_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="one of normal, full, not 'off'"):
        SqliteStore(tmp_path / "store.db", StoreLimits(), synchronous="off")
    assert not (tmp_path / "store.db").exists()


async def test_a_file_that_is_not_a_database_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    text = b"these are someone's notes, not an SQLite database\n" * 100
    path.write_bytes(text)
    store = SqliteStore(path, StoreLimits())
    with pytest.raises(StoreError) as caught:
        await store.open()
    assert str(path) in str(caught.value) and "not a database" in str(caught.value)
    assert path.read_bytes() == text
    await store.close()


async def test_a_missing_directory_is_refused_and_not_made(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "store.db"
    store = SqliteStore(path, StoreLimits())
    with pytest.raises(StoreError) as caught:
        await store.open()
    assert str(path) in str(caught.value) and "does not exist" in str(caught.value)
    assert not path.parent.exists()
    await store.close()


async def test_a_file_of_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    await (await opened_store(path)).close()
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    store = SqliteStore(path, StoreLimits())
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}") as caught:
        await store.open()
    assert str(path) in str(caught.value)
    await store.close()


async def test_a_reopened_store_keeps_records_sessions_leases_and_tasks(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    now = time.time()
    marked = [Entry(1, b"{}", int(Mark.REQUEST)), Entry(2, b"\x00\xff"), Entry(3, b"", 2)]
    done = "e0e0e0.2"
    store = await opened_store(path)
    announced = StreamRecord(KEY, "s1", "a", request_ids=[7, "x"], announced=True)
    await store.commit(Batch(streams=[announced], appends={KEY: marked}), now)
    batch = Batch([StreamRecord(done, "s1", "a")], {done: entries(1, 2)}, {done: now + 60})
    await store.commit(batch, now)
    await store.put_session(SessionRecord("s1", "e0e0e0", "a", "2025-11-25", now + 60))
    assert await store.acquire_lease("s1", "a", 60, now)
    await store.put_task("t1", {"status": "working", "nested": {"a": [1, 2]}}, now + 60)
    epoch = store.epoch
    await store.close()

    again = await opened_store(path)
    try:
        assert again.epoch == epoch
        record = await again.get_stream(KEY, now)
        assert record == StreamRecord(
            KEY, "s1", "a", "live", 1, 3, [7, "x"], True, pytest.approx(now + 600)
        )
        assert await again.read(KEY, 0, now) == marked
        assert await again.summary(KEY, 0, now) == Unacknowledged(3, 1, 1)
        finished = await again.get_stream(done, now)
        assert finished is not None and finished.state == COMPLETED
        assert [r.key for r in await again.live_streams("a", now)] == [KEY]
        session = await again.get_session("s1", now)
        assert session == SessionRecord("s1", "e0e0e0", "a", "2025-11-25", pytest.approx(now + 60))
        assert await again.lease_owner("s1", now) == "a"
        assert not await again.acquire_lease("s1", "b", 60, now)
        assert await again.get_task("t1", now) == {"status": "working", "nested": {"a": [1, 2]}}
    finally:
        await again.close()


async def test_a_refused_commit_changes_nothing(tmp_path: Path) -> None:
    """One bad entry (a payload SQLite cannot bind) refuses the whole batch, every key."""
    store = await opened_store(tmp_path / "store.db")
    now = time.time()
    try:
        bad = [Entry(1, object())]  # type: ignore[arg-type]
        batch = Batch([StreamRecord(KEY, "s1")], {KEY: entries(1, 3), "e0e0e0.2": bad})
        with pytest.raises(StoreError, match=str(tmp_path)):
            await store.commit(batch, now)
        assert await store.get_stream(KEY, now) is None
        assert await store.get_stream("e0e0e0.2", now) is None
        await store.commit(Batch([StreamRecord(KEY, "s1")], {KEY: entries(1, 2)}), now)
        assert await store.read(KEY, 0, now) == entries(1, 2)
    finally:
        await store.close()


async def test_a_key_put_again_after_its_record_expired_starts_without_a_log(
    tmp_path: Path,
) -> None:
    store = await opened_store(tmp_path / "store.db", StoreLimits(live_ttl=10))
    try:
        await store.commit(Batch([StreamRecord(KEY, "s1")], {KEY: entries(1, 3)}), 1000.0)
        await store.commit(Batch([StreamRecord(KEY, "s2")]), 2000.0)
        record = await store.get_stream(KEY, 2000.0)
        assert record is not None and (record.session_id, record.last_seq) == ("s2", 0)
        assert await store.read(KEY, 0, 2000.0) == []
    finally:
        await store.close()


async def test_close_ends_the_thread_and_a_closed_store_refuses_calls(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    store = await opened_store(tmp_path / "store.db")
    await store.put_task("t1", {}, time.time() + 60)
    started = [t for t in threading.enumerate() if t not in before]
    assert [t.name.startswith("sqlite-store") for t in started] == [True]
    await store.close()
    assert not started[0].is_alive()
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.get_stream(KEY, time.time())
    with pytest.raises(StoreError, match="closed"):
        await store.commit(Batch(appends={KEY: entries(1, 1)}), time.time())


def page_size(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])


async def test_a_new_file_has_8_kb_pages_and_a_16_kb_file_keeps_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 8 KB pages: a call's commit writes three whole pages to the WAL (sqlite_db.PAGE_SIZE).
    # A file written before, with 16 KB pages, opens as it is and replays what it holds.
    new = tmp_path / "new.db"
    store = await opened_store(new)
    await store.close()
    assert page_size(new) == 8_192
    old = tmp_path / "old.db"
    monkeypatch.setattr(sqlite_db, "PAGE_SIZE", 16_384)  # what the proxy made until now
    store = await opened_store(old)
    now = time.time()
    await store.commit(Batch([StreamRecord(KEY, "s1", "a")], {KEY: entries(1, 3)}), now)
    await store.close()
    monkeypatch.undo()
    again = await opened_store(old)
    try:
        assert await again.read(KEY, 0, now) == entries(1, 3)
        await again.commit(Batch(appends={KEY: [Entry(4, b"x" * 12_000)]}), now)
        assert [e.seq for e in await again.read(KEY, 2, now)] == [3, 4]
    finally:
        await again.close()
    assert page_size(old) == 16_384
