"""Time in a session: what is due when, which streams are due now, when to wake next.

A session may retain up to ``max_streams`` finished streams, so its next deadline is never
found by scanning them: each stream's earliest deadline sits in a :class:`DeadlineHeap`,
and only the streams whose deadline inputs were written during an event (the
:class:`~proxy.core.session_state.StreamTable`'s ``dirty`` set) are recomputed after it.
An event costs O(streams it touched * log streams), not O(streams).

The :class:`Schedule` owns that heap, the idle clock and the armed wake-up; it decides
*when*. What happens to a due stream (SEP-1699 close, announcement, abandonment,
retention) is :class:`proxy.core.deadlines.Deadlines`' business (on a
:class:`~proxy.core.events.Tick`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from proxy.core.session_state import STANDALONE, SessionSettings, StreamSlot, StreamTable
from proxy.core.stream import StreamState

# (Enum members read as module constants: through the class, 3.11's ``EnumType.__getattr__``
# hook makes each read cost ~25 times a global's, and these are read per event.)
_COMPLETED = StreamState.COMPLETED
_LIVE = StreamState.LIVE


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

    def __contains__(self, number: object) -> bool:
        return number in self._due

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


class Schedule:
    """When each stream of one session is next due, and when the session idles out."""

    def __init__(self, settings: SessionSettings, streams: StreamTable, now: float) -> None:
        self._settings = settings
        self._streams = streams
        self._dirty = streams.dirty
        self.deadlines = DeadlineHeap()
        self.idle_since: float | None = now  # no connection and no request since then
        # The upstream's process was stopped for idleness (upstream_idle_stop) and has not
        # been sent anything since: the next message for it starts it again.
        self.upstream_stopped = False
        self.wake: float | None = None  # the wake-up the runtime has armed
        # Whether the current event may have moved a deadline that is not a stream's
        # (the idle clock, the end of a closed session). A server notification moves none.
        self.moved = True

    # ------------------------------------------------------------------ per stream
    def abandon_at(self, stream: StreamSlot) -> float | None:
        """DESIGN.md §6: a request stream nobody resumed or polled for resumeInterval.max."""
        if stream.number == STANDALONE or stream.conn is not None or not stream.pending:
            return None
        if stream.state is not _LIVE:
            return None
        return stream.touched + self._settings.resume_interval_max

    def expire_at(self, stream: StreamSlot) -> float | None:
        """When a finished request stream nobody is reading stops being resumable."""
        if (
            stream.state is not _COMPLETED
            or stream.conn is not None
            or stream.done_at is None
            or stream.number == STANDALONE
        ):
            return None
        return stream.done_at + self._settings.completed_retention

    def deadline_of(self, stream: StreamSlot) -> float | None:
        """The earliest time something is due on ``stream`` (None: nothing ever is):
        :meth:`abandon_at`, else :meth:`expire_at` (inlined: this runs per event), then
        the SEP-1699 close and the announcement."""
        at: float | None = None
        state, conn = stream.state, stream.conn
        if stream.number != STANDALONE and conn is None:
            if state is _LIVE:
                if stream.pending:
                    at = stream.touched + self._settings.resume_interval_max
            elif state is _COMPLETED:
                done_at = stream.done_at
                if done_at is not None:
                    at = done_at + self._settings.completed_retention
        if conn is not None:
            close_at = stream.close_at
            if close_at is not None and (at is None or close_at < at):
                at = close_at
        create_at = stream.create_at
        if create_at is not None and state is _LIVE and (at is None or create_at < at):
            at = create_at
        return at

    def reschedule(self) -> None:
        """Recompute the deadlines of the streams written to since the last time."""
        dirty = self._dirty
        if not dirty:
            return
        for number in dirty:
            stream = self._streams.get(number)
            self.deadlines.set(number, None if stream is None else self.deadline_of(stream))
        dirty.clear()

    def due(self, now: float) -> Iterator[int]:
        """The numbers of the streams due at ``now``, in number order, each once.

        The caller carries out what is due on each before asking for the next. A stream
        that doing so makes due is yielded too if its number is higher, as one pass over
        all streams would; else it waits for the next tick (the heap has it at or before
        ``now``, so the next wake-up comes at once).
        """
        self.reschedule()
        todo = self.deadlines.pop_due(now)
        heapq.heapify(todo)
        seen = set(todo)
        while todo:
            number = heapq.heappop(todo)
            yield number
            self._dirty.add(number)  # popped from the heap: schedule it again
            for other in self._dirty:
                if other > number and other not in seen:
                    later = self._streams.get(other)
                    at = None if later is None else self.deadline_of(later)
                    if at is not None and at <= now:
                        heapq.heappush(todo, other)
                        seen.add(other)
            self.reschedule()

    # ------------------------------------------------------------------ per session
    def idle_expired(self, now: float) -> bool:
        return self.idle_since is not None and self.idle_since + self._settings.idle_timeout <= now

    def upstream_stop_at(self) -> float | None:
        """When the idle session's upstream process is stopped (``upstream_idle_stop``):
        after that long with no connection attached and no request in flight. An open
        standalone ``GET`` is a connection: a session that keeps one open never idles
        (a server can only send on it while its process runs)."""
        after = self._settings.upstream_idle_stop
        if after is None or self.upstream_stopped or self.idle_since is None:
            return None
        return self.idle_since + after

    def upstream_stop_due(self, now: float) -> bool:
        at = self.upstream_stop_at()
        return at is not None and at <= now

    def upstream_started(self) -> None:
        """A message went to a stopped upstream (which starts it): idle from now on."""
        self.upstream_stopped = False
        self.idle_since = None  # re-armed by next_wake unless the session is busy
        self.moved = True

    def next_wake(self, now: float, *, busy: bool, closed: bool) -> float | None:
        """After an event: the wake-up to arm, or None when the armed one still holds.

        ``busy``: a connection is attached or a request is in flight (not idle).
        ``closed``: the upstream is gone; wake at once when nothing is left to wait for.
        """
        if not self.moved and not self._dirty:
            return None
        if busy:
            self.idle_since = None
        elif self.idle_since is None:
            self.idle_since = now
        wake = self.next_deadline(now, closed=closed)
        if wake is None or wake == self.wake:
            self.wake = wake
            return None
        self.wake = wake
        return wake

    def next_deadline(self, now: float, *, closed: bool) -> float | None:
        if self._dirty:
            self.reschedule()
        first = self.deadlines.earliest()
        if closed:
            return now if first is None else first
        idle_since = self.idle_since
        if idle_since is None:
            return first
        idle_at = idle_since + self._settings.idle_timeout
        if self._settings.upstream_idle_stop is not None:
            stop_at = self.upstream_stop_at()
            if stop_at is not None and stop_at < idle_at:
                idle_at = stop_at
        return idle_at if first is None or idle_at < first else first
