"""Wires the sans-I/O sessions to real processes, connections and timers.

A :class:`SessionRunner` owns one core :class:`~proxy.core.session.Session`, its upstream
process, its client connections and its one timer. Everything the core decides arrives
as commands, which are carried out here synchronously and in order (queue puts, timer
moves, task starts), so that no ``await`` separates a decision from its effect.

The :class:`Registry` owns every runner: it creates sessions, finds them by id, and ends
them all on shutdown.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, assert_never

import structlog

from proxy.config import Config, ConfigError
from proxy.core import jsonrpc
from proxy.core.errors import Overloaded, ProxyError, SessionNotFound
from proxy.core.eventid import parse_event_id
from proxy.core.events import (
    Accepted,
    ClientAck,
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
    PauseUpstream,
    ProxyShutdown,
    ResumeUpstream,
    SendToClient,
    SendUpstream,
    StartSse,
    StopUpstream,
    Tick,
    UpstreamClosed,
    UpstreamMessage,
    WakeAt,
)
from proxy.core.jsonrpc import Message
from proxy.core.session import STANDALONE, Session, SessionSettings
from proxy.core.sse import encode_event
from proxy.core.stream import ByteBudget
from proxy.replicas import Replicas
from proxy.store.base import SessionRecord, StoreError, StoreLimits
from proxy.store.open import end_orphans, make_store
from proxy.store.persist import Persister
from proxy.upstream import UpstreamContext, open_upstream
from proxy.upstream.base import UpstreamHealth

log = structlog.get_logger("proxy.runtime")

STORE_BACKSTOP_FACTOR = 4
"""A store keeps at most this many times ``sessions.stream_max_events`` per stream, of
its own accord (the sessions' own trims are mirrored first)."""

SESSION_RECORD_SECONDS = 86400.0
"""How long a session's record outlives a replica that died without dropping it."""

SHUTDOWN_DRAIN_SECONDS = 2.0
"""How long shutdown waits for the connections to write out what they hold (each request's
last answer) before the HTTP server's cleanup tears them down; a client that has not read
it by then loses it with its connection."""


@dataclass(frozen=True, slots=True)
class CloseMarker:
    retry_ms: int | None


@dataclass(frozen=True, slots=True)
class Frame:
    """One message for a connection with framing "message", and the event id it has."""

    event_id: str
    payload: bytes


@dataclass(eq=False)
class ClientConn:
    """One client HTTP response: the core decides, the HTTP handler writes the queue out."""

    id: ConnId
    # "sse": queue items are SSE frames; "message": bare JSON-RPC payloads (WebSocket),
    # priming events and retry hints left out.
    framing: str = "sse"
    outcome: str | None = None  # "sse" or "accepted", set by the core's first command
    # framing "sse": SSE-encoded bytes; framing "message": Frame
    queue: asyncio.Queue[bytes | Frame | CloseMarker] = field(default_factory=asyncio.Queue)
    closed: bool = False
    queued_bytes: int = 0  # in the queue, not yet handed to the socket
    replay_left: int = 0  # of those, a replay's (at the front of the queue)
    last_event_id: str | None = None  # of the last event queued (or priming event seen)
    first_event_id: str | None = None  # of the first event ever queued
    # A durable store: what is queued may be written once batch ``ticket`` is stored.
    gate: Persister | None = None
    ticket: int = 0

    async def stored(self) -> None:
        """Wait until everything queued so far is in the store (the wire never runs
        ahead of it, DESIGN.md §9); at once with the memory store."""
        if self.gate is not None and self.ticket > self.gate.committed:
            await self.gate.wait(self.ticket)

    def written(self, n: int) -> None:
        """The writer handed ``n`` bytes from the front of the queue to the socket."""
        self.queued_bytes -= n
        self.replay_left = max(0, self.replay_left - n)


def new_session_id() -> str:
    """An unguessable session id: 192 random bits, visible ASCII (2025-03-26 §Session)."""
    return secrets.token_urlsafe(24)


def new_epoch() -> str:
    return secrets.token_hex(6)


TOKEN_SECRET_ENV = "MCP_RESUME_PROXY_TOKEN_SECRET"


def token_secret(config: Config) -> bytes:
    """The resume-token HMAC key: config, else environment, else random for this run.

    A random key is right for the in-memory store: tokens need not outlive the streams
    they name, and those die with the process. A persistent store's streams outlive it,
    so their tokens must too: without a configured key, ``ConfigError``.
    """
    configured = config.streams.token_secret or os.environ.get(TOKEN_SECRET_ENV)
    if configured:
        return configured.encode()
    if config.store.kind != "memory":
        raise ConfigError(
            f"store.kind: {config.store.kind} keeps streams across restarts and replicas, so "
            f"resume tokens must be signed with a key that outlives this process: set "
            f"streams.token_secret (16+ characters) or {TOKEN_SECRET_ENV}"
        )
    return secrets.token_bytes(32)


class SessionRunner:
    """Runs one session: feeds it events, carries out its commands."""

    def __init__(
        self,
        config: Config,
        settings: SessionSettings,
        budget: ByteBudget,
        session_id: str,
        epoch: str,
        on_forget: Callable[[SessionRunner], None],
        next_conn_id: Callable[[], ConnId],
        health: UpstreamHealth,
        persister: Persister | None = None,
    ) -> None:
        self.config = config
        self.session_id = session_id
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.session = Session(session_id, epoch, settings, loop.time(), budget)
        self._persister = persister
        self._journal = self.session.keep_journal() if persister is not None else None
        self._on_forget = on_forget
        self._next_conn_id = next_conn_id
        self._conns: dict[ConnId, ClientConn] = {}
        self._no_conns = asyncio.Event()  # set while no connection is open
        self._no_conns.set()
        self._max_queued = config.sse.max_queued_bytes
        self._timer: asyncio.TimerHandle | None = None
        self._stop_task: asyncio.Task[None] | None = None
        self.upstream = open_upstream(
            UpstreamContext(
                config.upstream,
                session_id,
                on_message=self._upstream_message,
                on_closed=self._upstream_closed,
                health=health,
            )
        )
        self.log = log.bind(session=session_id[:8])

    async def start(self) -> None:
        await self.upstream.start()

    # ------------------------------------------------------------------ connections
    def open_conn(self, framing: str = "sse") -> ClientConn:
        conn = ClientConn(self._next_conn_id(), framing, gate=self._persister)
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
        commands = self.session.handle(event, self._loop.time())
        # A client's own request may replay a whole log at once: that is not slowness.
        live = isinstance(event, UpstreamMessage | UpstreamClosed | Tick)
        for command in commands:
            self._execute(command, live)
        if self._persister is not None:
            self._persist()

    def _persist(self) -> None:
        """Hand what the core noted to the group commit; hold the connections behind it."""
        persister = self._persister
        assert persister is not None and self._journal is not None
        if self._journal:
            persister.note(self.session, self._journal.take())
        ticket = persister.ticket
        if ticket > persister.committed:
            for conn in self._conns.values():
                conn.ticket = ticket

    def acknowledge(self, last_event_id: str) -> None:
        """The client resumed from ``last_event_id`` on another replica."""
        pos = parse_event_id(last_event_id)
        if pos.epoch == self.session.epoch:
            self.feed(ClientAck(pos.stream, pos.seq))

    async def serve_remote(self, message: dict[str, Any]) -> dict[str, Any]:
        """Feed a forwarded POST or GET on a connection that leaves at once; the stream
        it opened (and where its client starts) once the store has it."""
        conn = self.open_conn()
        after = 0
        try:
            if message["kind"] == "post":
                messages, batch = jsonrpc.parse_body(message["body"])
                self.feed(ClientPost(conn.id, messages, batch, message.get("last_event_id")))
            else:
                after = self.session.sent_upto(STANDALONE)
                self.feed(ClientGet(conn.id))
            number = self.session.stream_of(conn.id)
        finally:
            self.conn_gone(conn)
        if self._persister is not None:
            await self._persister.wait(self._persister.ticket, hurry=True)
        if conn.outcome != "sse" or number is None:
            return {"outcome": "accepted"}
        return {"outcome": "sse", "stream": f"{self.session.epoch}.{number}", "after": after}

    def _upstream_message(self, msg: Message, origin: int | None = None) -> None:
        if not self.session.forgotten:
            self.feed(UpstreamMessage(msg, origin))

    def _upstream_closed(self, reason: str) -> None:
        if not self.session.forgotten:
            self.feed(UpstreamClosed(reason))

    def _tick(self) -> None:
        self._timer = None
        if not self.session.forgotten:
            self.feed(Tick())

    def _execute(self, command: Command, live: bool = True) -> None:
        if isinstance(command, SendToClient):
            conn = self._conns.get(command.conn)
            if conn is not None and not conn.closed:
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
                    conn.queue.put_nowait(item)
        elif isinstance(command, SendUpstream):
            self.upstream.send(command.payload)
        elif isinstance(command, PauseUpstream):
            self.log.info("upstream_paused", reason="stream buffer full (overflow: block)")
            self.upstream.pause()
        elif isinstance(command, ResumeUpstream):
            self.log.info("upstream_resumed")
            self.upstream.resume()
        elif isinstance(command, StartSse | Accepted):
            conn = self._conns.get(command.conn)
            if conn is not None:
                conn.outcome = "sse" if isinstance(command, StartSse) else "accepted"
        elif isinstance(command, CloseClient):
            conn = self._conns.get(command.conn)
            if conn is not None and not conn.closed:
                conn.closed = True
                conn.queue.put_nowait(CloseMarker(command.retry_ms))
        elif isinstance(command, WakeAt):
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self._loop.call_at(command.at, self._tick)
        elif isinstance(command, StopUpstream):
            self.log.info("session_closing", reason=command.reason)
            if self._stop_task is None:
                self._stop_task = asyncio.create_task(self.upstream.stop())
        elif isinstance(command, ForgetSession):
            self.log.info("session_forgotten", reason=command.reason)
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._on_forget(self)
        elif isinstance(command, LogNote):
            self.log.info(command.event, **command.fields)
        else:  # the Command union is closed: the type checker proves this unreachable
            assert_never(command)

    def _too_slow(self, conn: ClientConn) -> None:
        """A client reads slower than its stream grows: end its connection, not the stream.

        Its queue would otherwise grow without bound. Everything is in the stream's log;
        the client resumes with Last-Event-ID from what it really received.
        """
        self.log.info("client_too_slow", conn=conn.id, queued_bytes=conn.queued_bytes)
        while not conn.queue.empty():
            conn.queue.get_nowait()
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


class Registry:
    """Every live session of this process, by id."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.settings = config.session_settings(token_secret(config))
        self.budget = ByteBudget(config.sessions.max_buffered_bytes)
        self.health = UpstreamHealth()
        self.owner = secrets.token_hex(4)  # this process, as a store sees it
        sessions = config.sessions
        # The sessions say what they drop (overflow: block keeps what is unacknowledged
        # past the bound); the store's own bound is a backstop well beyond theirs.
        backstop = STORE_BACKSTOP_FACTOR * sessions.stream_max_events
        limits = StoreLimits(backstop, sessions.idle_timeout_seconds)
        self.store = make_store(config.store, limits)
        self.persister: Persister | None = None
        self.replicas: Replicas | None = None  # a shared store: the other replicas
        self._runners: dict[str, SessionRunner] = {}
        self._starting: set[SessionRunner] = set()  # reserved slots whose upstream starts
        self._none_starting = asyncio.Event()  # set while _starting is empty
        self._none_starting.set()
        self._conn_counter = 0
        self._reaper: set[asyncio.Task[Any]] = set()
        self.accepting = True

    def __len__(self) -> int:
        return len(self._runners)

    def store_health(self) -> dict[str, Any]:
        """The store for ``/healthz``: its kind, epoch, the error that holds commits back
        right now (clients wait meanwhile; nothing is skipped), and when a shared store
        was found to have lost its history (its epoch changed: a flush)."""
        persister = self.persister
        replicas = self.replicas
        return {
            "kind": self.store.kind,
            "epoch": self.store.epoch,
            "last_error": persister.last_error if persister is not None else None,
            "history_lost_at": replicas.history_lost_at if replicas is not None else None,
        }

    async def open(self) -> None:
        """Open the store; a durable one first ends what a dead proxy left live in it."""
        await self.store.open()
        retention = self.config.sessions.completed_retention_seconds
        if self.store.durable:
            self.persister = Persister(self.store, self.owner, retention)
            if not self.store.shared:  # one proxy per file: every live stream is orphaned
                await end_orphans(self.store, None, retention, "proxy_restarted")
        if self.store.shared:
            lease = self.config.store.lease_seconds
            self.replicas = Replicas(self.store, self.owner, lease, retention, self.serve_forwarded)
            await self.replicas.start()
        log.info("store_opened", store=self.store.kind, epoch=self.store.epoch, owner=self.owner)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._runners

    def _next_conn_id(self) -> ConnId:
        self._conn_counter += 1
        return ConnId(self._conn_counter)

    def get(self, session_id: str) -> SessionRunner:
        runner = self._runners.get(session_id)
        if runner is None or runner.session.forgotten:
            raise SessionNotFound("Session not found")
        return runner

    async def create(self) -> SessionRunner:
        """Start a new session and its upstream; ``Overloaded`` past ``max_sessions``.

        The slot is taken before the first ``await``: sessions still starting count, so
        concurrent ``initialize`` requests cannot overshoot the limit together.
        """
        limit = self.config.sessions.max_sessions
        if len(self._runners) + len(self._starting) >= limit:
            raise Overloaded(
                f"Too many sessions (sessions.max_sessions={limit}); try again later",
                reason="too_many_sessions",
            )
        runner = SessionRunner(
            self.config,
            self.settings,
            self.budget,
            new_session_id(),
            new_epoch(),
            self._forget,
            self._next_conn_id,
            self.health,
            self.persister,
        )
        self._starting.add(runner)
        self._none_starting.clear()
        try:
            await runner.start()
        finally:
            self._starting.discard(runner)
            if not self._starting:
                self._none_starting.set()
        if not self.accepting:  # shutdown began while it started: it must not outlive it
            await runner.end("proxy shutting down")
            raise SessionNotFound("the proxy is shutting down")
        self._runners[runner.session_id] = runner
        if self.replicas is not None:  # other replicas find it (and forward to it) by this
            record = SessionRecord(runner.session_id, runner.session.epoch, self.owner)
            record.expires_at = time.time() + SESSION_RECORD_SECONDS
            await self.store.put_session(record)
        runner.log.info(
            "session_created", upstream=runner.upstream.describe(), upstream_pid=runner.upstream.pid
        )
        return runner

    def _forget(self, runner: SessionRunner) -> None:
        self._runners.pop(runner.session_id, None)
        # Make sure the process is reaped even if nobody awaits the runner.
        self._own(runner.wait_stopped())
        if self.replicas is not None:
            self._own(self._drop_record(runner.session_id))

    def _own(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._reaper.add(task)
        task.add_done_callback(self._reaper.discard)

    async def _drop_record(self, session_id: str) -> None:
        try:
            await self.store.drop_session(session_id)
        except StoreError as exc:  # it expires by itself (SESSION_RECORD_SECONDS)
            log.warning("session_record_not_dropped", error=str(exc))

    # ------------------------------------------------------------------ forwarded requests
    async def serve_forwarded(self, message: dict[str, Any]) -> dict[str, Any]:
        """A request another replica received for one of this replica's sessions: feed it
        to the session, detach (the asker serves the stream from the shared log), and say
        what it became once the stream is in the store."""
        try:
            runner = self.get(message["session"])
            if message["kind"] == "delete":
                await runner.end("deleted by client")
                return {"outcome": "deleted"}
            if message["kind"] == "ack":
                runner.acknowledge(message["last_event_id"])
                return {"outcome": "acked"}
            return await runner.serve_remote(message)
        except ProxyError as exc:
            return {"status": exc.http_status, "error": exc.to_jsonrpc(message.get("request_id"))}

    async def shutdown(self) -> None:
        """End every session and wait for every child process to be gone.

        Each request in flight gets an error answer (``data.reason: proxy_shutdown``), and
        this waits (up to :data:`SHUTDOWN_DRAIN_SECONDS`) for the connections to write
        those answers out: the HTTP server's cleanup, which comes next, tears them down.
        """
        self.accepting = False
        await self._none_starting.wait()  # each ends itself once started (see above)
        runners = list(self._runners.values())
        for runner in runners:
            runner.shut_down()  # every upstream begins to stop now, in parallel
        drained = asyncio.gather(*(r.written_out() for r in runners))
        try:
            async with asyncio.timeout(SHUTDOWN_DRAIN_SECONDS):
                await drained
        except TimeoutError:
            left = sum(r.open_connections for r in runners)
            log.info("shutdown_connections_not_drained", connections=left)
        await asyncio.gather(*(r.wait_stopped() for r in runners))
        if self.replicas is not None:
            await self.replicas.stop()
        if self._reaper:
            await asyncio.gather(*self._reaper, return_exceptions=True)
        await self.close_store()

    async def close_store(self) -> None:
        """Commit what is gathered (each session's last answers), then close the store."""
        if self.persister is not None:
            if not await self.persister.drain(SHUTDOWN_DRAIN_SECONDS):
                log.warning("store_not_drained", error=self.persister.last_error)
            await self.persister.close()
        await self.store.close()
