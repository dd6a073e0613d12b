"""Time in a session: wake-ups, what expires when, idling, and holding the server back.

A mixin of :class:`~proxy.core.session.Session`. After every event the session works out
its next deadline (a :class:`WakeAt` when it moves) and whether ``overflow: block`` must
hold the server back; on a :class:`Tick` it carries out whatever came due: SEP-1699
closes, announcements after ``create_after``, abandonment, retention, idle expiry.
"""

from __future__ import annotations

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


class ExpiryMixin:
    # What the session provides (see proxy.core.session.Session).
    settings: SessionSettings
    closed: bool
    forgotten: bool
    upstream_paused: bool
    _streams: dict[int, StreamSlot]
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

    def _on_tick(self, out: list[Command]) -> None:
        now = self._now
        for stream in list(self._streams.values()):
            if stream.create_at is not None and stream.create_at <= now:
                if stream.state is StreamState.LIVE:
                    self._announce(stream, out)
                stream.create_at = None
            abandon_at = self._abandon_at(stream)
            if abandon_at is not None and abandon_at <= now:
                self._abandon(stream, out)
                continue
            if stream.conn is not None and stream.close_at is not None and stream.close_at <= now:
                conn = stream.conn
                self._detach(conn)
                out.append(CloseClient(conn, self.settings.retry_ms))
                out.append(LogNote("stream_polling_close", {"stream": stream.number}))
            expire_at = self._expire_at(stream)
            if expire_at is not None and expire_at <= now:
                self._drop_stream(stream)
        if self.closed:
            if all(s.number == STANDALONE for s in self._streams.values()) and not self._by_conn:
                self._end("ended and nothing left to resume", out)
        elif self._idle_since is not None and self._idle_since + self.settings.idle_timeout <= now:
            self._end("idle timeout", out)

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
        if not self._deadlines_moved:
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
        deadlines: list[float] = []
        for stream in self._streams.values():
            if stream.conn is not None and stream.close_at is not None:
                deadlines.append(stream.close_at)
            if stream.create_at is not None and stream.state is StreamState.LIVE:
                deadlines.append(stream.create_at)
            abandon_at = self._abandon_at(stream)
            if abandon_at is not None:
                deadlines.append(abandon_at)
            expire_at = self._expire_at(stream)
            if expire_at is not None:
                deadlines.append(expire_at)
        if self.closed and not deadlines:
            deadlines.append(self._now)
        if self._idle_since is not None and not self.closed:
            deadlines.append(self._idle_since + self.settings.idle_timeout)
        return min(deadlines) if deadlines else None
