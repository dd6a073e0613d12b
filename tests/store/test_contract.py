"""The store contract (proxy/store/base.py), the same cases on memory, sqlite and redis.

Expiry is checked on the maker's clock (tests/store/conftest.py): at ``now + ttl`` at once
for memory and SQLite, which take ``now`` from their caller, and in real time for Redis,
whose TTLs run on its own clock. A tail is known to wait for more once it has delivered
what was there (:class:`Tail`), not after a fixed sleep.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from proxy.core.errors import ResumeError
from proxy.core.stream import Mark, Unacknowledged
from proxy.store.base import (
    COMPLETED,
    LIVE,
    Batch,
    Entry,
    SessionRecord,
    Store,
    StoreError,
    StoreLimits,
    StreamRecord,
)
from tests.store.conftest import Maker
from tests.support import eventually

KEY = "e0e0e0.1"


def entries(first: int, last: int, mark: int = 0) -> list[Entry]:
    return [Entry(seq, f'{{"n":{seq}}}'.encode(), mark) for seq in range(first, last + 1)]


def opened(key: str = KEY, session: str = "s1", owner: str = "a", **kw: object) -> StreamRecord:
    return StreamRecord(key, session, owner, **kw)  # type: ignore[arg-type]


async def fill(
    store: Store, key: str = KEY, last: int = 3, *, at: float | None = None, **kw: object
) -> float:
    """Open stream ``key`` with entries 1..``last`` at time ``at`` (default: now)."""
    now = time.time() if at is None else at
    await store.commit(Batch(streams=[opened(key, **kw)], appends={key: entries(1, last)}), now)
    return now


async def reason(coro: object) -> str:
    with pytest.raises(ResumeError) as caught:
        await coro  # type: ignore[misc]
    return caught.value.reason


async def test_append_then_read_after_any_position(maker: Maker) -> None:
    store = await maker.make()
    now = await fill(store, last=3)
    assert [e.seq for e in await store.read(KEY, 0, now)] == [1, 2, 3]
    assert await store.read(KEY, 2, now) == entries(3, 3)
    assert await store.read(KEY, 3, now) == []
    assert [e.seq for e in await store.read(KEY, 0, now, limit=2)] == [1, 2]
    record = await store.get_stream(KEY, now)
    assert record is not None
    assert (record.session_id, record.owner, record.state) == ("s1", "a", LIVE)
    assert (record.first_seq, record.last_seq, record.number, record.epoch) == (1, 3, 1, "e0e0e0")


async def test_a_snapshot_is_the_record_and_the_read_or_no_entries_where_the_read_refuses(
    maker: Maker,
) -> None:
    """``snapshot``: the record and what ``read`` gives, in one read where the store can;
    no record, or a position the record refuses, comes with no entries (never an error:
    the caller decides from the record whether to say why)."""
    store = await maker.make()
    now = await fill(store, last=3)
    record = await store.get_stream(KEY, now)
    assert await store.snapshot(KEY, 1, now) == (record, entries(2, 3))
    assert await store.snapshot(KEY, 0, now, limit=2) == (record, entries(1, 2))
    assert await store.snapshot(KEY, 3, now) == (record, [])
    assert await store.snapshot(KEY, 4, now) == (record, [])
    assert await store.snapshot("e0e0e0.9", 0, now) == (None, [])


async def test_positions_never_reached_and_unknown_streams_are_refused(maker: Maker) -> None:
    store = await maker.make()
    now = await fill(store, last=3)
    assert await reason(store.read(KEY, 4, now)) == "unknown_position"
    assert await reason(store.read(KEY, -1, now)) == "unknown_position"
    assert await reason(store.read("e0e0e0.9", 0, now)) == "unknown_stream"
    assert await reason(store.summary("e0e0e0.9", 0, now)) == "unknown_stream"
    assert await store.get_stream("e0e0e0.9", now) is None


async def test_payload_bytes_round_trip_exactly(maker: Maker) -> None:
    store = await maker.make()
    odd = [Entry(1, b"\x00\xff\xfe binary \r\n\r\n"), Entry(2, "é✓".encode() * 1000), Entry(3, b"")]
    now = time.time()
    await store.commit(Batch(streams=[opened()], appends={KEY: odd}), now)
    assert await store.read(KEY, 0, now) == odd


async def test_appends_across_batches_and_a_retried_batch_is_not_doubled(maker: Maker) -> None:
    store = await maker.make()
    now = await fill(store, last=3)
    await store.commit(Batch(appends={KEY: entries(4, 6)}), now)
    await store.commit(Batch(appends={KEY: entries(4, 7)}), now)  # 4..6 again, then 7
    assert [e.seq for e in await store.read(KEY, 0, now)] == [1, 2, 3, 4, 5, 6, 7]
    record = await store.get_stream(KEY, now)
    assert record is not None and record.last_seq == 7


async def test_a_log_keeps_at_most_max_events_and_reads_before_them_are_truncated(
    maker: Maker,
) -> None:
    store = await maker.make(StoreLimits(max_events=5))
    now = await fill(store, last=8)
    record = await store.get_stream(KEY, now)
    assert record is not None and (record.first_seq, record.last_seq) == (4, 8)
    assert await reason(store.read(KEY, 2, now)) == "history_truncated"
    assert await reason(store.summary(KEY, 0, now)) == "history_truncated"
    assert [e.seq for e in await store.read(KEY, 3, now)] == [4, 5, 6, 7, 8]


async def test_an_append_after_lost_history_leaves_no_silent_gap(maker: Maker) -> None:
    """No record (it was lost): entries 10.. are kept, anything before is truncated."""
    store = await maker.make()
    now = time.time()
    await store.commit(Batch(appends={KEY: entries(10, 12)}), now)
    record = await store.get_stream(KEY, now)
    assert record is not None and (record.first_seq, record.last_seq) == (10, 12)
    assert await reason(store.read(KEY, 5, now)) == "history_truncated"
    assert [e.seq for e in await store.read(KEY, 9, now)] == [10, 11, 12]
    # A hole inside a log (seq 13, 14 never came): nothing before it stays readable.
    await store.commit(Batch(appends={KEY: entries(15, 15)}), now)
    assert await reason(store.read(KEY, 12, now)) == "history_truncated"
    assert [e.seq for e in await store.read(KEY, 14, now)] == [15]


async def test_completed_streams_last_until_their_expiry(maker: Maker) -> None:
    store, clock = await maker.make(), maker.clock
    now = await fill(store, last=2, at=clock.now())
    await store.commit(Batch(appends={KEY: entries(3, 3)}, completed={KEY: now + 0.4}), now)
    record = await store.get_stream(KEY, now)
    assert record is not None and record.state == COMPLETED and record.last_seq == 3
    assert [e.seq for e in await store.read(KEY, 1, now)] == [2, 3]
    await clock.advance(0.6)
    later = clock.now()
    await store.sweep(later)
    assert await store.get_stream(KEY, later) is None
    assert await reason(store.read(KEY, 0, later)) == "unknown_stream"


async def test_a_live_stream_without_writes_expires_after_live_ttl(maker: Maker) -> None:
    # Redis' clock is the wall's: a check is early or late by what a loaded machine
    # takes, so the one that must find the record comes right after the refresh.
    store, clock = await maker.make(StoreLimits(live_ttl=0.6)), maker.clock
    now = await fill(store, last=1, at=clock.now())
    await clock.advance(0.5)
    await store.commit(Batch(appends={KEY: entries(2, 2)}), clock.now())  # refreshes it
    await clock.advance(0.15)  # past the first expiry, 0.45 s before the refreshed one
    assert await store.get_stream(KEY, clock.now()) is not None
    await clock.advance(0.6)
    later = clock.now()
    await store.sweep(later)
    assert await store.get_stream(KEY, later) is None
    assert now < later


async def test_dropped_streams_are_gone(maker: Maker) -> None:
    store = await maker.make()
    now = await fill(store)
    await fill(store, key="e0e0e0.2")
    await store.commit(Batch(dropped=[KEY]), now)
    assert await store.get_stream(KEY, now) is None
    assert await reason(store.read(KEY, 0, now)) == "unknown_stream"
    assert [e.seq for e in await store.read("e0e0e0.2", 0, now)] == [1, 2, 3]


async def test_a_record_put_again_keeps_its_log_positions_and_state(maker: Maker) -> None:
    """Announcing a stream re-puts its record (announced, request ids), positions unknown:
    the log, its positions, state and expiry stay."""
    store = await maker.make(StoreLimits(max_events=3))
    now = await fill(store, last=4)
    await store.commit(Batch(completed={KEY: now + 60}), now)
    again = opened(owner="b", request_ids=[7, "x"], announced=True)  # first 1, last 0
    await store.commit(Batch(streams=[again], appends={KEY: entries(5, 5)}), now)
    record = await store.get_stream(KEY, now)
    assert record is not None and record.request_ids == [7, "x"] and record.announced
    assert (record.owner, record.state, record.first_seq, record.last_seq) == (
        "b",
        COMPLETED,
        3,
        5,
    )
    assert record.expires_at == pytest.approx(now + 60)
    assert [e.seq for e in await store.read(KEY, 2, now)] == [3, 4, 5]


async def test_summary_counts_marked_entries_after_a_position(maker: Maker) -> None:
    store = await maker.make()
    now = time.time()
    marked = [
        Entry(1, b"{}", int(Mark.REQUEST)),
        Entry(2, b"{}"),
        Entry(3, b"{}", int(Mark.ERROR)),
        Entry(4, b"{}", int(Mark.REQUEST | Mark.ERROR)),
    ]
    await store.commit(Batch(streams=[opened()], appends={KEY: marked}), now)
    assert await store.summary(KEY, 0, now) == Unacknowledged(4, 2, 2)
    assert await store.summary(KEY, 1, now) == Unacknowledged(3, 1, 2)
    assert await store.summary(KEY, 4, now) == Unacknowledged(0, 0, 0)


async def collect(store: Store, key: str, after: int) -> list[int]:
    return [e.seq async for batch in store.tail(key, after) for e in batch]


class Tail:
    """``store.tail(key, after)`` read by a task of its own; ``seen`` grows as it reads."""

    def __init__(self, store: Store, key: str, after: int) -> None:
        self.seen: list[int] = []
        self.task = asyncio.create_task(self._collect(store, key, after))

    async def _collect(self, store: Store, key: str, after: int) -> list[int]:
        async for batch in store.tail(key, after):
            self.seen += [e.seq for e in batch]
        return self.seen

    async def delivered(self, last: int) -> None:
        """Wait until the tail has delivered up to ``last``: having given all there was,
        it waits for more (or ends). Fails at once if it ended first."""

        def reached() -> bool:
            if self.seen[-1:] == [last]:
                return True
            if self.task.done():
                raise AssertionError(f"the tail ended at {self.seen}: {self.task!r}")
            return False

        await eventually(reached, timeout=10, what=lambda: f"the tail to reach {last}: {self.seen}")


async def test_tail_follows_commits_live_and_ends_with_the_stream(maker: Maker) -> None:
    store = await maker.make()
    now = await fill(store, last=2)
    tail = Tail(store, KEY, 1)
    await tail.delivered(2)
    assert not tail.task.done()
    for first in (3, 5):
        await store.commit(Batch(appends={KEY: entries(first, first + 1)}), now)
        await tail.delivered(first + 1)
    assert not tail.task.done()
    await store.commit(Batch(appends={KEY: entries(7, 7)}, completed={KEY: now + 60}), now)
    assert await asyncio.wait_for(tail.task, 5) == [2, 3, 4, 5, 6, 7]


async def test_tail_of_a_completed_stream_gives_the_rest_and_ends(maker: Maker) -> None:
    store = await maker.make()
    now = await fill(store, last=4)
    await store.commit(Batch(completed={KEY: now + 60}), now)
    assert await asyncio.wait_for(collect(store, KEY, 2), 5) == [3, 4]
    assert await asyncio.wait_for(collect(store, KEY, 4), 5) == []


async def test_a_tail_that_gave_a_completed_streams_last_entry_ends_there(maker: Maker) -> None:
    """Its reader has the whole stream: the tail ends without reading again (a round
    trip less from Redis), so a stream dropped right after is no error to it."""
    store = await maker.make()
    now = await fill(store, last=4)
    await store.commit(Batch(completed={KEY: now + 60}), now)
    tail = store.tail(KEY, 2)
    assert [e.seq for e in await asyncio.wait_for(anext(tail), 5)] == [3, 4]
    await store.commit(Batch(dropped=[KEY]), now)
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(anext(tail), 5)


async def test_tail_ends_with_an_error_when_the_stream_is_dropped(maker: Maker) -> None:
    store = await maker.make()
    now = await fill(store, last=2)
    tail = Tail(store, KEY, 1)
    await tail.delivered(2)  # all there was: it waits for more
    await store.commit(Batch(dropped=[KEY]), now)
    assert await reason(asyncio.wait_for(tail.task, 5)) == "unknown_stream"


async def test_tail_refuses_positions_the_read_refuses(maker: Maker) -> None:
    store = await maker.make()
    await fill(store, last=2)
    assert await reason(asyncio.wait_for(collect(store, KEY, 5), 5)) == "unknown_position"
    assert await reason(asyncio.wait_for(collect(store, "e0e0e0.8", 0), 5)) == "unknown_stream"


async def test_close_ends_every_tail(maker: Maker) -> None:
    store = await maker.make()
    await fill(store, last=1)
    tail = Tail(store, KEY, 0)
    await tail.delivered(1)  # all there was: it waits for more
    await store.close()
    with pytest.raises((StoreError, asyncio.CancelledError)):
        await asyncio.wait_for(tail.task, 5)


async def test_live_streams_lists_those_not_completed_by_owner(maker: Maker) -> None:
    store = await maker.make()
    now = await fill(store, key="e1.1", owner="a")
    await fill(store, key="e1.2", owner="b")
    await fill(store, key="e1.3", owner="a")
    await store.commit(Batch(completed={"e1.3": now + 60}), now)
    assert sorted(r.key for r in await store.live_streams(None, now)) == ["e1.1", "e1.2"]
    assert [r.key for r in await store.live_streams("a", now)] == ["e1.1"]


async def test_session_records_last_until_dropped_or_expired(maker: Maker) -> None:
    store, clock = await maker.make(), maker.clock
    now = clock.now()
    await store.put_session(SessionRecord("s1", "ep", "a", "2025-11-25", now + 60))
    await store.put_session(SessionRecord("s2", "eq", "b", None, now + 0.3))
    found = await store.get_session("s1", now)
    assert found == SessionRecord("s1", "ep", "a", "2025-11-25", pytest.approx(now + 60))
    await store.drop_session("s1")
    assert await store.get_session("s1", now) is None
    await clock.advance(0.5)
    assert await store.get_session("s2", clock.now()) is None


async def test_a_session_and_a_lease_read_together_are_what_each_read_gives(
    maker: Maker,
) -> None:
    store, clock = await maker.make(), maker.clock
    now = clock.now()
    await store.put_session(SessionRecord("s1", "ep", "a", None, now + 60))
    assert await store.acquire_lease("replica:a", "a", 60, now)
    together = await store.session_and_lease("s1", "replica:a", now)
    assert together == (await store.get_session("s1", now), "a")
    assert await store.session_and_lease("s1", "replica:b", now) == (together[0], None)
    assert await store.session_and_lease("s9", "replica:a", now) == (None, "a")


async def test_leases_are_exclusive_renewable_and_lapse(maker: Maker) -> None:
    store, clock = await maker.make(), maker.clock
    now = clock.now()
    assert await store.acquire_lease("s1", "a", 0.4, now)
    assert not await store.acquire_lease("s1", "b", 0.4, now)
    assert await store.lease_owner("s1", now) == "a"
    assert await store.acquire_lease("s1", "a", 0.4, now)  # renewal
    await store.release_lease("s1", "b")  # not b's: nothing happens
    assert await store.lease_owner("s1", clock.now()) == "a"
    await clock.advance(0.6)
    later = clock.now()
    assert await store.lease_owner("s1", later) is None
    assert await store.acquire_lease("s1", "b", 5, later)
    await store.release_lease("s1", "b")
    assert await store.lease_owner("s1", later) is None


async def test_task_records_round_trip_and_expire(maker: Maker) -> None:
    store, clock = await maker.make(), maker.clock
    now = clock.now()
    record = {"status": "working", "n": 1, "nested": {"a": [1, 2]}}
    await store.put_task("t1", record, now + 60)
    await store.put_task("t2", {"status": "completed"}, now + 0.3)
    assert await store.get_task("t1", now) == record
    await store.put_task("t1", {"status": "completed"}, now + 60)
    assert await store.get_task("t1", now) == {"status": "completed"}
    assert await store.get_task("nope", now) is None
    await clock.advance(0.5)
    assert await store.get_task("t2", clock.now()) is None


@pytest.mark.parametrize("final", ["completed", "failed", "cancelled"])
async def test_a_final_task_record_is_never_written_over(maker: Maker, final: str) -> None:
    """A task ended once (e.g. orphaned by another replica while its holder was paused)
    stays ended: the holder's late write is refused, whatever it says."""
    store, now = await maker.make(), maker.clock.now()
    assert await store.put_task("t1", {"status": "working"}, now + 60)
    assert await store.put_task("t1", {"status": "input_required"}, now + 60)
    ended = {"status": final, "statusMessage": "owner_lost"}
    assert await store.put_task("t1", ended, now + 60)
    assert not await store.put_task("t1", {"status": "completed", "late": True}, now + 60)
    assert not await store.put_task("t1", {"status": "working"}, now + 60)
    assert await store.get_task("t1", now) == ended


async def test_the_epoch_outlives_a_reopen_and_changes_when_history_is_lost(
    maker: Maker,
) -> None:
    store = await maker.make()
    first = store.epoch
    assert first and first.isalnum()
    now = await fill(store, last=3)
    store = await maker.reopen(store)
    assert store.epoch == first
    assert [e.seq for e in await store.read(KEY, 0, now)] == [1, 2, 3]
    store = await maker.lose(store)
    assert store.epoch != first
    assert await store.current_epoch() == store.epoch
    assert await reason(store.read(KEY, 0, now)) == "unknown_stream"


async def test_many_streams_in_one_batch(maker: Maker) -> None:
    store = await maker.make()
    now = time.time()
    keys = [f"e2.{n}" for n in range(1, 41)]
    batch = Batch(
        streams=[opened(k) for k in keys],
        appends={k: entries(1, 5) for k in keys},
        completed={k: now + 60 for k in keys[:10]},
    )
    await store.commit(batch, now)
    for key in keys:
        assert [e.seq for e in await store.read(key, 0, now)] == [1, 2, 3, 4, 5]
    assert len(await store.live_streams(None, now)) == 30


async def test_messages_reach_the_inbox_they_are_sent_to_in_order(maker: Maker) -> None:
    store = await maker.make()
    inbox = store.receive("b")
    for n in range(3):
        await store.send("b", {"n": n, "text": "é"})
    await store.send("c", {"n": 99})
    got = [await asyncio.wait_for(anext(inbox), 5) for _ in range(3)]
    assert got == [{"n": 0, "text": "é"}, {"n": 1, "text": "é"}, {"n": 2, "text": "é"}]
    waiting = asyncio.ensure_future(anext(inbox))
    assert not waiting.done()
    await store.send("b", {"n": 3})
    # c's message is not b's: sent before b's 3, it would have come first (inboxes keep
    # their order), so no fixed wait for "nothing arrives" is needed.
    assert await asyncio.wait_for(waiting, 5) == {"n": 3}
    await inbox.aclose()


async def test_what_the_session_trims_the_store_drops(maker: Maker) -> None:
    """Batch.trimmed: the entries before the first kept go, never past the end."""
    store = await maker.make()
    now = await fill(store, last=6)
    await store.commit(Batch(appends={KEY: entries(7, 7)}, trimmed={KEY: 4}), now)
    record = await store.get_stream(KEY, now)
    assert record is not None and (record.first_seq, record.last_seq) == (4, 7)
    assert await reason(store.read(KEY, 2, now)) == "history_truncated"
    assert [e.seq for e in await store.read(KEY, 3, now)] == [4, 5, 6, 7]
    await store.commit(Batch(trimmed={KEY: 2}), now)  # never back
    await store.commit(Batch(trimmed={KEY: 99, "e0e0e0.8": 5}), now)  # never past the end
    record = await store.get_stream(KEY, now)
    assert record is not None and (record.first_seq, record.last_seq) == (8, 7)
    assert await store.read(KEY, 7, now) == []
    assert await store.get_stream("e0e0e0.8", now) is None
