"""One resumable stream: its state machine and its event log.

States and every legal transition live in :data:`TRANSITIONS` (h11 style: one table, one
module); :func:`transition` raises on anything else.

::

    LIVE ──complete──▶ COMPLETED ──expire──▶ EXPIRED
      └─────────────────expire──────────────────┘

A request stream is LIVE while any of its requests awaits a response; the standalone
(GET) stream stays LIVE for the life of the session. EXPIRED streams hold no events.

A log also keeps the seed's poll summary of what the client has not acknowledged
(:meth:`StreamLog.unacknowledged`) as it goes: each event is classified once, when it is
appended, so a ``stream/poll`` costs O(1) whatever the backlog.
"""

from __future__ import annotations

import itertools
import operator
from collections import deque
from dataclasses import dataclass
from enum import Enum, IntFlag
from typing import TYPE_CHECKING

from proxy.core.errors import ProxyError, ResumeError
from proxy.core.journal import Journal
from proxy.core.resume_rules import HeldIn, check_position


class StreamState(Enum):
    LIVE = "live"
    COMPLETED = "completed"
    EXPIRED = "expired"

    # Members are singletons compared by identity: hash them so, in C (Enum's own
    # ``__hash__`` is Python, run on every lookup in :data:`TRANSITIONS`).
    __hash__ = object.__hash__


class StreamEvent(Enum):
    COMPLETE = "complete"
    EXPIRE = "expire"

    __hash__ = object.__hash__


TRANSITIONS: dict[StreamState, dict[StreamEvent, StreamState]] = {
    StreamState.LIVE: {
        StreamEvent.COMPLETE: StreamState.COMPLETED,
        StreamEvent.EXPIRE: StreamState.EXPIRED,
    },
    StreamState.COMPLETED: {StreamEvent.EXPIRE: StreamState.EXPIRED},
    StreamState.EXPIRED: {},
}


class IllegalTransition(ProxyError):
    """A bug: the core asked a stream for a transition its state does not allow."""


def transition(state: StreamState, event: StreamEvent) -> StreamState:
    try:
        return TRANSITIONS[state][event]
    except KeyError:
        raise IllegalTransition(f"stream cannot {event.value} when {state.value}") from None


class Mark(IntFlag):
    """What a ``stream/poll`` must report about an event (streams-draft, StreamPollResult)."""

    NONE = 0
    REQUEST = 1  # a server→client request: ``hasRequest``
    ERROR = 2  # an error response, or a result with ``isError: true``: ``hasError``


@dataclass(frozen=True, slots=True)
class Unacknowledged:
    """The events after the client's acknowledged position: how many, and of those how
    many are requests and how many errors."""

    messages: int
    requests: int
    errors: int


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One event as :meth:`StreamLog.after` hands it out (made on read, not stored)."""

    seq: int
    payload: bytes


class ByteBudget:
    """Bytes buffered by every stream log that shares it: the process-wide bound."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    @property
    def over(self) -> bool:
        return self.used > self.limit


class StreamLog:
    """The events of one stream, numbered from 1, bounded by count and bytes.

    When a bound is passed — the stream's own, or the process-wide :class:`ByteBudget` —
    the oldest events are dropped (the newest one is always kept); a later read from
    before the oldest kept event raises ``history_truncated`` rather than return a
    partial replay.

    ``acked`` is the position the client acknowledged (by event id). The marked events
    after it (requests, errors) are kept in one queue with their counts, so the poll
    summary is counted, never parsed: appends add to its tail, acknowledgements and trims
    drop from its head (amortised O(1) per event). Most streams mark nothing: the queue
    exists only while it holds something.
    """

    __slots__ = (
        "_acked",
        "_entries",
        "_errors",
        "_first_seq",
        "_last_seq",
        "_marks",
        "_requests",
        "budget",
        "bytes",
        "journal",
        "keep_after",
        "max_bytes",
        "max_events",
        "number",
    )

    def __init__(self, max_events: int, max_bytes: int, budget: ByteBudget | None = None) -> None:
        # Bare payloads, the oldest first; their seqs follow from _first_seq. (No object per
        # event: buffered memory stays close to the payload bytes.)
        self._entries: deque[bytes] = deque()
        self._first_seq = 1  # seq of _entries[0]
        self._last_seq = 0
        self.bytes = 0
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.budget = budget if budget is not None else ByteBudget(2**63)
        # overflow: block sets this to what the client acknowledged: later events are
        # never dropped for the log's own bounds. None: drop the oldest (truncate).
        self.keep_after: int | None = None
        self._acked = 0
        self._marks: deque[tuple[int, Mark]] | None = None  # kept marked events after _acked
        self._requests = 0  # of those, requests
        self._errors = 0  # and errors
        # A durable store's record of appends (proxy.core.journal), and this log's stream.
        self.journal: Journal | None = None
        self.number = 0

    if TYPE_CHECKING:

        @property
        def last_seq(self) -> int: ...
        @property
        def acked(self) -> int: ...  # the highest position the client acknowledged

    else:  # (read per event: a C getter, no Python frame)
        last_seq = property(operator.attrgetter("_last_seq"))
        acked = property(
            operator.attrgetter("_acked"),
            doc="The highest position the client acknowledged (by event id).",
        )

    @property
    def first_kept_seq(self) -> int:
        """Seq of the oldest event still held (``last_seq + 1`` when empty)."""
        return self._first_seq if self._entries else self._last_seq + 1

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def newest(self) -> bytes:
        """The payload of the event at :attr:`last_seq` (the log holds at least one)."""
        return self._entries[-1]

    @property
    def over_bound(self) -> bool:
        """Holding more than its own bounds allow (possible only while trimming is held back)."""
        return len(self._entries) > self.max_events or self.bytes > self.max_bytes

    def fits(self, size: int) -> bool:
        """Whether an event of ``size`` bytes can be appended without dropping one (by the
        log's own bounds or the process-wide budget)."""
        return (
            len(self._entries) < self.max_events
            and self.bytes + size <= self.max_bytes
            and self.budget.used + size <= self.budget.limit
        )

    def append(self, payload: bytes, mark: Mark = Mark.NONE) -> int:
        """Add an event (``mark``: what a poll must report about it) and trim to the bounds."""
        self._last_seq += 1
        if not self._entries:
            self._first_seq = self._last_seq
        self._entries.append(payload)
        if mark:
            if self._marks is None:
                self._marks = deque()
            self._marks.append((self._last_seq, mark))
            self._requests += bool(mark & Mark.REQUEST)
            self._errors += bool(mark & Mark.ERROR)
        self.bytes += len(payload)
        self.budget.used += len(payload)
        if self.journal is not None:
            self.journal.appends.append((self.number, self._last_seq, payload, int(mark)))
        budget = self.budget
        # (within every bound trim drops nothing: not called, the common case)
        if (
            len(self._entries) > self.max_events
            or self.bytes > self.max_bytes
            or budget.used > budget.limit
        ):
            self.trim()
        return self._last_seq

    def trim(self) -> None:
        """Drop the oldest events while over a bound, never the newest.

        Past its own bounds, only events up to ``keep_after`` go (``overflow: block`` keeps
        what the client has not acknowledged). The process-wide budget is a hard cap: past
        it the oldest go regardless.
        """
        keep_after = self.keep_after
        entries = self._entries
        first = self._first_seq
        while len(entries) > 1:
            if not self.budget.over:
                if keep_after is not None and self._first_seq > keep_after:
                    break
                if len(entries) <= self.max_events and self.bytes <= self.max_bytes:
                    break
            dropped = len(entries.popleft())
            self._first_seq += 1
            self.bytes -= dropped
            self.budget.used -= dropped
        if self._first_seq != first and self.journal is not None:
            self.journal.trimmed[self.number] = self._first_seq
        self._forget_marks_before(self._first_seq)

    def acknowledge(self, seq: int) -> None:
        """The client has everything up to ``seq`` (at most :attr:`last_seq`); under
        ``overflow: block`` that much may now be dropped."""
        if seq > self._acked:
            self._acked = seq
            self._forget_marks_before(seq + 1)
        if self.keep_after is not None:
            self.keep_after = self._acked
            self.trim()

    def _forget_marks_before(self, seq: int) -> None:
        marks = self._marks
        if marks is None:
            return
        while marks and marks[0][0] < seq:
            _, mark = marks.popleft()
            self._requests -= bool(mark & Mark.REQUEST)
            self._errors -= bool(mark & Mark.ERROR)
        if not marks:
            self._marks = None

    def unacknowledged(self) -> Unacknowledged:
        """The events after :attr:`acked`, counted; ``history_truncated`` if some of them
        were dropped (a poll never reports on a partial rest)."""
        if self._acked + 1 < self.first_kept_seq:
            raise ResumeError(
                "the events after Last-Event-ID were dropped from the buffer",
                reason="history_truncated",
            )
        return Unacknowledged(self._last_seq - self._acked, self._requests, self._errors)

    def after(self, seq: int) -> list[LogEntry]:
        """Every event after ``seq``, whole, or a :class:`ResumeError`."""
        return [LogEntry(n, p) for n, p in enumerate(self.payloads_after(seq), seq + 1)]

    def payloads_after(self, seq: int) -> list[bytes]:
        """The payloads of every event after ``seq`` (the first is ``seq + 1``), whole, or a
        :class:`ResumeError`: :meth:`after` without an object per event (a replay)."""
        check_position(
            seq, first_kept=self.first_kept_seq, last=self._last_seq, held_in=HeldIn.BUFFER
        )
        if seq == self._last_seq:
            return []
        skip = seq + 1 - self._first_seq
        if skip > len(self._entries) // 2:
            # The usual case (a live tail): walk back from the end, not forward.
            tail = list(itertools.islice(reversed(self._entries), len(self._entries) - skip))
            tail.reverse()
            return tail
        return list(itertools.islice(self._entries, skip, None))

    def clear(self) -> None:
        self._entries.clear()
        self._marks = None
        self._requests = self._errors = 0
        self.budget.used -= self.bytes
        self.bytes = 0
