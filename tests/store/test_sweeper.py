"""The store's sweep has an owner (proxy/store/sweeper.py): the running proxy's context
sweeps from the store's open to its close, every ``store.sweep_seconds``; each sweep of a
SQLite file is a series of bounded transactions (proxy/store/sqlite_db.py ``sweep_step``).
Real SQLite files; the sweeper's clock is the test's (no time is waited for an expiry)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from proxy.config import config_from_mapping
from proxy.context import ProxyContext
from proxy.registry import Registry
from proxy.store import sqlite_runs
from proxy.store.base import Batch, StreamRecord
from proxy.store.memory import MemoryStore
from proxy.store.sqlite_db import SWEEP_EVENTS
from proxy.store.sweeper import Sweeper
from tests.store.sqlite_support import (
    DONE,
    LIVE_KEY,
    entries,
    fill,
    filled,
    stored_events,
    stored_streams,
)

DEADLINE_S = 30.0


def rows(path: Path, table: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


async def test_the_running_proxy_sweeps_the_sqlite_file_from_open_to_close(
    tmp_path: Path,
) -> None:
    """The bug: nothing in the running proxy called Store.sweep, so an expired stream
    (and its events) and an expired task stayed in the file for ever."""
    path = tmp_path / "s.db"
    config = config_from_mapping(
        {
            "store": {"kind": "sqlite", "path": str(path), "sweep_seconds": 0.02},
            "streams": {"token_secret": "a-test-secret-0123456789"},
        }
    )
    context = ProxyContext(config)
    registry = Registry(context)
    await context.open(registry.serve_forwarded)
    try:
        await fill(context.store, time.time() - 20)  # expired 10 s ago
        assert stored_events(path, DONE) == 3 and rows(path, "tasks") == 1
        async with asyncio.timeout(DEADLINE_S):  # a condition, with a generous deadline
            while stored_streams(path, DONE) or rows(path, "tasks"):
                await asyncio.sleep(0.01)
        assert stored_events(path, DONE) == 0
        assert stored_streams(path, LIVE_KEY) == 1 and stored_events(path, LIVE_KEY) == 2
    finally:
        await registry.shutdown()
        await context.close()
    assert not context.sweeper.running


async def test_the_memory_store_is_swept_too() -> None:
    """The memory store deletes an expired task only when it is read again: the sweep
    deletes the ones nobody asks for."""
    context = ProxyContext(config_from_mapping({"store": {"sweep_seconds": 0.02}}))
    registry = Registry(context)
    await context.open(registry.serve_forwarded)
    try:
        store = context.store
        assert isinstance(store, MemoryStore)
        await store.put_task("t1", {"status": "working"}, time.time() - 1)
        swept = context.sweeper.sweeps
        await asyncio.wait_for(context.sweeper.ended(swept + 1), DEADLINE_S)
        assert store._tasks == {}
    finally:
        await registry.shutdown()
        await context.close()


async def test_a_sweep_deletes_what_expired_by_its_clock_and_nothing_else(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    clock = Clock()
    async with filled(path, clock.now, events=SWEEP_EVENTS * 2 + 5) as store:
        sweeper = Sweeper(store, 3600.0, clock)
        clock.now += 5  # nothing expired yet
        assert await sweeper.sweep() == 0
        assert stored_events(path, DONE) == SWEEP_EVENTS * 2 + 5 and rows(path, "tasks") == 1
        clock.now += 10
        assert await sweeper.sweep() == 1  # the completed stream, in three transactions
        assert stored_streams(path, DONE) == 0 and stored_events(path, DONE) == 0
        assert rows(path, "tasks") == 0
        assert stored_streams(path, LIVE_KEY) == 1 and stored_events(path, LIVE_KEY) == 2
        assert (sweeper.sweeps, sweeper.swept) == (2, 1)


async def test_a_sweep_step_is_bounded_and_the_record_goes_with_its_last_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One transaction deletes at most SWEEP_EVENTS rows of events: a long expired log
    takes several (the loop turns between them); meanwhile its record is absent to
    reads. (A row per event here: a run holds events up to RUN_BYTES.)"""
    monkeypatch.setattr(sqlite_runs, "RUN_BYTES", 0)
    path, now = tmp_path / "s.db", time.time()
    later = now + 20
    async with filled(path, now, events=SWEEP_EVENTS + 10) as store:
        assert store._db is not None
        assert store._db.sweep_step(later) == ([], 0, True)
        assert stored_events(path, DONE) == 10 and stored_streams(path, DONE) == 1
        assert await store.get_stream(DONE, later) is None
        assert store._db.sweep_step(later) == ([DONE], 0, False)
        assert stored_events(path, DONE) == 0 and stored_streams(path, DONE) == 0
        assert rows(path, "tasks") == 0


async def test_a_key_made_again_before_the_sweep_keeps_its_new_log(tmp_path: Path) -> None:
    path, now = tmp_path / "s.db", time.time()
    later = now + 20
    async with filled(path, now, events=SWEEP_EVENTS + 10) as store:
        assert store._db is not None
        store._db.sweep_step(later)  # part of its old events deleted
        await store.commit(Batch([StreamRecord(DONE, "s2", "a")], {DONE: entries(1, 2)}), later)
        await Sweeper(store, clock=lambda: later).sweep()
        assert await store.read(DONE, 0, later) == entries(1, 2)
        assert stored_events(path, DONE) == 2


async def test_the_periodic_task_sweeps_until_stopped_and_survives_a_failing_store(
    tmp_path: Path,
) -> None:
    path, clock = tmp_path / "s.db", Clock()
    async with filled(path, clock.now) as store:
        sweeper = Sweeper(store, 0.01, clock)
        clock.now += 20
        sweeper.start()
        try:
            await asyncio.wait_for(sweeper.ended(1), DEADLINE_S)
            assert stored_streams(path, DONE) == 0
            await store.close()  # every sweep from now on fails: logged, tried again
            ended = sweeper.sweeps
            await asyncio.wait_for(sweeper.ended(ended + 2), DEADLINE_S)
            assert sweeper.running
        finally:
            await sweeper.stop()
    assert not sweeper.running
