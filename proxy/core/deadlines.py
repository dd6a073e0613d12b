"""What happens when a session's deadline passes (a :class:`~proxy.core.events.Tick`).

:class:`~proxy.core.schedule.Schedule` decides *when* something is due; :class:`Deadlines`
carries out *what* is due, per stream and then for the session:

- a delayed announcement (``streams.create_after_ms``): ``notifications/stream/create``;
- abandonment (nobody resumed or polled within ``resumeInterval.max``): the server's
  request is cancelled and the log freed;
- a SEP-1699 close (``sse.max_stream_seconds``, 2025-11-25 transports §Resumability):
  the response ends with ``retry:`` so that the client polls back with ``Last-Event-ID``;
- retention (``completed_retention_seconds``): a completed stream expires;
- the session: ended once it is closed with nothing left to resume, or idle too long;
  before that, with ``upstream_idle_stop``, its upstream process stopped (the session
  stays; the next message for the upstream starts it again).
"""

from __future__ import annotations

from proxy.core.delivery import Delivery
from proxy.core.events import CloseClient, Command, LogNote
from proxy.core.lifetime import Lifetime
from proxy.core.resume import Resumer
from proxy.core.schedule import Schedule
from proxy.core.session_state import STANDALONE, SessionSettings, StreamSlot, StreamTable
from proxy.core.stream import StreamState


class Deadlines:
    """Carries out what is due in one session; it owns no state of its own. The session's
    :class:`Schedule` is given with each tick (the one that says what is due now)."""

    def __init__(
        self,
        settings: SessionSettings,
        streams: StreamTable,
        delivery: Delivery,
        resumer: Resumer,
        lifetime: Lifetime,
    ) -> None:
        self._settings = settings
        self._streams = streams
        self._delivery = delivery
        self._resumer = resumer
        self._lifetime = lifetime

    def tick(self, schedule: Schedule, now: float, out: list[Command]) -> None:
        """Everything due at ``now``: the due streams first, then the session's end."""
        for number in schedule.due(now):
            stream = self._streams.get(number)
            if stream is not None:
                self._stream_due(schedule, stream, now, out)
        if self._lifetime.closed:
            if self._streams.keys() <= {STANDALONE} and not self._delivery.by_conn:
                self._lifetime.end("ended and nothing left to resume", now, out)
        elif schedule.idle_expired(now):
            self._lifetime.end("idle timeout", now, out)
        elif schedule.upstream_stop_due(now):
            schedule.upstream_stopped = True
            after = self._settings.upstream_idle_stop
            assert after is not None  # else nothing is ever due
            self._lifetime.stop_upstream_idle(after, out)

    def _stream_due(
        self, schedule: Schedule, stream: StreamSlot, now: float, out: list[Command]
    ) -> None:
        """Carry out what is due on one stream at ``now``."""
        if stream.create_at is not None and stream.create_at <= now:
            if stream.state is StreamState.LIVE:
                self._resumer.announce(stream, now, out)
            stream.create_at = None
        abandon_at = schedule.abandon_at(stream)
        if abandon_at is not None and abandon_at <= now:
            self._resumer.abandon(stream, now, out)
            return
        if stream.conn is not None and stream.close_at is not None and stream.close_at <= now:
            # SEP-1699: end the response; the client polls back with Last-Event-ID.
            conn = stream.conn
            self._delivery.detach(conn, now)
            out.append(CloseClient(conn, self._settings.retry_ms))
            out.append(LogNote("stream_polling_close", {"stream": stream.number}))
        expire_at = schedule.expire_at(stream)
        if expire_at is not None and expire_at <= now:
            self._streams.drop(stream)
