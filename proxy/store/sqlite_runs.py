"""How the SQLite store's ``events`` table holds a key's log (schema version 2): a row per
*run* of consecutive events, written together by one commit.

A row is ``(key, seq, mark, run, payload)``:

- ``run`` NULL: the row is one event (every row of a version 1 file, and what a call's
  commit writes): ``seq`` its position, ``payload`` its bytes, ``mark`` its
  :class:`~proxy.core.stream.Mark`.
- ``run`` not NULL: the row holds ``len(run) // 4`` events from ``seq`` on, their bytes
  one after the other in ``payload``; ``run`` is one unsigned 32-bit little-endian word
  per event, its length shifted left by two and its mark (two bits) in the low bits;
  ``mark`` is the marks of them all or'ed (0: no request, no error among them).

A burst's commit then writes one row per :data:`RUN_BYTES` of events instead of a row
(and an index entry) per event: a quarter of the commit's time per event, and less
written to the WAL. The rows of a key hold its stored events exactly, without a gap or an
overlap, as the rows of version 1 did: a cut that falls inside a run rewrites the run
from the cut on (:func:`cut`), so ``min(seq)`` is still the oldest event stored. A read
after position ``after`` starts at the row holding ``after + 1`` (the last row starting
at or before it: :data:`FROM_AFTER`) and skips what comes before it.
"""

from __future__ import annotations

import sqlite3
import sys
from array import array
from collections.abc import Iterable
from functools import cache
from typing import Any

from proxy.core.stream import Mark
from proxy.store.base import Entry

RUN_BYTES = 4_096
"""A run holds events up to this many payload bytes (an event larger than it is a row of
its own): a row stays on its 8 KB page, and a read that starts inside a run skips little."""
RUN_ROWS = 32  # rows per INSERT statement, at most
MARK_BITS = 2
_MARK_MASK = (1 << MARK_BITS) - 1
_MAX_SIZE = (1 << (32 - MARK_BITS)) - 1
_SWAP = sys.byteorder == "big"  # runs are stored little-endian
assert array("I").itemsize == 4, "a run's words are 32 bits"
assert max(Mark) <= _MARK_MASK, "every mark fits a run word's low bits"

# The rows of ``key`` (?1) that hold an event after ``after`` (?2), and any row of
# the run holding ``after + 1`` before it; no row starts inside a run.
FROM_AFTER = (
    "key = ?1 AND seq >= coalesce("
    "(SELECT max(seq) FROM events WHERE key = ?1 AND seq <= ?2 + 1), ?2 + 1)"
)
EVENTS_OF_ROW = "CASE WHEN run IS NULL THEN 1 ELSE length(run) / 4 END"
"""SQL: how many events a row of ``events`` holds (``sum`` of it: a key's events)."""
ENTRIES = f"SELECT seq, payload, mark, run FROM events WHERE {FROM_AFTER} ORDER BY seq"
# (a run's words only when one of its events has a mark: a summary counts the rest)
SUMMARY = (
    f"SELECT seq, mark, {EVENTS_OF_ROW}, CASE WHEN mark != 0 THEN run END"
    f" FROM events WHERE {FROM_AFTER} ORDER BY seq"
)
# The rows wholly before ``below`` (?2); the one holding it, if it starts before, stays.
_CUT = (
    "DELETE FROM events WHERE key = ?1 AND seq < coalesce("
    "(SELECT max(seq) FROM events WHERE key = ?1 AND seq <= ?2), ?2)"
)
_STRADDLING = "SELECT seq, payload, mark, run FROM events WHERE key = ? AND seq < ?"
_DROP_ROW = "DELETE FROM events WHERE key = ? AND seq = ?"


@cache
def insert_runs(rows: int) -> str:
    """An INSERT of ``rows`` rows of one key: the key bound once (``?1``), then each
    row's seq, payload, mark and run, as :func:`runs` makes them."""
    values = ",".join(
        f"(?1,?{4 * n + 2},?{4 * n + 3},?{4 * n + 4},?{4 * n + 5})" for n in range(rows)
    )
    return f"INSERT OR REPLACE INTO events (key, seq, payload, mark, run) VALUES {values}"


def _words(run: bytes) -> array[int]:
    words = array("I")
    words.frombytes(run)
    if _SWAP:
        words.byteswap()
    return words


def runs(new: list[Entry]) -> list[tuple[int, bytes, int, bytes | None]]:
    """``new`` (consecutive events of one key) as rows: runs of up to :data:`RUN_BYTES`
    payload bytes; an event alone (larger than that, or the last one) is a plain row."""
    rows: list[tuple[int, bytes, int, bytes | None]] = []
    payloads: list[bytes] = []
    words: list[int] = []
    first = used = marks = 0
    for seq, payload, mark in new:
        size = len(payload)
        alone = mark & ~_MARK_MASK or size > _MAX_SIZE  # (not a run word: a plain row)
        if payloads and (alone or used + size > RUN_BYTES):
            rows.append(_row(first, payloads, words, marks))
            payloads, words, used, marks = [], [], 0, 0
        if alone:
            rows.append((seq, payload, mark, None))
            continue
        if not payloads:
            first = seq
        payloads.append(payload)
        words.append(size << MARK_BITS | mark)
        used += size
        marks |= mark
    if payloads:
        rows.append(_row(first, payloads, words, marks))
    return rows


def _row(
    first: int, payloads: list[bytes], words: list[int], marks: int
) -> tuple[int, bytes, int, bytes | None]:
    if len(payloads) == 1:
        return first, payloads[0], marks, None
    packed = array("I", words)
    if _SWAP:
        packed.byteswap()
    return first, b"".join(payloads), marks, packed.tobytes()


def insert(conn: sqlite3.Cursor, key: str, new: list[Entry]) -> None:
    """Insert ``key``'s consecutive events ``new`` as runs, a few rows per statement (the
    key bound once; chunks are powers of two up to :data:`RUN_ROWS`, so a few
    statements, prepared once, serve every batch)."""
    rows = runs(new)
    done, count = 0, len(rows)
    while done < count:
        size = min(RUN_ROWS, 1 << ((count - done).bit_length() - 1))
        values: list[Any] = [key]
        for row in rows[done : done + size]:
            values += row
        conn.execute(insert_runs(size), values)
        done += size


def entries(rows: Iterable[Any], after: int, limit: int | None) -> list[Entry]:
    """The events after ``after`` held by ``rows`` (``(seq, payload, mark, run)``, in
    order), at most ``limit``; stops reading ``rows`` once it has them."""
    out: list[Entry] = []
    for seq, payload, mark, run in rows:
        if run is None:
            if seq > after:
                out.append(Entry(seq, payload, mark))
        else:
            at = 0
            for word in _words(run):
                size = word >> MARK_BITS
                if seq > after:
                    out.append(Entry(seq, payload[at : at + size], word & _MARK_MASK))
                at += size
                seq += 1
        if limit is not None and len(out) >= limit:
            del out[limit:]
            break
    return out


def summary(rows: Iterable[Any], after: int) -> tuple[int, int, int]:
    """How many events after ``after`` ``rows`` (``(seq, mark, count, run or None)``, in
    order: :data:`SUMMARY`) hold, and of those how many are requests and errors."""
    messages = requests = errors = 0
    request, error = int(Mark.REQUEST), int(Mark.ERROR)
    for seq, mark, count, run in rows:
        skip = max(0, after + 1 - seq)
        if skip >= count:
            continue
        messages += count - skip
        if not mark:
            continue
        marks = [mark] if run is None else [w & _MARK_MASK for w in _words(run)[skip:]]
        requests += sum(1 for m in marks if m & request)
        errors += sum(1 for m in marks if m & error)
    return messages, requests, errors


def cut(conn: sqlite3.Cursor, key: str, below: int) -> None:
    """Delete ``key``'s events before ``below``: the rows wholly before it, and the part
    before it of a run that holds it (rewritten from ``below`` on)."""
    conn.execute(_CUT, (key, below))
    straddling = conn.execute(_STRADDLING, (key, below)).fetchone()
    if straddling is None:
        return
    conn.execute(_DROP_ROW, (key, straddling[0]))
    kept = entries([straddling], below - 1, None)
    if kept:
        insert(conn, key, kept)
