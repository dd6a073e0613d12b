"""The group commit in slices (proxy/store/slices.py, proxy/store/persist.py, issue 23): a
batch behind a burst is committed in slices of at most a cap of events, the sessions with
the fewest events first, and a session's writers go on once its own part has landed, while
the burst's thousands still go in; fencing and the store's order keep their rules."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from proxy.core.journal import Journal
from proxy.store.base import Batch, Entry, StoreLimits, StreamRecord
from proxy.store.fencing import Fence
from proxy.store.memory import MemoryStore
from proxy.store.persist import Persister
from proxy.store.slices import slices
from proxy.store.sqlite import SqliteStore
from tests.store.persist_support import HeldStore, Noting, appends

BURST, ECHO = "b0b0b0", "e1e1e1"


def test_a_batch_over_the_cap_is_cut_small_sessions_first_in_order() -> None:
    burst = [Entry(seq, b"x") for seq in range(1, 1001)]
    batch = Batch(
        [StreamRecord(f"{BURST}.1", "sb"), StreamRecord(f"{ECHO}.3", "se")],
        {f"{BURST}.1": burst, f"{ECHO}.3": [Entry(1, b"answer")]},
        completed={f"{BURST}.1": 99.0, f"{ECHO}.3": 99.0},
        dropped=[f"{BURST}.0"],
        trimmed={f"{BURST}.1": 5},
        fence="tok",
        owner="a",
    )
    cut = slices(batch, 300)
    # the small session's part alone first (a piece of the burst would not fit beside it)
    assert [s.batch.events() for s in cut] == [1, 300, 300, 300, 100]
    first = cut[0].batch
    assert first.appends == {f"{ECHO}.3": [Entry(1, b"answer")]}
    assert first.completed == {f"{ECHO}.3": 99.0} and cut[0].finished == [ECHO]
    assert [r.key for r in first.streams] == [f"{ECHO}.3"]
    # the burst's record with its first piece; its entries in order; its ends with its last
    assert [r.key for r in cut[1].batch.streams] == [f"{BURST}.1"]
    assert not cut[1].batch.completed and not cut[1].batch.dropped
    seqs = [e.seq for s in cut for e in s.batch.appends.get(f"{BURST}.1", [])]
    assert seqs == list(range(1, 1001))
    last = cut[-1].batch
    assert last.completed == {f"{BURST}.1": 99.0} and last.dropped == [f"{BURST}.0"]
    assert last.trimmed == {f"{BURST}.1": 5} and cut[-1].finished == [BURST]
    assert all(s.batch.fence == "tok" and s.batch.owner == "a" for s in cut)
    assert [s.finished for s in cut[1:-1]] == [[], [], []]


def test_a_batch_within_the_cap_is_one_commit() -> None:
    batch = Batch(appends={f"{BURST}.1": [Entry(1, b"x")], f"{ECHO}.1": [Entry(1, b"y")]})
    (only,) = slices(batch, 2)
    assert only.batch is batch and sorted(only.finished) == [BURST, ECHO]


async def test_a_small_sessions_answer_is_let_go_before_a_bursts_batch_is_in() -> None:
    store = HeldStore()
    await store.open()
    persister = Persister(store, "a", 60.0, Fence("a"), cap=100)
    try:
        burst, echo = Noting(BURST), Noting(ECHO)
        persister.note(burst, Journal(opened=[1], appends=appends(1, 1, 1)), "default")  # type: ignore[arg-type]
        for _ in range(3):  # the first batch goes: its commit is held
            await asyncio.sleep(0)
        assert len(store.seen) == 1
        # Meanwhile the burst notes 250 events, then the echo session its one answer.
        persister.note(burst, Journal(appends=appends(1, 2, 250)), "default")  # type: ignore[arg-type]
        persister.note(echo, Journal(opened=[1], appends=appends(1, 1, 1)), "default")  # type: ignore[arg-type]
        ticket = persister.ticket
        echo_waits = asyncio.create_task(persister.wait(ticket, lane=ECHO))
        burst_waits = asyncio.create_task(persister.wait(ticket, lane=BURST))
        store.gates[0].set()
        for _ in range(5):
            await asyncio.sleep(0)
        assert [b.events() for b in store.seen] == [1, 1]  # the answer alone, first
        assert list(store.seen[1].appends) == [f"{ECHO}.1"]
        store.gates[1].set()
        for _ in range(5):
            await asyncio.sleep(0)
        assert echo_waits.done() and not burst_waits.done()
        assert persister.committed < ticket
        for n in (2, 3, 4):  # 250 burst events: 100, 100, 50
            assert store.seen[n].events() == (100 if n < 4 else 50)
            assert not burst_waits.done()
            store.gates[n].set()
            for _ in range(5):
                await asyncio.sleep(0)
        assert burst_waits.done() and persister.committed >= ticket
        got = await store.read(f"{BURST}.1", 0, time.time())
        assert [e.seq for e in got] == list(range(1, 252))
    finally:
        for gate in store.gates:
            gate.set()
        await persister.close()


async def test_slices_committed_at_once_are_a_loop_turn_apart(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", StoreLimits(), synchronous="normal")
    await store.open()
    persister = Persister(store, "a", 60.0, Fence("a"), cap=100)
    try:
        burst, echo = Noting(BURST), Noting(ECHO)
        persister.note(burst, Journal(opened=[1], appends=appends(1, 1, 250)), "default")  # type: ignore[arg-type]
        persister.note(echo, Journal(opened=[1], appends=appends(1, 1, 1)), "default")  # type: ignore[arg-type]
        ticket = persister.ticket
        await asyncio.sleep(0)  # the flush: the echo's slice is in, alone
        assert persister.landed(ticket, ECHO) and not persister.landed(ticket, BURST)
        assert persister.commits == 1
        await asyncio.sleep(0)  # one slice of the burst a turn
        assert persister.commits == 2 and not persister.landed(ticket, BURST)
        async with asyncio.timeout(10):
            await persister.wait(ticket, lane=BURST)
        assert persister.commits == 4 and persister.committed >= ticket
        got = await store.read(f"{BURST}.1", 0, time.time())
        assert [e.seq for e in got] == list(range(1, 251))
    finally:
        await persister.close()
        await store.close()


async def test_a_lost_fence_drops_the_slices_left_and_lets_the_waiters_go() -> None:
    store = HeldStore()
    await store.open()
    fence = Fence("a")
    persister = Persister(store, "a", 60.0, fence, cap=10)
    try:
        persister.note(Noting(BURST), Journal(opened=[1], appends=appends(1, 1, 30)), "default")  # type: ignore[arg-type]
        ticket = persister.ticket
        waits = asyncio.create_task(persister.wait(ticket, lane=BURST))
        for _ in range(3):
            await asyncio.sleep(0)
        assert len(store.seen) == 1
        fence.lost("lease_lapsed")  # while the first slice is in flight
        store.gates[0].set()
        async with asyncio.timeout(10):
            await waits
        assert len(store.seen) == 1  # the other two slices never went
        assert persister.committed >= ticket
    finally:
        for gate in store.gates:
            gate.set()
        await persister.close()


async def test_a_refused_slice_makes_the_token_stale_and_drops_the_slices_left() -> None:
    store = MemoryStore()
    await store.open()
    fence = Fence("a")
    persister = Persister(store, "a", 60.0, fence, cap=10)
    stale = fence.token
    lost: list[str] = []
    fence.on_lost(lost.append)
    key = f"{BURST}.1"
    # Another replica ended the stream while this one was paused: it holds that one's token.
    taken = Batch([StreamRecord(key, "s1", "a")], {key: [Entry(1, b"{}")]}, fence="reaper")
    await store.commit(taken, time.time())
    persister.note(Noting(BURST), Journal(appends=appends(1, 2, 30)), "default")  # type: ignore[arg-type]
    ticket = persister.ticket
    async with asyncio.timeout(10):
        await persister.wait(ticket, lane=BURST)
    assert lost == [stale] and fence.token != stale  # told before the wait returned
    assert persister.commits == 1  # the other two slices never went
    assert [e.seq for e in await store.read(key, 0, time.time())] == [1]
    await persister.close()


def test_an_answer_beside_a_larger_part_goes_first_even_within_the_cap() -> None:
    batch = Batch(
        appends={
            f"{BURST}.1": [Entry(seq, b"x") for seq in range(1, 101)],
            f"{ECHO}.1": [Entry(1, b"answer")],
        }
    )
    first, rest = slices(batch, 256)
    assert list(first.batch.appends) == [f"{ECHO}.1"] and first.finished == [ECHO]
    assert rest.batch.events() == 100 and rest.finished == [BURST]
    alone = Batch(appends={f"{BURST}.1": [Entry(seq, b"x") for seq in range(1, 101)]})
    assert [s.batch for s in slices(alone, 256)] == [alone]  # one session: one commit


async def test_an_answer_gathered_behind_a_sliced_batch_goes_ahead_of_its_slices_left() -> None:
    store = HeldStore()
    await store.open()
    persister = Persister(store, "a", 60.0, Fence("a"), cap=100)
    try:
        burst, echo = Noting(BURST), Noting(ECHO)
        persister.note(burst, Journal(opened=[1], appends=appends(1, 1, 300)), "default")  # type: ignore[arg-type]
        first = persister.ticket
        for _ in range(3):
            await asyncio.sleep(0)
        assert [b.events() for b in store.seen] == [100]  # slice 1 of 3 in flight
        # The echo session's answer comes meanwhile: it goes into the next batch...
        persister.note(echo, Journal(opened=[1], appends=appends(1, 1, 1)), "default")  # type: ignore[arg-type]
        persister.note(burst, Journal(appends=appends(1, 301, 50)), "default")  # type: ignore[arg-type]
        second = persister.ticket
        assert second > first
        echo_waits = asyncio.create_task(persister.wait(second, lane=ECHO))
        store.gates[0].set()
        for _ in range(5):
            await asyncio.sleep(0)
        # ... and is committed next, ahead of the first batch's two slices left.
        assert [b.events() for b in store.seen] == [100, 1]
        assert list(store.seen[1].appends) == [f"{ECHO}.1"]
        store.gates[1].set()
        for _ in range(5):
            await asyncio.sleep(0)
        assert echo_waits.done() and persister.committed < first
        # More from the echo session now is more of that batch: it waits for it again.
        persister.note(echo, Journal(appends=appends(1, 2, 1)), "default")  # type: ignore[arg-type]
        assert not persister.landed(persister.ticket, ECHO)
        for n in range(2, 8):
            if n < len(store.gates):
                store.gates[n].set()
            for _ in range(5):
                await asyncio.sleep(0)
        async with asyncio.timeout(10):
            await persister.wait(persister.ticket, lane=ECHO)
        got = await store.read(f"{BURST}.1", 0, time.time())
        assert [e.seq for e in got] == list(range(1, 351))
        assert [e.seq for e in await store.read(f"{ECHO}.1", 0, time.time())] == [1, 2]
    finally:
        for gate in store.gates:
            gate.set()
        await persister.close()
