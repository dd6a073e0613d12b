"""Group commit: every session's journal, one batch per loop turn, and the wire behind it.

DESIGN.md §9: the core decides what is appended; the runtime persists it and only then
lets it reach a client. A :class:`Persister` takes each session's
:class:`~proxy.core.journal.Journal` after every event (:meth:`Persister.note`), gathers
what one loop turn noted into one :class:`~proxy.store.base.Batch` and commits it with
one store call. While one commit runs the next batch grows, so the cost per event falls
as load rises.

Tickets keep the wire behind the store: everything queued for a client in a loop turn is
tagged with the number of the batch that turn's events go into (:attr:`Persister.ticket`),
and a writer waits for that batch (:meth:`Persister.wait`) before it writes. A batch that
fails is retried (commits are idempotent) with backoff until it lands: clients wait, no
event is skipped, and ``/healthz`` shows the store's error meanwhile. A batch of new
stream records, trims or drops alone (a request just forwarded upstream) waits a few
milliseconds for the events that usually follow, unless a replica waits for it.

Only durable stores get a persister: with the memory store the session's own logs are
the record, and nothing is copied.

Fencing (:mod:`proxy.store.fencing`): each batch carries the token in force when it was
taken for commit. A commit that comes back with refused keys, under the token still in
force, means another replica ended those streams: the token goes stale (every session is
lost, :meth:`Fence.lost`) before any writer waiting for that batch is let go, and what
was gathered under it is dropped (its events never reach a client).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import structlog

from proxy import tracing
from proxy.store.base import Batch, Entry, Store, StoreError, StreamRecord
from proxy.store.fencing import Fence

if TYPE_CHECKING:
    from proxy.core.journal import Journal
    from proxy.core.session import Session

log = structlog.get_logger("proxy.store")

RECORD_DELAY_SECONDS = 0.005
"""How long a batch holding only new stream records waits for more: a quick call's answer
then goes to the store with its stream's record, in one commit."""

RETRY_FIRST_SECONDS = 0.05
RETRY_MAX_SECONDS = 2.0


class Persister:
    """Owns the commits to one store: at most one in flight, in ticket order."""

    def __init__(
        self, store: Store, owner: str, retention: float, fence: Fence | None = None
    ) -> None:
        self.store = store
        self.owner = owner
        self.fence = fence if fence is not None else Fence(owner)
        self.fence.on_lost(self._discard)
        self._retention = retention
        self._batch = Batch()
        self._open = 1  # the ticket of the batch being gathered
        self.committed = 0  # every batch up to this ticket is in the store
        self._scheduled = False  # a flush at the end of this loop turn
        self._timer: asyncio.TimerHandle | None = None  # a delayed one (records alone)
        self._inflight: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self.last_error: str | None = None
        self.events = 0  # committed, in all
        self._traced: list[Any] = []  # the traced requests of the open batch (tracing)

    # ------------------------------------------------------------------ gathering
    @property
    def ticket(self) -> int:
        """What a client must wait for to see everything noted so far."""
        return self._open if self._inflight is not None or self._batch else self.committed

    def note(self, session: Session, j: Journal, server: str) -> None:
        """Add what ``session`` noted (a :meth:`Journal.take`) to the open batch;
        ``server``: the name of the server it was made at (its streams' records say so)."""
        epoch = session.epoch
        tracing.gather(self._traced)
        batch = self._batch
        if j.opened or j.announced:
            self._note_records(session, j, server)
        if j.appends:  # most often the one event this feed appended: kept cheap
            appends = batch.appends
            lists: dict[int, list[Entry]] = {}  # stream number -> its list in the batch
            for number, seq, payload, mark in j.appends:
                found = lists.get(number)
                if found is None:
                    key = f"{epoch}.{number}"
                    found = appends.get(key)
                    if found is None:
                        found = appends[key] = []
                    lists[number] = found
                found.append(Entry(seq, payload, mark))
        elif not (j.trimmed or j.completed or j.dropped):
            self._schedule(urgent=bool(batch.appends or batch.completed))
            return
        for number, first in j.trimmed.items():
            batch.trimmed[f"{epoch}.{number}"] = first
        if j.completed:
            until = time.time() + self._retention
            for number in j.completed:
                batch.completed[f"{epoch}.{number}"] = until
        for number in j.dropped:
            batch.dropped.append(f"{epoch}.{number}")
        # Clients wait for events and endings; new records, trims and drops can wait a
        # little for them (nobody reads what is not there yet, or gone).
        self._schedule(urgent=bool(batch.appends or batch.completed))

    def _note_records(self, session: Session, j: Journal, server: str) -> None:
        """The new streams' records (and the announced seeds') of what ``session`` noted."""
        sid, epoch = session.session_id, session.epoch
        for number, announced in [(n, False) for n in j.opened] + [(n, True) for n in j.announced]:
            ids = session.client_ids(number)
            record = StreamRecord(
                f"{epoch}.{number}",
                sid,
                self.owner,
                request_ids=ids,
                principal=session.principal,
                server=server,
            )
            record.announced = announced
            self._batch.streams.append(record)

    def _schedule(self, *, urgent: bool) -> None:
        """Flush at the end of this loop turn; a batch without events or endings (new
        records, trims, drops) waits up to :data:`RECORD_DELAY_SECONDS` for the events that
        usually follow (one commit, not two, for a quick call)."""
        if self._scheduled:
            return
        loop = asyncio.get_running_loop()
        if urgent:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._scheduled = True
            loop.call_soon(self._flush)
        elif self._timer is None:
            self._timer = loop.call_later(RECORD_DELAY_SECONDS, self._flush)

    # ------------------------------------------------------------------ committing
    def _flush(self) -> None:
        self._scheduled = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._inflight is not None:
            return  # its end flushes again
        if not self._batch:
            self.committed = self._open - 1
            return
        batch, ticket = self._batch, self._open
        batch.fence, batch.owner = self.fence.token, self.owner
        self._batch = Batch()
        self._open += 1
        traced, self._traced = self._traced, []
        if self.store.commits_at_once:
            # Stored before this callback returns: a writer holding this turn's events
            # goes on at the loop's next turn, not after a task's first step and the
            # commit behind it (the first event of a burst waited for two commits).
            try:
                with tracing.commit(traced, batch.events(), self.store.kind):
                    refused = self.store.commit_now(batch, time.time())
            except StoreError as exc:
                self._failed(exc)  # the task below retries it, with backoff
            else:
                self._landed(batch, ticket, refused)
                return
        self._inflight = asyncio.create_task(self._commit(batch, ticket, traced))

    def _failed(self, exc: StoreError) -> None:
        if self.last_error is None:
            log.warning("store_unavailable", store=self.store.kind, error=str(exc))
        self.last_error = str(exc)

    async def _commit(self, batch: Batch, ticket: int, traced: list[Any]) -> None:
        delay = RETRY_FIRST_SECONDS
        with tracing.commit(traced, batch.events(), self.store.kind):
            while True:
                try:
                    refused = await self.store.commit(batch, time.time())
                    break
                except StoreError as exc:
                    self._failed(exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RETRY_MAX_SECONDS)
        self._inflight = None
        self._landed(batch, ticket, refused)

    def _landed(self, batch: Batch, ticket: int, refused: list[str]) -> None:
        """Batch ``ticket`` is in the store (``refused``: the keys fencing turned away)."""
        if self.last_error is not None:
            log.info("store_available", store=self.store.kind)
            self.last_error = None
        self.events += batch.events()
        self.committed = ticket
        # Before any writer waiting for this batch goes on (none runs before this returns;
        # what was gathered since is discarded by the fence, not written).
        if refused:
            log.warning(
                "store_write_refused", streams=refused, stale=batch.fence != self.fence.token
            )
            if batch.fence == self.fence.token:
                self.fence.lost("write_refused")
        if self._batch:
            self._flush()
        else:  # nothing gathered meanwhile: the open ticket holds nothing; it is done too
            self._open += 1
            self.committed = self._open - 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _discard(self, stale: str) -> None:
        """The sessions that noted what is gathered are lost: drop it, and let go whoever
        waits for it (their connections are fenced: they write none of it)."""
        self._batch = Batch()
        if self._inflight is None:  # else its end lets them go
            self._open += 1
            self.committed = self._open - 1
            changed, self._changed = self._changed, asyncio.Event()
            changed.set()

    async def wait(self, ticket: int, *, hurry: bool = False) -> None:
        """Return once batch ``ticket`` (and every one before it) is in the store;
        ``hurry``: without waiting for more (a replica waits to read what it names)."""
        if hurry and ticket >= self._open:
            self._schedule(urgent=True)
        while self.committed < ticket:
            await self._changed.wait()

    async def drain(self, timeout: float) -> bool:
        """Commit what is gathered; False if the store did not take it within ``timeout``."""
        try:
            async with asyncio.timeout(timeout):
                while self._inflight is not None or self._batch:
                    if self._inflight is None:
                        self._flush()
                    if self._inflight is not None:
                        await asyncio.shield(self._inflight)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._inflight is not None:
            self._inflight.cancel()
            await asyncio.gather(self._inflight, return_exceptions=True)
            self._inflight = None
