"""Time in a session: wake-ups, what expires when, idling, and holding the server back.

A mixin of :class:`~proxy.core.session.Session`. After every event the session works out
its next deadline (a :class:`WakeAt` when it moves) and whether ``overflow: block`` must
hold the server back; on a :class:`Tick` it carries out whatever came due: SEP-1699
closes, announcements after ``create_after``, abandonment, retention, idle expiry.

A session may retain up to ``max_streams`` finished streams, so the next deadline is
never found by scanning them: each stream's earliest deadline sits in a
:class:`DeadlineHeap`, and only the streams whose deadline inputs were written during an
event (the :class:`~proxy.core.session_state.StreamTable`'s ``dirty`` set) are recomputed
after it. An event costs O(streams it touched * log streams), not O(streams).
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from proxy.core.events import (
    CloseClient,
    Command,
    ConnId,
    LogNote,
    PauseUpstream,
    ResumeUpstream,
    WakeAt,
)
from proxy.core.idmap import IdMap
from proxy.core.session_state import STANDALONE, SessionSettings, StreamSlot
from proxy.core.stream import StreamState


class DeadlineHeap:
    """The earliest deadline of each stream, and the earliest of all in O(log n).

    Lazy deletion: a changed deadline pushes a new entry and leaves the old one in the
    heap; an entry that no longer matches ``_due`` is dropped when it reaches the top. The
    heap is rebuilt when stale entries outnumber live ones, so it stays O(streams).
    """

    __slots__ = ("_due", "_heap")

    def __init__(self) -> None:
        self._due: dict[int, float] = {}
        self._heap: list[tuple[float, int]] = []

    def __len__(self) -> int:
        return len(self._due)

    def set(self, number: int, at: float | None) -> None:
        """Stream ``number``'s earliest deadline is now ``at`` (None: it has none)."""
        old = self._due.get(number)
        if at is None:
            if old is not None:
                del self._due[number]
            return
        if at == old:
            return
        self._due[number] = at
        heapq.heappush(self._heap, (at, number))
        if len(self._heap) > 2 * len(self._due) + 64:
            self._heap = [(due, n) for n, due in self._due.items()]
            heapq.heapify(self._heap)

    def earliest(self) -> float | None:
        heap, due = self._heap, self._due
        while heap:
            at, number = heap[0]
            if due.get(number) == at:
                return at
            heapq.heappop(heap)
        return None

    def pop_due(self, now: float) -> list[int]:
        """Unschedule and return the streams whose deadline is at or before ``now``."""
        numbers: list[int] = []
        while (at := self.earliest()) is not None and at <= now:
            _, number = heapq.heappop(self._heap)
            del self._due[number]
            numbers.append(number)
        return numbers


class ExpiryMixin:
    # What the session provides (see proxy.core.session.Session).
    settings: SessionSettings
    closed: bool
    forgotten: bool
    upstream_paused: bool
    _streams: dict[int, StreamSlot]
    _dirty: set[int]  # the StreamTable's: streams whose deadlines must be recomputed
    _deadlines: DeadlineHeap
    _by_conn: dict[ConnId, int]
    _over: set[int]
    _ids: IdMap
    _idle_since: float | None
    _wake: float | None
    _deadlines_moved: bool
    _now: float

    if TYPE_CHECKING:  # provided by Session; declared here for the type checker

        def _detach(self, conn: ConnId) -> None: ...

        def _end(self, reason: str, out: list[Command]) -> None: ...

        def _announce(self, stream: StreamSlot, out: list[Command]) -> None: ...

        def _abandon(self, stream: StreamSlot, out: list[Command]) -> None: ...

        def _abandon_at(self, stream: StreamSlot) -> float | None: ...

        def _drop_stream(self, stream: StreamSlot) -> None: ...

    def _expire_at(self, stream: StreamSlot) -> float | None:
        """When a finished request stream nobody is reading stops being resumable."""
        if (
            stream.state is not StreamState.COMPLETED
            or stream.conn is not None
            or stream.done_at is None
            or stream.number == STANDALONE
        ):
            return None
        return stream.done_at + self.settings.completed_retention

    def _stream_deadline(self, stream: StreamSlot) -> float | None:
        """The earliest time something is due on ``stream`` (None: nothing ever is)."""
        at = self._abandon_at(stream)
        if at is None:
            at = self._expire_at(stream)
        if stream.conn is not None and stream.close_at is not None:
            at = stream.close_at if at is None else min(at, stream.close_at)
        if stream.create_at is not None and stream.state is StreamState.LIVE:
            at = stream.create_at if at is None else min(at, stream.create_at)
        return at

    def _reschedule(self) -> None:
        """Recompute the deadlines of the streams written to since the last time."""
        dirty = self._dirty
        if not dirty:
            return
        for number in dirty:
            stream = self._streams.get(number)
            self._deadlines.set(number, None if stream is None else self._stream_deadline(stream))
        dirty.clear()

    def _on_tick(self, out: list[Command]) -> None:
        now = self._now
        self._reschedule()
        todo = self._deadlines.pop_due(now)
        heapq.heapify(todo)
        seen = set(todo)
        # Due streams in number order, each once, as one pass over all streams would: a
        # stream that this pass makes due goes in it too if its number is higher, else it
        # waits for the next tick (the heap has it at or before now: WakeAt re-arms).
        while todo:
            number = heapq.heappop(todo)
            stream = self._streams.get(number)
            if stream is not None:
                self._tick_stream(stream, now, out)
                self._dirty.add(number)  # popped from the heap: schedule it again
            for other in self._dirty:
                if other > number and other not in seen:
                    later = self._streams.get(other)
                    at = None if later is None else self._stream_deadline(later)
                    if at is not None and at <= now:
                        heapq.heappush(todo, other)
                        seen.add(other)
            self._reschedule()
        if self.closed:
            if self._streams.keys() <= {STANDALONE} and not self._by_conn:
                self._end("ended and nothing left to resume", out)
        elif self._idle_since is not None and self._idle_since + self.settings.idle_timeout <= now:
            self._end("idle timeout", out)

    def _tick_stream(self, stream: StreamSlot, now: float, out: list[Command]) -> None:
        """Carry out what is due on one stream at ``now``."""
        if stream.create_at is not None and stream.create_at <= now:
            if stream.state is StreamState.LIVE:
                self._announce(stream, out)
            stream.create_at = None
        abandon_at = self._abandon_at(stream)
        if abandon_at is not None and abandon_at <= now:
            self._abandon(stream, out)
            return
        if stream.conn is not None and stream.close_at is not None and stream.close_at <= now:
            conn = stream.conn
            self._detach(conn)
            out.append(CloseClient(conn, self.settings.retry_ms))
            out.append(LogNote("stream_polling_close", {"stream": stream.number}))
        expire_at = self._expire_at(stream)
        if expire_at is not None and expire_at <= now:
            self._drop_stream(stream)

    def _after(self, out: list[Command]) -> None:
        if self.forgotten:
            return
        for number in list(self._over):
            held = self._streams.get(number)
            if held is None or not held.log.over_bound:
                self._over.discard(number)
        blocked = bool(self._over)
        if blocked != self.upstream_paused:
            # overflow: block — stop reading the server until a client takes the backlog.
            self.upstream_paused = blocked
            out.append(PauseUpstream() if blocked else ResumeUpstream())
        if not self._deadlines_moved and not self._dirty:
            return
        busy = bool(self._by_conn) or len(self._ids) > 0
        if busy:
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = self._now
        wake = self._next_deadline()
        if wake is not None and wake != self._wake:
            out.append(WakeAt(wake))
        self._wake = wake

    def _next_deadline(self) -> float | None:
        self._reschedule()
        first = self._deadlines.earliest()
        if self.closed:
            # Ended: wake at once when nothing is left to wait for (the tick forgets it).
            return self._now if first is None else first
        if self._idle_since is None:
            return first
        idle_at = self._idle_since + self.settings.idle_timeout
        return idle_at if first is None else min(first, idle_at)
