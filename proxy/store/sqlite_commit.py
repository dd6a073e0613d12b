"""One :class:`~proxy.store.base.Batch` applied to the SQLite store in one transaction,
with as few statements as the batch allows (:func:`commit`).

Each key the batch touches is read once (its record, alive or not, and its oldest stored
seq: one ``SELECT``), unless it is known to have no row (:class:`FreshEpochs`: a new
stream of a session first seen without rows); fencing is decided from that read, every
change of the batch is then worked out in Python, and each key's record is written once.
A call's commit (a new record, its answer, its ending) is ``BEGIN``, one ``INSERT`` of
events, one of the record, ``COMMIT``; events are deleted only when a record needs it (a
trim, ``max_events``, a lost history, a key made again after it expired).

A dropped stream of at most :data:`DROP_AT_ONCE` stored events (a call's) goes in the
commit, row and events: its pages are the ones the commit writes anyway. A larger one's
record becomes a *tombstone* (expired at 0: every read treats it as
absent, as it does any expired record) and its events stay until
:meth:`~proxy.store.sqlite_db.Database.tidy_step` deletes them, a piece at a time, after
the commit: a finished burst's 10,000 events are not deleted inside the commit that lets
its last ones go. A tombstone left when the proxy stops is an expired record like any
other (the sweep deletes it with its events; a key made again starts without a log).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from typing import Any

from proxy.store import sqlite_runs
from proxy.store.base import COMPLETED, LIVE, Batch, Entry, StoreLimits, StreamRecord, refused_by
from proxy.store.sqlite_fresh import FreshEpochs
from proxy.store.sqlite_rows import (
    INSERT_ONE,
    PUT_STREAM,
    STREAM_COLUMNS,
    ids_json,
    stream_record,
    stream_row,
)

# Always one row: the record's columns (NULL: no record) and the key's oldest stored seq
# (NULL: no events), whether or not a record holds them.
_LOAD = (
    f"SELECT {STREAM_COLUMNS}, (SELECT min(seq) FROM events WHERE events.key = ?1)"
    " FROM (SELECT 1) LEFT JOIN streams ON streams.key = ?1"
)
_KEY_OF = attrgetter("key")
_SEQ_OF = itemgetter(0)  # an :class:`Entry`'s seq

_WIPE = "DELETE FROM events WHERE key = ?"

TOMBSTONE_EXPIRES = 0.0  # a dropped record's ``expires_at``: expired at any ``now``
DROP_AT_ONCE = 64
"""A dropped stream with at most this many stored events is deleted in its commit (a
call's stream evicted by the next call: no tombstone, no later transaction for it)."""


def _copy(given: StreamRecord, expires_at: float | None, fence: str) -> StreamRecord:
    """``given`` with its expiry and token (what ``dataclasses.replace`` makes, in a
    third of its time: it looks every field up by name)."""
    r = given
    return StreamRecord(
        r.key,
        r.session_id,
        r.owner,
        r.state,
        r.first_seq,
        r.last_seq,
        r.request_ids,
        r.announced,
        expires_at,
        r.principal,
        r.server,
        fence,
    )


def alive(record: StreamRecord | None, now: float) -> bool:
    return record is not None and (record.expires_at is None or record.expires_at > now)


@dataclass(slots=True)
class AppendPlan:
    """What one key's entries of a batch do to its stored log."""

    new: list[Entry]  # to insert
    clear: bool = False  # a hole: every stored entry is unreachable and goes
    cut: int | None = None  # stored entries below this seq go (``max_events``)


def plan_append(
    record: StreamRecord, oldest: int | None, entries: Sequence[Entry], max_events: int
) -> AppendPlan:
    """The memory store's append rules, from the record and its oldest stored seq alone.

    Moves ``record.last_seq`` and ``record.first_seq``; the stored log is assumed to run
    without a gap from ``oldest`` to ``record.last_seq`` (every commit keeps it so).
    """
    new: list[Entry] = []
    clear = False
    last = record.last_seq
    seqs = list(map(_SEQ_OF, entries))
    if seqs and seqs[0] == last + 1 and seqs == list(range(last + 1, last + 1 + len(seqs))):
        # (each seq the next one: a burst's run, checked and taken in C, no step per event)
        new, last = list(entries), seqs[-1]
        entries = ()
    for entry in entries:
        if entry.seq <= last:
            continue  # already there (a retried batch)
        if entry.seq != last + 1:
            new.clear()  # a hole: what was before it is unreachable
            clear = True
        new.append(entry)
        last = entry.seq
    record.last_seq = last
    if clear or oldest is None:
        oldest = new[0].seq if new else None
    if oldest is None:
        record.first_seq = last + 1
        return AppendPlan(new, clear)
    cut = last - max_events + 1
    if cut <= oldest:
        record.first_seq = oldest
        return AppendPlan(new, clear)
    record.first_seq = cut
    return AppendPlan([e for e in new if e.seq >= cut], clear, cut)


class _Key:
    """One key while its part of a batch is worked out (a plain class: a slots
    dataclass with a list default made its ``__init__`` a tenth of a call's commit)."""

    __slots__ = (
        "below",
        "dropped",
        "had_events",
        "new",
        "oldest",
        "record",
        "stored",
        "stored_events",
        "wipe",
        "write",
    )

    def __init__(self, record: StreamRecord | None, oldest: int | None) -> None:
        self.record = record  # what its row holds (None: no row), alive or not
        self.stored = record is not None  # a row is stored (live, expired or a tombstone)
        self.oldest = oldest  # its oldest stored event that is not to be deleted
        self.wipe = False  # every stored event goes
        self.below: int | None = None  # stored events below this seq go
        self.new: list[Entry] = []  # events to insert
        self.write = False  # the record (or a tombstone) is written
        self.dropped = False
        self.had_events = oldest is not None  # events were stored before this batch
        # How many (at most) were stored before this batch (no record: as if many).
        self.stored_events = 0
        if oldest is not None:
            self.stored_events = (
                DROP_AT_ONCE + 1 if record is None else record.last_seq - oldest + 1
            )

    def start_over(self) -> None:
        """The key is new again (never made, expired or dropped): without a log."""
        if self.oldest is not None or self.below is not None:
            self.wipe = True
        self.oldest, self.below, self.new = None, None, []


def _touched(batch: Batch) -> dict[str, Any]:
    """:meth:`Batch.touched` (its keys, in order), without a ``dict.fromkeys`` per
    empty part (a call's batch names one key in three parts)."""
    streams = batch.streams
    # (no comprehension: a function call of its own; the dicts' values are never read)
    found: dict[str, Any] = dict.fromkeys(map(_KEY_OF, streams)) if streams else {}
    for named in (batch.takeovers, batch.appends, batch.trimmed, batch.completed):
        if named:
            found.update(named)
    if batch.dropped:
        found.update(dict.fromkeys(batch.dropped))
    return found


def commit(
    conn: sqlite3.Cursor,
    batch: Batch,
    limits: StoreLimits,
    now: float,
    fresh: FreshEpochs | None = None,
) -> tuple[list[str], list[str]]:
    """Apply ``batch`` inside the caller's transaction: the keys fencing refused (nothing
    of the batch applied to them) and the keys that became tombstones. ``fresh``: the
    keys known to have no row (:class:`FreshEpochs`: the store's, as its one writer)."""
    if fresh is not None and _a_call(conn, batch, limits, now, fresh):
        return [], []
    keys: dict[str, _Key] = {}
    takeovers = batch.takeovers
    refused: list[str] = []
    for key in _touched(batch):
        if fresh is not None:
            if takeovers:  # (a reaper's batch: every key read)
                fresh.named(key)
            elif fresh.absent(conn, key):
                keys[key] = _Key(None, None)  # (what its SELECT would have found)
                continue
        *columns, oldest = conn.execute(_LOAD, (key,)).fetchone()
        if columns[0] is None:
            keys[key] = _Key(None, oldest)
            # (no record and no takeover: nothing to refuse; a new key, a call's, mostly)
            if takeovers and refused_by(None, key, batch):
                refused.append(key)
            continue
        record = stream_record(columns)
        keys[key] = _Key(record, oldest)
        if refused_by(record if alive(record, now) else None, key, batch):
            refused.append(key)
    if refused:
        batch = batch.without(set(refused))
    live_until = now + limits.live_ttl
    for key in batch.takeovers:
        k = keys[key]
        assert k.record is not None, "refused_by lets a takeover through only on a live record"
        k.record.fence, k.write = batch.fence, True
    for given in batch.streams:
        k = keys[given.key]
        r = k.record
        if r is None or (r.expires_at is not None and r.expires_at <= now):
            # An expired record is gone as if never made.
            if k.oldest is not None or k.below is not None or k.new:
                k.start_over()
            expires = live_until if given.expires_at is None else given.expires_at
            k.record = _copy(given, expires, batch.fence)
        else:
            r.session_id, r.principal, r.server = given.session_id, given.principal, given.server
            r.owner, r.request_ids, r.announced = given.owner, given.request_ids, given.announced
        k.write = True
    for key, entries in batch.appends.items():
        if entries:
            _append(keys[key], key, entries, batch, limits, now)
    for key, first in batch.trimmed.items():
        _trim(keys[key], first)
    for key, at in batch.completed.items():
        k = keys[key]
        r = k.record
        if r is not None and (r.expires_at is None or r.expires_at > now):
            r.state, r.expires_at, k.write = COMPLETED, at, True
    for key in batch.dropped:
        keys[key].dropped = True
    return refused, _write(conn, keys, batch)


def _a_call(
    conn: sqlite3.Cursor, batch: Batch, limits: StoreLimits, now: float, fresh: FreshEpochs
) -> bool:
    """A call's batch (a new stream's record, its one answer, its ending or not yet) on
    a key known to have no row: written as :func:`commit` works it out (the record
    made, the answer appended, the stream ended), without the working out. False
    (nothing done) for any other batch."""
    streams, appends, completed = batch.streams, batch.appends, batch.completed
    if (
        len(streams) != 1
        or len(appends) != 1
        or batch.takeovers
        or batch.trimmed
        or batch.dropped
        or limits.max_events <= 0
        or limits.live_ttl <= 0
    ):
        return False
    given = streams[0]
    key = given.key
    entries = appends.get(key)
    if (
        entries is None
        or len(entries) != 1
        or given.state != LIVE
        or given.expires_at is not None
        or (completed and (len(completed) != 1 or key not in completed))
    ):
        return False
    entry = entries[0]
    seq = entry[0]
    if seq != given.last_seq + 1 or not fresh.absent(conn, key):  # (absent: last, it notes)
        return False
    # The record as given, alive (``live_ttl``), holding the answer alone (first = last =
    # its seq); ended (if so) while alive; the batch's token.
    state, expires = LIVE, now + limits.live_ttl
    if completed:
        state, expires = COMPLETED, completed[key]
    conn.execute(INSERT_ONE, (key, *entry))
    conn.execute(
        PUT_STREAM,
        (
            key,
            given.session_id,
            given.owner,
            state,
            seq,
            seq,
            ids_json(given.request_ids),
            int(given.announced),
            expires,
            given.principal,
            given.server,
            batch.fence,
        ),
    )
    return True


def _append(
    k: _Key, key: str, entries: list[Entry], batch: Batch, limits: StoreLimits, now: float
) -> None:
    live_until = now + limits.live_ttl
    record = k.record
    if record is None or (record.expires_at is not None and record.expires_at <= now):
        # No record (never made, expired, or its history lost): keep what comes.
        k.start_over()
        k.record = record = StreamRecord(
            key, "", batch.owner, first_seq=entries[0].seq, fence=batch.fence
        )
    if len(entries) == 1 and k.oldest is None and limits.max_events > 0:
        entry = entries[0]
        if entry.seq == record.last_seq + 1:
            # (a call's answer on a log with nothing stored: what plan_append works out)
            record.last_seq = record.first_seq = k.oldest = entry.seq
            k.new.append(entry)
            if record.state == LIVE:
                record.expires_at = live_until
            k.write = True
            return
    plan = plan_append(record, k.oldest, entries, limits.max_events)
    if plan.clear:
        k.start_over()
    elif plan.cut is not None:
        k.below = plan.cut if k.below is None else max(k.below, plan.cut)
    k.new += plan.new
    if record.state == LIVE:
        record.expires_at = live_until
    k.oldest = record.first_seq if record.first_seq <= record.last_seq else None
    k.write = True


def _trim(k: _Key, first: int) -> None:
    """Entries before ``first`` go and ``first_seq`` moves up to it (never past
    ``last_seq + 1``), on any record, alive or not."""
    record = k.record
    if record is None:
        return
    record.first_seq = max(record.first_seq, min(first, record.last_seq + 1))
    if k.oldest is not None and k.oldest < record.first_seq:
        k.below = record.first_seq if k.below is None else max(k.below, record.first_seq)
        k.new = [e for e in k.new if e.seq >= record.first_seq]
        k.oldest = record.first_seq if record.first_seq <= record.last_seq else None
    k.write = True


def _write(conn: sqlite3.Cursor, keys: dict[str, _Key], batch: Batch) -> list[str]:
    """The statements of the worked-out keys, key by key (a key's deletes before its
    inserts; one key's statements touch no other's rows), every record written in one
    statement at the end; the tombstones written."""
    rows: list[tuple[Any, ...]] = []
    tombstones: list[str] = []
    for key, k in keys.items():
        if k.dropped:
            # A small stream goes now; a larger one's row becomes a tombstone and its
            # events go after the commit (tidy); events without a row (none written by
            # this store) go now.
            if k.stored and k.stored_events <= DROP_AT_ONCE:
                conn.execute("DELETE FROM streams WHERE key = ?", (key,))
                if k.had_events:
                    conn.execute(_WIPE, (key,))
            elif k.stored:
                tomb = StreamRecord(key, "", batch.owner, COMPLETED, fence=batch.fence)
                tomb.expires_at = TOMBSTONE_EXPIRES
                rows.append(stream_row(tomb))
                tombstones.append(key)
                if k.wipe:
                    conn.execute(_WIPE, (key,))
            elif k.had_events:
                conn.execute(_WIPE, (key,))
            continue
        if k.wipe:
            conn.execute(_WIPE, (key,))
        elif k.below is not None:
            sqlite_runs.cut(conn, key, k.below)
        new = k.new
        if len(new) == 1:  # (a call's answer: one row, no chunking)
            conn.execute(INSERT_ONE, (key, *new[0]))
        elif new:
            sqlite_runs.insert(conn, key, new)
        if k.write and k.record is not None:
            rows.append(stream_row(k.record))
    if len(rows) == 1:  # (a call's commit: one record; ``execute`` makes no iterator)
        conn.execute(PUT_STREAM, rows[0])
    elif rows:
        conn.executemany(PUT_STREAM, rows)
    return tombstones
