"""What the runtime tells a session (events) and what a session asks of it (commands).

``Session.handle(event, now)`` takes one event and returns a list of commands, to be
carried out in order. Commands for one connection must reach the wire in the order they
were returned; that ordering is what makes replay-then-live seamless.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from typing import Any, NewType

from proxy.core.eventrun import EventRun
from proxy.core.handshake import HandshakeStep
from proxy.core.jsonrpc import Message
from proxy.core.record import record

ConnId = NewType("ConnId", int)
"""A client connection (one HTTP response stream), numbered by the runtime."""


# ---------------------------------------------------------------- events (runtime → core)
@record
class ClientPost:
    """A POST body's messages (one, or a 2025-03-26 batch) on connection ``conn``."""

    conn: ConnId
    messages: list[Message]
    batch: bool = False
    last_event_id: str | None = None  # the request's Last-Event-ID header, if any


@record
class ClientGet:
    """A GET: open the standalone stream, or resume the stream ``last_event_id`` names."""

    conn: ConnId
    last_event_id: str | None = None


@record
class ClientDetached:
    """The connection is gone (client hung up, or the runtime finished closing it)."""

    conn: ConnId


@record
class ClientDelete:
    """End the session now: a client's ``DELETE``, or the runtime giving up on it (a
    refused ``initialize``); ``reason`` is what the log says ended it."""

    reason: str = "deleted by client"


@record
class ClientAck:
    """The client has every event of stream ``stream`` up to ``seq``: it resumed from there
    on another replica (a ``Last-Event-ID`` the holder did not see). Like a resume's
    acknowledgement, it lets ``overflow: block`` drop what is acknowledged."""

    stream: int
    seq: int


@record
class ProxyShutdown:
    """The proxy is stopping: answer every request in flight with an error, then end.

    Unlike :class:`ClientDelete` nobody asked for the requests to go away, so each gets
    an answer in its stream's log (and on its connection, if one is attached) before the
    session is forgotten.
    """


@record
class UpstreamMessage:
    """One message from the server. ``origin``: the (upstream) id of the request whose
    HTTP response stream carried it, when the transport knows (DESIGN §5 rule 3)."""

    msg: Message
    origin: int | None = None


@record
class UpstreamMessages:
    """Messages from the server read in one turn of the event loop, in order (a stdio
    server's lines, :mod:`proxy.upstream.stdio_reader`), with no origin: the same as one
    :class:`UpstreamMessage` each, except that a stream's connection is handed what they
    added once, after the last of them (one run of events, not one command each)."""

    msgs: Sequence[Message]


@record
class UpstreamClosed:
    reason: str


@record
class UpstreamRestarted:
    """The server process died and is being started again for this session: what was in
    flight on it is lost (each request gets an error); the session goes on."""

    reason: str


@record
class Tick:
    """A wake-up the session asked for with :class:`WakeAt` (or any time: it is idempotent)."""


Event = (
    ClientPost
    | ClientGet
    | ClientDetached
    | ClientDelete
    | ClientAck
    | ProxyShutdown
    | UpstreamMessage
    | UpstreamMessages
    | UpstreamClosed
    | UpstreamRestarted
    | Tick
)


# ---------------------------------------------------------------- commands (core → runtime)
@record
class Accepted:
    """Answer the POST on ``conn`` with 202 and no body."""

    conn: ConnId


@record
class StartSse:
    """Answer the request on ``conn`` with a 200 ``text/event-stream`` response."""

    conn: ConnId


@record
class SendToClient:
    """Write one event, already in the stream's log. ``payload=None``: a priming event."""

    conn: ConnId
    event_id: str
    payload: bytes | None
    retry_ms: int | None = None  # sent with priming events: how long to wait to reconnect


@record
class SendEvents:
    """Write consecutive events of one stream, all already in its log (a replay, or the
    backlog of a connection that attaches): one command however many, framed by the
    writer in chunks (:mod:`proxy.core.eventrun`). The same as one :class:`SendToClient`
    per event, in order (:meth:`each`)."""

    conn: ConnId
    run: EventRun

    def each(self) -> list[SendToClient]:
        """The run as one :class:`SendToClient` per event."""
        run, conn = self.run, self.conn
        return [SendToClient(conn, run.event_id(i), p) for i, p in enumerate(run.payloads)]


@record
class CloseClient:
    """End the response stream on ``conn``; write ``retry:`` first when given (SEP-1699)."""

    conn: ConnId
    retry_ms: int | None = None


@record
class SendUpstream:
    """Write one message (ids already rewritten) to the upstream server. ``handshake``
    marks the client's own ``initialize`` and ``notifications/initialized``: a transport
    that starts a new upstream session for this one replays them (no byte sniffing)."""

    payload: bytes
    handshake: HandshakeStep | None = None


@record
class PauseUpstream:
    """Stop reading the upstream: a stream holds all it may of what no client was sent."""


@record
class ResumeUpstream:
    """Read the upstream again."""


@record
class WakeAt:
    """Feed a :class:`Tick` at time ``at`` (replaces any earlier wake-up)."""

    at: float


@record
class StopUpstream:
    """Stop the upstream server of this session; no more client requests are taken."""

    reason: str


@record
class StopIdleUpstream:
    """Stop the upstream server's process: the session has been idle (no connection, no
    request in flight) for ``idle_seconds`` (``upstream.stop_idle_seconds``). The session
    stays; the next message for the upstream starts the process again, re-initialized with
    the client's own ``initialize``."""

    idle_seconds: float


@record
class ForgetSession:
    """Drop the session: nothing in it can be resumed any more."""

    reason: str


@record
class LogNote:
    """Something worth a structured log line (never carries secrets)."""

    event: str
    fields: dict[str, Any] = field(default_factory=dict)


Command = (
    Accepted
    | StartSse
    | SendToClient
    | SendEvents
    | CloseClient
    | SendUpstream
    | PauseUpstream
    | ResumeUpstream
    | WakeAt
    | StopUpstream
    | StopIdleUpstream
    | ForgetSession
    | LogNote
)
