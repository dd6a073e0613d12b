"""The SQLite store: one file that survives a restart of the proxy (not shared by replicas).

Durability. The file is in WAL mode and every :meth:`SqliteStore.commit` is one
transaction (``BEGIN IMMEDIATE`` … ``COMMIT``) that has returned from SQLite before the
call returns, so a batch is stored whole or not at all. ``synchronous``:

- ``"normal"`` (default): a committed transaction is in the WAL file, written to the OS
  (its page cache) but not fsynced. It survives any end of the proxy's process, SIGKILL
  included; only an OS crash or a power loss may lose the last transactions (never a part
  of one: the database stays consistent).
- ``"full"``: the WAL is fsynced at every commit, so a commit also survives a power loss.
  Each commit then costs a disk flush.

Threads. Two connections (:class:`~proxy.store.sqlite_db.Database`): one writes, one
reads; in WAL mode neither waits for the other. Reads and checkpoints run on one
dedicated thread (a one-worker executor), in submission order, so a replay never holds
the event loop. Writes (commits, sessions, leases, tasks) run where ``synchronous`` says:

- ``"normal"``: on the event loop itself, at once. Such a commit only hands pages to the
  OS (no fsync): about 0.1 ms for a call, 1 ms for 250 events, less than handing it to a
  thread costs, and without the thread's fight for the GIL with a busy loop (each
  statement gives the GIL up and waits up to the switch interval to get it back: a
  burst's commits took ten times longer beside the loop relaying it). The checkpoints
  that copy the WAL into the database (and fsync it) go to the thread instead
  (at most every :data:`CHECKPOINT_SECONDS`); SQLite's own ones on the writer are a
  backstop.
- ``"full"``: on the thread, behind the reads queued before them: each commit waits for
  an fsync, which the loop must not.

A read submitted after a commit returned sees it either way. Tails wake in-process
(:mod:`proxy.store.wakeup`): this store is for one process at a time (``shared =
False``), and :meth:`SqliteStore.open` enforces it with a lock beside the file before
reading anything (:mod:`proxy.store.sqlite_lock`).

The SQL, the schema and the thread's side are in :mod:`proxy.store.sqlite_db`.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from proxy.core.stream import Unacknowledged
from proxy.store.base import (
    COMPLETED,
    Batch,
    Entry,
    SessionRecord,
    Store,
    StoreError,
    StoreLimits,
    StreamRecord,
    read_to_end,
)
from proxy.store.sqlite_db import SYNCHRONOUS, Database
from proxy.store.sqlite_lock import StoreLock, lock_store_file
from proxy.store.wakeup import Wakeups

P = ParamSpec("P")
T = TypeVar("T")

CHECKPOINT_SECONDS = 0.1
"""While commits run on the loop, the thread checkpoints the WAL at most this often (it
grows by what is committed meanwhile: a few MB at most, at full speed)."""

TIDY_SECONDS = 0.02
"""How long after a commit that dropped streams their events start to be deleted (a
piece per transaction, :meth:`Database.tidy_step`, the loop turning between pieces): not
in the commit that lets a burst's last events go."""


class SqliteStore(Store):
    """The async face of :class:`Database`: each call is a job on its one thread."""

    kind = "sqlite"
    durable = True
    shared = False

    def __init__(
        self, path: str | Path, limits: StoreLimits, *, synchronous: str = "normal"
    ) -> None:
        if synchronous not in SYNCHRONOUS:
            raise ValueError(
                f"sqlite synchronous must be one of {', '.join(SYNCHRONOUS)}, not {synchronous!r}"
            )
        super().__init__(limits)
        self.path = Path(path)
        self.synchronous = synchronous
        self._executor: ThreadPoolExecutor | None = None
        self._db: Database | None = None
        self._lock: StoreLock | None = None
        self._wakeups = Wakeups()
        self._closed = False
        self._now = 0.0  # the latest ``now`` seen: tails have no clock of their own
        # Writes on the loop (synchronous normal: no fsync per commit), else on the thread.
        self._inline = self.commits_at_once = synchronous == "normal"
        self._next_checkpoint = 0.0  # time.monotonic(): no checkpoint is asked before it
        self._checkpoint: asyncio.Future[None] | None = None  # asked, not yet done
        self._tidy: asyncio.Task[None] | None = None  # deleting dropped streams' events
        # What the tidy awaits before each piece (a test holds it on a condition).
        self.tidy_pause: Callable[[], Awaitable[None]] = functools.partial(
            asyncio.sleep, TIDY_SECONDS
        )

    async def _call(
        self, method: Callable[Concatenate[Database, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        db, executor = self._db, self._executor
        if self._closed or db is None or executor is None:
            state = "closed" if self._closed else "not open"
            raise StoreError(f"the sqlite store {self.path} is {state}")
        call = functools.partial(method, db, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(executor, db.run, call)

    async def _write(
        self, method: Callable[Concatenate[Database, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """A write: on the loop at once (:attr:`_inline`), else a job on the thread."""
        if not self._inline:
            return await self._call(method, *args, **kwargs)
        db = self._db
        if self._closed or db is None:
            state = "closed" if self._closed else "not open"
            raise StoreError(f"the sqlite store {self.path} is {state}")
        return db.run(functools.partial(method, db, *args, **kwargs))

    def _checkpoint_soon(self) -> None:
        """After a commit on the loop: have the thread copy the WAL into the database,
        unless it is doing so or did within :data:`CHECKPOINT_SECONDS`."""
        if self._checkpoint is not None:
            return
        now = time.monotonic()  # (not the loop's ``time()``: a Python call per commit)
        if now < self._next_checkpoint:
            return
        db, executor = self._db, self._executor
        if db is None or executor is None or self._closed:
            return
        self._next_checkpoint = now + CHECKPOINT_SECONDS
        done = asyncio.get_running_loop().run_in_executor(executor, db.run, db.checkpoint)
        self._checkpoint = done
        done.add_done_callback(self._checkpointed)

    def _checkpointed(self, done: asyncio.Future[None]) -> None:
        self._checkpoint = None
        if not done.cancelled():
            done.exception()  # a failed checkpoint is retried by the next; SQLite's backstop

    # ------------------------------------------------------------------ lifetime
    async def open(self) -> None:
        if self._executor is not None or self._closed:
            raise StoreError(f"the sqlite store {self.path} opens once (and not after close)")
        # One proxy per file: the lock comes before the first read (sqlite_lock).
        try:
            self._lock = lock_store_file(self.path)
        except BaseException:
            self._closed = True
            raise
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-store")
        loop = asyncio.get_running_loop()
        make = functools.partial(Database, self.path, self.synchronous, self.limits)
        try:
            self._db = await loop.run_in_executor(self._executor, make)
        except BaseException:
            self._executor.shutdown(wait=False)
            self._closed = True
            self._lock.release()
            raise
        self._epoch = self._db.epoch

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._wakeups.close()
        if self._tidy is not None:  # what it left is expired records, deleted by a sweep
            self._tidy.cancel()
            await asyncio.gather(self._tidy, return_exceptions=True)
        executor, db = self._executor, self._db
        if executor is None:
            return
        if db is not None:
            try:  # queued after every job already submitted: they finish first
                await asyncio.get_running_loop().run_in_executor(executor, db.close)
            except BaseException:
                executor.shutdown(wait=False)  # it ends once its queue is done
                raise  # the lock stays held until the process ends: the thread may write
        executor.shutdown(wait=True)  # idle by now: joining its thread takes no time
        if self._lock is not None:
            self._lock.release()

    # ------------------------------------------------------------------ logs
    async def commit(self, batch: Batch, now: float) -> list[str]:
        if self._inline:
            return self.commit_now(batch, now)
        self._now = max(self._now, now)
        if not batch:
            return []
        try:
            return await self._call(Database.commit, batch, now)
        finally:
            # Also on failure or cancellation: a tail only re-reads, and its read queues
            # behind this commit on the one thread.
            self._wake(batch)
            self._tidy_soon()

    def commit_now(self, batch: Batch, now: float) -> list[str]:
        """:meth:`commit` on the loop, at once (``synchronous: normal``)."""
        self._now = max(self._now, now)
        if not batch:
            return []
        db = self._db
        if self._closed or db is None:
            state = "closed" if self._closed else "not open"
            raise StoreError(f"the sqlite store {self.path} is {state}")
        try:
            refused = db.commit(batch, now)  # (:meth:`Database.run` spelled out)
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store {self.path}: {exc}") from exc
        finally:
            self._wake(batch)  # also on failure: a tail only re-reads
        self._checkpoint_soon()
        if db.tombstones:
            self._tidy_soon()
        return refused

    def _tidy_soon(self) -> None:
        """Start deleting the dropped streams' events, unless that is under way."""
        db = self._db
        if db is None or not db.tombstones or self._tidy is not None or self._closed:
            return
        self._tidy = asyncio.get_running_loop().create_task(self._tidy_all())

    async def _tidy_all(self) -> None:
        """Delete the dropped streams' events, a piece per transaction, until none is
        left; a failed piece is retried by the next commit's tidy (the records are
        already tombstones: nothing reads those events)."""
        try:
            more = True
            while more:
                await self.tidy_pause()
                more = await self._write(Database.tidy_step, self._now)
        except StoreError:
            pass
        finally:
            self._tidy = None

    def _wake(self, batch: Batch) -> None:
        if not self._wakeups.watched:  # (no tail waits: most commits; no list of keys)
            return
        self._wakeups.wake(
            [*batch.appends, *batch.completed, *batch.dropped, *(r.key for r in batch.streams)]
        )

    async def get_stream(self, key: str, now: float) -> StreamRecord | None:
        return await self._call(Database.stream, key, now)

    async def read(self, key: str, after: int, now: float, limit: int | None = None) -> list[Entry]:
        return await self._call(Database.read, key, after, now, limit)

    async def snapshot(
        self, key: str, after: int, now: float, limit: int | None = None
    ) -> tuple[StreamRecord | None, list[Entry]]:
        return await self._call(Database.snapshot, key, after, now, limit)

    async def tail(self, key: str, after: int) -> AsyncIterator[list[Entry]]:
        while True:
            wakeup = self._wakeups.watch(key)  # before reading: no commit is missed
            try:
                entries, record = await self._call(Database.tail_step, key, after, self._now)
                if entries:
                    after = entries[-1].seq
                    yield entries
                    if read_to_end(record, after):
                        return
                    continue
                if self._wakeups.closed:
                    raise StoreError(f"the sqlite store {self.path} is closed")
                if record.state == COMPLETED:
                    return
                await wakeup.wait()
            finally:
                self._wakeups.unwatch(key, wakeup)

    async def summary(self, key: str, after: int, now: float) -> Unacknowledged:
        return await self._call(Database.summary, key, after, now)

    async def live_streams(self, owner: str | None, now: float) -> list[StreamRecord]:
        return await self._call(Database.live_streams, owner, now)

    # ------------------------------------------------------------------ sessions, leases
    async def put_session(self, record: SessionRecord) -> None:
        await self._write(Database.put_session, record)

    async def get_session(self, session_id: str, now: float) -> SessionRecord | None:
        return await self._call(Database.get_session, session_id, now)

    async def drop_session(self, session_id: str) -> None:
        await self._write(Database.drop_session, session_id)

    async def acquire_lease(self, name: str, owner: str, ttl: float, now: float) -> bool:
        return await self._write(Database.acquire_lease, name, owner, ttl, now)

    async def renew_lease(self, name: str, owner: str, ttl: float, now: float) -> bool:
        return await self._write(Database.renew_lease, name, owner, ttl, now)

    async def release_lease(self, name: str, owner: str) -> None:
        await self._write(Database.release_lease, name, owner)

    async def lease_owner(self, name: str, now: float) -> str | None:
        return await self._call(Database.lease_owner, name, now)

    # ------------------------------------------------------------------ tasks
    async def put_task(self, task_id: str, record: dict[str, Any], expires_at: float) -> bool:
        written: bool = await self._write(Database.put_task, task_id, record, expires_at, self._now)
        return written

    async def get_task(self, task_id: str, now: float) -> dict[str, Any] | None:
        return await self._call(Database.get_task, task_id, now)

    # ------------------------------------------------------------------ housekeeping
    async def sweep(self, now: float) -> int:
        self._now = max(self._now, now)
        gone = 0
        more = True
        while more:  # a transaction at a time: the loop turns between them
            keys, sessions, more = await self._write(Database.sweep_step, now)
            if keys:
                self._wakeups.wake(keys)
            gone += len(keys) + sessions
            if more:
                await asyncio.sleep(0)
        return gone
