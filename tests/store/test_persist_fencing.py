"""The group commit under fencing (proxy/store/persist.py, proxy/store/fencing.py): a batch
the store refuses under the token in force makes that token stale before anyone waiting
for the batch goes on; what the lost sessions gathered meanwhile is dropped."""

from __future__ import annotations

import asyncio
import time

import pytest

from proxy.client_conn import ClientConn, ConnFenced
from proxy.core.events import ConnId
from proxy.core.journal import Journal
from proxy.store.base import Batch, Entry, StreamRecord
from proxy.store.fencing import Fence
from proxy.store.memory import MemoryStore
from proxy.store.persist import Persister
from tests.store.persist_support import EPOCH, KEY, NotingSession


async def test_a_refused_write_makes_the_token_stale_before_its_waiters_go_on() -> None:
    store = MemoryStore()
    await store.open()
    fence = Fence("a")
    persister = Persister(store, "a", 60.0, fence)
    stale = fence.token
    lost: list[str] = []
    fence.on_lost(lost.append)
    # Another replica ended stream 1 while this one was paused: it holds that one's token.
    taken = Batch([StreamRecord(KEY, "s1", "a")], {KEY: [Entry(1, b"{}")]}, fence="reaper")
    await store.commit(taken, time.time())
    persister.note(NotingSession(), Journal(appends=[(1, 2, b'{"late":1}', 0)]), "default")  # type: ignore[arg-type]
    ticket = persister.ticket
    async with asyncio.timeout(10):
        await persister.wait(ticket)
    assert lost == [stale] and fence.token != stale  # told before the wait returned
    assert [e.seq for e in await store.read(KEY, 0, time.time())] == [1]
    # New writes go under the new token: a new stream is this replica's again.
    persister.note(NotingSession(), Journal(opened=[2], appends=[(2, 1, b"{}", 0)]), "default")  # type: ignore[arg-type]
    async with asyncio.timeout(10):
        await persister.wait(persister.ticket)
    record = await store.get_stream(f"{EPOCH}.2", time.time())
    assert record is not None and record.fence == fence.token
    await persister.close()


async def test_what_lost_sessions_gathered_is_dropped_and_its_waiters_let_go() -> None:
    store = MemoryStore()
    await store.open()
    fence = Fence("a")
    persister = Persister(store, "a", 60.0, fence)
    persister.note(NotingSession(), Journal(opened=[1], appends=[(1, 1, b"{}", 0)]), "default")  # type: ignore[arg-type]
    ticket = persister.ticket
    fence.lost("lease_lapsed")  # in the same loop turn: nothing was committed yet
    async with asyncio.timeout(10):
        await persister.wait(ticket)
    assert await store.get_stream(KEY, time.time()) is None
    await persister.close()


async def test_a_conn_nobody_fenced_by_name_writes_none_of_a_refused_commit() -> None:
    """A stop forgets its sessions before their last commit comes back (the nemesis:
    a replica paused past its lease, reaped, then drained): refused, that commit's
    events must not reach those sessions' clients, though no list of sessions names
    them any more to fence. The token they were noted under went stale: that fences
    them."""
    store = MemoryStore()
    await store.open()
    fence = Fence("a")
    persister = Persister(store, "a", 60.0, fence)
    taken = Batch([StreamRecord(KEY, "s1", "a")], {KEY: [Entry(1, b"{}")]}, fence="reaper")
    await store.commit(taken, time.time())
    conn = ClientConn(ConnId(1), gate=persister, lane=EPOCH)
    persister.note(NotingSession(), Journal(appends=[(1, 2, b'{"late":1}', 0)]), "default")  # type: ignore[arg-type]
    conn.ticket = persister.ticket
    conn.queue.put_nowait(b'data: {"late":1}\n\n')
    with pytest.raises(ConnFenced):
        async with asyncio.timeout(10):
            await conn.stored()
    assert conn.fenced
    later = ClientConn(ConnId(2), gate=persister, lane=EPOCH)  # made under the new token
    await later.stored()
    assert not later.fenced
    await persister.close()
