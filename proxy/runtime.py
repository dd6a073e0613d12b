"""Wires the sans-I/O sessions to real processes, connections and timers.

A :class:`SessionRunner` owns one core :class:`~proxy.core.session.Session`, its upstream
process, its client connections and its one timer. Everything the core decides arrives
as commands, which are carried out here synchronously and in order (queue puts, timer
moves, task starts), so that no ``await`` separates a decision from its effect.

The :class:`~proxy.registry.Registry` owns every runner. A connection and its queue are
:mod:`proxy.client_conn`'s (re-exported here); the hand-off to a durable store
:mod:`proxy.runner_store`'s; what it does for another replica :mod:`proxy.runner_remote`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from typing import Protocol, assert_never, runtime_checkable

import structlog

from proxy.client_conn import ClientConn, CloseMarker, ConnFenced, Frame
from proxy.core.errors import SessionNotFound
from proxy.core.events import (
    Accepted,
    ClientDelete,
    ClientDetached,
    ClientGet,
    CloseClient,
    Command,
    ConnId,
    Event,
    ForgetSession,
    LogNote,
    PauseUpstream,
    ProxyShutdown,
    ResumeUpstream,
    SendEvents,
    SendToClient,
    SendUpstream,
    StartSse,
    StopIdleUpstream,
    StopUpstream,
    Tick,
    UpstreamClosed,
    UpstreamMessage,
    UpstreamMessages,
    UpstreamRestarted,
    WakeAt,
)
from proxy.core.jsonrpc import Message
from proxy.core.session import Session, SessionSettings
from proxy.core.sse import encode_event
from proxy.core.stream import ByteBudget
from proxy.metrics import Metrics
from proxy.runner_store import StoreHandoff
from proxy.servers import Server
from proxy.standalone_seat import StandaloneSeat
from proxy.store.persist import Persister
from proxy.upstream import UpstreamContext, open_upstream
from proxy.upstream.base import Listening

__all__ = ["ClientConn", "CloseMarker", "ConnFenced", "Frame", "IdleStoppable", "SessionRunner"]

log = structlog.get_logger("proxy.runtime")

_LIVE = (UpstreamMessage, UpstreamMessages, UpstreamClosed, Tick)  # (tuple: faster than a union)
_OUTCOMES = (StartSse, Accepted)


@runtime_checkable
class IdleStoppable(Protocol):
    """An upstream whose process can be stopped while its session stays (stdio):
    :class:`~proxy.upstream.stdio.StdioUpstream`."""

    @property
    def stopped_idle(self) -> bool: ...

    def stop_idle(self) -> None: ...


class SessionRunner:
    """Runs one session: feeds it events, carries out its commands."""

    def __init__(
        self,
        server: Server,
        settings: SessionSettings,
        budget: ByteBudget,
        session_id: str,
        epoch: str,
        on_forget: Callable[[SessionRunner], None],
        next_conn_id: Callable[[], ConnId],
        persister: Persister | None = None,
        metrics: Metrics | None = None,
        principal: str | None = None,
        scopes: frozenset[str] | None = None,
    ) -> None:
        self.server = server
        self.config = config = server.config
        health = server.health
        self.session_id = session_id
        loop = asyncio.get_running_loop()
        self._loop = loop
        idle_stop = config.upstream.stop_idle_seconds
        if idle_stop is not None and config.upstream.kind == "stdio":  # a process to stop
            settings = dataclasses.replace(settings, upstream_idle_stop=idle_stop)
        self.session = Session(session_id, epoch, settings, loop.time(), budget)
        self.seat = StandaloneSeat(self.session)  # which /ws socket has its standalone stream
        self.metrics = metrics
        self.principal = principal  # who created it (inbound auth), if anyone
        self.session.principal = principal
        self.session.scopes = scopes  # those of the credential that opened it
        self.session.policy = server.policy
        # A durable store: what each step noted goes to its group commit (None: memory).
        self.store: StoreHandoff | None = None
        if persister is not None:
            self.store = StoreHandoff(persister, self.session, server.name)
        self._on_forget = on_forget
        self._next_conn_id = next_conn_id
        self._conns: dict[ConnId, ClientConn] = {}
        self._no_conns = asyncio.Event()  # set while no connection is open
        self._no_conns.set()
        self._max_queued = config.sse.max_queued_bytes
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0  # when the armed timer fires (loop time)
        self._wake_at = 0.0  # the wake-up the core asked for last (the timer's or later)
        self._stop_task: asyncio.Task[None] | None = None
        self.upstream = open_upstream(
            UpstreamContext(
                config.upstream,
                session_id,
                on_message=self._upstream_message,
                on_closed=self._upstream_closed,
                health=health,
                on_restarted=self._upstream_restarted,
                server=server.name,
                on_messages=self._upstream_messages,
            )
        )
        # upstream.standalone_stream on_client_get: told when the client first listens.
        self._listening: Listening | None = None
        if config.upstream.standalone_stream == "on_client_get" and isinstance(
            self.upstream, Listening
        ):
            self._listening = self.upstream
        # upstream.stop_idle_seconds: the process that may be stopped while the session stays.
        self._idle_stoppable: IdleStoppable | None = None
        if settings.upstream_idle_stop is not None and isinstance(self.upstream, IdleStoppable):
            self._idle_stoppable = self.upstream
        # Every line of this session says which server and whose (never a credential).
        self.log = log.bind(session=session_id[:8], upstream=server.name, principal=principal)

    async def start(self) -> None:
        # The upstream's tasks start here and keep this context: their lines say whose.
        with structlog.contextvars.bound_contextvars(
            session=self.session_id[:8], upstream=self.server.name, principal=self.principal
        ):
            await self.upstream.start()

    # ------------------------------------------------------------------ connections
    def open_conn(self, framing: str = "sse") -> ClientConn:
        gate = self.store.persister if self.store is not None else None
        conn = ClientConn(self._next_conn_id(), framing, gate=gate, lane=self.session.epoch)
        self._conns[conn.id] = conn
        self._no_conns.clear()
        return conn

    def conn_gone(self, conn: ClientConn) -> None:
        """The HTTP handler is done with ``conn`` (written out, or the client hung up)."""
        if self._conns.pop(conn.id, None) is None:
            return
        if not self._conns:
            self._no_conns.set()
        if not self.session.forgotten:
            self.feed(ClientDetached(conn.id))

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    async def written_out(self) -> None:
        """Return once every connection is done: its queue written, or its client gone.

        Each writer calls :meth:`conn_gone` after the end of its stream (a ``CloseMarker``)
        is on the wire, so after :meth:`shut_down` this is when every answer is out.
        """
        await self._no_conns.wait()

    # ------------------------------------------------------------------ events
    def feed(self, event: Event) -> None:
        """Hand one event to the core and carry out its commands. Raises ``ProxyError``."""
        if self.session.forgotten:
            raise SessionNotFound("Session not found")
        self.session.policy = self.server.policy  # the rules in force now (a reload)
        if self._listening is not None and type(event) is ClientGet:
            self._listening.listen_standalone()  # the client listens: so does the proxy
            self._listening = None
        commands = self.session.handle(event, self._loop.time())
        # A client's own request may replay a whole log at once: that is not slowness.
        live = isinstance(event, _LIVE)
        for command in commands:
            self._execute(command, live)
        store = self.store
        if store is not None:
            store.hand_off(self._conns)

    def _upstream_message(self, msg: Message, origin: int | None = None) -> None:
        if not self.session.forgotten:
            self.feed(UpstreamMessage(msg, origin))

    def _upstream_messages(self, msgs: Sequence[Message]) -> None:
        if not self.session.forgotten:
            self.feed(UpstreamMessages(msgs))

    def _upstream_restarted(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.upstream_restarts.labels(self.server.name).inc()
        with contextlib.suppress(SessionNotFound):
            self.feed(UpstreamRestarted(reason))

    def _upstream_closed(self, reason: str) -> None:
        if not self.session.forgotten:
            self.feed(UpstreamClosed(reason))

    def _tick(self) -> None:
        self._timer = None
        if self._timer_at < self._wake_at:  # the wake-up moved later meanwhile
            self._timer_at = self._wake_at
            self._timer = self._loop.call_at(self._wake_at, self._tick)
            return
        if not self.session.forgotten:
            self.feed(Tick())

    def _execute(self, command: Command, live: bool = True) -> None:
        if isinstance(command, SendToClient):
            conn = self._conns.get(command.conn)
            if conn is not None and not conn.closed:
                if command.payload is None and conn.priming is None:
                    conn.priming = command
                item: bytes | Frame
                if conn.framing == "sse":
                    item = data = encode_event(
                        command.payload, event_id=command.event_id, retry_ms=command.retry_ms
                    )
                elif command.payload is None:
                    conn.last_event_id = command.event_id
                    return  # a priming event: nothing to say without SSE ids
                else:
                    data = command.payload
                    item = Frame(command.event_id, data)
                backlog = conn.queued_bytes - conn.replay_left
                if live and backlog and backlog + len(data) > self._max_queued:
                    self._too_slow(conn)
                else:
                    conn.queued_bytes += len(data)
                    conn.last_event_id = command.event_id
                    if conn.first_event_id is None:
                        conn.first_event_id = command.event_id
                    if not live:
                        conn.replay_left += len(data)
                        conn.replay_events += 1
                    conn.queue.put_nowait(item)
        elif isinstance(command, SendUpstream):
            sleeper = self._idle_stoppable
            if sleeper is not None and sleeper.stopped_idle and self.metrics is not None:
                self.metrics.upstream_starts.labels(self.server.name, "idle_restart").inc()
            self.upstream.send(command.payload, command.handshake)
        elif isinstance(command, _OUTCOMES):  # (a tuple: `A | B` builds a union per call)
            conn = self._conns.get(command.conn)
            if conn is not None:
                conn.outcome = "sse" if isinstance(command, StartSse) else "accepted"
        elif isinstance(command, CloseClient):
            conn = self._conns.get(command.conn)
            if conn is not None and not conn.closed:
                conn.closed = True
                conn.queue.put_nowait(CloseMarker(command.retry_ms))
        elif isinstance(command, PauseUpstream):
            self.log.info("upstream_paused", reason="stream buffer full (overflow: block)")
            self.upstream.pause()
        elif isinstance(command, ResumeUpstream):
            self.log.info("upstream_resumed")
            self.upstream.resume()
        elif isinstance(command, WakeAt):
            # A later wake-up than the armed timer's keeps that timer: it fires, finds the
            # wake-up moved on and re-arms for it (_tick). Each call moves the idle clock
            # later; cancelling and arming a timer each time showed in the profile.
            self._wake_at = command.at
            if self._timer is not None:
                if self._timer_at <= command.at:
                    return
                self._timer.cancel()
            self._timer_at = command.at
            self._timer = self._loop.call_at(command.at, self._tick)
        elif isinstance(command, StopUpstream):
            self.log.info("session_closing", reason=command.reason)
            if self._stop_task is None:
                self._stop_task = asyncio.create_task(self.upstream.stop())
        elif isinstance(command, StopIdleUpstream):
            sleeper = self._idle_stoppable
            if sleeper is not None and not sleeper.stopped_idle:
                if self.metrics is not None:
                    self.metrics.upstream_idle_stops.labels(self.server.name).inc()
                sleeper.stop_idle()
        elif isinstance(command, ForgetSession):
            self.log.info("session_forgotten", reason=command.reason)
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._on_forget(self)
        elif isinstance(command, LogNote):
            self.log.info(command.event, **command.fields)
            if command.event == "stream_resumed" and self.metrics is not None:
                self.metrics.resumes.labels("resumed").inc()
        elif isinstance(command, SendEvents):
            self._send_run(command, live)
        else:  # the Command union is closed: the type checker proves this unreachable
            assert_never(command)

    def _send_run(self, command: SendEvents, live: bool) -> None:
        """Queue a run of logged events as one item: the writer frames it in chunks
        (proxy/core/eventrun.py), so a replay of thousands costs no work per event here.
        A connection with framing "message" takes them one by one, as ever."""
        conn = self._conns.get(command.conn)
        if conn is None or conn.closed:
            return
        if conn.framing != "sse":
            for each in command.each():
                self._execute(each, live)
            return
        run = command.run
        size = run.size()
        backlog = conn.queued_bytes - conn.replay_left
        if live and backlog and backlog + size > self._max_queued:
            self._too_slow(conn)
            return
        conn.queued_bytes += size
        conn.last_event_id = run.event_id(len(run) - 1)
        if conn.first_event_id is None:
            conn.first_event_id = run.event_id(0)
        if not live:
            conn.replay_left += size
            conn.replay_events += len(run)
        conn.queue.put_nowait(run)

    def _too_slow(self, conn: ClientConn) -> None:
        """A client reads slower than its stream grows: end its connection, not the stream.

        Its queue would otherwise grow without bound. Everything is in the stream's log;
        the client resumes with Last-Event-ID from what it really received.
        """
        self.log.info("client_too_slow", conn=conn.id, queued_bytes=conn.queued_bytes)
        conn.queue.clear()
        conn.queued_bytes = conn.replay_left = 0
        conn.closed = True
        conn.queue.put_nowait(CloseMarker(self.config.sse.retry_ms))
        # Tell the core once the commands of this step are carried out (no re-entry).
        self._loop.call_soon(self.conn_gone, conn)

    async def end(self, reason: str) -> None:
        """End the session now (DELETE, or a refused start) and wait until its process is
        gone. Requests in flight end unanswered: whoever ends it no longer wants them."""
        if not self.session.forgotten:
            self.feed(ClientDelete(reason))
            self.log.info("session_ended", reason=reason)
        await self.wait_stopped()

    def lose(self) -> None:
        """This replica lost the session's streams (fencing, :mod:`proxy.store.fencing`):
        end it without another write to the store or to its clients. Its connections end
        without what waited for the store; its upstream stops; the session is forgotten.
        Its clients resume from the store, where another replica ended its streams."""
        if self.session.forgotten:
            return
        self.store = None  # what the core notes from here on stays here
        for conn in self._conns.values():
            conn.fence()
        self.feed(ClientDelete("lease lost"))
        self.log.warning("session_lost", reason="lease lost")

    def shut_down(self) -> None:
        """The proxy stops: answer every request in flight with an error, queue those
        answers on the attached connections, close them, and stop the upstream.

        Synchronous: the commands are carried out before the caller's next ``await``.
        Await :meth:`written_out` for the answers to reach the wire, then
        :meth:`wait_stopped` for the process to be gone.
        """
        if self.session.forgotten:
            return
        try:
            self.feed(ProxyShutdown())
        except Exception:  # a bug in one session must not keep the others' servers alive
            self.log.exception("session_shutdown_failed")
        else:
            self.log.info("session_ended", reason="proxy shutting down")

    async def wait_stopped(self) -> None:
        if self._stop_task is None:
            self._stop_task = asyncio.create_task(self.upstream.stop())
        await asyncio.shield(self._stop_task)
