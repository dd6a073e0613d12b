"""A commit packed for the Redis store's own connections (proxy/store/redis_pack.py) is,
byte for byte, what hiredis packs of ``commit_call``'s arguments (which redis-py sends to
a cluster): seeded random batches with records, appends with and without marks, empty
appends, trims, endings, drops and takeovers."""

from __future__ import annotations

import random

import pytest
from hiredis import pack_command

from proxy.core.stream import Mark
from proxy.store import redis_layout
from proxy.store.base import Batch, Entry, StoreLimits, StreamRecord, Takeover
from proxy.store.redis_layout import Layout, commit_call
from proxy.store.redis_pack import pack_commit

SEED = 2323
SHA = "0123456789abcdef0123456789abcdef01234567"
MARKS = [0, 0, 0, Mark.REQUEST, Mark.ERROR, Mark.REQUEST | Mark.ERROR, 3]


def random_batch(rng: random.Random) -> Batch:
    keys = [f"e{rng.randrange(3)}.{n}" for n in range(rng.randrange(1, 6))]
    batch = Batch(fence=f"f{rng.randrange(9)}", owner="a")
    for key in keys:
        if rng.random() < 0.5:
            record = StreamRecord(key, "s1", "a", request_ids=[rng.randrange(5)])
            record.principal = rng.choice([None, "alice", 'qu"ote'])
            record.expires_at = rng.choice([None, 1.7e9 + rng.random()])
            batch.streams.append(record)
        if rng.random() < 0.7:
            first = rng.randrange(1, 10**6)
            payload = lambda: bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))  # noqa: E731
            batch.appends[key] = [
                Entry(seq, payload(), rng.choice(MARKS))
                for seq in range(first, first + rng.randrange(0, 300))
            ]
        if rng.random() < 0.2:
            batch.trimmed[key] = rng.randrange(1, 100)
        if rng.random() < 0.2:
            batch.completed[key] = 1.7e9 + rng.random() * 100
        if rng.random() < 0.1:
            batch.dropped.append(key)
        if rng.random() < 0.1:
            batch.takeovers[key] = Takeover(f"t{rng.randrange(9)}", rng.randrange(100))
    return batch


def test_a_packed_commit_is_what_hiredis_packs_of_its_arguments() -> None:
    print(f"seed {SEED}")
    rng = random.Random(SEED)
    layout = Layout("pack")
    limits = StoreLimits()
    for _ in range(300):
        batch = random_batch(rng)
        now = 1.7e9 + rng.random() * 1000
        bucket = rng.randrange(256)
        keys, args = commit_call(layout, bucket, batch, now, limits)
        expected = pack_command(("EVALSHA", SHA, len(keys), *keys, *args))
        assert pack_commit(SHA, layout, bucket, batch, now, limits) == expected


def test_ids_across_digit_counts_and_thousands_pack_as_hiredis_does() -> None:
    # Runs that start and end around 10, 100, 1000, a thousand's edge and a power of ten
    # (the ids are joins of constant digit strings, a thousand seqs at a time).
    layout = Layout("pack")
    limits = StoreLimits()
    for first, count in [
        (1, 1), (1, 300), (9, 2), (95, 10), (990, 20), (999, 1), (1000, 1), (1998, 5),
        (9990, 30), (99_999, 2), (123_456_999, 3), (10**12 - 1, 3), (5, 2500),
    ]:  # fmt: skip
        batch = Batch(fence="f", owner="a")
        batch.appends["e1.1"] = [
            Entry(seq, b"x" * (seq % 7), int(Mark.REQUEST) if seq % 5 == 0 else 0)
            for seq in range(first, first + count)
        ]
        keys, args = commit_call(layout, 3, batch, 1.7e9, limits)
        expected = pack_command(("EVALSHA", SHA, len(keys), *keys, *args))
        assert pack_commit(SHA, layout, 3, batch, 1.7e9, limits) == expected, (first, count)


def test_a_bursts_commit_is_the_arguments_the_script_takes() -> None:
    # One stream's run of appends alone (built at once, not part by part).
    batch = Batch(fence="f1", owner="a")
    batch.appends["e1.1"] = [Entry(7, b"p7"), Entry(8, b"p8", int(Mark.REQUEST))]
    layout = Layout("pack")
    names = layout.stream("e1.1")
    keys, args = commit_call(layout, 9, batch, 1.7e9, StoreLimits(max_events=50, live_ttl=60))
    assert keys == [layout.live(9), names.record, names.log, names.wake]
    head = [1_700_000_000_000, 1_700_000_060_000, 50, 60_000, 1, "e1.1", "f1", "a", 0, 0, 1]
    run = [1, 2, 7, 1, 1, b"%d" % Mark.REQUEST, b"7-1", b"8-1", b"p7", b"p8"]
    assert args == [*head, *run, 0, 0, 0]


def test_a_calls_commit_is_what_hiredis_packs_of_its_arguments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch that names one stream (a call's record, its answer, its end; or a few
    events, a trim, a drop) goes by the short paths (``one_key``, ``FEW`` entries packed
    in one ``pack_command``): the same bytes as the general path's arguments."""
    print(f"seed {SEED}")
    rng = random.Random(SEED)
    layout = Layout("pack")
    limits = StoreLimits()
    for n in range(300):
        key = f"e{rng.randrange(3)}.{n}"
        batch = Batch(fence="f", owner="a")
        if rng.random() < 0.7:
            ids: list[object] = rng.choice([[n], [], [f"r{n}"], ['q"\u00e9\n'], [n, n + 1], [True]])
            batch.streams.append(StreamRecord(key, "s1", "a", request_ids=ids, server="default"))
        if rng.random() < 0.8:
            first = rng.randrange(1, 2000)
            batch.appends[key] = [
                Entry(seq, b'{"n":%d}' % seq, rng.choice(MARKS))
                for seq in range(first, first + rng.randrange(0, 7))
            ]
        if rng.random() < 0.2:
            batch.trimmed[key] = rng.randrange(1, 100)
        if rng.random() < 0.5:
            batch.completed[key] = 1.7e9 + rng.random() * 100
        if rng.random() < 0.1:
            batch.dropped.append(key)
        now = 1.7e9 + rng.random() * 1000
        bucket = rng.randrange(256)
        packed = pack_commit(SHA, layout, bucket, batch, now, limits)
        with monkeypatch.context() as general:  # every key in a slot of its own
            general.setattr(redis_layout, "one_key", lambda batch: None)
            keys, args = commit_call(layout, bucket, batch, now, limits)
        assert packed == pack_command(("EVALSHA", SHA, len(keys), *keys, *args))
