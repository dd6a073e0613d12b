"""How a stored stream's batches become runs of events (``StoredStreams._runs``): a batch
without a gap is one run, taken without a look at each entry; a gap (none is expected)
splits it; every event comes once, in order, with its own id."""

from __future__ import annotations

from proxy.core.eventrun import EventRun, in_chunks
from proxy.core.sse import encode_event
from proxy.downstream.stored import StoredStreams
from proxy.store.base import Entry, StreamRecord

RECORD = StreamRecord("e6e6e6.7", "s", "a")


def entries(seqs: list[int]) -> list[Entry]:
    return [Entry(seq, b'{"n":%d}' % seq, seq % 3) for seq in seqs]


def framed(batches: list[list[Entry]]) -> bytes:
    """The bytes the batches' events must come as: each encoded alone, in order."""
    return b"".join(
        encode_event(e.payload, event_id=f"e6e6e6.7.{e.seq}") for b in batches for e in b
    )


def test_a_batch_without_a_gap_is_one_run() -> None:
    batches = [entries(list(range(5, 1005))), entries([1005])]
    runs = StoredStreams._runs(RECORD, batches)
    assert [(r.first_seq, len(r)) for r in runs] == [(5, 1000), (1005, 1)]
    assert b"".join(in_chunks(runs)) == framed(batches)


def test_a_gap_splits_a_batch_into_runs() -> None:
    batches = [entries([1, 2, 3, 7, 8, 20]), [], entries([21, 23])]
    runs = StoredStreams._runs(RECORD, batches)
    assert [(r.first_seq, len(r)) for r in runs] == [(1, 3), (7, 2), (20, 1), (21, 1), (23, 1)]
    assert all(isinstance(r, EventRun) for r in runs)
    assert b"".join(in_chunks(runs)) == framed(batches)


def test_a_gap_whose_ends_look_whole_still_splits() -> None:
    """First and last seq 4 apart over 5 entries, yet not consecutive: not one run."""
    batch = [Entry(1, b"a"), Entry(2, b"b"), Entry(4, b"c"), Entry(4, b"d"), Entry(5, b"e")]
    runs = StoredStreams._runs(RECORD, [batch])
    assert b"".join(in_chunks(runs)) == framed([batch])
