"""Group commit: every session's journal, one batch per loop turn, and the wire behind it.

DESIGN.md §9: the core decides what is appended; the runtime persists it and only then
lets it reach a client. A session names its :class:`~proxy.core.journal.Journal` to the
:class:`Persister` after every event that noted something (:meth:`Persister.noted`: no
copy per message); the persister takes each named journal once, when the batch is cut
(:meth:`Persister._gather`), gathers what one loop turn noted into one
:class:`~proxy.store.base.Batch` and commits it with one store call. While one commit
runs the next batch grows, so the cost per event falls as load rises. A batch of more
than :data:`~proxy.store.slices.COMMIT_CAP` events (behind a burst) is committed in
slices, the sessions with the fewest events first (:mod:`proxy.store.slices`): a session
whose whole part of the batch has landed may write it (:meth:`Persister.wait` with its
``lane``) while another's thousands still go in; slices committed at once are a loop
turn apart.

Tickets keep the wire behind the store: everything queued for a client in a loop turn is
tagged with the number of the batch that turn's events go into (:attr:`Persister.ticket`),
and a writer waits for that batch (:meth:`Persister.wait`) before it writes. With a store
that commits at once, a writer that finds that batch still open (its turn's end not yet
run) commits it itself, unless a burst's batch may wait for more: it goes on in its own
turn instead of a wake-up in the next. With a store that starts a commit without a task
(:meth:`~proxy.store.base.Store.commit_soon`: Redis on one server), the slice is written
in the flush and lands in the store's reply callback, which lets its writers go and
writes the next slice: no task started before the write nor woken after the reply; a
writer holding a whole answer may ask to be called there (:meth:`Persister.when_landed`)
instead of waiting in a task. A batch that fails is retried (commits are idempotent)
with backoff until it lands: clients wait, no event is skipped, and ``/healthz`` shows
the store's error meanwhile. A batch of new stream records, trims or drops alone (a
request just forwarded upstream) waits a few milliseconds for the events that usually
follow, unless a replica waits for it.

What a session noted goes into the open batch, and when that batch goes, in
:mod:`proxy.store.persist_gather`; committing it, here.

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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from proxy import tracing
from proxy.store.base import Batch, Store, StoreError
from proxy.store.fencing import Fence
from proxy.store.persist_gather import Gathering
from proxy.store.slices import COMMIT_CAP, Slice, lane_of, lanes_of, slices, take_small

if TYPE_CHECKING:
    from proxy.store.persist_gather import Source

log = structlog.get_logger("proxy.store")

RETRY_FIRST_SECONDS = 0.05
RETRY_MAX_SECONDS = 2.0


class Persister(Gathering):
    """Owns the commits to one store: at most one in flight, in ticket order."""

    def __init__(
        self,
        store: Store,
        owner: str,
        retention: float,
        fence: Fence | None = None,
        cap: int = COMMIT_CAP,
    ) -> None:
        self.store = store
        self.owner = owner
        self.fence = fence if fence is not None else Fence(owner)
        self.fence.on_lost(self._discard)
        self._retention = retention
        self._batch = Batch()
        self._sources: dict[str, Source] = {}  # lane -> a journal the open batch takes
        self._open = 1  # the ticket of the batch being gathered
        self.committed = 0  # every batch up to this ticket is in the store
        self._scheduled = False  # a flush at the end of this loop turn
        self._lanes: set[str] = set()  # the sessions (epochs) with something in the batch
        self._timer: asyncio.TimerHandle | None = None  # a delayed one (records alone)
        self._records_ticket = 0  # the open batch that holds records alone, waiting
        self._records_due = 0.0  # until then (loop time)
        self._turn: asyncio.Handle | None = None  # the end of this turn's (:meth:`_turn_end`)
        self._inflight: asyncio.Task[None] | None = None
        self._busy = False  # a ticket's slices are being committed
        self._ticket_in_commit = 0
        self._slices: list[Slice] = []  # that ticket's slices not yet committed
        self._later: asyncio.Handle | None = None  # the next of them, a loop turn later
        self._early: dict[str, int] = {}  # session (epoch) -> its part of the ticket landed
        self._cap = cap
        self._closed = False
        self._changed = asyncio.Event()
        self._waiting = 0  # tasks waiting on :attr:`_changed` (none: it need not be set)
        self.last_error: str | None = None
        self.events = 0  # committed, in all
        self.commits = 0  # store commits (slices), in all
        self._traced: list[Any] = []  # the traced requests of the open batch (tracing)
        # (ticket, lane, then): called once that part is in the store (:meth:`when_landed`)
        self._when: list[tuple[int, str, Callable[[bool], None]]] = []
        self._losing = False  # inside :meth:`_discard` (the sessions not yet fenced)
        self._when_later: asyncio.Handle | None = None  # those callbacks, after it

    # ------------------------------------------------------------------ gathering
    @property
    def ticket(self) -> int:
        """What a client must wait for to see everything noted so far."""
        return self._open if self._busy or self._sources or self._batch else self.committed

    # ------------------------------------------------------------------ committing
    def _flush(self) -> None:
        self._scheduled = False
        if self._turn is not None:
            self._turn.cancel()
            self._turn = None
        if self._busy:
            return  # its end flushes again
        self._gather()
        if not self._batch:
            self.committed = self._open - 1
            return
        batch, self._ticket_in_commit = self._batch, self._open
        batch.fence, batch.owner = self.fence.token, self.owner
        self._batch = Batch()
        self._lanes = set()
        self._open += 1
        self._slices = slices(batch, self._cap)
        self._busy = True
        traced, self._traced = self._traced, []
        self._next_slice(traced)

    def _next_slice(self, traced: list[Any] | None = None) -> None:
        """Commit the next slice of the ticket in commit (at once, or in a task)."""
        self._later = None
        if not self._slices:  # dropped meanwhile (fencing)
            self._ticket_done()
            return
        part = self._slices.pop(0)
        traced = traced if traced is not None else []
        if self.store.commits_at_once:
            # Stored before this callback returns: a writer holding this turn's events
            # goes on at the loop's next turn, not after a task's first step and the
            # commit behind it (the first event of a burst waited for two commits).
            try:
                if traced:
                    with tracing.commit(traced, part.batch.events(), self.store.kind):
                        refused = self.store.commit_now(part.batch, time.time())
                else:  # (no span: no context manager's two calls per commit)
                    refused = self.store.commit_now(part.batch, time.time())
            except StoreError as exc:
                self._failed(exc)  # the task below retries it, with backoff
            else:
                self._slice_landed(part, refused)
                return
        elif not traced and self.store.commit_soon(
            part.batch, time.time(), lambda outcome: self._soon_landed(part, outcome)
        ):
            # Written now; landed from the store's own reply callback: no task to start
            # (a turn before the write) nor to wake (a turn after the reply).
            return
        self._inflight = asyncio.create_task(self._commit(part, traced))

    def _soon_landed(self, part: Slice, outcome: list[str] | Exception) -> None:
        """A slice written by :meth:`Store.commit_soon` came back: landed, or (a flushed
        script cache, a broken connection) committed again by :meth:`_commit`, which
        loads, reconnects and retries with backoff."""
        if self._closed:
            return
        if isinstance(outcome, Exception):
            self._inflight = asyncio.create_task(self._commit(part, []))
            return
        self._slice_landed(part, outcome)

    def _failed(self, exc: StoreError) -> None:
        if self.last_error is None:
            log.warning("store_unavailable", store=self.store.kind, error=str(exc))
        self.last_error = str(exc)

    async def _commit(self, part: Slice, traced: list[Any]) -> None:
        delay = RETRY_FIRST_SECONDS
        with tracing.commit(traced, part.batch.events(), self.store.kind):
            while True:
                try:
                    refused = await self.store.commit(part.batch, time.time())
                    break
                except StoreError as exc:
                    self._failed(exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RETRY_MAX_SECONDS)
        self._inflight = None
        self._slice_landed(part, refused)

    def _slice_landed(self, part: Slice, refused: list[str]) -> None:
        """A slice of the ticket in commit is in the store (``refused``: the keys fencing
        turned away); the sessions it finished may write their part of that ticket."""
        if self.last_error is not None:
            log.info("store_available", store=self.store.kind)
            self.last_error = None
        self.commits += 1
        self.events += part.batch.events()
        # Before any writer waiting for this slice goes on (none runs before this returns;
        # what was gathered since is discarded by the fence, not written).
        if refused:
            log.warning(
                "store_write_refused", streams=refused, stale=part.batch.fence != self.fence.token
            )
            if part.batch.fence == self.fence.token:
                self.fence.lost("write_refused")  # drops the slices left, too
        if not self._slices:
            self._ticket_done()
            return
        ticket = part.ticket or self._ticket_in_commit
        for lane in part.finished:
            # (a part taken ahead from the open batch: not if its session noted more since)
            if not (part.ticket and (lane in self._lanes or lane in self._sources)):
                self._early[lane] = ticket
        self._jump_small()
        self._wake()
        if self.store.commits_at_once:
            # A turn of the loop before the next slice: the writers just let go (their
            # wake-ups are queued already) and the other sessions run first.
            self._later = asyncio.get_running_loop().call_soon(self._next_slice)
        else:
            self._next_slice()

    def _jump_small(self) -> None:
        """Between two slices: the small parts gathered since for the next batch (a
        call's answer), of sessions with nothing in the slices left, go next, ahead of
        those (a burst's thousands may take many slices)."""
        self._gather()
        if not self._batch.appends:
            return
        part = take_small(self._batch, lanes_of(self._slices))
        if part is None:
            return
        part.batch.fence, part.batch.owner = self.fence.token, self.owner
        part.ticket = self._open
        self._slices.insert(0, part)
        self._lanes = {lane_of(key) for key in self._batch.touched()}

    def _ticket_done(self) -> None:
        """Every slice of the ticket in commit is in the store (or was dropped)."""
        self._busy = False
        committed = self._ticket_in_commit
        if self._early:
            self._early = {lane: t for lane, t in self._early.items() if t > committed}
        self.committed = self._ticket_in_commit
        if self._batch or self._sources:
            self._flush()
        else:  # nothing gathered meanwhile: the open ticket holds nothing; it is done too
            self._open += 1
            self.committed = self._open - 1
        self._wake()

    def _wake(self) -> None:
        if self._when:
            if not self._losing:
                self._call_landed()
            elif self._when_later is None:  # once every session of the old token is fenced
                self._when_later = asyncio.get_running_loop().call_soon(self._call_landed)
        if not self._waiting:  # (most commits: their writers asked :meth:`landed` first)
            return
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _discard(self, stale: str) -> None:
        """The sessions that noted what is gathered are lost: drop it, and let go whoever
        waits for it (their connections are fenced: they write none of it). The callbacks
        of :meth:`when_landed` go in the next loop turn, as a woken writer would: the other
        ``on_lost`` callbacks, which fence the connections, have not run yet."""
        self._losing = True
        try:
            self._drop_gathered()
        finally:
            self._losing = False

    def _drop_gathered(self) -> None:
        self._batch = Batch()
        for _, journal, _ in self._sources.values():
            journal.take()  # what they noted since is dropped too
        self._sources = {}
        self._lanes = set()
        self._slices = []  # the rest of the ticket in commit, too
        if not self._busy:
            self._open += 1
            self.committed = self._open - 1
            self._wake()
        elif self._later is not None:  # between two slices committed at once
            self._later.cancel()
            self._later = None
            self._ticket_done()
        # else the slice in flight lets them go when it ends

    def landed(self, ticket: int, lane: str = "") -> bool:
        """Whether batch ``ticket`` is in the store, or the part of it (and of every
        batch before it) that session ``lane`` (its epoch) noted."""
        return self.committed >= ticket or self._early.get(lane, 0) >= ticket

    def land_now(self, ticket: int, lane: str = "") -> bool:
        """:meth:`landed`, once the open batch is committed if ``ticket`` waits for it
        and the store commits at once (:meth:`_commit_open_for`): a callback holding an
        answer writes it in its own turn, without a task (and the turn before its first
        step) waiting in :meth:`wait`."""
        self._commit_open_for(ticket)
        return self.landed(ticket, lane)

    def when_landed(self, ticket: int, lane: str, then: Callable[[bool], None]) -> None:
        """Call ``then(True)`` once :meth:`landed` ``(ticket, lane)``: from the commit's
        landing (:meth:`_wake`; with Redis, the store's reply callback), not by a task
        waiting in :meth:`wait` (a loop turn to wake it, its step, its done callback).
        ``then(False)`` if the persister closes first (what a waiting task's cancellation
        would do). Only for a ticket not landed yet (ask :meth:`land_now` first). A
        fenced connection is let go like a waiter: ``then`` must check it (never write
        what fencing dropped). ``then`` must not raise: if it does, that is logged."""
        self._when.append((ticket, lane, then))

    def _call_landed(self) -> None:
        """Call the :meth:`when_landed` callbacks whose part is in the store."""
        self._when_later = None
        if self._closed:
            return
        pending, self._when = self._when, []
        for ticket, lane, then in pending:
            if self.landed(ticket, lane):
                _call(then, True)
            else:  # (a later ticket; or a callback's own commit added one: kept too)
                self._when.append((ticket, lane, then))

    def _commit_open_for(self, ticket: int) -> None:
        """A writer waits for the batch this turn's end would commit: commit it now, so
        that the writer goes on in this turn, not after a wake-up in the next. What the
        batch holds is the same (every callback of the turn before ran)."""
        if (
            self._scheduled
            and ticket >= self._open
            and not self._busy
            and self.store.commits_at_once
        ):
            self._flush()

    async def wait(self, ticket: int, *, hurry: bool = False, lane: str = "") -> None:
        """Return once batch ``ticket`` (and every one before it) is in the store;
        ``hurry``: without waiting for more (a replica waits to read what it names);
        ``lane``: once the part session ``lane`` noted is (:func:`~proxy.store.slices.slices`)."""
        if hurry and ticket >= self._open:
            self._schedule(urgent=True)
        self._commit_open_for(ticket)
        while not self.landed(ticket, lane):
            self._waiting += 1  # (counted here, not in a coroutine of its own per wait)
            try:
                await self._changed.wait()
            finally:
                self._waiting -= 1

    async def drain(self, timeout: float) -> bool:
        """Commit what is gathered; False if the store did not take it within ``timeout``."""
        try:
            async with asyncio.timeout(timeout):
                while self._busy or self._sources or self._batch:
                    if not self._busy:
                        self._flush()
                    if self._inflight is not None:
                        await asyncio.shield(self._inflight)
                    elif self._busy:  # slices committed at once, a loop turn apart
                        self._waiting += 1
                        try:
                            await self._changed.wait()
                        finally:
                            self._waiting -= 1
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        self._closed = True  # a commit landing later (commit_soon) changes nothing
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._turn is not None:
            self._turn.cancel()
            self._turn = None
        if self._later is not None:
            self._later.cancel()
            self._later = None
        if self._inflight is not None:
            self._inflight.cancel()
            await asyncio.gather(self._inflight, return_exceptions=True)
            self._inflight = None
        if self._when_later is not None:
            self._when_later.cancel()
            self._when_later = None
        pending, self._when = self._when, []
        for _, _, then in pending:  # never stored: nothing of theirs is written
            _call(then, False)


def _call(then: Callable[[bool], None], landed: bool) -> None:
    """A :meth:`Persister.when_landed` callback: its fault is logged, not raised into
    the commit's landing (a store's reply callback, another writer's turn)."""
    try:
        then(landed)
    except Exception:
        log.exception("landed_callback_failed")
