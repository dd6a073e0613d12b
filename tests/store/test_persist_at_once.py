"""The group commit with a store that commits at once (proxy/store/persist.py with SQLite,
``synchronous: normal``): the batch is stored in the flush itself, at the end of the loop
turn that gathered it; fencing and retries keep their rules."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from proxy.core.journal import Journal
from proxy.store.base import Batch, Entry, StoreError, StoreLimits, StreamRecord
from proxy.store.fencing import Fence
from proxy.store.sqlite import SqliteStore
from tests.store.persist_support import EPOCH, KEY, NotingSession, persisting
from tests.store.sqlite_support import opened


async def test_sqlite_normal_commits_at_once_and_full_does_not(tmp_path: Path) -> None:
    normal = await opened(tmp_path / "a.db")
    full = await opened(tmp_path / "b.db", synchronous="full")
    try:
        assert normal.commits_at_once and not full.commits_at_once
        batch = Batch([StreamRecord(KEY, "s1")], {KEY: [Entry(1, b"{}")]})
        assert normal.commit_now(batch, time.time()) == []
        assert [e.seq for e in await normal.read(KEY, 0, time.time())] == [1]
    finally:
        await normal.close()
        await full.close()


async def test_a_batch_is_stored_by_the_end_of_the_turn_after_it_was_gathered(
    tmp_path: Path,
) -> None:
    store = await opened(tmp_path / "store.db")
    async with persisting(store) as persister:
        journal = Journal(opened=[1], appends=[(1, 1, b'{"a":1}', 0)])
        persister.note(NotingSession(), journal, "default")  # type: ignore[arg-type]
        ticket = persister.ticket
        assert persister.committed < ticket
        await asyncio.sleep(0)  # one loop turn: the flush runs, and with it the commit
        assert persister.committed >= ticket
        assert [e.payload for e in await store.read(KEY, 0, time.time())] == [b'{"a":1}']


async def test_a_refused_write_at_once_makes_the_token_stale_before_its_waiters_go_on(
    tmp_path: Path,
) -> None:
    store = await opened(tmp_path / "store.db")
    fence = Fence("a")
    stale = fence.token
    lost: list[str] = []
    async with persisting(store, fence) as persister:
        fence.on_lost(lost.append)  # after the persister's own (as it was)
        # Another replica ended stream 1 while this one was paused: it holds that one's token.
        taken = Batch([StreamRecord(KEY, "s1", "a")], {KEY: [Entry(1, b"{}")]}, fence="reaper")
        await store.commit(taken, time.time())
        late = Journal(appends=[(1, 2, b'{"late":1}', 0)])
        persister.note(NotingSession(), late, "default")  # type: ignore[arg-type]
        ticket = persister.ticket
        async with asyncio.timeout(10):
            await persister.wait(ticket)
        assert lost == [stale] and fence.token != stale  # told before the wait returned
        assert [e.seq for e in await store.read(KEY, 0, time.time())] == [1]
        assert persister.committed >= ticket
        # New writes go under the new token: a new stream is this replica's again.
        again = Journal(opened=[2], appends=[(2, 1, b"{}", 0)])
        persister.note(NotingSession(), again, "default")  # type: ignore[arg-type]
        async with asyncio.timeout(10):
            await persister.wait(persister.ticket)
        record = await store.get_stream(f"{EPOCH}.2", time.time())
        assert record is not None and record.fence == fence.token


class FailingOnce(SqliteStore):
    """Its first commit at once fails, as a full disk or a locked file would."""

    failed = False

    def commit_now(self, batch: Batch, now: float) -> list[str]:
        if not self.failed:
            self.failed = True
            raise StoreError("disk full (once)")
        return super().commit_now(batch, now)


async def test_a_commit_at_once_that_fails_is_retried_until_it_lands(tmp_path: Path) -> None:
    store = FailingOnce(tmp_path / "store.db", StoreLimits())
    await store.open()
    async with persisting(store) as persister:
        journal = Journal(opened=[1], appends=[(1, 1, b"{}", 0)])
        persister.note(NotingSession(), journal, "default")  # type: ignore[arg-type]
        ticket = persister.ticket
        await asyncio.sleep(0)
        assert persister.last_error == "disk full (once)"
        async with asyncio.timeout(10):
            await persister.wait(ticket)
        assert persister.last_error is None
        assert [e.seq for e in await store.read(KEY, 0, time.time())] == [1]


def burst(first: int, n: int) -> Journal:
    return Journal(appends=[(1, seq, b'{"n":1}', 0) for seq in range(first, first + n)])


class Other(NotingSession):
    session_id, epoch = "s2", "e2e2e2"


async def test_a_bursts_batch_goes_at_the_end_of_the_turn_that_noted_it(tmp_path: Path) -> None:
    """No waiting for more turns: a turn's lines of a burst are a few runs of rows, and
    the client reads them while the next turn's are read (bench/README.md, SQLite runs)."""
    store = await opened(tmp_path / "store.db")
    async with persisting(store) as persister:
        session = NotingSession()
        persister.note(session, Journal(opened=[1], appends=[(1, 1, b"{}", 0)]), "default")  # type: ignore[arg-type]
        await asyncio.sleep(0)
        assert persister.commits == 1
        persister.note(session, burst(2, 64), "default")  # type: ignore[arg-type]
        ticket = persister.ticket
        await asyncio.sleep(0)
        assert persister.committed >= ticket and persister.commits == 2
        # A burst turn beside another session's answer: the end of that turn commits the
        # answer (in a slice of its own), the next one the burst's part.
        persister.note(session, burst(66, 64), "default")  # type: ignore[arg-type]
        persister.note(Other(), Journal(appends=[(1, 1, b"{}", 0)]), "default")  # type: ignore[arg-type]
        ticket = persister.ticket
        await asyncio.sleep(0)
        assert persister.landed(ticket, Other.epoch) and persister.commits == 3
        await asyncio.sleep(0)
        assert persister.committed >= ticket and persister.commits == 4
        read = await store.read(KEY, 0, time.time())
        assert [e.seq for e in read] == list(range(1, 130))


def _finished_without_a_turn(waiting: object) -> bool:
    """Whether the coroutine ``waiting`` ran to its end without giving the loop a turn."""
    try:
        waiting.send(None)  # type: ignore[attr-defined]
    except StopIteration:
        return True
    waiting.close()  # type: ignore[attr-defined]
    return False


async def test_a_writer_waiting_for_the_open_batch_commits_it_in_its_own_turn(
    tmp_path: Path,
) -> None:
    """A call's answer: its writer does not wait for a wake-up a turn later (a loop turn
    and a task wake-up per call); the batch is the same one the turn's end would commit."""
    store = await opened(tmp_path / "store.db")
    async with persisting(store) as persister:
        journal = Journal(opened=[1], appends=[(1, 1, b'{"a":1}', 0)])
        persister.note(NotingSession(), journal, "default")  # type: ignore[arg-type]
        ticket = persister.ticket
        assert _finished_without_a_turn(persister.wait(ticket, lane=EPOCH))
        assert persister.committed >= ticket and persister.commits == 1
        assert [e.payload for e in await store.read(KEY, 0, time.time())] == [b'{"a":1}']
        await asyncio.sleep(0)  # the turn's end finds nothing more to commit
        assert persister.commits == 1


async def test_land_now_commits_the_open_batch_a_writer_waits_for(tmp_path: Path) -> None:
    """A callback holding a call's answer (proxy/downstream/fast_call.py) asks without a
    task: the open batch is committed then and there, as :meth:`Persister.wait` would
    in the task's first step, a loop turn later."""
    store = await opened(tmp_path / "store.db")
    async with persisting(store) as persister:
        journal = Journal(opened=[1], appends=[(1, 1, b'{"a":1}', 0)])
        persister.note(NotingSession(), journal, "default")  # type: ignore[arg-type]
        ticket = persister.ticket
        assert persister.land_now(ticket, EPOCH)  # no loop turn in between
        assert persister.committed >= ticket and persister.commits == 1
        assert [e.payload for e in await store.read(KEY, 0, time.time())] == [b'{"a":1}']
        await asyncio.sleep(0)  # the turn's end finds nothing more to commit
        assert persister.commits == 1


async def test_land_now_leaves_a_thread_stores_batch_alone(tmp_path: Path) -> None:
    full = await opened(tmp_path / "full.db", synchronous="full")  # commits on its thread
    async with persisting(full) as persister:
        journal = Journal(opened=[1], appends=[(1, 1, b"{}", 0)])
        persister.note(NotingSession(), journal, "default")  # type: ignore[arg-type]
        ticket = persister.ticket
        assert not persister.land_now(ticket, EPOCH) and persister.commits == 0
        async with asyncio.timeout(10):
            await persister.wait(ticket, lane=EPOCH)
        assert persister.commits == 1
