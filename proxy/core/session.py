"""One client session: which message belongs to which stream, delivery, expiry.

The session is the single owner of its streams' logs. Every message for the client is
appended to its stream's log *before* a :class:`SendToClient` for it is returned, so what
reaches the wire is always a prefix of what is stored (DESIGN.md §3).

Routing (DESIGN.md §5), upstream → stream: a response goes to the stream of its request;
``notifications/progress`` to the stream of the request that carried its
``progressToken``; any other server→client message to the stream of the only request in
flight if exactly one is (or, over HTTP, to the stream of the request whose response
carried it), else to the standalone stream (0). Ids are rewritten at the
boundary (:mod:`proxy.core.idmap`); resuming lives in :mod:`proxy.core.resume`.
"""

from __future__ import annotations

from typing import Any

from proxy.core import jsonrpc, seed
from proxy.core.errors import BadRequest, Overloaded, SessionNotFound
from proxy.core.eventid import format_event_id
from proxy.core.events import (
    Accepted,
    ClientDelete,
    ClientDetached,
    ClientGet,
    ClientPost,
    CloseClient,
    Command,
    ConnId,
    Event,
    ForgetSession,
    LogNote,
    ProxyShutdown,
    SendToClient,
    SendUpstream,
    StartSse,
    StopUpstream,
    Tick,
    UpstreamClosed,
    UpstreamMessage,
)
from proxy.core.expiry import DeadlineHeap, ExpiryMixin
from proxy.core.idmap import IdMap, progress_token_of
from proxy.core.jsonrpc import Kind, Message
from proxy.core.resume import ResumeMixin
from proxy.core.session_state import STANDALONE, SessionSettings, StreamSlot, StreamTable

__all__ = ["PROXY_SHUTDOWN", "STANDALONE", "UPSTREAM_EXITED", "Session", "SessionSettings"]
from proxy.core.stream import ByteBudget, Mark, StreamEvent, StreamLog, StreamState, transition

# Revisions that allow JSON-RPC batches in a POST body (removed in 2025-06-18).
_BATCH_REVISIONS = frozenset({"2024-11-05", "2025-03-26"})
# From this revision on: priming events and server-initiated close (SEP-1699).
_POLLING_REVISION = "2025-11-25"

UPSTREAM_EXITED = -32000
PROXY_SHUTDOWN = -32000  # JSON-RPC 2.0 §5.1: -32000..-32099 are the implementation's own


class Session(ExpiryMixin, ResumeMixin):
    """A client session. Feed it events with :meth:`handle`; carry out what it returns."""

    def __init__(
        self,
        session_id: str,
        epoch: str,
        settings: SessionSettings,
        now: float,
        budget: ByteBudget | None = None,
    ) -> None:
        self.session_id = session_id
        self.epoch = epoch
        self.settings = settings
        self.protocol_version: str | None = None
        self.closed = False  # upstream gone: no new requests, retained streams resumable
        self.forgotten = False
        self._initialize_seen = False
        self._streams = StreamTable()  # watched: see proxy.core.expiry
        self._dirty = self._streams.dirty
        self._deadlines = DeadlineHeap()
        self.budget = budget if budget is not None else ByteBudget(2**63)
        self._by_conn: dict[ConnId, int] = {}
        self._ids = IdMap()
        self._next_stream = 1
        self._abandoned: set[int] = set()
        self._continue: dict[ConnId, int] = {}  # a resume's connection goes on to its reply
        self.speaks_streams = False  # the client declared capabilities.streams
        self.upstream_paused = False  # overflow: block is holding the server back
        self._over: set[int] = set()  # streams holding more than their bounds (block)
        self._deadlines_moved = True
        self._idle_since: float | None = now
        self._wake: float | None = None
        self._now = now
        self._streams[STANDALONE] = StreamSlot(
            STANDALONE,
            StreamLog(settings.standalone_max_events, settings.stream_max_bytes, self.budget),
        )

    # ------------------------------------------------------------------ entry point
    def handle(self, event: Event, now: float) -> list[Command]:
        """Apply one event at time ``now``; return the commands to carry out, in order."""
        self._now = now
        out: list[Command] = []
        # A server notification only appends to a live stream: no deadline moves unless a
        # connection goes or a stream completes (those mark it themselves). Everything else
        # may move one. This keeps the hot path from scanning every stream per message.
        self._deadlines_moved = not (
            isinstance(event, UpstreamMessage) and event.msg.kind is Kind.NOTIFICATION
        )
        if isinstance(event, ClientPost):
            self._on_post(event, out)
        elif isinstance(event, ClientGet):
            self._on_get(event, out)
        elif isinstance(event, ClientDetached):
            self._detach(event.conn)
        elif isinstance(event, UpstreamMessage):
            self._on_upstream(event.msg, event.origin, out)
        elif isinstance(event, UpstreamClosed):
            self._on_upstream_closed(event.reason, out)
        elif isinstance(event, ClientDelete):
            self._end(event.reason, out)
        elif isinstance(event, ProxyShutdown):
            self._shut_down(out)
        elif isinstance(event, Tick):
            self._wake = None  # the runtime's timer fired: always re-arm
            self._on_tick(out)
        else:  # pragma: no cover - the Event union is closed
            raise TypeError(f"unexpected event {event!r}")
        self._after(out)
        return out

    # ------------------------------------------------------------------ queries
    @property
    def live_requests(self) -> int:
        return len(self._ids)

    @property
    def buffered_bytes(self) -> int:
        return sum(s.log.bytes for s in self._streams.values())

    def stream_numbers(self) -> list[int]:
        return sorted(self._streams)

    def accepts_batches(self) -> bool:
        return (self.protocol_version or "2025-03-26") in _BATCH_REVISIONS

    # ------------------------------------------------------------------ client side
    def _on_post(self, ev: ClientPost, out: list[Command]) -> None:
        """A POST body. Everything that can refuse it is checked before anything changes
        (h11's ``_process_event`` style): a refused POST leaves the session as it was."""
        if self.closed:
            raise SessionNotFound("Session not found: it has ended")
        if ev.batch and not self.accepts_batches():
            raise BadRequest(
                f"JSON-RPC batches are not allowed in protocol {self.protocol_version}"
            )
        requests = [m for m in ev.messages if m.kind is Kind.REQUEST]
        if any(m.method in (seed.POLL, seed.RESUME) for m in requests):
            if len(ev.messages) > 1:
                raise BadRequest("stream/poll and stream/resume must be sent alone")
            self._local_request(ev.conn, requests[0], ev.last_event_id, out)
            return
        initialize = any(m.method == "initialize" for m in requests)
        if initialize and (self._initialize_seen or len(ev.messages) > 1):
            raise BadRequest("initialize must be sent alone, once, to open a session")
        # The last check: room for the requests' stream. A batch's answers to server
        # requests must not be taken from the id map and then refused (2025-03-26).
        evict = self._room_for_stream() if requests else None
        # ---- accepted: from here on nothing raises
        if initialize:
            self._initialize_seen = True
        for msg in ev.messages:
            if msg.kind is Kind.NOTIFICATION:
                self._client_notification(msg, out)
            elif msg.kind is Kind.RESPONSE:
                self._client_response(msg, out)
        if not requests:
            out.append(Accepted(ev.conn))
            return
        if evict is not None and evict.number in self._streams:
            self._drop_stream(evict)
        stream = self._add_stream()
        out.append(StartSse(ev.conn))
        self._attach(stream, ev.conn, out)
        stream.request_id = requests[0].id
        for msg in requests:
            token = progress_token_of(msg.params)
            upstream_id = self._ids.add_client_request(
                msg.id, msg.method or "", stream.number, token
            )
            stream.pending.add(upstream_id)
            forward = jsonrpc.with_id(msg, upstream_id)
            if msg.method == "initialize":
                forward, self.speaks_streams = seed.without_streams_capability(forward)
            out.append(SendUpstream(jsonrpc.encode(forward)))
        if (
            self.speaks_streams
            and len(requests) == 1
            and requests[0].method in self.settings.stream_methods
        ):
            if self.settings.create_after <= 0:
                self._announce(stream, out)
            else:
                stream.create_at = self._now + self.settings.create_after

    def _client_notification(self, msg: Message, out: list[Command]) -> None:
        if msg.method == "notifications/cancelled":
            client_id = msg.params.get("requestId")
            upstream_id = self._ids.upstream_id_of(client_id)
            if upstream_id is None:
                out.append(LogNote("cancel_unknown_request", {"request_id": client_id}))
                return
            out.append(
                SendUpstream(jsonrpc.encode(jsonrpc.with_param(msg, "requestId", upstream_id)))
            )
            # The client stops waiting; a late upstream answer is dropped as unmatched.
            self._finish_request(upstream_id, out)
            return
        out.append(SendUpstream(msg.encoded()))

    def _client_response(self, msg: Message, out: list[Command]) -> None:
        known, server_id = self._ids.take_server_request(msg.id)
        if not known:
            out.append(LogNote("client_response_unmatched", {"response_id": msg.id}))
            return
        out.append(SendUpstream(jsonrpc.encode(jsonrpc.with_id(msg, server_id))))

    def _attach(
        self,
        stream: StreamSlot,
        conn: ConnId,
        out: list[Command],
        *,
        start: int = 0,
        prime: bool = True,
    ) -> None:
        stream.conn = conn
        stream.cursor = start
        stream.attaches += 1
        stream.touched = self._now
        self._by_conn[conn] = stream.number
        polling = (self.protocol_version or "") >= _POLLING_REVISION
        if polling and prime:
            # 2025-11-25 §Resumability: prime the client with an id before anything else.
            event_id = format_event_id(self.epoch, stream.number, start, stream.attaches)
            out.append(SendToClient(conn, event_id, None, self.settings.retry_ms))
            if self.settings.max_stream_seconds is not None and stream.number != STANDALONE:
                stream.close_at = self._now + self.settings.max_stream_seconds
        self._flush(stream, out)

    def _detach(self, conn: ConnId) -> None:
        self._deadlines_moved = True
        self._continue.pop(conn, None)
        number = self._by_conn.pop(conn, None)
        if number is None:
            return
        stream = self._streams.get(number)
        if stream is not None and stream.conn == conn:
            stream.conn = None
            stream.close_at = None
            stream.touched = self._now

    def _flush(self, stream: StreamSlot, out: list[Command]) -> None:
        """Send what the attached connection has not been given; close when complete."""
        conn = stream.conn
        if conn is None:
            if stream.log.over_bound:
                self._over.add(stream.number)
            return
        if stream.cursor < stream.log.last_seq:
            for entry in stream.log.after(stream.cursor):
                out.append(
                    SendToClient(
                        conn, format_event_id(self.epoch, stream.number, entry.seq), entry.payload
                    )
                )
            stream.cursor = stream.log.last_seq
            stream.sent_upto = max(stream.sent_upto, stream.cursor)
            if stream.state is StreamState.COMPLETED:
                stream.done_at = self._now
        if stream.log.over_bound and stream.state is StreamState.LIVE:
            # overflow: block, full of what the client was sent but never acknowledged:
            # end the connection (retry:) so it reconnects with its Last-Event-ID.
            self._over.add(stream.number)
            self._detach(conn)
            out.append(CloseClient(conn, self.settings.retry_ms))
            out.append(LogNote("ack_solicited", {"stream": stream.number}))
            return
        if stream.state is StreamState.COMPLETED:
            then = self._streams.get(self._continue.get(conn, -1))
            self._detach(conn)
            if then is None:
                out.append(CloseClient(conn))
            else:
                # stream/resume: after the stream's end, the resume request's own answer.
                self._attach(then, conn, out, prime=False)

    # ------------------------------------------------------------------ upstream side
    def _on_upstream(self, msg: Message, origin: int | None, out: list[Command]) -> None:
        if msg.kind is Kind.RESPONSE:
            self._upstream_response(msg, out)
        elif msg.kind is Kind.REQUEST:
            downstream_id = self._ids.add_server_request(msg.id)
            self._append(self._route_unrelated(origin), jsonrpc.with_id(msg, downstream_id), out)
        elif msg.method == "notifications/progress":
            number = self._ids.stream_of_progress(msg.params.get("progressToken"))
            if number is None:
                number = self._route_unrelated(origin)
            self._append_bytes(number, msg.encoded(), seed.poll_mark(msg.raw), out)
        elif msg.method == "notifications/cancelled":
            # The server gave up one of its own requests: rewrite to our downstream id.
            server_id = msg.params.get("requestId")
            downstream = self._ids.cancel_server_request(server_id)
            if downstream is None:
                out.append(LogNote("upstream_cancel_unmatched", {"request_id": server_id}))
                return
            rewritten = jsonrpc.with_param(msg, "requestId", downstream)
            self._append(self._route_unrelated(origin), rewritten, out)
        else:
            payload, mark = msg.encoded(), seed.poll_mark(msg.raw)
            self._append_bytes(self._route_unrelated(origin), payload, mark, out)

    def _upstream_response(self, msg: Message, out: list[Command]) -> None:
        rid = msg.id
        pending = self._ids.pending(rid)
        if pending is None:
            out.append(LogNote("upstream_response_unmatched", {"upstream_id": rid}))
            return
        if pending.method == "initialize" and not msg.is_error:
            result = msg.raw.get("result")
            version = result.get("protocolVersion") if isinstance(result, dict) else None
            if isinstance(version, str):
                self.protocol_version = version
        self._append(pending.stream, jsonrpc.with_id(msg, pending.client_id), out)
        self._finish_request(rid, out)
        if pending.method == "initialize" and msg.is_error:
            # No session was established: do not keep a server process for it.
            self._close("initialize failed", out)

    def _finish_request(self, upstream_id: int, out: list[Command]) -> None:
        pending = self._ids.finish(upstream_id)
        stream = self._streams.get(pending.stream)
        if stream is None:
            return
        stream.pending.discard(upstream_id)
        if not stream.pending:
            self._complete(stream, out)

    def _complete(self, stream: StreamSlot, out: list[Command]) -> None:
        if stream.state is not StreamState.LIVE:
            return
        self._deadlines_moved = True
        if stream.stream_id is not None:
            end = jsonrpc.encode(seed.end_notification(stream.stream_id))
            stream.log.append(self._stamped(stream, end))
        stream.state = transition(stream.state, StreamEvent.COMPLETE)
        stream.done_at = self._now
        for number in stream.waiting:
            self._answer_resume(number, jsonrpc.ok_response(None, {}))
        stream.waiting.clear()
        self._flush(stream, out)

    def _route_unrelated(self, origin: int | None = None) -> int:
        """Rule 3: what came on a request's HTTP response goes to its stream; rule 4:
        else the only request in flight's stream, else the standalone stream."""
        if origin is not None:
            pending = self._ids.pending(origin)
            if pending is not None and pending.stream in self._streams:
                return pending.stream
        number = self._ids.only_stream_in_flight()
        return STANDALONE if number is None else number

    def _append(self, number: int, obj: dict[str, Any], out: list[Command]) -> None:
        self._append_bytes(number, jsonrpc.encode(obj), seed.poll_mark(obj), out)

    def _append_bytes(self, number: int, payload: bytes, mark: Mark, out: list[Command]) -> None:
        """Log one message (``mark``: what a poll reports of it, from its parsed form)."""
        stream = self._streams[number]
        stream.log.append(self._stamped(stream, payload), mark)
        self._flush(stream, out)

    def _stamped(self, stream: StreamSlot, payload: bytes) -> bytes:
        """With ``streams.event_id_in_meta``: the id the payload gets, in its ``_meta``."""
        if stream.stream_id is None or not self.settings.event_id_in_meta:
            return payload
        next_id = format_event_id(self.epoch, stream.number, stream.log.last_seq + 1)
        return seed.with_event_id(payload, next_id)

    def _on_upstream_closed(self, reason: str, out: list[Command]) -> None:
        if self.closed:
            return
        out.append(LogNote("upstream_closed", {"reason": reason}))
        self._fail_in_flight(UPSTREAM_EXITED, f"MCP server gone: {reason}", None, out)
        self._close(reason, out)

    def _fail_in_flight(self, code: int, message: str, data: Any, out: list[Command]) -> None:
        """Answer every request in flight with an error, logged (and sent) on its stream."""
        for upstream_id in self._ids.in_flight():
            pending = self._ids.pending(upstream_id)
            assert pending is not None
            error = jsonrpc.error_response(pending.client_id, code, message, data)
            self._append(pending.stream, error, out)
            self._finish_request(upstream_id, out)

    # ------------------------------------------------------------------ lifetime
    def _new_stream(self) -> StreamSlot:
        """A new request stream, room made by evicting a finished one; else ``Overloaded``."""
        evict = self._room_for_stream()
        if evict is not None:
            self._drop_stream(evict)
        return self._add_stream()

    def _add_stream(self) -> StreamSlot:
        s = self.settings
        number = self._next_stream
        self._next_stream += 1
        log = StreamLog(s.stream_max_events, s.stream_max_bytes, self.budget)
        if s.overflow == "block":
            # Keep every event the client has not acknowledged (by event id): a write to a
            # connection proves nothing. (The standalone stream always truncates: no
            # request waits on it, so it must never hold the server back.)
            log.keep_after = 0
        stream = StreamSlot(number, log, touched=self._now)
        self._streams[number] = stream
        return stream

    def _room_for_stream(self) -> StreamSlot | None:
        """Whether a stream may be added: None (there is room), the stream to evict first
        (the oldest completed, unattached one), or ``Overloaded``. Changes nothing."""
        if len(self._streams) <= self.settings.max_streams:  # the standalone is not counted
            return None
        for number, stream in self._streams.items():  # oldest first
            if stream.state is StreamState.COMPLETED and stream.conn is None and number:
                return stream
        raise Overloaded(
            f"Too many streams in this session (sessions.max_streams_per_session="
            f"{self.settings.max_streams})",
            reason="too_many_streams",
        )

    def _drop_stream(self, stream: StreamSlot) -> None:
        """Forget a stream and free its log (it can no longer be resumed)."""
        stream.state = transition(stream.state, StreamEvent.EXPIRE)
        stream.log.clear()
        del self._streams[stream.number]

    def _close(self, reason: str, out: list[Command]) -> None:
        """No more requests; the upstream stops; completed streams stay resumable."""
        self.closed = True
        self._ids.drop_server_requests()
        standalone = self._streams[STANDALONE]
        if standalone.conn is not None:
            out.append(CloseClient(standalone.conn))
            self._detach(standalone.conn)
        standalone.state = transition(standalone.state, StreamEvent.COMPLETE)
        standalone.done_at = self._now
        out.append(StopUpstream(reason))

    def _shut_down(self, out: list[Command]) -> None:
        """The proxy stops: no request is left without an answer (DESIGN.md §3).

        Each answer is in its stream's log before the stream's connection is closed, so
        an attached client reads it before its stream ends.
        """
        if not self.closed:
            data = {"reason": "proxy_shutdown"}
            self._fail_in_flight(PROXY_SHUTDOWN, "the proxy is shutting down", data, out)
        self._end("proxy shutting down", out)

    def _end(self, reason: str, out: list[Command]) -> None:
        if not self.closed:
            for upstream_id in self._ids.in_flight():
                self._finish_request(upstream_id, out)
            self._close(reason, out)
        for conn in list(self._by_conn):
            self._detach(conn)
            out.append(CloseClient(conn))
        for stream in self._streams.values():
            stream.state = StreamState.EXPIRED
            stream.log.clear()
        self._streams.clear()
        self.forgotten = True
        out.append(ForgetSession(reason))
