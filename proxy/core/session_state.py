"""The state a session keeps: its settings and, per stream, its slot."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.core.events import ConnId
from proxy.core.stream import StreamLog, StreamState

STANDALONE = 0
"""Stream number of the session's standalone (GET) stream."""


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """The knobs a session needs; the runtime builds it from the config."""

    retry_ms: int = 1000
    max_stream_seconds: float | None = None
    completed_retention: float = 120.0
    idle_timeout: float = 600.0
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


@dataclass(slots=True)
class StreamSlot:
    """One stream of a session: its log, its state, and who is attached where."""

    number: int
    log: StreamLog
    state: StreamState = StreamState.LIVE
    pending: set[int] = field(default_factory=set)
    conn: ConnId | None = None
    cursor: int = 0  # seq of the last event handed to ``conn``
    sent_upto: int = 0  # highest seq ever handed to any connection
    attaches: int = 0
    close_at: float | None = None  # SEP-1699 deadline of the current connection
    done_at: float | None = None  # when it completed or last sent, whichever is later
    request_id: Any = None  # the client's id of the (first) request on this stream
    stream_id: str | None = None  # set once announced with notifications/stream/create
    create_at: float | None = None  # when to announce it (streams.create_after_ms)
    acked: int = 0  # the highest position the client acknowledged (Last-Event-ID)
    touched: float = 0.0  # last create, poll, resume or detach: abandonment counts from it
    waiting: list[int] = field(default_factory=list)  # stream/resume requests to answer
