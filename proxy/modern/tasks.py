"""Tasks: a legacy server's ``tools/call`` kept as durable work (docs/modern.md §Tasks).

The :class:`TaskKeeper` turns a running :class:`~proxy.modern.call.Call` into a task:
it writes the task's record to the store and only then lets the ``CreateTaskResult`` go
out (a ``tasks/get`` for it would resolve: Tasks extension §Task Creation). From then on
every change of the call (input wanted, answered, completed, failed, cancelled) is
written to the record, in order, one write at a time per task, and announced to the
listeners that named the task (``notifications/tasks``).

``tasks/get`` reads the local call when this replica runs the task, else the store: any
replica answers it. ``tasks/update`` and ``tasks/cancel`` act on the local call, or are
forwarded to the replica that runs it. A record whose replica is gone (a restart with
the sqlite store, a dead replica with Redis) cannot finish: it reads as ``failed``.
Task ids are 192 random bits; unknown, expired and other principals' tasks are all
``-32602``.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, assert_never

import structlog

from proxy import tracing
from proxy.backoff import Backoff
from proxy.config_sections import TasksConfig
from proxy.core.era import invalid_params
from proxy.core.errors import LostReason, lost_error
from proxy.core.taskrecord import (
    TERMINAL,
    detailed,
    may_be_orphaned,
    new_record,
    orphaned_by,
    refresh,
)
from proxy.forwarding import (
    Reply,
    TaskActed,
    TaskAction,
    TaskCancel,
    TaskReply,
    TaskUpdate,
    UnknownTask,
)
from proxy.modern.call import CallRun
from proxy.store.base import Store, StoreError
from proxy.store.unavailable import patiently

log = structlog.get_logger("proxy.modern")

# Sends a task action to the replica that runs the task, and waits for its reply.
Forward = Callable[[str, TaskAction], Awaitable[Reply]]
Alive = Callable[[str], Awaitable[bool]]


def new_task_id() -> str:
    return secrets.token_urlsafe(24)


class TaskKeeper:
    """This replica's tasks, and the way to everybody's records."""

    def __init__(
        self,
        settings: TasksConfig,
        store: Store,
        owner: str,
        *,
        shared: bool,
        alive: Alive,
        forward: Forward | None,
        publish: Callable[[dict[str, Any]], None],
        server: str = "default",
    ) -> None:
        self.settings = settings
        self.server = server  # the server its tasks run on: asked elsewhere, they are unknown
        self.store = store
        self.owner = owner
        self.shared = shared
        self._alive = alive
        self._forward = forward
        self._publish = publish
        self.calls: dict[str, CallRun] = {}
        self.records: dict[str, dict[str, Any]] = {}
        self._dirty: set[str] = set()
        self._writers: dict[str, asyncio.Task[None]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.on_end: Callable[[str], None] = lambda status: None  # metrics

    @property
    def ttl_ms(self) -> int:
        return round(self.settings.ttl_seconds * 1000)

    # ------------------------------------------------------------------ creation
    async def adopt(
        self, call: CallRun, era: str, ttl_ms: int | None = None, patient: bool = False
    ) -> dict[str, Any]:
        """Make ``call`` a task; return its record once the store holds it. A requested
        ``ttl_ms`` (2025-11-25 ``params.task.ttl``) may shorten the configured one.
        ``patient``: a store that fails is tried again for ``store.unavailable_wait``
        (then StoreUnavailable), for a call that cannot go on without its task (a
        2025-11-25 task request); else the first StoreError is raised (the caller lets
        the call go on plain). Writing the same record twice is harmless."""
        task_id = new_task_id()
        now = time.time()
        ttl = self.ttl_ms if ttl_ms is None else min(ttl_ms, self.ttl_ms)
        record = new_record(
            task_id,
            now,
            ttl,
            self.settings.poll_interval_ms,
            owner=self.owner,
            principal=call.principal,
            era=era,
            server=self.server,
        )
        refresh(record, call.call, now)

        def put() -> Awaitable[bool]:
            return self.store.put_task(task_id, record, record["expiresAt"])

        if patient:
            await patiently(self.store, "create a task", put)
        else:
            await put()  # StoreError: no task
        call.call.task_id = task_id
        self.calls[task_id] = call
        self.records[task_id] = record
        call.on_change.append(self._changed)
        loop = asyncio.get_running_loop()
        self._timers[task_id] = loop.call_later(ttl / 1000, self._expire, task_id)
        self._changed(call)  # what changed while the record was written
        log.info("task_created", task=task_id[:8], method=call.method, era=era)
        tracing.task_life(call, task_id, era)
        return record

    def _changed(self, call: CallRun) -> None:
        task_id = call.task_id
        if task_id is None or task_id not in self.records:
            return
        record = self.records[task_id]
        if not refresh(record, call.call, time.time()):
            return  # progress alone changes nothing a client of the task sees
        self._dirty.add(task_id)
        if task_id not in self._writers:
            writer = asyncio.ensure_future(self._write(task_id))
            self._writers[task_id] = writer
        self._publish(detailed(record))
        if call.done:
            call.on_change.remove(self._changed)
            self.on_end(record["status"])

    async def _write(self, task_id: str) -> None:
        """Write the task's record while it changes, its latest state each time; a store
        that fails is tried again with backoff until the record lands or the task
        expires (its final state must reach the store: another replica answers
        ``tasks/get`` from it)."""
        final = False
        backoff = Backoff(0.2, 2.0)
        try:
            while task_id in self._dirty and task_id in self.records:
                self._dirty.discard(task_id)
                record = dict(self.records[task_id])
                final = record["status"] in TERMINAL
                try:
                    if not await self.store.put_task(task_id, record, record["expiresAt"]):
                        # Ended elsewhere (orphaned while this replica's lease had
                        # lapsed): that outcome stands; this one is not given.
                        log.warning("task_ended_elsewhere", task=task_id[:8])
                        final = True
                        call = self.calls.get(task_id)
                        if call is not None and not call.done:
                            call.cancel("the task was ended by another replica")
                        break
                except StoreError as exc:
                    if backoff.attempt == 0:
                        log.warning("task_record_not_written", task=task_id[:8], error=str(exc))
                    if time.time() >= record["expiresAt"]:
                        break  # expired meanwhile: nothing of it is kept anywhere
                    self._dirty.add(task_id)  # again, with whatever it is by then
                    await asyncio.sleep(backoff.next_delay())
                    continue
                if backoff.attempt:
                    log.info("task_record_written", task=task_id[:8], tries=backoff.attempt + 1)
                    backoff.reset()
            if final:
                # Its last state is in the store: this process holds nothing more of it.
                self.calls.pop(task_id, None)
                self.records.pop(task_id, None)
                timer = self._timers.pop(task_id, None)
                if timer is not None:
                    timer.cancel()
        finally:
            self._writers.pop(task_id, None)

    @property
    def running(self) -> int:
        return len(self.calls)

    def full(self) -> bool:
        return len(self.calls) >= self.settings.max_running

    def _expire(self, task_id: str) -> None:
        self._timers.pop(task_id, None)
        call = self.calls.pop(task_id, None)
        self.records.pop(task_id, None)
        if call is not None and not call.done:
            call.cancel("the task expired (tasks.ttl_seconds)")
        log.info("task_expired", task=task_id[:8])

    # ------------------------------------------------------------------ client requests
    async def record(self, task_id: Any, principal: str | None) -> dict[str, Any]:
        """The task's record as a client may see it; -32602 if it may not."""
        if not isinstance(task_id, str) or not task_id:
            raise invalid_params("Invalid params: taskId must be a non-empty string")
        now = time.time()
        record = self.records.get(task_id)
        if record is None:
            # A store that does not answer is waited for (bounded), then 503
            # store_unavailable: never "unknown taskId" for a task that may well exist.
            record = await patiently(
                self.store, "read a task record", lambda: self.store.get_task(task_id, now)
            )
            if (
                record is not None
                and may_be_orphaned(record, self.owner)
                and not await self._owner_alive(record)
            ):
                record = await self._orphan(task_id, record, now)
        if (
            record is None
            or record.get("principal") != principal
            or record.get("server", "default") != self.server
        ):
            raise invalid_params("Invalid params: unknown or expired taskId")
        return record

    async def _owner_alive(self, record: dict[str, Any]) -> bool:
        owner = record.get("owner")
        if not self.shared or not isinstance(owner, str):
            return False
        return await self._alive(owner)

    async def _orphan(self, task_id: str, record: dict[str, Any], now: float) -> dict[str, Any]:
        """The record of a task whose owner is gone, ended (``owner_lost``) in the store
        before a client is told so; if its owner's final record landed first, that one
        (the store refuses to end an ended task twice). A store that fails is waited for
        (bounded), then 503 store_unavailable: a client is never told an end the store
        does not hold."""
        orphaned = orphaned_by(record, shared=self.shared, now=now)

        def put() -> Awaitable[bool]:
            return self.store.put_task(task_id, orphaned, orphaned["expiresAt"])

        if await patiently(self.store, "end an orphaned task", put):
            return orphaned
        stored = await patiently(
            self.store, "read a task record", lambda: self.store.get_task(task_id, now)
        )
        return stored if stored is not None else orphaned

    async def update(self, task_id: Any, responses: Any, principal: str | None) -> None:
        record = await self.record(task_id, principal)
        if not isinstance(responses, dict):
            raise invalid_params("Invalid params: inputResponses must be an object")
        await self._act(record, TaskUpdate(record["taskId"], responses))

    async def cancel(self, task_id: Any, principal: str | None) -> None:
        record = await self.record(task_id, principal)
        await self._act(record, TaskCancel(record["taskId"]))

    async def _act(self, record: dict[str, Any], action: TaskAction) -> None:
        if action.task in self.calls:
            self.serve(action)
            return
        owner = record.get("owner")
        if record["status"] in TERMINAL or self._forward is None or not isinstance(owner, str):
            return  # nothing runs it any more: the ack is all there is to give
        await self._forward(owner, action)

    def serve(self, action: TaskAction) -> TaskReply:
        """An update or cancel for a task this replica runs (local or forwarded)."""
        call = self.calls.get(action.task)
        if call is None:
            return UnknownTask()
        match action:
            case TaskUpdate():
                call.answer(action.responses)
            case TaskCancel():
                call.cancel("cancelled by the client (tasks/cancel)")
            case _:
                assert_never(action)
        return TaskActed()

    async def serve_forwarded(self, message: TaskAction) -> TaskReply:
        """:meth:`serve`, replied once the record says what it did (the asker reads the
        record next: a cancel must read ``cancelled`` there)."""
        reply = self.serve(message)
        writer = self._writers.get(message.task)
        if writer is not None:
            await asyncio.shield(writer)
        return reply

    async def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for call in list(self.calls.values()):
            if not call.done:
                message = "the proxy shut down while this task ran"
                call.fail(lost_error(LostReason.PROXY_SHUTDOWN, message))
        if self._writers:
            await asyncio.gather(*self._writers.values(), return_exceptions=True)
