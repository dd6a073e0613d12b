"""Initialized upstream sessions that serve modern clients (docs/modern.md §Pool).

A legacy server needs ``initialize`` and a session; a 2026-07-28 client brings neither.
The pool keeps initialized upstream sessions (a process each for stdio, a session each
for a remote server) and runs every modern request on one of them:

- ``shared`` (default): up to ``modern.pool.size`` sessions; a request goes to a session
  with nothing in flight, else a new one while under the size, else the least busy one
  (requests are multiplexed: the proxy numbers upstream ids itself). A session idle for
  ``idle_seconds`` is stopped; one stays warm.
- ``per_request``: a fresh session for each request, stopped once it is answered: no
  state of one request (a stdio server's globals, its working directory's files) is seen
  by another, at the cost of a start per request.

A request stays on its session until it is answered. Which call what the server sends
belongs to, and how ids and progress tokens are rewritten, is the session's
:class:`~proxy.core.calltable.CallTable`'s to decide (DESIGN.md §5); a
:class:`PooledSession` carries out its commands. List-changed and resource-updated
notifications go to the listeners (:mod:`proxy.modern.listen`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import time
from collections.abc import Callable
from typing import Any, assert_never

import structlog

from proxy import __version__
from proxy.config import Config
from proxy.core import jsonrpc, pooling
from proxy.core.calltable import (
    AskServer,
    AwaitAnswer,
    BeginCall,
    Broadcast,
    CallChanged,
    CallReleased,
    CallTable,
    FailCall,
    Idle,
    OwnAnswer,
    SessionLost,
    TableCommand,
    TableEvent,
)
from proxy.core.errors import LostReason, ProxyError, UpstreamStartFailed, lost_error
from proxy.core.events import SendUpstream
from proxy.core.handshake import HandshakeStep, proxy_params
from proxy.core.jsonrpc import Message
from proxy.metrics import Metrics
from proxy.modern.call import CallRun
from proxy.upstream import UpstreamContext, open_upstream
from proxy.upstream.base import Upstream, UpstreamHealth
from proxy.upstream.handshake import INITIALIZE_TIMEOUT_SECONDS, answer_within, initialize

log = structlog.get_logger("proxy.modern")

SETTLE_SECONDS = 0.05


class PooledSession:
    """One initialized upstream session, shared by the calls that run on it."""

    def __init__(self, pool: UpstreamPool, number: int) -> None:
        self.pool = pool
        self.number = number
        self.label = f"pool-{number}"
        context = UpstreamContext(
            config=pool.config.upstream,
            session_id=f"{self.label}-{secrets.token_hex(8)}",
            on_message=self._on_message,
            on_closed=self._on_closed,
            health=pool.health,
        )
        self.upstream: Upstream = open_upstream(context)
        self.table = CallTable(tied_by_stream=pool.ties_by_stream)
        self.runs: dict[Any, CallRun] = {}  # by their Call
        self._waiting: dict[int, asyncio.Future[Message]] = {}  # the proxy's own requests
        self.init_result: dict[str, Any] = {}
        self.closed: str | None = None
        self.idle_since = time.monotonic()

    @property
    def busy(self) -> int:
        return len(self.table)

    @property
    def asking(self) -> int:
        """Calls in flight that may make the server ask the client something."""
        return self.table.asking

    async def start(self) -> None:
        # Its tasks keep this context: a pooled session serves everyone, so its lines
        # name the pool and the server, never the principal whose call started it.
        with structlog.contextvars.bound_contextvars(
            session=self.label, upstream=self.pool.name, principal=None
        ):
            await self.upstream.start()
        try:
            self.init_result = await initialize(
                self._ask_initialize,
                self._send_initialized,
                proxy_params(__version__),
                INITIALIZE_TIMEOUT_SECONDS,
            )
        except ProxyError:
            await self.stop()
            raise
        # Servers often ask something as soon as they are initialized (roots/list, say).
        # On stdio nothing would tell that from a question of the first call, so the
        # session is handed out only once such questions are in (and refused): after a
        # round trip, and a moment of quiet.
        with contextlib.suppress(ProxyError):
            await self.ask("ping", {}, SETTLE_SECONDS * 20)
        await asyncio.sleep(SETTLE_SECONDS)

    async def _ask_initialize(self, method: str, params: dict[str, Any], timeout: float) -> Message:
        return await self.ask(method, params, timeout, HandshakeStep.INITIALIZE)

    def _send_initialized(self, message: dict[str, Any]) -> None:
        if self.closed is None:
            self.upstream.send(jsonrpc.encode(message), HandshakeStep.INITIALIZED)

    async def ask(
        self,
        method: str,
        params: dict[str, Any],
        timeout: float,
        handshake: HandshakeStep | None = None,
    ) -> Message:
        """A request of the proxy's own (initialize, resources/subscribe): its answer."""
        commands = self.table.handle(AskServer(method, params, handshake))
        request_id = next(c.request_id for c in commands if isinstance(c, AwaitAnswer))
        self._execute(commands)
        try:
            return await answer_within(self._waiting[request_id], method, timeout)
        finally:
            self._waiting.pop(request_id, None)

    def begin(self, run: CallRun, params: dict[str, Any]) -> None:
        """Send ``run``'s request; it is pinned here until it is answered."""
        self.runs[run.call] = run
        run.carrier = self
        self._execute(self.table.handle(BeginCall(run.call, params)))

    def deliver(self, event: TableEvent) -> None:
        """A client's move on a call running here (answer, refusal, cancel, fail)."""
        self._execute(self.table.handle(event))

    def _execute(self, commands: list[TableCommand]) -> None:
        for command in commands:
            match command:
                case CallChanged(call):  # the most frequent first: each progress notification
                    run = self.runs.get(call)
                    if run is not None:
                        run.signal()
                case SendUpstream(payload, handshake):
                    if self.closed is None:
                        self.upstream.send(payload, handshake)
                case CallReleased(call):
                    self.runs.pop(call, None)
                case Idle():
                    self.idle_since = time.monotonic()
                    self.pool.idle(self)
                case AwaitAnswer(request_id):
                    future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
                    self._waiting[request_id] = future
                case OwnAnswer(request_id, msg):
                    waiting = self._waiting.get(request_id)
                    if waiting is not None and not waiting.done():
                        waiting.set_result(msg)
                case Broadcast(msg):
                    self.pool.broadcast(msg)
                case _:
                    assert_never(command)

    # ------------------------------------------------------------------ from the server
    def _on_message(self, msg: Message, origin: int | None) -> None:
        self._execute(self.table.from_server(msg, origin))

    def _on_closed(self, reason: str) -> None:
        if self.closed is not None:
            return
        log.warning("pool_session_closed", session=self.label, reason=reason)
        self._close(reason)
        self.pool.lost(self)

    def _close(self, reason: str) -> None:
        """No more traffic here: the proxy's own requests and every call on it fail."""
        self.closed = reason
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(UpstreamStartFailed(f"the MCP server went away: {reason}"))
        self._execute(self.table.handle(SessionLost(reason)))

    def fail_calls(self, error: dict[str, Any]) -> None:
        for call in self.table.calls():
            self.deliver(FailCall(call, error))

    async def stop(self) -> None:
        if self.closed is None:
            self._close("stopped by the proxy")
        with contextlib.suppress(Exception):
            await self.upstream.stop()


class UpstreamPool:
    """The pooled sessions of one upstream (see the module docstring)."""

    def __init__(
        self,
        config: Config,
        health: UpstreamHealth,
        metrics: Metrics | None = None,
        name: str = "default",
    ) -> None:
        self.config = config
        self.health = health
        self.metrics = metrics
        self.name = name  # the server's, for metrics
        self.settings = config.modern.pool
        # Streamable HTTP says which request a server message belongs to (the response
        # stream it came on); on stdio, HTTP+SSE and WebSocket only the timing can.
        self.ties_by_stream = config.upstream.kind == "streamable-http"
        self.sessions: list[PooledSession] = []
        self._numbers = itertools.count(1)
        self._starting: asyncio.Lock = asyncio.Lock()
        self._owned: set[asyncio.Task[Any]] = set()
        self.on_broadcast: Callable[[Message], None] = lambda msg: None
        self.on_session: Callable[[PooledSession], None] = lambda session: None
        self.init_result: dict[str, Any] | None = None  # the upstream's, once seen
        self._stopping = False
        self._reaper: asyncio.TimerHandle | None = None
        self._listening: PooledSession | None = None  # per_request: kept for listeners
        self._listeners = 0

    @property
    def per_request(self) -> bool:
        return self.settings.isolation == "per_request"

    async def _new(self) -> PooledSession:
        if self._stopping:
            raise UpstreamStartFailed("the proxy is shutting down")
        session = PooledSession(self, next(self._numbers))
        try:
            await session.start()
        except UpstreamStartFailed:
            if self.metrics is not None:
                self.metrics.upstream_failures.labels(self.name).inc()
            raise
        if self.metrics is not None:
            self.metrics.upstream_starts.labels(self.name, "pool").inc()
        if self._stopping:
            await session.stop()
            raise UpstreamStartFailed("the proxy is shutting down")
        self.init_result = session.init_result
        if not self.per_request:
            self.sessions.append(session)
            self.on_session(session)
        log.info("pool_session_started", session=session.label, pid=session.upstream.pid)
        return session

    async def acquire(self, exclusive: bool = False) -> PooledSession:
        """A session for one more request (a new one, per ``isolation``).

        ``exclusive``: the request may make the server ask its client something; it gets
        a session where no other such request is in flight (growing the pool up to
        ``max_size``), so that the question can only be its own.
        """
        if self.per_request:
            return await self._new()
        found = self._pick(exclusive)
        if found is not None:
            return found
        async with self._starting:  # one start at a time; others may find it free
            found = self._pick(exclusive)
            if found is not None:
                return found
            live = len(self.live_sessions())
            settings = self.settings
            if pooling.may_grow(live, exclusive, size=settings.size, max_size=settings.max_size):
                return await self._new()
        live_sessions = self.live_sessions()
        if not live_sessions:
            return await self._new()
        return live_sessions[pooling.least_loaded(self._loads(live_sessions))]

    def _pick(self, exclusive: bool) -> PooledSession | None:
        live = self.live_sessions()
        index = pooling.pick(self._loads(live), exclusive)
        return None if index is None else live[index]

    def _loads(self, sessions: list[PooledSession]) -> list[pooling.Load]:
        return [
            pooling.Load(s.busy, s.asking, s.idle_since, held=s is self._listening)
            for s in sessions
        ]

    async def info(self) -> dict[str, Any]:
        """The upstream's InitializeResult (a session is started if none has been)."""
        if self.init_result is None:
            session = await self.acquire()
            if self.per_request:
                self._own(session.stop())
        assert self.init_result is not None
        return self.init_result

    def idle(self, session: PooledSession) -> None:
        if self.per_request and session is not self._listening:
            self._own(session.stop())
            return
        if self._reaper is None and not self._stopping:  # one timer, not one per call
            loop = asyncio.get_running_loop()
            self._reaper = loop.call_later(self.settings.idle_seconds + 0.05, self._reap_idle)

    def _reap_idle(self) -> None:
        self._reaper = None
        live = self.live_sessions()
        stop, later = pooling.to_reap(
            self._loads(live), time.monotonic(), self.settings.idle_seconds
        )
        for index in stop:
            self.sessions.remove(live[index])
            self._own(live[index].stop())
        if later:
            self.idle(live[0])

    async def hold_listening(self) -> None:
        """A listener needs a session to hear the server: with ``per_request`` there is
        none between requests, so one is kept while anybody listens."""
        self._listeners += 1
        if self.per_request and self._listening is None:
            async with self._starting:
                if self._listening is None:
                    session = PooledSession(self, next(self._numbers))
                    await session.start()
                    self._listening = session
                    self.sessions.append(session)
                    self.on_session(session)
        elif not self.per_request and not self.live_sessions():
            await self.acquire()

    def release_listening(self) -> None:
        self._listeners -= 1
        session = self._listening
        if self._listeners <= 0 and session is not None:
            self._listening = None
            if session in self.sessions:
                self.sessions.remove(session)
            self._own(session.stop())

    def lost(self, session: PooledSession) -> None:
        if session in self.sessions:
            self.sessions.remove(session)
        self._own(session.stop())

    def broadcast(self, msg: Message) -> None:
        self.on_broadcast(msg)

    def live_sessions(self) -> list[PooledSession]:
        return [s for s in self.sessions if s.closed is None]

    def _own(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._owned.add(task)
        task.add_done_callback(self._owned.discard)

    async def stop(self) -> None:
        self._stopping = True
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        async with self._starting:
            pass
        sessions, self.sessions = self.sessions, []
        for session in sessions:
            session.fail_calls(lost_error(LostReason.PROXY_SHUTDOWN, "the proxy is shutting down"))
        await asyncio.gather(*(s.stop() for s in sessions), return_exceptions=True)
        if self._owned:
            await asyncio.gather(*self._owned, return_exceptions=True)
