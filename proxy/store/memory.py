"""The in-memory store: this process's dicts. Nothing survives the process.

It is the default, and it costs nothing on the hot path: the runtime does not copy a
session's events into it (the session's own logs are the record, see
:mod:`proxy.store.persist`); it serves the records that outlive a connection and runs the
same contract as the durable stores (``tests/store/``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import secrets
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from proxy.core.errors import ResumeError
from proxy.core.stream import Unacknowledged
from proxy.core.taskrecord import TERMINAL
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
    check_read,
    count_marks,
    read_to_end,
    refused_by,
)
from proxy.store.wakeup import Wakeups

SWEEP_CHUNK = 1_000
"""Records of one table a sweep looks at in one loop turn."""


class MemoryStore(Store):
    kind = "memory"

    def __init__(self, limits: StoreLimits | None = None) -> None:
        super().__init__(limits or StoreLimits())
        self._streams: dict[str, StreamRecord] = {}
        self._logs: dict[str, deque[Entry]] = {}
        self._sessions: dict[str, SessionRecord] = {}
        self._leases: dict[str, tuple[str, float]] = {}
        self._tasks: dict[str, tuple[dict[str, Any], float]] = {}
        self._wakeups = Wakeups()
        self._now = 0.0  # the latest ``now`` seen: tails have no clock of their own

    async def open(self) -> None:
        self._epoch = secrets.token_hex(6)

    async def close(self) -> None:
        self._wakeups.close()

    # ------------------------------------------------------------------ logs
    def _record(self, key: str, now: float) -> StreamRecord | None:
        record = self._streams.get(key)
        if record is not None and record.expires_at is not None and record.expires_at <= now:
            self._drop(key)
            return None
        return record

    def _drop(self, key: str) -> None:
        self._streams.pop(key, None)
        self._logs.pop(key, None)

    async def commit(self, batch: Batch, now: float) -> list[str]:
        self._now = max(self._now, now)
        refused = [k for k in batch.touched() if refused_by(self._record(k, now), k, batch)]
        batch = batch.without(set(refused))
        self._apply(batch, now)
        return refused

    def _apply(self, batch: Batch, now: float) -> None:
        live_until = now + self.limits.live_ttl
        for key in batch.takeovers:
            taken = self._record(key, now)
            assert taken is not None, "refused_by refuses a takeover of no record"
            taken.fence = batch.fence
        for record in batch.streams:
            known = self._record(record.key, now)
            if known is not None:
                known.session_id, known.owner = record.session_id, record.owner
                known.principal, known.server = record.principal, record.server
                known.request_ids, known.announced = list(record.request_ids), record.announced
                continue
            expires_at = record.expires_at if record.expires_at is not None else live_until
            self._streams[record.key] = dataclasses.replace(
                record,
                request_ids=list(record.request_ids),
                expires_at=expires_at,
                fence=batch.fence,
            )
            self._logs.setdefault(record.key, deque())
        for key, entries in batch.appends.items():
            if not entries:
                continue
            found = self._record(key, now)
            if found is None:  # no record: its history was lost, keep what comes
                found = StreamRecord(
                    key, "", batch.owner, first_seq=entries[0].seq, fence=batch.fence
                )
                self._streams[key] = found
            record = found
            log = self._logs.setdefault(key, deque())
            for entry in entries:
                if entry.seq <= record.last_seq:
                    continue  # already there (a retried batch)
                if entry.seq != record.last_seq + 1:
                    log.clear()  # a hole: what was before it is unreachable
                    record.first_seq = entry.seq
                log.append(entry)
                record.last_seq = entry.seq
            while len(log) > self.limits.max_events:
                log.popleft()
            record.first_seq = log[0].seq if log else record.last_seq + 1
            if record.state == LIVE:
                record.expires_at = live_until
        for key, first in batch.trimmed.items():
            trimmed = self._record(key, now)
            if trimmed is not None:
                self._trim(trimmed, first)
        for key, expires_at in batch.completed.items():
            done = self._record(key, now)
            if done is not None:
                done.state = COMPLETED
                done.expires_at = expires_at
        for key in batch.dropped:
            self._drop(key)
        self._wakeups.wake(
            [*batch.appends, *batch.completed, *batch.dropped, *(r.key for r in batch.streams)]
        )

    def _trim(self, record: StreamRecord, first: int) -> None:
        record.first_seq = max(record.first_seq, min(first, record.last_seq + 1))
        log = self._logs.get(record.key)
        while log and log[0].seq < record.first_seq:
            log.popleft()

    async def get_stream(self, key: str, now: float) -> StreamRecord | None:
        return self._record(key, now)

    async def read(self, key: str, after: int, now: float, limit: int | None = None) -> list[Entry]:
        record = check_read(self._record(key, now), after)
        log = self._logs.get(key, deque())
        skip = after + 1 - record.first_seq
        return list(itertools.islice(log, skip, None if limit is None else skip + limit))

    async def tail(self, key: str, after: int) -> AsyncIterator[list[Entry]]:
        while True:
            wakeup = self._wakeups.watch(key)
            try:
                entries = await self.read(key, after, self._now)
                record = self._record(key, self._now)
                if entries:
                    after = entries[-1].seq
                    yield entries
                    if record is not None and read_to_end(record, after):
                        return
                    continue
                if self._wakeups.closed:
                    raise StoreError("the store is closed")
                if record is None:
                    raise ResumeError("the stream has expired", reason="unknown_stream")
                if record.state == COMPLETED:
                    return
                await wakeup.wait()
            finally:
                self._wakeups.unwatch(key, wakeup)

    async def summary(self, key: str, after: int, now: float) -> Unacknowledged:
        return count_marks(await self.read(key, after, now))

    async def live_streams(self, owner: str | None, now: float) -> list[StreamRecord]:
        return [
            r
            for key in list(self._streams)
            if (r := self._record(key, now)) is not None
            and r.state == LIVE
            and (owner is None or r.owner == owner)
        ]

    # ------------------------------------------------------------------ sessions, leases
    async def put_session(self, record: SessionRecord) -> None:
        self._sessions[record.session_id] = SessionRecord(
            record.session_id,
            record.epoch,
            record.owner,
            record.protocol_version,
            record.expires_at,
        )

    async def get_session(self, session_id: str, now: float) -> SessionRecord | None:
        record = self._sessions.get(session_id)
        if record is not None and record.expires_at is not None and record.expires_at <= now:
            del self._sessions[session_id]
            return None
        return record

    async def drop_session(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    async def acquire_lease(self, name: str, owner: str, ttl: float, now: float) -> bool:
        held = self._leases.get(name)
        if held is not None and held[0] != owner and held[1] > now:
            return False
        self._leases[name] = (owner, now + ttl)
        return True

    async def renew_lease(self, name: str, owner: str, ttl: float, now: float) -> bool:
        held = self._leases.get(name)
        if held is None or held[0] != owner or held[1] <= now:
            return False
        self._leases[name] = (owner, now + ttl)
        return True

    async def release_lease(self, name: str, owner: str) -> None:
        held = self._leases.get(name)
        if held is not None and held[0] == owner:
            del self._leases[name]

    async def lease_owner(self, name: str, now: float) -> str | None:
        held = self._leases.get(name)
        return held[0] if held is not None and held[1] > now else None

    # ------------------------------------------------------------------ tasks
    async def put_task(self, task_id: str, record: dict[str, Any], expires_at: float) -> bool:
        held = self._tasks.get(task_id)
        if held is not None and held[1] > self._now and held[0].get("status") in TERMINAL:
            return False
        self._tasks[task_id] = (dict(record), expires_at)
        return True

    async def get_task(self, task_id: str, now: float) -> dict[str, Any] | None:
        found = self._tasks.get(task_id)
        if found is None or found[1] <= now:
            self._tasks.pop(task_id, None)
            return None
        return dict(found[0])

    async def sweep(self, now: float) -> int:
        """Delete what expired by ``now``, :data:`SWEEP_CHUNK` records a loop turn."""
        self._now = max(self._now, now)
        gone = sessions = 0
        tables: tuple[dict[str, Any], ...] = (
            self._streams,
            self._sessions,
            self._leases,
            self._tasks,
        )
        for table in tables:
            names = list(table)
            for start in range(0, len(names), SWEEP_CHUNK):
                if start:
                    await asyncio.sleep(0)
                expired = [
                    n for n in names[start : start + SWEEP_CHUNK] if _expired(table.get(n), now)
                ]
                if table is self._streams:
                    for key in expired:
                        self._drop(key)
                    self._wakeups.wake(expired)
                    gone += len(expired)
                else:
                    for name in expired:
                        del table[name]
                    if table is self._sessions:
                        sessions += len(expired)
        return gone + sessions


def _expired(held: Any, now: float) -> bool:
    """Whether a record of any table (a stream or session record; a lease or task
    ``(value, expires_at)``) expired by ``now``; False when it is gone already."""
    if held is None:
        return False
    at = held[1] if isinstance(held, tuple) else held.expires_at
    return at is not None and at <= now
