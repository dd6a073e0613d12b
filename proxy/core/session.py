"""One client session: which message belongs to which stream, delivery, expiry.

The session is the single owner of its streams' logs. Every message for the client is
appended to its stream's log *before* a :class:`SendToClient` for it is returned, so what
reaches the wire is always a prefix of what is stored (DESIGN.md §3).

What it does with its server's messages (routing them to streams, DESIGN.md §5, and
logging them) is :class:`~proxy.core.session_upstream.UpstreamSide`.

The session holds its helpers, each owning its own state: a :class:`Schedule` (what is
due when), a :class:`Delivery` (which connection reads which stream), a :class:`Resumer`
(``GET`` + ``Last-Event-ID``, ``stream/poll``, ``stream/resume``), a :class:`Lifetime`
(how the session ends: server gone or restarted, proxy shutdown, ``DELETE``, idle) and
:class:`Deadlines` (what is done when a deadline passes).
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, assert_never

from proxy.core import jsonrpc, legacy_tasks, seed
from proxy.core.admission import check_initialize
from proxy.core.deadlines import Deadlines
from proxy.core.delivery import Delivery
from proxy.core.errors import BadRequest, Conflict, SessionNotFound, answer_with_error
from proxy.core.events import (
    Accepted,
    ClientAck,
    ClientDelete,
    ClientDetached,
    ClientGet,
    ClientPost,
    Command,
    ConnId,
    Event,
    LogNote,
    ProxyShutdown,
    SendUpstream,
    StartSse,
    Tick,
    UpstreamClosed,
    UpstreamMessage,
    UpstreamMessages,
    UpstreamRestarted,
    WakeAt,
)
from proxy.core.handshake import INITIALIZE, INITIALIZED, HandshakeStep
from proxy.core.idmap import IdMap, progress_token_of
from proxy.core.journal import Journal
from proxy.core.jsonrpc import Kind, Message
from proxy.core.lifetime import Lifetime
from proxy.core.resume import Resumer
from proxy.core.schedule import Schedule
from proxy.core.session_queries import SessionQueries
from proxy.core.session_state import STANDALONE, SessionSettings, StreamSlot, StreamTable
from proxy.core.session_upstream import UpstreamSide
from proxy.core.stream import ByteBudget, StreamEvent, StreamLog, StreamState, transition
from proxy.core.tool_policy import OPEN, Policy, Refuse, View

# (Enum members read as module constants: through the class, 3.11's ``EnumType.__getattr__``
# hook makes each read cost ~25 times a global's, and these are read per event.)
_COMPLETE = StreamEvent.COMPLETE
_LIVE = StreamState.LIVE
_NOTIFICATION = Kind.NOTIFICATION
_REQUEST = Kind.REQUEST
_RESPONSE = Kind.RESPONSE

__all__ = ["STANDALONE", "Session", "SessionSettings"]

# Revisions that allow JSON-RPC batches in a POST body (removed in 2025-06-18).
_BATCH_REVISIONS = frozenset({"2024-11-05", "2025-03-26"})
# From this revision on: priming events and server-initiated close (SEP-1699).
_POLLING_REVISION = "2025-11-25"
# The requests a POST's common path (Session._post_request) leaves to the general one.
_NOT_PLAIN = frozenset({seed.POLL, seed.RESUME, INITIALIZE})


class Session(UpstreamSide, SessionQueries):
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
        # Who the session belongs to (inbound auth; None: nobody), set by the runtime right
        # after it is made: the resume tokens it mints and checks are bound to it, and the
        # records of its streams in a durable store name it.
        self.principal: str | None = None
        # What its client is shown and may use (docs/tools.md): the server's rules, set by
        # the runtime (anew after a reload), and the OAuth scopes of the credential that
        # opened the session (None: not limited by scope rules).
        self.policy: Policy = OPEN
        self.scopes: frozenset[str] | None = None
        self._protocol_version: str | None = None
        self._initialize_seen = False
        self._streams = StreamTable()  # watched: see proxy.core.schedule
        self.budget = budget if budget is not None else ByteBudget(2**63)
        self._ids = IdMap()
        self.speaks_streams = False  # the client declared capabilities.streams
        # The client declared capabilities.tasks and the proxy serves them (legacy Tasks).
        self.offers_tasks = False
        self.client_capabilities: dict[str, Any] = {}
        self._now = now
        self.created_at = now  # for the status page
        self.schedule = Schedule(settings, self._streams, now)
        self.delivery = Delivery(epoch, settings, self._streams, self.schedule)
        self.resumer = Resumer(
            session_id, epoch, settings, self._streams, self.delivery, self._ids, self
        )
        self.lifetime = Lifetime(self._streams, self._ids, self.delivery, self)
        self.deadlines = Deadlines(
            settings, self._streams, self.delivery, self.resumer, self.lifetime
        )
        self._streams[STANDALONE] = StreamSlot(
            STANDALONE,
            StreamLog(settings.standalone_max_events, settings.stream_max_bytes, self.budget),
            created_at=now,
        )

    def keep_journal(self) -> Journal:
        """Note every change to the streams from now on (for a durable store)."""
        journal = self._streams.journal = Journal()
        for number, stream in self._streams.items():
            stream.log.journal = journal
            journal.opened.append(number)
        return journal

    @property
    def view(self) -> View:
        return self.policy.view(self.scopes)

    @property
    def protocol_version(self) -> str | None:
        return self._protocol_version

    @protocol_version.setter
    def protocol_version(self, version: str | None) -> None:
        self._protocol_version = version
        # 2025-11-25 §Resumability: prime the client with an id before anything else.
        self.delivery.priming = (version or "") >= _POLLING_REVISION

    if TYPE_CHECKING:

        @property
        def closed(self) -> bool: ...
        @property
        def forgotten(self) -> bool: ...
        @property
        def upstream_paused(self) -> bool: ...
        @property
        def upstream_stopped(self) -> bool: ...

    else:  # (read per event by the runtime: C getters, no Python frame)
        closed = property(
            operator.attrgetter("lifetime.closed"),
            doc="The upstream is gone: no new requests; retained streams stay resumable.",
        )
        forgotten = property(
            operator.attrgetter("lifetime.forgotten"),
            doc="The session is over: the runtime forgets it.",
        )
        upstream_paused = property(
            operator.attrgetter("delivery.upstream_paused"),
            doc="overflow: block is holding the server back.",
        )
        upstream_stopped = property(
            operator.attrgetter("schedule.upstream_stopped"),
            doc="Its upstream process is stopped for idleness (``upstream_idle_stop``).",
        )

    # ------------------------------------------------------------------ entry point
    def handle(self, event: Event, now: float) -> list[Command]:
        """Apply one event at time ``now``; return the commands to carry out, in order."""
        self._now = now
        out: list[Command] = []
        # A server notification only appends to a live stream: no deadline moves unless a
        # connection goes or a stream completes (those mark it themselves). Everything else
        # may move one. This keeps the hot path from scanning every stream per message.
        schedule = self.schedule
        if isinstance(event, UpstreamMessage):
            msg = event.msg
            schedule.moved = msg.kind is not _NOTIFICATION
            self._on_upstream(msg, event.origin, out)
        elif isinstance(event, UpstreamMessages):
            schedule.moved = False  # (the run marks it for what is not a notification)
            self._on_upstream_run(event.msgs, out)
        else:
            schedule.moved = True
            if isinstance(event, ClientPost):
                self._on_post(event, out)
            elif isinstance(event, ClientDetached):
                delivery = self.delivery
                conn = event.conn
                if conn not in delivery.by_conn and conn not in delivery.continuation:
                    # Detached already (its stream completed): nothing changes, nothing
                    # moves (the event that detached it re-armed the wake-up).
                    return out
                delivery.detach(conn, now)
            elif isinstance(event, ClientGet):
                self._on_get(event, out)
            elif isinstance(event, UpstreamClosed):
                self.lifetime.upstream_closed(event.reason, now, out)
            elif isinstance(event, UpstreamRestarted):
                self.lifetime.upstream_restarted(event.reason, out)
            elif isinstance(event, ClientDelete):
                self.lifetime.end(event.reason, now, out)
            elif isinstance(event, ClientAck):
                self._on_ack(event)
            elif isinstance(event, ProxyShutdown):
                self.lifetime.shut_down(now, out)
            elif isinstance(event, Tick):
                schedule.wake = None  # the runtime's timer fired: always re-arm
                self.deadlines.tick(schedule, now, out)
            else:  # the Event union is closed: the type checker proves this unreachable
                assert_never(event)
        self._after(out)
        return out

    # ------------------------------------------------------------------ queries
    def standalone_handed(self, upto: int) -> None:
        """The standalone stream's events up to seq ``upto``, and none after, count as
        handed to a client: a ``/ws`` socket on another replica wrote them from the
        shared log (issue 19). The next connection to take the stream gets those after
        ``upto`` (:meth:`_on_get`), as it would after a local one that had them."""
        stream = self._streams[STANDALONE]
        stream.sent_upto = max(0, min(upto, stream.log.last_seq))

    def accepts_batches(self) -> bool:
        return (self.protocol_version or "2025-03-26") in _BATCH_REVISIONS

    # ------------------------------------------------------------------ client side
    def _on_post(self, ev: ClientPost, out: list[Command]) -> None:
        """A POST body. Everything that can refuse it is checked before anything changes
        (h11's ``_process_event`` style): a refused POST leaves the session as it was."""
        if self.lifetime.closed:
            raise SessionNotFound("Session not found: it has ended")
        messages = ev.messages
        if len(messages) == 1 and not ev.batch:
            msg = messages[0]
            if msg.kind is _REQUEST and msg.raw["method"] not in _NOT_PLAIN and self.policy.inert:
                self._post_request(ev.conn, msg, out)
                return
        if ev.batch and not self.accepts_batches():
            raise BadRequest(
                f"JSON-RPC batches are not allowed in protocol {self.protocol_version}"
            )
        requests = [m for m in ev.messages if m.kind is _REQUEST]
        if any(m.method in (seed.POLL, seed.RESUME) for m in requests):
            if len(ev.messages) > 1:
                raise BadRequest("stream/poll and stream/resume must be sent alone")
            self.resumer.serve(ev.conn, requests[0], ev.last_event_id, self._now, out)
            return
        # The edges refuse these first (proxy.core.admission); the session keeps the rule.
        initialize = check_initialize(ev.messages, ev.batch, initialized=self._initialize_seen)
        # The last check: room for the requests' stream. A batch's answers to server
        # requests must not be taken from the id map and then refused (2025-03-26).
        evict = self._streams.room_for_new(self.settings.max_streams) if requests else None
        # ---- accepted: from here on nothing raises
        if initialize is not None:
            self._initialize_seen = True
        for msg in ev.messages:
            if msg.kind is _NOTIFICATION:
                self._client_notification(msg, out)
            elif msg.kind is _RESPONSE:
                self._client_response(msg, out)
        if not requests:
            out.append(Accepted(ev.conn))
            return
        if evict is not None and evict.number in self._streams:
            self.drop_stream(evict)
        stream = self._streams.add(self.settings, self.budget, self._now)
        out.append(StartSse(ev.conn))
        self.delivery.attach(stream, ev.conn, self._now, out)
        stream.request_id = requests[0].id
        view = self.view
        for msg in requests:
            decided = None if view.inert else view.request(msg.method or "", msg.params)
            if isinstance(decided, Refuse):  # as the server refuses what it does not have
                self.append(stream.number, answer_with_error(msg.id, decided.error), out)
                continue
            if decided is not None:
                msg = jsonrpc.classify(jsonrpc.with_param(msg, decided.key, decided.value))
            token = progress_token_of(msg.params)
            upstream_id = self._ids.add_client_request(
                msg.id, msg.method or "", stream.number, token
            )
            stream.pending.add(upstream_id)
            forward = jsonrpc.with_id(msg, upstream_id)
            if msg.method == "initialize":
                forward, self.speaks_streams = seed.without_streams_capability(forward)
                self.client_capabilities = legacy_tasks.client_capabilities(msg.raw)
                self.offers_tasks = self.settings.legacy_tasks and isinstance(
                    self.client_capabilities.get("tasks"), dict
                )
            step = HandshakeStep.INITIALIZE if msg.method == INITIALIZE else None
            out.append(SendUpstream(jsonrpc.encode(forward), step))
        if not stream.pending:  # every request refused: answered already
            self.complete(stream, out)
            return
        if (
            self.speaks_streams
            and len(requests) == 1
            and requests[0].method in self.settings.stream_methods
        ):
            if self.settings.create_after <= 0:
                self.resumer.announce(stream, self._now, out)
            else:
                stream.create_at = self._now + self.settings.create_after

    def _post_request(self, conn: ConnId, msg: Message, out: list[Command]) -> None:
        """The common POST, as :meth:`_on_post` takes it, in one pass: one request, not
        ``initialize``, ``stream/poll`` or ``stream/resume``, no tool rules. Only the room
        for its stream can refuse it, before anything changes."""
        raw, now, streams = msg.raw, self._now, self._streams
        if len(streams) > self.settings.max_streams:  # (room_for_new's own first test)
            evict = streams.room_for_new(self.settings.max_streams)  # or Overloaded
            if evict is not None:
                self.drop_stream(evict)
        stream = streams.add(self.settings, self.budget, now)
        out.append(StartSse(conn))
        self.delivery.attach(stream, conn, now, out)
        rid, method = raw["id"], raw["method"]
        stream.request_id = rid
        params = raw.get("params")
        token = progress_token_of(params) if type(params) is dict and "_meta" in params else None
        upstream_id = self._ids.add_client_request(rid, method, stream.number, token)
        stream.pending.add(upstream_id)
        out.append(SendUpstream(jsonrpc.encode(jsonrpc.with_id(msg, upstream_id))))
        if self.speaks_streams and method in self.settings.stream_methods:
            if self.settings.create_after <= 0:
                self.resumer.announce(stream, now, out)
            else:
                stream.create_at = now + self.settings.create_after

    def _on_get(self, ev: ClientGet, out: list[Command]) -> None:
        if ev.last_event_id is not None:
            self.resumer.resume_by_get(ev, ev.last_event_id, self._now, out)
            return
        if self.closed:
            raise SessionNotFound("Session not found: it has ended")
        stream = self._streams[STANDALONE]
        if stream.conn is not None:
            raise Conflict("the session's standalone stream is already open")
        out.append(StartSse(ev.conn))
        self.delivery.attach(stream, ev.conn, self._now, out, start=stream.sent_upto)

    def _on_ack(self, ev: ClientAck) -> None:
        """An acknowledgement given elsewhere (another replica); a position the stream
        never reached, or a stream gone, is ignored: nothing is owed for it."""
        stream = self._streams.get(ev.stream)
        if stream is not None and 0 <= ev.seq <= stream.log.last_seq:
            stream.log.acknowledge(ev.seq)

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
            self.finish_request(upstream_id, out)
            return
        step = HandshakeStep.INITIALIZED if msg.method == INITIALIZED else None
        out.append(SendUpstream(msg.encoded(), step))

    def _client_response(self, msg: Message, out: list[Command]) -> None:
        known, server_id = self._ids.take_server_request(msg.id)
        if not known:
            out.append(LogNote("client_response_unmatched", {"response_id": msg.id}))
            return
        out.append(SendUpstream(jsonrpc.encode(jsonrpc.with_id(msg, server_id))))

    # ------------------------------------------------------------------ upstream side
    def finish_request(self, upstream_id: int, out: list[Command]) -> None:
        pending = self._ids.finish(upstream_id)
        stream = self._streams.get(pending.stream)
        if stream is None:
            return
        stream.pending.discard(upstream_id)
        if not stream.pending:
            self.complete(stream, out)

    def complete(self, stream: StreamSlot, out: list[Command]) -> None:
        """The stream's last message is logged: end it, answer the resumes waiting on it."""
        if stream.state is not _LIVE:
            return
        self.schedule.moved = True
        if stream.stream_id is not None:
            end = jsonrpc.encode(seed.end_notification(stream.stream_id))
            stream.log.append(self.stamped(stream, end))
        # (through the slots, the stream marked once: see StreamSlot)
        stream._state = transition(stream.state, _COMPLETE)
        stream._done_at = self._now
        if stream.watch is not None:
            stream.watch.add(stream.number)
        if self._streams.journal is not None:
            self._streams.journal.completed.append(stream.number)
        for number in stream.waiting:
            self.resumer.answer_waiting(number, jsonrpc.ok_response(None, {}), self._now)
        stream.waiting.clear()
        self.delivery.flush(stream, self._now, out)

    # ------------------------------------------------------------------ time
    def _after(self, out: list[Command]) -> None:
        """After every event: hold the server back or let it go; re-arm the wake-up."""
        lifetime = self.lifetime
        if lifetime.forgotten:
            return
        schedule, delivery = self.schedule, self.delivery
        if schedule.upstream_stopped and any(isinstance(c, SendUpstream) for c in out):
            schedule.upstream_started()  # the transport starts the process for it
        if delivery.held or delivery.upstream_paused:  # (else it has nothing to change)
            delivery.backpressure(out)
        busy = bool(delivery.by_conn) or len(self._ids) > 0
        wake = schedule.next_wake(self._now, busy=busy, closed=lifetime.closed)
        if wake is not None:
            out.append(WakeAt(wake))

    # ------------------------------------------------------------------ lifetime
    def new_stream(self) -> StreamSlot:
        """A new request stream, room made by evicting a finished one; else ``Overloaded``."""
        evict = self._streams.room_for_new(self.settings.max_streams)
        if evict is not None:
            self.drop_stream(evict)
        return self._streams.add(self.settings, self.budget, self._now)

    def drop_stream(self, stream: StreamSlot) -> None:
        """Forget a stream and free its log (it can no longer be resumed)."""
        self._streams.drop(stream)
