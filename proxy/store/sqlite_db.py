"""The SQLite store's database side: schema, SQL, and :class:`Database`, which owns the
connection and runs only on the store's one thread (:mod:`proxy.store.sqlite`).

Schema (``PRAGMA user_version`` = 2)::

    meta(name PRIMARY KEY, value)                   -- 'epoch': minted with the file
    streams(key PRIMARY KEY, session_id, owner, state, first_seq, last_seq,
            request_ids JSON, announced, expires_at, principal, server, fence)
    events(key, seq, mark, run BLOB, payload BLOB, PRIMARY KEY(key, seq))
    sessions(session_id PRIMARY KEY, epoch, owner, protocol_version, expires_at)
    leases(name PRIMARY KEY, owner, expires_at)
    tasks(task_id PRIMARY KEY, record JSON, expires_at)

A new file's pages are 8 KB (:data:`PAGE_SIZE`; a file made with 16 KB pages, as before,
keeps them) and ``events`` is a rowid table, so events of a few KB stay on their page
(see ``_SCHEMA``). A row of ``events`` is one event or a run of them
(:mod:`proxy.store.sqlite_runs`): version 2. A version 1 file (a row per event, no
``run`` column) is brought to version 2 when it is opened (the column added, its rows
kept: each is an event as version 2 reads one); a proxy that reads version 1 then refuses
the file, by its version. ``expires_at`` is unix seconds (NULL: no limit). A row past it is
treated as absent by every read and deleted by :meth:`SqliteStore.sweep` (a stream with
its events); a dropped stream's record is one (expired at 0) until :meth:`Database.tidy_step`
deletes its events after the commit (:mod:`proxy.store.sqlite_commit`).

Columns added after version 1 was first written (``streams.principal``: NULL, nobody's;
``streams.server``: NULL, made before servers were recorded; ``streams.fence``: NULL, the
writers' token before fencing existed, read as "") are nullable and added when a file
without them is opened (:data:`_ADDED_COLUMNS`); every statement names its columns, so a
file stays readable by the versions on either side.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from proxy.core.stream import Unacknowledged
from proxy.core.taskrecord import TERMINAL
from proxy.store import sqlite_commit, sqlite_runs
from proxy.store.base import (
    LIVE,
    Batch,
    Entry,
    SessionRecord,
    StoreError,
    StoreLimits,
    StreamRecord,
    check_read,
    readable_after,
)
from proxy.store.sqlite_fresh import FreshEpochs
from proxy.store.sqlite_rows import STREAM_COLUMNS, stream_record

T = TypeVar("T")

SCHEMA_VERSION = 2
SYNCHRONOUS = ("normal", "full")
BUSY_TIMEOUT_MS = 5_000
WAL_SIZE_LIMIT = 64 * 1024 * 1024  # bytes the WAL file shrinks back to after a checkpoint
# A new file's page size (an existing file keeps its own). Each commit writes every page it
# touched to the WAL whole, checksummed: a call's commit writes three (the events table's
# last leaf, its index's, the streams'), so 8 KB pages halve what a call writes and
# checksums (~30k instructions of ~230k) against 16 KB; events up to ~8 KB still fit on a
# page (4 KB pages: events of a few KB half as fast, measured by the first SQLite pass).
PAGE_SIZE = 8_192
TAIL_CHUNK = 1_000  # entries a tail reads at a time
# The writer's own checkpoints (SQLite's automatic ones, run by the commit that crosses
# the mark) are a backstop: the store's thread checkpoints first, off the event loop
# (:meth:`Database.checkpoint`), and the WAL only reaches this when it cannot keep up.
WAL_BACKSTOP_PAGES = 4_096
SWEEP_KEYS = 64  # expired streams looked at per sweep transaction (the loop turns between)
SWEEP_EVENTS = 2_000  # rows of their events (an event or a run) deleted per sweep transaction
SWEEP_ROWS = 1_000  # expired sessions, leases, tasks deleted per sweep transaction, each
TIDY_EVENTS = 2_000  # rows of a dropped stream's events deleted per transaction (ditto)

_SCHEMA = (
    "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE streams (key TEXT PRIMARY KEY, session_id TEXT NOT NULL,"
    " owner TEXT NOT NULL, state TEXT NOT NULL, first_seq INTEGER NOT NULL,"
    " last_seq INTEGER NOT NULL, request_ids TEXT NOT NULL, announced INTEGER NOT NULL,"
    " expires_at REAL, principal TEXT, server TEXT) WITHOUT ROWID",
    # A rowid table (and its (key, seq) index), not WITHOUT ROWID: there a row over about
    # a quarter of a page spills into an overflow page of its own, which made 1 KB
    # events four times slower; small events commit about as fast either way.
    # ``mark`` before ``payload``: a summary reads it without the payload's overflow pages.
    # ``run`` before ``payload`` too (a file of version 1 has it last: added on open).
    "CREATE TABLE events (key TEXT NOT NULL, seq INTEGER NOT NULL, mark INTEGER NOT NULL,"
    " run BLOB, payload BLOB NOT NULL, PRIMARY KEY (key, seq))",
    "CREATE TABLE sessions (session_id TEXT PRIMARY KEY, epoch TEXT NOT NULL,"
    " owner TEXT NOT NULL, protocol_version TEXT, expires_at REAL)",
    "CREATE TABLE leases (name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at REAL NOT NULL)",
    "CREATE TABLE tasks (task_id TEXT PRIMARY KEY, record TEXT NOT NULL, expires_at REAL NOT NULL)",
)

# (table, column, its declaration): added on open to a file made before they existed.
_ADDED_COLUMNS = (
    ("streams", "principal", "TEXT"),
    ("streams", "server", "TEXT"),
    ("streams", "fence", "TEXT"),
)

_ALIVE = "(expires_at IS NULL OR expires_at > :now)"
# A dropped stream's events, while its record is still the tombstone (expired) it left.
_TIDY_EVENTS = (
    "DELETE FROM events WHERE rowid IN (SELECT rowid FROM events WHERE key = ?1 LIMIT ?2)"
    " AND EXISTS (SELECT 1 FROM streams WHERE key = ?1 AND expires_at <= ?3)"
)
_TIDY_STREAM = "DELETE FROM streams WHERE key = ? AND expires_at <= ?"
_SWEEP_ROWS = (
    "DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} WHERE expires_at <= ? LIMIT ?)"
)
_STREAM_COLUMNS = STREAM_COLUMNS  # the name tests and older callers use


_ACQUIRE_LEASE = (
    "INSERT INTO leases (name, owner, expires_at) VALUES (?, ?, ?)"
    " ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at"
    " WHERE leases.owner = excluded.owner OR leases.expires_at <= ?"
)


def _connect(path: Path, synchronous: str) -> sqlite3.Connection:
    """A connection in WAL mode. Each is used by one thread at a time, but not always the
    one that made it (:class:`Database` says which)."""
    if not path.parent.is_dir():
        raise StoreError(
            f"cannot open the sqlite store {path}: the directory {path.parent} does not exist"
        )
    try:
        # Transactions are explicit; the store, not sqlite3, keeps each connection to one
        # thread at a time.
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the sqlite store {path}: {exc}") from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # only a new file takes it
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode != "wal":
            raise StoreError(f"cannot open the sqlite store {path}: WAL mode refused ({mode})")
        conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
    except sqlite3.Error as exc:
        conn.close()
        raise StoreError(f"cannot open the sqlite store {path}: {exc}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


class Database:
    """Two connections and every statement.

    ``conn`` writes (:meth:`commit`, sessions, leases, tasks, :meth:`sweep_step`,
    :meth:`tidy_step`) and
    ``reader`` reads and checkpoints; in WAL mode neither waits for the other, and a read
    begun after a commit returned sees it. :class:`~proxy.store.sqlite.SqliteStore` runs
    the reads on its thread and the writes where ``synchronous`` says (one thread at a
    time uses each connection)."""

    def __init__(self, path: Path, synchronous: str, limits: StoreLimits) -> None:
        self.path = path
        self.limits = limits
        self.conn = _connect(path, synchronous)
        # The commits' one cursor: ``conn.execute`` makes (and frees) a cursor per
        # statement, ~2,500 instructions each, five statements a call's commit.
        self._cursor = self.conn.cursor()
        self.reader: sqlite3.Connection | None = None
        self.tombstones: list[str] = []  # dropped streams whose events are still stored
        # New keys a commit need not read (the store is the file's one writer).
        self.fresh = FreshEpochs()
        try:
            self.epoch = self._migrate()
            self.conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_BACKSTOP_PAGES}")
            self.reader = _connect(path, synchronous)
        except sqlite3.Error as exc:
            self.close()
            raise StoreError(f"cannot open the sqlite store {path}: {exc}") from exc
        except BaseException:
            self.close()
            raise

    @property
    def _reads(self) -> sqlite3.Connection:
        assert self.reader is not None, "set by __init__"
        return self.reader

    def run(self, call: Callable[[], T]) -> T:
        """``call()``, with any SQLite error as a :class:`StoreError` naming the file."""
        try:
            return call()
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store {self.path}: {exc}") from exc

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
        self.conn.close()

    def checkpoint(self) -> None:
        """Copy the WAL into the database without blocking the writer (``PASSIVE``); the
        writer starts the WAL over at its next commit once all of it is copied."""
        self._reads.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.rollback()
            raise

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """One read transaction on ``reader``: a record and the entries read after it
        agree, whatever the writer commits meanwhile."""
        reads = self._reads
        reads.execute("BEGIN")
        try:
            yield
        finally:
            reads.execute("COMMIT")

    def _many(self, statement: str, rows: Sequence[Any]) -> None:
        """``executemany``, skipped when there is nothing (most batches touch few tables)."""
        if rows:
            self.conn.executemany(statement, rows)

    def _migrate(self) -> str:
        """Create the schema and mint the epoch if the file is new; the stored epoch."""
        with self._transaction() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute("INSERT INTO meta VALUES ('epoch', ?)", (secrets.token_hex(6),))
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            elif version == 1:  # a row per event: each is an event as version 2 reads one
                conn.execute("ALTER TABLE events ADD COLUMN run BLOB")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            elif version != SCHEMA_VERSION:
                raise StoreError(
                    f"the sqlite store {self.path} has schema version {version}; "
                    f"this proxy reads version {SCHEMA_VERSION}"
                )
            for table, column, declared in _ADDED_COLUMNS:
                known = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
                if column not in known:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declared}")
            row = conn.execute("SELECT value FROM meta WHERE name = 'epoch'").fetchone()
        if row is None:
            raise StoreError(f"the sqlite store {self.path} has no epoch: is it damaged?")
        return str(row[0])

    # ------------------------------------------------------------------ commit
    def commit(self, batch: Batch, now: float) -> list[str]:
        """Apply ``batch`` in one transaction (:mod:`proxy.store.sqlite_commit`); the keys
        fencing refused (nothing applied). A dropped stream's events wait in
        :attr:`tombstones` for :meth:`tidy_step`."""
        conn, cursor = self.conn, self._cursor
        # (:meth:`_transaction` spelled out: its generator is a fifth of a call's commit
        # outside SQLite.)
        cursor.execute("BEGIN IMMEDIATE")
        try:
            refused, tombstones = sqlite_commit.commit(cursor, batch, self.limits, now, self.fresh)
            cursor.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.rollback()
            raise
        self.tombstones.extend(tombstones)
        return refused

    def tidy_step(self, now: float) -> bool:
        """Delete up to :data:`TIDY_EVENTS` events of the dropped streams (and a
        tombstone once its events are gone) in one transaction; whether more are left."""
        budget = TIDY_EVENTS
        with self._transaction() as conn:
            while self.tombstones and budget > 0:
                key = self.tombstones[0]
                gone = conn.execute(_TIDY_EVENTS, (key, budget, now)).rowcount
                if gone < budget:  # fewer than asked: none left (or made again since)
                    conn.execute(_TIDY_STREAM, (key, now))
                    self.tombstones.pop(0)
                budget -= gone
        return bool(self.tombstones)

    # ------------------------------------------------------------------ reads
    def stream(self, key: str, now: float) -> StreamRecord | None:
        return self._stream(self._reads, key, now)

    @staticmethod
    def _stream(conn: sqlite3.Connection, key: str, now: float) -> StreamRecord | None:
        row = conn.execute(
            f"SELECT {_STREAM_COLUMNS} FROM streams WHERE key = :key AND {_ALIVE}",
            {"key": key, "now": now},
        ).fetchone()
        return None if row is None else stream_record(row)

    def read(self, key: str, after: int, now: float, limit: int | None) -> list[Entry]:
        with self._snapshot():
            check_read(self.stream(key, now), after)
            return self._entries(key, after, limit)

    def snapshot(
        self, key: str, after: int, now: float, limit: int | None
    ) -> tuple[StreamRecord | None, list[Entry]]:
        """:meth:`~proxy.store.base.Store.snapshot` in one read transaction."""
        with self._snapshot():
            record = self.stream(key, now)
            if not readable_after(record, after):
                return record, []
            return record, self._entries(key, after, limit)

    def _entries(self, key: str, after: int, limit: int | None) -> list[Entry]:
        rows = self._reads.execute(sqlite_runs.ENTRIES, (key, after))
        return sqlite_runs.entries(rows, after, limit)

    def tail_step(self, key: str, after: int, now: float) -> tuple[list[Entry], StreamRecord]:
        """The next entries after ``after`` and the stream's record, read together."""
        with self._snapshot():
            record = check_read(self.stream(key, now), after)
            return self._entries(key, after, TAIL_CHUNK), record

    def summary(self, key: str, after: int, now: float) -> Unacknowledged:
        with self._snapshot():
            check_read(self.stream(key, now), after)
            rows = self._reads.execute(sqlite_runs.SUMMARY, (key, after))
            messages, requests, errors = sqlite_runs.summary(rows, after)
        return Unacknowledged(messages, requests, errors)

    def live_streams(self, owner: str | None, now: float) -> list[StreamRecord]:
        query = f"SELECT {_STREAM_COLUMNS} FROM streams WHERE state = :live AND {_ALIVE}"
        if owner is not None:
            query += " AND owner = :owner"
        rows = self._reads.execute(query, {"live": LIVE, "now": now, "owner": owner})
        return [stream_record(row) for row in rows]

    # ------------------------------------------------------------------ sessions, leases, tasks
    def put_session(self, r: SessionRecord) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO sessions VALUES (?, ?, ?, ?, ?)",
            (r.session_id, r.epoch, r.owner, r.protocol_version, r.expires_at),
        )

    def get_session(self, session_id: str, now: float) -> SessionRecord | None:
        row = self._reads.execute(
            "SELECT session_id, epoch, owner, protocol_version, expires_at FROM sessions"
            f" WHERE session_id = :id AND {_ALIVE}",
            {"id": session_id, "now": now},
        ).fetchone()
        return None if row is None else SessionRecord(*row)

    def drop_session(self, session_id: str) -> None:
        self.conn.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))

    def acquire_lease(self, name: str, owner: str, ttl: float, now: float) -> bool:
        taken = self.conn.execute(_ACQUIRE_LEASE, (name, owner, now + ttl, now))
        return taken.rowcount == 1

    def renew_lease(self, name: str, owner: str, ttl: float, now: float) -> bool:
        renewed = self.conn.execute(
            "UPDATE leases SET expires_at = ? WHERE name = ? AND owner = ? AND expires_at > ?",
            (now + ttl, name, owner, now),
        )
        return renewed.rowcount == 1

    def release_lease(self, name: str, owner: str) -> None:
        self.conn.execute("DELETE FROM leases WHERE name = ? AND owner = ?", (name, owner))

    def lease_owner(self, name: str, now: float) -> str | None:
        row = self._reads.execute(
            "SELECT owner FROM leases WHERE name = ? AND expires_at > ?", (name, now)
        ).fetchone()
        return None if row is None else str(row[0])

    def put_task(self, task_id: str, record: dict[str, Any], expires_at: float, now: float) -> bool:
        """Write it unless the record held (not expired) is final; whether it was."""
        with self._transaction() as conn:
            held = self._task(conn, task_id, now)
            if held is not None and held.get("status") in TERMINAL:
                return False
            conn.execute(
                "INSERT OR REPLACE INTO tasks VALUES (?, ?, ?)",
                (task_id, json.dumps(record), expires_at),
            )
        return True

    def get_task(self, task_id: str, now: float) -> dict[str, Any] | None:
        return self._task(self._reads, task_id, now)

    @staticmethod
    def _task(conn: sqlite3.Connection, task_id: str, now: float) -> dict[str, Any] | None:
        row = conn.execute(
            "SELECT record FROM tasks WHERE task_id = ? AND expires_at > ?", (task_id, now)
        ).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def sweep_step(self, now: float) -> tuple[list[str], int, bool]:
        """Delete what expired by ``now`` in one transaction of bounded work: at most
        :data:`SWEEP_EVENTS` events of expired streams (a record goes once its events
        are gone), then at most :data:`SWEEP_ROWS` expired sessions, leases and tasks
        each. The streams whose records went, how many sessions, and whether more is
        left (the caller lets the loop turn before the next step)."""
        budget = SWEEP_EVENTS
        gone: list[str] = []
        with self._transaction() as conn:
            expired = conn.execute(
                "SELECT key FROM streams WHERE expires_at <= ? LIMIT ?", (now, SWEEP_KEYS)
            ).fetchall()
            for (key,) in expired:
                deleted = conn.execute(_TIDY_EVENTS, (key, budget, now)).rowcount
                if deleted == budget:  # the budget is spent: its record waits for the next
                    return gone, 0, True
                conn.execute(_TIDY_STREAM, (key, now))
                gone.append(key)
                budget -= deleted
            more = len(expired) == SWEEP_KEYS
            sessions = 0
            for table in ("sessions", "leases", "tasks"):
                deleted = conn.execute(_SWEEP_ROWS.format(table=table), (now, SWEEP_ROWS)).rowcount
                more = more or deleted == SWEEP_ROWS
                if table == "sessions":
                    sessions = deleted
            return gone, sessions, more
