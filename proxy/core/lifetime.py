"""How a session ends, and that no request is left without an answer when it does.

:class:`Lifetime` owns the session's two end states: ``closed`` (its server is gone or
stopping: no new requests, its retained streams stay resumable) and ``forgotten`` (the
session is over: its streams are freed and the runtime forgets it). It carries out each
way of getting there:

- the server exits (``UpstreamClosed``): every request in flight gets an error, then close;
- the server is restarted (``UpstreamRestarted``): the requests in flight get an error,
  and the server's own requests are forgotten; the session goes on;
- the server's process is stopped for idleness (``upstream_idle_stop``): nothing is in
  flight; the server's own requests are forgotten as on a restart; the session goes on;
- the proxy stops (``ProxyShutdown``): every request in flight gets an error, logged
  before its stream's connection is closed, then the session ends and its streams stay
  in a durable store;
- ``DELETE``, the idle timeout, or nothing left to resume: the session ends.

DESIGN.md §3: each request ends with exactly one response, the server's or one the proxy
writes. It works on explicit parts of its session (the stream table, the id map, the
:class:`~proxy.core.delivery.Delivery`) and a :class:`LifetimeHost` of two operations
that stay with the session (logging a message on a stream, finishing a request).
"""

from __future__ import annotations

from typing import Any, Protocol

from proxy.core.delivery import Delivery
from proxy.core.errors import LostReason, error_message, lost_answer
from proxy.core.events import (
    CloseClient,
    Command,
    ForgetSession,
    LogNote,
    StopIdleUpstream,
    StopUpstream,
)
from proxy.core.idmap import IdMap
from proxy.core.protocol import SERVER_ERROR
from proxy.core.session_state import STANDALONE, StreamTable
from proxy.core.stream import StreamEvent, StreamState, transition


class LifetimeHost(Protocol):
    """What ending needs its session to do (:class:`~proxy.core.session.Session`)."""

    def append(self, number: int, obj: dict[str, Any], out: list[Command]) -> None:
        """Log ``obj`` on stream ``number`` (and hand it to its conn, if attached)."""
        ...

    def finish_request(self, upstream_id: int, out: list[Command]) -> None:
        """The request is answered: forget it; complete its stream if it was the last."""
        ...


class Lifetime:
    """The end states of one session and the ways to them."""

    def __init__(
        self, streams: StreamTable, ids: IdMap, delivery: Delivery, host: LifetimeHost
    ) -> None:
        self._streams = streams
        self._ids = ids
        self._delivery = delivery
        self._host = host
        self.closed = False  # upstream gone: no new requests, retained streams resumable
        self.forgotten = False

    def upstream_closed(self, reason: str, now: float, out: list[Command]) -> None:
        if self.closed:
            return
        out.append(LogNote("upstream_closed", {"reason": reason}))
        # (no data.reason here: the answer has always been written without one)
        self.fail_in_flight(f"MCP server gone: {reason}", None, out)
        self.close(reason, now, out)

    def upstream_restarted(self, reason: str, out: list[Command]) -> None:
        if self.closed:
            return
        out.append(LogNote("upstream_restarting", {"reason": reason}))
        self.fail_in_flight(f"MCP server restarted: {reason}", LostReason.UPSTREAM_RESTARTED, out)
        self._ids.drop_server_requests()  # its questions died with it

    def stop_upstream_idle(self, idle_seconds: float, out: list[Command]) -> None:
        """The session is idle: its server's process stops, the session stays. Questions
        the server asked are void with it (a late answer is dropped, as after a restart)."""
        if self.closed:
            return
        self._ids.drop_server_requests()
        out.append(StopIdleUpstream(idle_seconds))

    def fail_in_flight(self, message: str, reason: LostReason | None, out: list[Command]) -> None:
        """Answer every request in flight in the server's place (-32000, ``data.reason``
        when given), logged (and sent) on its stream."""
        for upstream_id in self._ids.in_flight():
            pending = self._ids.pending(upstream_id)
            assert pending is not None
            if reason is None:
                error = error_message(pending.client_id, SERVER_ERROR, message)
            else:
                error = lost_answer(pending.client_id, reason, message)
            self._host.append(pending.stream, error, out)
            self._host.finish_request(upstream_id, out)

    def close(self, reason: str, now: float, out: list[Command]) -> None:
        """No more requests; the upstream stops; completed streams stay resumable."""
        self.closed = True
        self._ids.drop_server_requests()
        standalone = self._streams[STANDALONE]
        if standalone.conn is not None:
            out.append(CloseClient(standalone.conn))
            self._delivery.detach(standalone.conn, now)
        standalone.state = transition(standalone.state, StreamEvent.COMPLETE)
        standalone.done_at = now
        if self._streams.journal is not None:
            self._streams.journal.completed.append(STANDALONE)
        out.append(StopUpstream(reason))

    def shut_down(self, now: float, out: list[Command]) -> None:
        """The proxy stops: no request is left without an answer (DESIGN.md §3).

        Each answer is in its stream's log before the stream's connection is closed, so
        an attached client reads it before its stream ends.
        """
        if not self.closed:
            self.fail_in_flight("the proxy is shutting down", LostReason.PROXY_SHUTDOWN, out)
        self.end("proxy shutting down", now, out, keep=True)

    def end(self, reason: str, now: float, out: list[Command], *, keep: bool = False) -> None:
        """Forget the session. ``keep``: its streams stay in a durable store until their
        retention ends (a restarted proxy serves them); else they are dropped there too."""
        if not self.closed:
            for upstream_id in self._ids.in_flight():
                self._host.finish_request(upstream_id, out)
            self.close(reason, now, out)
        self._delivery.close_all(now, out)
        journal = self._streams.journal
        if journal is not None:
            journal.ended = reason
            if not keep:
                journal.dropped.extend(self._streams)
        for stream in self._streams.values():
            stream.state = StreamState.EXPIRED
            stream.log.clear()
        self._streams.clear()
        self.forgotten = True
        out.append(ForgetSession(reason))
