"""The persister's gathering (:mod:`proxy.store.persist`): what the sessions noted goes
into the open batch (:meth:`Gathering.noted`, :meth:`Gathering.note`), and when that
batch goes to the store: at the end of the loop turn that noted events, or after
:data:`RECORD_DELAY_SECONDS` for new stream records alone.

A burst's batch does not wait for more turns either, also when the store commits at
once (SQLite): a turn's 64 lines are a few runs of rows (:mod:`proxy.store.sqlite_runs`),
and committing them at once lets the client read them while the next turn's are read,
where waiting up to 3 turns for 256 events (as before runs) left the client idle, then
the proxy (bench/README.md, "SQLite runs")."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from proxy import tracing
from proxy.store.base import Batch, Store
from proxy.store.journal_batch import journal_into

if TYPE_CHECKING:
    from proxy.core.journal import Journal
    from proxy.core.session import Session

    Source = tuple[Session, Journal, str]
    """A session, its journal, and the name of the server it was made at."""

RECORD_DELAY_SECONDS = 0.005
"""How long a batch holding only new stream records waits for more: a quick call's answer
then goes to the store with its stream's record, in one commit."""


class Gathering:
    """The open batch and when it goes; :class:`~proxy.store.persist.Persister` holds the
    state and commits it (:meth:`_flush`)."""

    store: Store
    owner: str
    _retention: float
    _batch: Batch
    _sources: dict[str, Source]
    _open: int
    _scheduled: bool
    _lanes: set[str]
    _timer: asyncio.TimerHandle | None
    _records_ticket: int
    _records_due: float
    _turn: asyncio.Handle | None
    _busy: bool
    _early: dict[str, int]
    _traced: list[Any]

    def _flush(self) -> None:
        raise NotImplementedError

    def noted(self, lane: str, source: Source) -> int:
        """Session ``lane`` (its epoch) noted something in its journal: the open batch takes
        it at its flush (:meth:`_gather`), once per loop turn, not once per message. The
        ticket its connections must wait for. ``source``: the session, its journal and
        the name of the server it was made at (its streams' records say so)."""
        tracing.gather(self._traced)  # (the span of the message being handled)
        sources = self._sources
        if lane not in sources:
            sources[lane] = source
            early = self._early
            if early and early.get(lane, 0) >= self._open:
                del early[lane]  # its part taken ahead landed; this is more of the batch
        if not self._scheduled:
            j, batch = source[1], self._batch
            self._schedule(
                urgent=bool(j.appends or j.completed or batch.appends or batch.completed)
            )
        return self._open

    def note(self, session: Session, j: Journal, server: str) -> None:
        """Add what ``session`` noted (``j``, emptied) to the open batch now;
        ``server``: the name of the server it was made at (its streams' records say so)."""
        tracing.gather(self._traced)
        self._gather()  # what was noted before, first
        self._take_in(session, j, server)
        batch = self._batch
        self._schedule(urgent=bool(batch.appends or batch.completed))

    def _gather(self) -> None:
        """Take into the open batch the journals of the sessions that noted something
        since the last gathering (:meth:`noted`)."""
        sources = self._sources
        if not sources:
            return
        self._sources = {}
        for session, journal, server in sources.values():
            if journal:
                self._take_in(session, journal, server)  # (emptied as it is added)

    def _take_in(self, session: Session, j: Journal, server: str) -> None:
        epoch = session.epoch
        self._lanes.add(epoch)
        if self._early and self._early.get(epoch, 0) >= self._open:
            del self._early[epoch]  # its part taken ahead landed; this is more of the batch
        journal_into(self._batch, session, j, server, self.owner, self._retention)

    def _schedule(self, *, urgent: bool) -> None:
        """Flush at the end of this loop turn; a batch without events or endings (new
        records, trims, drops) waits up to :data:`RECORD_DELAY_SECONDS` for the events that
        usually follow (one commit, not two, for a quick call)."""
        if self._scheduled:
            return
        loop = asyncio.get_running_loop()
        if urgent:
            self._scheduled = True
            self._turn = loop.call_soon(self._turn_end)
        elif self._records_ticket != self._open:
            # The timer is not cancelled when the batch goes sooner (a call's answer came):
            # one armed already, for a batch gone since, fires and re-arms for this one
            # (:meth:`_records_waited`). Arming and cancelling one per call showed.
            self._records_ticket = self._open
            self._records_due = loop.time() + RECORD_DELAY_SECONDS
            if self._timer is None:
                self._timer = loop.call_at(self._records_due, self._records_waited)

    def _records_waited(self) -> None:
        """The records timer: flush the batch of records alone it waited for, if still
        open and not about to go anyway; re-arm for a later one's."""
        self._timer = None
        if self._records_ticket != self._open or self._scheduled:
            return  # gone, or going at this turn's end
        loop = asyncio.get_running_loop()
        if loop.time() < self._records_due:
            self._timer = loop.call_at(self._records_due, self._records_waited)
            return
        self._flush()

    def _turn_end(self) -> None:
        """The end of a turn that noted events: flush."""
        self._turn = None
        self._flush()
