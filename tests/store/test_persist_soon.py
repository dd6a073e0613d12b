"""The group commit with a store that starts a commit without a task
(:meth:`~proxy.store.base.Store.commit_soon`, Redis on one server): the slice is written in
the flush, and lands in the store's own reply callback (no task started before the write,
none woken after the reply); an error there is committed again by ``commit``; slices
follow one another from the callback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from proxy.core.journal import Journal
from proxy.store.base import Batch, StoreError
from proxy.store.memory import MemoryStore
from proxy.store.persist import Persister
from tests.store.persist_support import KEY, NotingSession, appends, persisting

Landed = Callable[[list[str] | Exception], None]


class SoonStore(MemoryStore):
    """A memory store whose commits are started by :meth:`commit_soon` and land when the
    test hands their outcome over (a reply read by the store's connection)."""

    def __init__(self) -> None:
        super().__init__()
        self.started: list[tuple[Batch, Landed]] = []
        self.awaited: list[Batch] = []

    def commit_soon(self, batch: Batch, now: float, landed: Landed) -> bool:
        self.started.append((batch, landed))
        return True

    async def commit(self, batch: Batch, now: float) -> list[str]:
        self.awaited.append(batch)
        return await super().commit(batch, now)

    def reply(self, outcome: list[str] | Exception | None = None) -> None:
        """Apply the oldest commit started and hand its outcome over."""
        batch, landed = self.started.pop(0)
        if outcome is None:
            self._apply(batch, time.time())  # (what MemoryStore.commit does, at once)
            outcome = []
        landed(outcome)


def note_opened(persister: Persister, stream: int = 1, events: int = 1) -> int:
    """Note a journal that opens ``stream`` with its events 1 to ``events``; its ticket."""
    journal = Journal(opened=[stream], appends=appends(stream, 1, events))
    persister.note(NotingSession(), journal, "default")  # type: ignore[arg-type]
    return persister.ticket


async def flushed(persister: Persister) -> None:
    """Let the turn's end (the flush, which starts the commit) run."""
    await asyncio.sleep(0)
    assert not persister._scheduled


async def test_a_commit_lands_in_the_reply_callback_without_a_task() -> None:
    store = SoonStore()
    await store.open()
    async with persisting(store) as persister:
        ticket = note_opened(persister, 1, 3)
        await flushed(persister)
        assert len(store.started) == 1 and persister._inflight is None
        assert not persister.landed(ticket)
        store.reply()
        assert persister.landed(ticket)  # in the callback itself, no turn of the loop
        assert store.awaited == []
        await asyncio.wait_for(persister.wait(ticket), 5)


async def test_an_error_is_committed_again_by_commit() -> None:
    """NOSCRIPT, a broken connection: the same slice goes to ``commit`` (which loads,
    reconnects, retries) and lands from there."""
    store = SoonStore()
    await store.open()
    async with persisting(store) as persister:
        ticket = note_opened(persister, 1, 2)
        await flushed(persister)
        ((batch, _),) = store.started
        store.reply(StoreError("NOSCRIPT"))
        assert not persister.landed(ticket)
        await asyncio.wait_for(persister.wait(ticket), 5)
        assert store.awaited == [batch]
        assert persister.last_error is None  # not an outage: nothing was said
        got = await store.read(KEY, 0, time.time())
        assert [e.seq for e in got] == [1, 2]


async def test_slices_follow_one_another_from_the_callback() -> None:
    """A batch over the cap: the next slice is started when the one before lands, in its
    callback; a writer of the whole ticket goes on after the last."""
    store = SoonStore()
    await store.open()
    persister = Persister(store, "a", 60.0, cap=4)
    try:
        ticket = note_opened(persister, 1, 10)
        await flushed(persister)
        sizes = []
        while store.started:
            sizes.append(store.started[0][0].events())
            store.reply()
        assert sizes == [4, 4, 2] and persister.landed(ticket)
        assert store.awaited == []
    finally:
        await persister.close()
        await store.close()


async def test_a_reply_after_close_changes_nothing() -> None:
    store = SoonStore()
    await store.open()
    persister = Persister(store, "a", 60.0)
    ticket = note_opened(persister)
    await flushed(persister)
    await persister.close()
    store.reply(StoreError("closed"))
    assert persister._inflight is None and not persister.landed(ticket)
    await store.close()


async def test_a_refused_key_loses_the_fence_before_the_writer_goes_on() -> None:
    store = SoonStore()
    await store.open()
    async with persisting(store) as persister:
        lost: list[str] = []
        persister.fence.on_lost(lost.append)
        ticket = note_opened(persister)
        await flushed(persister)
        store.reply([KEY])
        assert len(lost) == 1 and persister.landed(ticket)


async def test_when_landed_is_called_in_the_reply_callback_once_stored() -> None:
    """A writer's callback (:meth:`Persister.when_landed`): called when its batch lands, in
    the store's reply callback; not on an error reply (the batch is not stored), but once
    ``commit`` has stored it."""
    store = SoonStore()
    await store.open()
    async with persisting(store) as persister:
        called: list[tuple[bool, bool]] = []
        ticket = note_opened(persister, 1, 2)
        persister.when_landed(ticket, "", lambda ok: called.append((ok, persister.landed(ticket))))
        await flushed(persister)
        store.reply(StoreError("NOSCRIPT"))
        assert called == []  # not stored: not let go
        async with asyncio.timeout(5):
            await persister.wait(ticket)
        assert called == [(True, True)] and store.awaited
        persister.note(NotingSession(), Journal(appends=appends(1, 3, 3)), "default")  # type: ignore[arg-type]
        ticket = persister.ticket
        persister.when_landed(ticket, "", lambda ok: called.append((ok, persister.landed(ticket))))
        await flushed(persister)
        assert len(called) == 1
        store.reply()
        assert called[1:] == [(True, True)]  # in the reply callback, no loop turn


async def test_when_landed_after_a_refused_commit_runs_once_the_sessions_are_fenced() -> None:
    """A refused commit: the token goes stale (every ``on_lost`` callback, the registry's
    fencing of the connections, runs) before the callback; the same when the lease
    lapses with the batch not yet committed (the callbacks go a loop turn later)."""
    store = SoonStore()
    await store.open()
    async with persisting(store) as persister:
        lost: list[str] = []
        persister.fence.on_lost(lost.append)  # (after the persister's own, as the registry)
        seen: list[int] = []
        note_opened(persister)
        persister.when_landed(persister.ticket, "", lambda ok: seen.append(len(lost)))
        await flushed(persister)
        store.reply([KEY])
        assert seen == [1]
        note_opened(persister, 2, 1)
        persister.when_landed(persister.ticket, "", lambda ok: seen.append(len(lost)))
        persister.fence.lost("lease_lapsed")  # in the same turn: nothing committed
        assert seen == [1] and len(lost) == 2
        await asyncio.sleep(0)
        assert seen == [1, 2]


async def test_when_landed_never_stored_is_called_with_false_on_close() -> None:
    store = SoonStore()
    await store.open()
    persister = Persister(store, "a", 60.0)
    called: list[bool] = []
    note_opened(persister)
    persister.when_landed(persister.ticket, "", called.append)
    await flushed(persister)
    await persister.close()
    assert called == [False]
    store.reply()  # (a reply after close changes nothing)
    assert called == [False]
    await store.close()


async def test_a_when_landed_callback_that_raises_is_logged_not_raised() -> None:
    store = SoonStore()
    await store.open()
    async with persisting(store) as persister:
        called: list[bool] = []

        def fails(ok: bool) -> None:
            raise RuntimeError("a writer's bug")

        ticket = note_opened(persister)
        persister.when_landed(ticket, "", fails)
        persister.when_landed(ticket, "", called.append)
        await flushed(persister)
        store.reply()  # (the store's reply callback: nothing raised into it)
        assert called == [True] and persister.landed(ticket)
