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

Threads. The connection lives on one dedicated thread (a one-worker executor): every
statement runs there, in submission order, so the event loop never waits on the disk and
a read submitted after a commit sees it. Tails wake in-process (:mod:`proxy.store.wakeup`):
this store is for one process at a time (``shared = False``), and :meth:`SqliteStore.open`
enforces it with a lock beside the file before reading anything
(:mod:`proxy.store.sqlite_lock`).

The SQL, the schema and the thread's side are in :mod:`proxy.store.sqlite_db`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable
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
)
from proxy.store.sqlite_db import SYNCHRONOUS, Database
from proxy.store.sqlite_lock import StoreLock, lock_store_file
from proxy.store.wakeup import Wakeups

P = ParamSpec("P")
T = TypeVar("T")


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

    async def _call(
        self, method: Callable[Concatenate[Database, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        db, executor = self._db, self._executor
        if self._closed or db is None or executor is None:
            state = "closed" if self._closed else "not open"
            raise StoreError(f"the sqlite store {self.path} is {state}")
        call = functools.partial(method, db, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(executor, db.run, call)

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
        self._now = max(self._now, now)
        if not batch:
            return []
        try:
            return await self._call(Database.commit, batch, now)
        finally:
            # Also on failure or cancellation: a tail only re-reads, and its read queues
            # behind this commit on the one thread.
            self._wakeups.wake(
                [*batch.appends, *batch.completed, *batch.dropped, *(r.key for r in batch.streams)]
            )

    async def get_stream(self, key: str, now: float) -> StreamRecord | None:
        return await self._call(Database.stream, key, now)

    async def read(self, key: str, after: int, now: float, limit: int | None = None) -> list[Entry]:
        return await self._call(Database.read, key, after, now, limit)

    async def tail(self, key: str, after: int) -> AsyncIterator[list[Entry]]:
        while True:
            wakeup = self._wakeups.watch(key)  # before reading: no commit is missed
            try:
                entries, state = await self._call(Database.tail_step, key, after, self._now)
                if entries:
                    after = entries[-1].seq
                    yield entries
                    continue
                if self._wakeups.closed:
                    raise StoreError(f"the sqlite store {self.path} is closed")
                if state == COMPLETED:
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
        await self._call(Database.put_session, record)

    async def get_session(self, session_id: str, now: float) -> SessionRecord | None:
        return await self._call(Database.get_session, session_id, now)

    async def drop_session(self, session_id: str) -> None:
        await self._call(Database.drop_session, session_id)

    async def acquire_lease(self, name: str, owner: str, ttl: float, now: float) -> bool:
        return await self._call(Database.acquire_lease, name, owner, ttl, now)

    async def renew_lease(self, name: str, owner: str, ttl: float, now: float) -> bool:
        return await self._call(Database.renew_lease, name, owner, ttl, now)

    async def release_lease(self, name: str, owner: str) -> None:
        await self._call(Database.release_lease, name, owner)

    async def lease_owner(self, name: str, now: float) -> str | None:
        return await self._call(Database.lease_owner, name, now)

    # ------------------------------------------------------------------ tasks
    async def put_task(self, task_id: str, record: dict[str, Any], expires_at: float) -> bool:
        written: bool = await self._call(Database.put_task, task_id, record, expires_at, self._now)
        return written

    async def get_task(self, task_id: str, now: float) -> dict[str, Any] | None:
        return await self._call(Database.get_task, task_id, now)

    # ------------------------------------------------------------------ housekeeping
    async def sweep(self, now: float) -> int:
        self._now = max(self._now, now)
        keys, sessions = await self._call(Database.sweep, now)
        if keys:
            self._wakeups.wake(keys)
        return len(keys) + sessions
