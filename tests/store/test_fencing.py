"""Fencing (proxy/store/base.py, Fencing), the same cases on memory, sqlite and redis.

A record holds its writer's token; a batch of another token is refused on that key, whole
and atomically, and :meth:`Store.commit` names the refused keys. A takeover (what a reaper
does to a lost replica's stream) is a compare-and-set on a LIVE record's token and last
seq; once it passed, the old writer's appends, completions, puts and drops are refused.
"""

from __future__ import annotations

import time

from proxy.store.base import COMPLETED, LIVE, Batch, Entry, StreamRecord, Takeover
from tests.store.conftest import Maker

KEY = "e0e0e0.1"
OTHER = "e0e0e0.2"


def entries(first: int, last: int) -> list[Entry]:
    return [Entry(seq, f'{{"n":{seq}}}'.encode()) for seq in range(first, last + 1)]


def opened(key: str = KEY, owner: str = "a") -> StreamRecord:
    return StreamRecord(key, "s1", owner)


async def test_a_new_record_takes_its_writers_token_and_only_that_token_writes(
    maker: Maker,
) -> None:
    store = await maker.make()
    now = time.time()
    batch = Batch([opened()], {KEY: entries(1, 2)}, fence="t1", owner="a")
    assert await store.commit(batch, now) == []
    record = await store.get_stream(KEY, now)
    assert record is not None and record.fence == "t1"
    assert await store.commit(Batch(appends={KEY: entries(3, 3)}, fence="t1"), now) == []
    # Another token: refused whole, the other key of the same batch applied.
    stale = Batch(
        [opened(OTHER)],
        {KEY: entries(4, 5), OTHER: entries(1, 1)},
        completed={KEY: now + 60},
        fence="t0",
    )
    assert await store.commit(stale, now) == [KEY]
    record = await store.get_stream(KEY, now)
    assert record is not None and record.last_seq == 3 and record.state == LIVE
    assert [e.seq for e in await store.read(KEY, 0, now)] == [1, 2, 3]
    other = await store.get_stream(OTHER, now)
    assert other is not None and other.fence == "t0" and other.last_seq == 1
    for refused in (
        Batch([opened(owner="x")], fence="t0"),
        Batch(trimmed={KEY: 3}, fence="t0"),
        Batch(dropped=[KEY], fence="t0"),
    ):
        assert await store.commit(refused, now) == [KEY]
    record = await store.get_stream(KEY, now)
    assert record is not None and record.owner == "a" and record.first_seq == 1


async def test_a_takeover_ends_a_stream_and_fences_its_old_writer(maker: Maker) -> None:
    store = await maker.make()
    now = time.time()
    await store.commit(Batch([opened()], {KEY: entries(1, 3)}, fence="old", owner="a"), now)
    # The expectation must hold: its token and its last seq.
    for wrong in (Takeover("other", 3), Takeover("old", 2)):
        ending = Batch(takeovers={KEY: wrong}, appends={KEY: entries(4, 4)}, fence="reaper")
        assert await store.commit(ending, now) == [KEY]
    ending = Batch(
        takeovers={KEY: Takeover("old", 3)},
        appends={KEY: entries(4, 4)},
        completed={KEY: now + 60},
        fence="reaper",
    )
    assert await store.commit(ending, now) == []
    record = await store.get_stream(KEY, now)
    assert record is not None
    assert (record.state, record.fence, record.last_seq) == (COMPLETED, "reaper", 4)
    # The old writer wakes up: none of its writes lands (no second answer, no gap).
    late = Batch(appends={KEY: entries(4, 6)}, completed={KEY: now + 60}, fence="old")
    assert await store.commit(late, now) == [KEY]
    assert [e.seq for e in await store.read(KEY, 0, now)] == [1, 2, 3, 4]
    # A completed stream cannot be taken over again, nor a stream that does not exist.
    again = Batch(takeovers={KEY: Takeover("reaper", 4)}, fence="second")
    assert await store.commit(again, now) == [KEY]
    nothing = Batch(takeovers={OTHER: Takeover("", 0)}, fence="second")
    assert await store.commit(nothing, now) == [OTHER]
    assert await store.get_stream(OTHER, now) is None


async def test_records_written_before_fencing_hold_the_empty_token(maker: Maker) -> None:
    """A batch without a token (every writer before fencing) writes records without one."""
    store = await maker.make()
    now = time.time()
    assert await store.commit(Batch([opened()], {KEY: entries(1, 1)}), now) == []
    assert await store.commit(Batch(appends={KEY: entries(2, 2)}), now) == []
    taken = Batch(takeovers={KEY: Takeover("", 2)}, completed={KEY: now + 60}, fence="r")
    assert await store.commit(taken, now) == []
    assert await store.commit(Batch(appends={KEY: entries(3, 3)}), now) == [KEY]


async def test_an_append_that_recreates_a_lost_record_names_its_writer(maker: Maker) -> None:
    store = await maker.make()
    now = time.time()
    assert await store.commit(Batch(appends={KEY: entries(5, 6)}, fence="t", owner="a"), now) == []
    record = await store.get_stream(KEY, now)
    assert record is not None and (record.owner, record.fence) == ("a", "t")


async def test_a_lease_renews_only_while_held(maker: Maker) -> None:
    store, clock = await maker.make(), maker.clock
    now = clock.now()
    assert not await store.renew_lease("r", "a", 0.4, now)  # never taken: not taken now
    assert await store.lease_owner("r", now) is None
    assert await store.acquire_lease("r", "a", 0.4, now)
    assert await store.renew_lease("r", "a", 0.4, now)
    assert not await store.renew_lease("r", "b", 0.4, now)
    await clock.advance(0.6)
    assert not await store.renew_lease("r", "a", 0.4, clock.now())  # lapsed: the holder learns
    assert await store.lease_owner("r", clock.now()) is None
