"""Which connection reads which stream, and handing each one what it has not been given.

A stream is attached to at most one client connection at a time. :class:`Delivery`
owns that mapping, the continuation of a ``stream/resume`` connection (after the resumed
stream ends, the same connection carries the resume request's own answer), and the set of
streams holding more than their bounds under ``overflow: block`` (the server is held
back while any does).

Everything it sends is already in the stream's log: a :class:`SendToClient` names an
event the log has, a :class:`SendEvents` a run of them (DESIGN.md §3, "an event is stored
before it is sent").
"""

from __future__ import annotations

from proxy.core.eventid import event_id_prefix, format_event_id
from proxy.core.eventrun import EventRun
from proxy.core.events import (
    CloseClient,
    Command,
    ConnId,
    LogNote,
    PauseUpstream,
    ResumeUpstream,
    SendEvents,
    SendToClient,
)
from proxy.core.schedule import Schedule
from proxy.core.session_state import STANDALONE, SessionSettings, StreamSlot, StreamTable
from proxy.core.stream import StreamState

# (Enum members read as module constants: through the class, 3.11's ``EnumType.__getattr__``
# hook makes each read cost ~25 times a global's, and these are read per event.)
_COMPLETED = StreamState.COMPLETED
_LIVE = StreamState.LIVE


class Delivery:
    """The attachments of one session's streams to its client connections."""

    def __init__(
        self, epoch: str, settings: SessionSettings, streams: StreamTable, schedule: Schedule
    ) -> None:
        self._epoch = epoch
        self._settings = settings
        self._streams = streams
        self._schedule = schedule
        self.by_conn: dict[ConnId, int] = {}  # connection -> the stream it reads
        self.continuation: dict[ConnId, int] = {}  # a resume's connection goes on to its reply
        # 2025-11-25 §Resumability: open each stream with a priming event (an id, no data)
        # and honour sse.max_stream_seconds (SEP-1699). Set once the version is known.
        self.priming = False
        self.held: set[int] = set()  # streams over their bounds (overflow: block)
        self.upstream_paused = False

    def attach(
        self,
        stream: StreamSlot,
        conn: ConnId,
        now: float,
        out: list[Command],
        *,
        start: int = 0,
        prime: bool = True,
    ) -> None:
        """Give ``conn`` the events of ``stream`` after ``start``, then its live tail."""
        # (Watched attributes written through their slots, the stream marked once: this
        # runs per call. See StreamSlot.)
        number = stream.number
        stream._conn = conn
        stream._touched = now
        stream.cursor = start
        stream.attaches += 1
        watch = stream.watch
        if watch is not None:
            watch.add(number)
        self.by_conn[conn] = number
        if self.priming and prime:
            event_id = format_event_id(self._epoch, number, start, stream.attaches)
            out.append(SendToClient(conn, event_id, None, self._settings.retry_ms))
            if self._settings.max_stream_seconds is not None and number != STANDALONE:
                stream.close_at = now + self._settings.max_stream_seconds
        log = stream.log
        # (Else flush has nothing to do: nothing after start, live, within its bounds; a
        # new request stream, every call.)
        if start < log.last_seq or stream.state is not _LIVE or log.over_bound:
            self.flush(stream, now, out)

    def detach(self, conn: ConnId, now: float) -> None:
        """``conn`` reads no more (it closed, or the proxy closes it)."""
        self._schedule.moved = True
        self.continuation.pop(conn, None)
        number = self.by_conn.pop(conn, None)
        if number is None:
            return
        stream = self._streams.get(number)
        if stream is not None and stream.conn == conn:
            stream._conn = stream._close_at = None  # (through the slots: see attach)
            stream._touched = now
            watch = stream.watch
            if watch is not None:
                watch.add(number)

    def take_over(self, stream: StreamSlot, now: float, out: list[Command]) -> None:
        """A resume takes a stream over: its old connection is presumed dead."""
        if stream.conn is not None:
            old = stream.conn
            self.detach(old, now)
            out.append(CloseClient(old))

    def close_all(self, now: float, out: list[Command]) -> None:
        for conn in list(self.by_conn):
            self.detach(conn, now)
            out.append(CloseClient(conn))

    def flush(self, stream: StreamSlot, now: float, out: list[Command]) -> None:
        """Send what the attached connection has not been given; close when complete."""
        conn = stream.conn
        log = stream.log
        if conn is None:
            if log.over_bound:
                self.held.add(stream.number)
            return
        last = log.last_seq
        cursor = stream.cursor
        state = stream.state
        if cursor < last:
            if cursor + 1 == last and len(log):  # the live tail: the one just logged
                event_id = format_event_id(self._epoch, stream.number, last)
                out.append(SendToClient(conn, event_id, log.newest))
            else:  # a backlog (a resume's replay): one command, framed in chunks when written
                prefix = event_id_prefix(self._epoch, stream.number)
                out.append(
                    SendEvents(conn, EventRun(prefix, cursor + 1, log.payloads_after(cursor)))
                )
            stream.cursor = last
            if stream.sent_upto < last:
                stream.sent_upto = last
            if state is _COMPLETED:
                stream.done_at = now
        if state is _LIVE:
            if log.over_bound:
                # overflow: block, full of what the client was sent but never acknowledged:
                # end the connection (retry:) so it reconnects with its Last-Event-ID.
                self.held.add(stream.number)
                self.detach(conn, now)
                out.append(CloseClient(conn, self._settings.retry_ms))
                out.append(LogNote("ack_solicited", {"stream": stream.number}))
            return
        if stream.state is _COMPLETED:
            then = self._streams.get(self.continuation.get(conn, -1))
            self.detach(conn, now)
            if then is None:
                out.append(CloseClient(conn))
            else:
                # stream/resume: after the stream's end, the resume request's own answer.
                self.attach(then, conn, now, out, prime=False)

    def backpressure(self, out: list[Command]) -> None:
        """overflow: block — hold the server back while any stream is over its bounds."""
        for number in list(self.held):
            held = self._streams.get(number)
            if held is None or not held.log.over_bound:
                self.held.discard(number)
        blocked = bool(self.held)
        if blocked != self.upstream_paused:
            self.upstream_paused = blocked
            out.append(PauseUpstream() if blocked else ResumeUpstream())
