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

Either way ``spare`` sessions are started ahead of need (:func:`proxy.core.pooling.
spares_to_start`): beside the first start, and again each time a call takes one, so that a
call finds an initialized session rather than waiting for a server to start. A call that
finds none idle takes a spare still starting (it waits for what is left of that start)
before it starts one of its own. With ``per_request`` a spare is a fresh session no request
has used yet.

A request stays on its session until it is answered. Which call what the server sends
belongs to, and how ids and progress tokens are rewritten, is the session's
:class:`~proxy.core.calltable.CallTable`'s to decide (DESIGN.md §5); a
:class:`~proxy.modern.pooled_session.PooledSession` carries out its commands.
List-changed and resource-updated notifications go to the listeners
(:mod:`proxy.modern.listen`).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from typing import Any

import structlog

from proxy.config import Config
from proxy.core import pooling
from proxy.core.errors import LostReason, UpstreamStartFailed, lost_error
from proxy.core.jsonrpc import Message
from proxy.metrics import Metrics
from proxy.modern.pooled_session import PooledSession
from proxy.upstream.base import UpstreamHealth

log = structlog.get_logger("proxy.modern")


class _Spare:
    """A spare session being started; ``claimed``: the call that waits for it, if any."""

    def __init__(self) -> None:
        self.task: asyncio.Future[PooledSession | None]
        self.claimed: asyncio.Task[Any] | None = None


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
        self._starts = 0  # sessions being started, for a call or as spares
        self._coming: list[_Spare] = []  # spares being started, each until it is up
        self._ready: list[PooledSession] = []  # per_request: spares no request has used
        self._spares_failed = False  # no more spares until a session starts again
        self._change = asyncio.Event()  # set (and replaced) when a start ends
        self.start_waits = 0  # requests that waited for a server to start
        self._owned: set[asyncio.Task[Any]] = set()
        self.on_broadcast: Callable[[Message], None] = lambda msg: None
        self.on_session: Callable[[PooledSession], None] = lambda session: None
        self.init_result: dict[str, Any] | None = None  # the upstream's, once seen
        self._stopping = False
        self._reaper: asyncio.TimerHandle | None = None
        self._listening: PooledSession | None = None  # per_request: kept for listeners
        self._listeners = 0
        self._retired: list[PooledSession] = []  # of settings a reload replaced: end when idle
        self._generation = 0  # the settings' (a reload replaces them: retarget)

    @property
    def per_request(self) -> bool:
        return self.settings.isolation == "per_request"

    async def _new(self) -> PooledSession:
        """A new session for the caller (counted among the starts while it starts)."""
        self._starts += 1
        try:
            session = await self._start_session()
        finally:
            self._starts -= 1
            self._ended_start()
        self._register(session, for_call=True)
        return session

    async def _start_session(self) -> PooledSession:
        if self._stopping:
            raise UpstreamStartFailed("the proxy is shutting down")
        session = PooledSession(self, next(self._numbers))
        session.generation = self._generation
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
        self._spares_failed = False
        log.info("pool_session_started", session=session.label, pid=session.upstream.pid)
        return session

    def _register(self, session: PooledSession, for_call: bool) -> None:
        """A started session joins the pool (per_request: a spare joins the ready ones);
        one started with settings a reload replaced meanwhile does not."""
        if session.closed is not None:
            return
        if session.generation != self._generation:
            self._retire(session)
            return
        if not self.per_request:
            self.sessions.append(session)
            self.on_session(session)
        elif not for_call:
            self._ready.append(session)

    def _ended_start(self) -> None:
        self._change.set()
        self._change = asyncio.Event()

    async def acquire(self, exclusive: bool = False) -> PooledSession:
        """A session for one more request (a new one, per ``isolation``).

        ``exclusive``: the request may make the server ask its client something; it gets
        a session where no other such request is in flight (growing the pool up to
        ``max_size``), so that the question can only be its own.

        An idle session, else a spare being started (its start is under way), else a new
        one within the limits, else (shared) the least loaded one; each time, spares are
        started to stand in for what was taken (:meth:`_keep_spares`).
        """
        waited = False
        while True:
            found = self._take_ready() if self.per_request else self._pick(exclusive)
            if found is not None:
                break
            spare = next((s for s in self._coming if s.claimed is None), None)
            if spare is not None:
                waited = True
                found = await self._claim(spare)
                if found is not None and found.generation == self._generation:
                    break
                continue
            live = len(self.live_sessions())
            settings = self.settings
            if self.per_request or pooling.may_grow(
                live + self._starts, exclusive, size=settings.size, max_size=settings.max_size
            ):
                waited = True
                self._keep_spares(exclusive, own_start=True)
                found = await self._new()
                break
            live_sessions = self.live_sessions()
            if live_sessions:
                found = live_sessions[pooling.least_loaded(self._loads(live_sessions))]
                break
            waited = True  # every session the limits allow is starting: share one once up
            await self._change.wait()
        if waited:
            self.start_waits += 1
            if self.metrics is not None:
                self.metrics.pool_start_waits.labels(self.name).inc()
        self._keep_spares(exclusive, taken=found)
        return found

    def _take_ready(self) -> PooledSession | None:
        while self._ready:
            session = self._ready.pop(0)
            if session.closed is None:
                return session
        return None

    async def _claim(self, spare: _Spare) -> PooledSession | None:
        """Wait for ``spare``, claimed, to be up: it is this caller's (None: it failed)."""
        spare.claimed = asyncio.current_task()
        try:
            session = await asyncio.shield(spare.task)
        except asyncio.CancelledError:
            spare.claimed = None  # the caller left: the spare joins the pool when up
            if spare.task.done() and not spare.task.cancelled():
                started = spare.task.result()
                if started is not None:
                    self._register(started, for_call=False)
            raise
        if session is not None:
            self._register(session, for_call=True)
        return session

    def _keep_spares(
        self, exclusive: bool, taken: PooledSession | None = None, own_start: bool = False
    ) -> None:
        """Start the spares that ``spare`` asks for (:func:`pooling.spares_to_start`)."""
        settings = self.settings
        if self._stopping or self._spares_failed or settings.spare <= 0:
            return
        coming = sum(1 for s in self._coming if s.claimed is None)
        starting = self._starts + (1 if own_start else 0)
        if self.per_request:
            idle = sum(1 for s in self._ready if s.closed is None)
            count = pooling.spares_to_start(
                idle=idle,
                live=0,
                starting=0,
                coming=coming,
                spare=settings.spare,
                limit=settings.spare,
            )
        else:
            live = self.live_sessions()
            idle = sum(
                1 for s in live if s is not taken and s.busy == 0 and s is not self._listening
            )
            limit = settings.max_size if exclusive else settings.size
            count = pooling.spares_to_start(
                idle=idle,
                live=len(live),
                starting=starting,
                coming=coming,
                spare=settings.spare,
                limit=limit,
            )
        for _ in range(count):
            spare = _Spare()
            self._starts += 1
            spare.task = asyncio.ensure_future(self._start_spare(spare))
            self._coming.append(spare)

    async def _start_spare(self, spare: _Spare) -> PooledSession | None:
        try:
            session = await self._start_session()
        except Exception as exc:  # a spare that failed: the next call meets the error
            if not self._stopping:
                self._spares_failed = True
                log.warning("pool_spare_not_started", error=str(exc))
            return None
        finally:
            self._starts -= 1
            self._coming.remove(spare)
            self._ended_start()
        if spare.claimed is None:
            self._register(session, for_call=False)
            log.info("pool_spare_ready", session=session.label)
        return session

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

    def retarget(self, config: Config) -> None:
        """A reload changed the server's settings: sessions started from now on use
        ``config``; those running keep theirs, take no new call, and stop once idle."""
        self.config = config
        self.ties_by_stream = config.upstream.kind == "streamable-http"
        self.init_result = None  # the new server may say otherwise
        self._generation += 1  # spares under way are retired when up (_register)
        old = [s for s in self.sessions if s is not self._listening] + self._ready
        self.sessions = [s for s in self.sessions if s is self._listening]
        self._ready = []
        for session in old:
            self._retire(session)

    def _retire(self, session: PooledSession) -> None:
        if session.busy == 0:
            self._own(session.stop())
        elif session not in self._retired:
            self._retired.append(session)

    def idle(self, session: PooledSession) -> None:
        if session in self._retired:
            if session.busy == 0:
                self._retired.remove(session)
                self._own(session.stop())
            return
        if self.per_request and session is not self._listening:
            self._own(session.stop())
            return
        if self._reaper is None and not self._stopping:  # one timer, not one per call
            loop = asyncio.get_running_loop()
            self._reaper = loop.call_later(self.settings.idle_seconds + 0.05, self._reap_idle)

    def _reap_idle(self) -> None:
        self._reaper = None
        live = self.live_sessions()
        settings = self.settings
        stop, later = pooling.to_reap(
            self._loads(live), time.monotonic(), settings.idle_seconds, settings.spare
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
        if session in self._ready:
            self._ready.remove(session)
        self._own(session.stop())

    def broadcast(self, msg: Message) -> None:
        self.on_broadcast(msg)

    def idle_count(self) -> int:
        """Sessions started and idle: a request would take one without waiting."""
        if self.per_request:
            return sum(1 for s in self._ready if s.closed is None)
        return sum(1 for s in self.live_sessions() if s.busy == 0)

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
        coming = [spare.task for spare in self._coming]
        await asyncio.gather(*coming, return_exceptions=True)  # each stops itself (stopping)
        sessions, self.sessions = self.sessions, []
        sessions += self._ready + self._retired
        self._ready, self._retired = [], []
        for session in sessions:
            session.fail_calls(lost_error(LostReason.PROXY_SHUTDOWN, "the proxy is shutting down"))
        await asyncio.gather(*(s.stop() for s in sessions), return_exceptions=True)
        if self._owned:
            await asyncio.gather(*self._owned, return_exceptions=True)
