"""The Redis layout's pure parts: bucket of a stream key, key names, and a batch split by
bucket (each part one single-slot script) that loses, adds and moves nothing."""

from __future__ import annotations

import dataclasses

from proxy.store.base import Batch, Entry, StreamRecord
from proxy.store.redis_layout import (
    BUCKETS,
    STREAM_KEYS_KEPT,
    Layout,
    bucket_of,
    by_bucket,
    entries_of,
)

SESSIONS = [f"{n:012x}" for n in range(0, 30 * 7919, 7919)]


def hash_tag(key: str) -> str:
    """What Redis Cluster hashes: the first ``{…}`` with something in it."""
    return key.partition("{")[2].partition("}")[0]


def test_a_sessions_streams_share_a_bucket_and_sessions_spread() -> None:
    for session in SESSIONS:
        assert len({bucket_of(f"{session}.{n}") for n in range(1, 6)}) == 1
    assert len({bucket_of(f"{session}.1") for session in SESSIONS}) > 20
    assert all(0 <= bucket_of(f"{s}.1") < BUCKETS for s in SESSIONS)
    assert bucket_of("nodot") == bucket_of("nodot")


def test_each_streams_keys_and_its_live_index_have_one_hash_tag() -> None:
    layout = Layout("ns:with:colons")
    keys = layout.stream("abc.7")
    tags = {hash_tag(k) for k in (keys.record, keys.log, keys.wake)}
    assert tags == {hash_tag(layout.live(bucket_of("abc.7")))} == {f"b{bucket_of('abc.7')}"}
    assert keys.record == f"mrp:ns:with:colons:{{b{bucket_of('abc.7')}}}:rec:abc.7"
    assert hash_tag(layout.epoch) == "epoch"
    assert hash_tag(layout.key("lease", "replica:a")) == "lease:replica:a"


def test_a_batch_split_by_bucket_keeps_everything_once_in_its_own_bucket() -> None:
    keys = [f"{session}.{n}" for session in SESSIONS for n in (1, 2)]
    batch = Batch(
        streams=[StreamRecord(k, "s", "o") for k in keys[::3]],
        appends={k: [Entry(1, b"{}")] for k in keys[::2]},
        completed={k: 1.0 for k in keys[1::4]},
        dropped=keys[2::5],
        trimmed={k: 2 for k in keys[::7]},
    )
    parts = by_bucket(batch)
    assert len(parts) > 1
    for bucket, part in parts.items():
        touched = {r.key for r in part.streams} | set(part.appends) | set(part.completed)
        touched |= set(part.dropped) | set(part.trimmed)
        assert {bucket_of(k) for k in touched} == {bucket}
    for field in dataclasses.fields(Batch):  # every field, also those Batch gains later
        values = [getattr(part, field.name) for part in parts.values()]
        whole = getattr(batch, field.name)
        if isinstance(whole, dict):
            merged: dict[str, object] = {}
            for value in values:
                assert not set(merged) & set(value)
                merged.update(value)
            assert merged == whole, field.name
        elif isinstance(whole, list):
            items = [item for value in values for item in value]
            assert sorted(map(repr, items)) == sorted(map(repr, whole)), field.name
        else:
            assert all(value == whole for value in values), field.name


def test_a_raw_xrange_reply_is_read_whatever_fields_an_entry_holds() -> None:
    """As the commit script adds them (``p`` then ``m``, or ``p`` alone), and in any other
    order a writer might use."""
    raw = [
        [b"1-1", [b"p", b'{"a":1}', b"m", b"3"]],
        [b"2-1", [b"p", b"{}"]],
        [b"12-0", [b"m", b"1", b"p", b"[]"]],
        [b"13-1", [b"p", b"x", b"z", b"9"]],
    ]
    assert entries_of(raw) == [
        Entry(1, b'{"a":1}', 3),
        Entry(2, b"{}", 0),
        Entry(12, b"[]", 1),
        Entry(13, b"x", 0),
    ]
    assert [type(e) for e in entries_of(raw)] == [Entry] * 4
    assert entries_of([]) == []


def test_a_layout_keeps_a_bounded_number_of_streams_key_names() -> None:
    # Key names are made once per stream and kept (every commit names them), but not
    # without bound: a long-lived replica sees sessions come and go.
    layout = Layout("ns")
    first = layout.stream("abc.1")
    assert layout.stream("abc.1") is first
    for n in range(STREAM_KEYS_KEPT + 10):
        layout.stream(f"s{n}.1")
    assert len(layout._streams) <= STREAM_KEYS_KEPT
    again = layout.stream("abc.1")
    assert again == first
    assert again.log == f"mrp:ns:{{b{bucket_of('abc.1')}}}:log:abc.1"
    assert layout.live(7) == "mrp:ns:{b7}:live"


def test_a_burst_batch_is_one_part_in_its_sessions_bucket() -> None:
    batch = Batch()
    batch.appends["abc.2"] = [Entry(1, b"x"), Entry(2, b"y")]
    assert by_bucket(batch) == {bucket_of("abc.2"): batch}
