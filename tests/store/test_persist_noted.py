"""A session's journal named to the persister per message and taken once per loop turn
(:meth:`proxy.store.persist.Persister.noted`, issue 23): the wire stays behind the store,
order is kept, the records timer is armed once, not per call, and a lost fence drops what
was named but not taken."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from proxy.client_conn import ClientConn
from proxy.core.events import ConnId
from proxy.core.journal import Journal
from proxy.store.base import StoreLimits
from proxy.store.fencing import Fence
from proxy.store.memory import MemoryStore
from proxy.store.persist import Persister
from proxy.store.sqlite import SqliteStore
from tests.store.persist_support import EPOCH, KEY, HeldStore, Noting, NotingSession, appends


async def opened(path: Path) -> SqliteStore:
    store = SqliteStore(path, StoreLimits(), synchronous="normal")
    await store.open()
    return store


def source(journal: Journal) -> tuple[NotingSession, Journal, str]:
    return (NotingSession(), journal, "default")


async def test_a_journal_named_per_message_is_taken_once_at_the_turns_end(tmp_path: Path) -> None:
    store = await opened(tmp_path / "store.db")
    persister = Persister(store, "a", 60.0, Fence("a"))
    try:
        journal = Journal()
        named = source(journal)
        journal.opened.append(1)
        tickets = []
        for seq in range(1, 6):  # five messages of one turn, each appending an event
            journal.appends.append((1, seq, b'{"n":%d}' % seq, 0))
            tickets.append(persister.noted(EPOCH, named))  # type: ignore[arg-type]
        assert journal.appends  # named, not taken: nothing copied per message
        assert len(set(tickets)) == 1 and persister.ticket == tickets[0]
        assert not persister.landed(tickets[0], EPOCH)  # the wire waits for the store
        await asyncio.sleep(0)  # the turn's end takes the journal and commits it
        assert not journal and persister.commits == 1
        assert persister.landed(tickets[0], EPOCH)
        got = await store.read(KEY, 0, time.time())
        assert [e.seq for e in got] == [1, 2, 3, 4, 5]
        # More of the same session, in a later turn: a new ticket, after the first.
        journal.appends.append((1, 6, b"{}", 0))
        later = persister.noted(EPOCH, named)  # type: ignore[arg-type]
        assert later > tickets[0] and not persister.landed(later, EPOCH)
        async with asyncio.timeout(10):
            await persister.wait(later, lane=EPOCH)
        assert [e.seq for e in await store.read(KEY, 0, time.time())] == [1, 2, 3, 4, 5, 6]
    finally:
        await persister.close()
        await store.close()


async def test_a_writer_waiting_commits_what_was_named_in_its_own_turn(tmp_path: Path) -> None:
    store = await opened(tmp_path / "store.db")
    persister = Persister(store, "a", 60.0, Fence("a"))
    try:
        journal = Journal(opened=[1], appends=[(1, 1, b"{}", 0)])
        ticket = persister.noted(EPOCH, source(journal))  # type: ignore[arg-type]
        waiting = persister.wait(ticket, lane=EPOCH)
        try:
            waiting.send(None)
        except StopIteration:
            pass  # it ran to its end without a loop turn: the flush took the journal
        else:
            raise AssertionError("the writer waited for a turn")
        assert not journal and persister.commits == 1
        assert [e.seq for e in await store.read(KEY, 0, time.time())] == [1]
    finally:
        await persister.close()
        await store.close()


async def test_records_alone_are_committed_by_one_timer_re_armed_for_a_later_batch(
    tmp_path: Path,
) -> None:
    """A new stream's record alone waits for its events; the timer armed for the first
    batch of records is not cancelled when that batch goes with its answer, and when it
    fires it re-arms for the records named since, which it then commits."""
    store = await opened(tmp_path / "store.db")
    persister = Persister(store, "a", 60.0, Fence("a"))
    try:
        journal = Journal()
        named = source(journal)
        journal.opened.append(1)  # a request forwarded: its stream's record alone
        first = persister.noted(EPOCH, named)  # type: ignore[arg-type]
        await asyncio.sleep(0)
        assert persister.commits == 0  # it waits for the answer
        journal.appends.append((1, 1, b"{}", 0))  # the answer
        journal.completed.append(1)
        persister.noted(EPOCH, named)  # type: ignore[arg-type]
        await asyncio.sleep(0)
        assert persister.commits == 1 and persister.landed(first, EPOCH)  # one commit
        armed = persister._timer
        assert armed is not None  # still armed: not cancelled per call
        journal.opened.append(2)  # the next request, whose answer does not come
        second = persister.noted(EPOCH, named)  # type: ignore[arg-type]
        assert persister._timer is armed  # no second timer
        async with asyncio.timeout(10):
            await persister.wait(second, lane=EPOCH)
        assert persister.commits == 2
        assert await store.get_stream(f"{EPOCH}.2", time.time()) is not None
        assert persister._timer is None  # nothing left armed
    finally:
        await persister.close()
        await store.close()


async def test_what_a_lost_session_named_is_dropped_with_the_batch() -> None:
    store = MemoryStore()
    await store.open()
    fence = Fence("a")
    persister = Persister(store, "a", 60.0, fence)
    try:
        journal = Journal(opened=[1], appends=[(1, 1, b"{}", 0)])
        ticket = persister.noted(EPOCH, source(journal))  # type: ignore[arg-type]
        fence.lost("test")  # before the turn's end takes it
        assert not journal  # emptied: never committed later either
        async with asyncio.timeout(10):
            await persister.wait(ticket, lane=EPOCH)  # let go
        await asyncio.sleep(0)
        assert persister.commits == 0
        assert await store.get_stream(KEY, time.time()) is None
    finally:
        await persister.close()


async def test_a_part_taken_ahead_does_not_let_more_named_since_go() -> None:
    """A session whose small part of the open batch was committed ahead of a burst's
    slices (``_early``), then names more for the same batch: that more waits for its own
    commit (the wire never ahead of the store)."""
    store = HeldStore()
    await store.open()
    persister = Persister(store, "a", 60.0, Fence("a"), cap=100)
    burst_epoch, echo_epoch = "b0b0b0", "e1e1e1"
    try:
        burst, echo = Noting(burst_epoch), Noting(echo_epoch)
        persister.note(burst, Journal(opened=[1], appends=appends(1, 1, 1)), "default")  # type: ignore[arg-type]
        for _ in range(3):
            await asyncio.sleep(0)
        assert len(store.seen) == 1  # held
        persister.note(burst, Journal(appends=appends(1, 2, 250)), "default")  # type: ignore[arg-type]
        store.gates[0].set()
        for _ in range(3):
            await asyncio.sleep(0)
        assert len(store.seen) == 2 and store.seen[1].events() == 100  # a burst slice, held
        echo_journal = Journal(opened=[1], appends=appends(1, 1, 1))
        ticket = persister.noted(echo_epoch, (echo, echo_journal, "default"))  # type: ignore[arg-type]
        store.gates[1].set()
        for _ in range(3):
            await asyncio.sleep(0)
        assert list(store.seen[2].appends) == [f"{echo_epoch}.1"]  # taken ahead
        store.gates[2].set()
        for _ in range(3):
            await asyncio.sleep(0)
        assert persister.landed(ticket, echo_epoch)
        echo_journal.appends.extend(appends(1, 2, 1))  # more, for the same open batch
        again = persister.noted(echo_epoch, (echo, echo_journal, "default"))  # type: ignore[arg-type]
        assert again == ticket and not persister.landed(again, echo_epoch)
    finally:
        for gate in store.gates:
            gate.set()
        await persister.close()


async def test_a_writer_of_items_taken_earlier_waits_only_for_their_batch() -> None:
    """A held response (a fast POST handed to aiohttp) writes the items it took as soon as
    their batch is stored, not once everything queued for its connection since is: a
    burst's later batch may still be waiting. Fails if ``stored(upto)`` waits for
    :attr:`ClientConn.ticket` (the writer's first event then waits for a later batch)."""
    store = HeldStore()
    await store.open()
    persister = Persister(store, "a", 60.0, Fence("a"))
    try:
        session = Noting(EPOCH)
        conn = ClientConn(ConnId(1), gate=persister, lane=EPOCH)
        persister.note(session, Journal(opened=[1], appends=appends(1, 1, 1)), "default")  # type: ignore[arg-type]
        conn.ticket = taken_at = persister.ticket
        for _ in range(3):
            await asyncio.sleep(0)
        assert len(store.seen) == 1  # the first batch, held in its commit
        persister.note(session, Journal(appends=appends(1, 2, 5)), "default")  # type: ignore[arg-type]
        conn.ticket = persister.ticket  # more queued since: a later batch
        assert conn.ticket > taken_at
        store.gates[0].set()
        async with asyncio.timeout(10):
            await conn.stored(taken_at)
        assert not persister.landed(conn.ticket, EPOCH)  # the later one is not stored yet
        waiting = asyncio.ensure_future(conn.stored())
        for _ in range(3):
            await asyncio.sleep(0)
        assert not waiting.done()
        for _ in range(10):
            for gate in store.gates:
                gate.set()
            await asyncio.sleep(0)
        async with asyncio.timeout(10):
            await waiting
    finally:
        for gate in store.gates:
            gate.set()
        await persister.close()
        await store.close()
