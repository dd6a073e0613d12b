"""The state a session keeps: its settings and, per stream, its slot."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from proxy.core.errors import Overloaded
from proxy.core.events import ConnId
from proxy.core.journal import Journal
from proxy.core.stream import ByteBudget, StreamEvent, StreamLog, StreamState, transition

STANDALONE = 0
"""Stream number of the session's standalone (GET) stream."""


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """The knobs a session needs; the runtime builds it from the config.

    These defaults are the configuration's too: :mod:`proxy.config` takes its defaults
    from here, so change them here only.
    """

    retry_ms: int = 1000
    max_stream_seconds: float | None = None
    completed_retention: float = 120.0
    idle_timeout: float = 600.0
    # Idle this long (no connection, no request in flight), the session's upstream process
    # is stopped while the session stays (upstream.stop_idle_seconds); None: never.
    upstream_idle_stop: float | None = None
    stream_max_events: int = 100_000
    stream_max_bytes: int = 64 * 1024 * 1024
    standalone_max_events: int = 1000
    max_streams: int = 1000  # per session, live and retained; the oldest finished go first
    # Past a stream bound: "block" stops reading the upstream until a client takes what
    # was never sent (nothing lost); "truncate" drops the oldest (history_truncated).
    overflow: str = "block"
    # The seed's stream protocol (D2), for clients that declare capabilities.streams.
    stream_methods: tuple[str, ...] = ("tools/call",)
    create_after: float = 0.0  # seconds a request runs before its stream is announced
    resume_interval_min: float = 1.0
    resume_interval_max: float = 3600.0
    notification_shape: str = "nested"  # or "flat" (the PR's final schema.ts)
    detach_after_create: bool = False
    event_id_in_meta: bool = False  # opt-in: announced streams' messages carry their id
    token_secret: bytes = b""
    # The 2025-11-25 Tasks shape for legacy clients that declare capabilities.tasks, over
    # a server that does not offer tasks itself (proxy/modern/legacy_tasks.py).
    legacy_tasks: bool = True


def _watched(name: str) -> property:
    """A slot attribute whose every write marks the stream for rescheduling.

    The session keeps its streams' deadlines in a heap (:mod:`proxy.core.schedule`) and
    recomputes only the streams whose deadline inputs were written since the last event.
    """
    private = "_" + name

    def set_(self: StreamSlot, value: Any) -> None:
        setattr(self, private, value)
        if self.watch is not None:
            self.watch.add(self.number)

    # The getter is C (attrgetter): these are read on every event, written far less.
    return property(
        operator.attrgetter(private), set_, doc=f"``{name}`` (a deadline input: writes are watched)"
    )


class StreamSlot:
    """One stream of a session: its log, its state, and who is attached where.

    Every attribute a deadline is computed from (``conn``, ``state``, ``close_at``,
    ``create_at``, ``done_at``, ``touched``) is watched: a write adds the stream's number
    to ``watch`` (the session's set of streams to reschedule). ``pending`` is not watched:
    it only turns empty or non-empty together with a write to ``state`` (completion) or
    ``conn`` (a new request stream is attached), which the expiry tests check.
    """

    __slots__ = (
        "_close_at",
        "_conn",
        "_create_at",
        "_done_at",
        "_state",
        "_touched",
        "attaches",
        "created_at",
        "cursor",
        "log",
        "number",
        "pending",
        "request_id",
        "sent_upto",
        "stream_id",
        "waiting",
        "watch",
    )

    if TYPE_CHECKING:  # what the watched properties below hold, for the type checker

        @property
        def conn(self) -> ConnId | None: ...  # the connection it is attached to
        @conn.setter
        def conn(self, value: ConnId | None) -> None: ...
        @property
        def state(self) -> StreamState: ...
        @state.setter
        def state(self, value: StreamState) -> None: ...
        @property
        def close_at(self) -> float | None: ...  # SEP-1699 deadline of the current conn
        @close_at.setter
        def close_at(self, value: float | None) -> None: ...
        @property
        def done_at(self) -> float | None: ...  # completed or last sent, the later
        @done_at.setter
        def done_at(self, value: float | None) -> None: ...
        @property
        def create_at(self) -> float | None: ...  # when to announce it (create_after_ms)
        @create_at.setter
        def create_at(self, value: float | None) -> None: ...
        @property
        def touched(self) -> float: ...  # last create/poll/resume/detach: abandonment
        @touched.setter
        def touched(self, value: float) -> None: ...

    else:
        conn = _watched("conn")
        state = _watched("state")
        close_at = _watched("close_at")
        done_at = _watched("done_at")
        create_at = _watched("create_at")
        touched = _watched("touched")

    def __init__(
        self,
        number: int,
        log: StreamLog,
        *,
        state: StreamState = StreamState.LIVE,
        touched: float = 0.0,
        watch: set[int] | None = None,
        created_at: float | None = None,
    ) -> None:
        self.number = number
        self.log = log
        self.watch: set[int] | None = None  # set last: the writes below need no notice
        self._state: StreamState = state
        self.pending: set[int] = set()
        self._conn: ConnId | None = None
        self.cursor = 0  # seq of the last event handed to ``conn``
        self.sent_upto = 0  # highest seq ever handed to any connection
        self.attaches = 0
        self._close_at: float | None = None
        self._done_at: float | None = None
        self.request_id: Any = None  # the client's id of the (first) request on this stream
        self.stream_id: str | None = None  # set once announced with notifications/stream/create
        self._create_at: float | None = None
        self._touched = touched
        self.created_at = touched if created_at is None else created_at  # for the status page
        self.waiting: list[int] = []  # stream/resume requests to answer
        self.watch = watch

    @property
    def acked(self) -> int:
        """The highest position the client acknowledged (Last-Event-ID): the log's."""
        return self.log.acked

    def __repr__(self) -> str:
        return (
            f"StreamSlot(number={self.number}, state={self._state.value}, conn={self._conn}, "
            f"events={len(self.log)})"
        )


class StreamTable(dict[int, StreamSlot]):
    """A session's streams by number, oldest first; a stream put in it is watched by
    ``dirty``. It numbers new streams, makes room and forgets them."""

    __slots__ = ("dirty", "journal", "next_number")

    def __init__(self) -> None:
        super().__init__()
        self.dirty: set[int] = set()  # streams whose deadlines must be recomputed
        self.next_number = 1  # 0 is the standalone stream
        self.journal: Journal | None = None  # a durable store's (proxy.core.journal)

    def __setitem__(self, number: int, stream: StreamSlot) -> None:
        stream.watch = self.dirty
        self.dirty.add(number)
        super().__setitem__(number, stream)
        stream.log.number = number
        if self.journal is not None:
            stream.log.journal = self.journal
            self.journal.opened.append(number)

    def __delitem__(self, number: int) -> None:
        super().__delitem__(number)
        self.dirty.add(number)

    def add(self, settings: SessionSettings, budget: ByteBudget, now: float) -> StreamSlot:
        """A new request stream (call :meth:`room_for_new` first)."""
        number = self.next_number
        self.next_number += 1
        log = StreamLog(settings.stream_max_events, settings.stream_max_bytes, budget)
        if settings.overflow == "block":
            # Keep every event the client has not acknowledged (by event id): a write to a
            # connection proves nothing. (The standalone stream always truncates: no
            # request waits on it, so it must never hold the server back.)
            log.keep_after = 0
        stream = StreamSlot(number, log, touched=now)
        self[number] = stream
        return stream

    def room_for_new(self, max_streams: int) -> StreamSlot | None:
        """Whether a stream may be added: None (there is room), the stream to evict first
        (the oldest completed, unattached one), or ``Overloaded``. Changes nothing."""
        if len(self) <= max_streams:  # the standalone stream is not counted
            return None
        for number, stream in self.items():  # oldest first
            if stream.state is StreamState.COMPLETED and stream.conn is None and number:
                return stream
        raise Overloaded(
            f"Too many streams in this session (sessions.max_streams_per_session={max_streams})",
            reason="too_many_streams",
        )

    def drop(self, stream: StreamSlot) -> None:
        """Forget a stream and free its log (it can no longer be resumed)."""
        stream.state = transition(stream.state, StreamEvent.EXPIRE)
        stream.log.clear()
        del self[stream.number]
        if self.journal is not None:
            self.journal.dropped.append(stream.number)
