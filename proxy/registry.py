"""Every session of this process: the :class:`Registry` creates them, finds them by id,
serves what other replicas forward to them, and ends them all on shutdown. It also opens
the store (and, on a shared one, this replica's place among the others).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, assert_never

import structlog

from proxy.config import Config, ConfigError
from proxy.core.errors import Overloaded, ProxyError, SessionNotFound, UpstreamStartFailed
from proxy.core.events import ConnId
from proxy.core.stream import ByteBudget
from proxy.forwarding import (
    Acked,
    Deleted,
    Forwarded,
    ForwardedAck,
    ForwardedDelete,
    ForwardedGet,
    ForwardedPost,
    Refused,
    Reply,
    SessionRequest,
    TaskAction,
    TaskCancel,
    TaskReply,
    TaskUpdate,
    UnknownTask,
)
from proxy.metrics import Metrics, counts
from proxy.replicas import Replicas
from proxy.runtime import SessionRunner
from proxy.servers import Server, servers_of
from proxy.store.base import SessionRecord, StoreError, StoreLimits
from proxy.store.open import end_orphans, make_store
from proxy.store.persist import Persister

log = structlog.get_logger("proxy.registry")

STORE_BACKSTOP_FACTOR = 4
"""A store keeps at most this many times ``sessions.stream_max_events`` per stream, of
its own accord (the sessions' own trims are mirrored first)."""

SESSION_RECORD_SECONDS = 86400.0
"""How long a session's record outlives a replica that died without dropping it."""

SHUTDOWN_DRAIN_SECONDS = 2.0
"""How long shutdown waits for the connections to write out what they hold (each request's
last answer) before the HTTP server's cleanup tears them down; a client that has not read
it by then loses it with its connection."""


def new_session_id() -> str:
    """An unguessable session id: 192 random bits, visible ASCII (2025-03-26 §Session)."""
    return secrets.token_urlsafe(24)


def new_epoch() -> str:
    return secrets.token_hex(6)


TOKEN_SECRET_ENV = "MCP_RESUME_PROXY_TOKEN_SECRET"

ANYONE = object()  # Registry.get without a principal check (forwarded requests)


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


class TaskService(Protocol):
    """What serves the task requests other replicas forward here (proxy/modern/tasks.py)."""

    async def serve_forwarded(self, message: TaskAction) -> TaskReply: ...


class Registry:
    """Every live session of this process, by id."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.settings = config.session_settings(token_secret(config))
        self.budget = ByteBudget(config.sessions.max_buffered_bytes)
        self.servers: dict[str, Server] = servers_of(config)
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
        self.task_services: list[TaskService] = []  # each server's modern tasks, if on
        self.metrics = Metrics()
        metrics = self.metrics
        for server in self.servers.values():
            metrics.watch(metrics.sessions.labels(server.name), self._counter(server))
        metrics.watch(metrics.buffered_bytes, lambda: self.budget.used)
        metrics.watch(metrics.live_streams, lambda: counts(self._runners.values())[0])
        metrics.watch(metrics.buffered_events, lambda: counts(self._runners.values())[1])
        self._closers: list[Callable[[], Awaitable[None]]] = []

    @staticmethod
    def _counter(server: Server) -> Callable[[], float]:
        return lambda: server.sessions

    @property
    def only_server(self) -> Server | None:
        """The server when exactly one is configured (it is also at ``/mcp`` and ``/ws``)."""
        return next(iter(self.servers.values())) if len(self.servers) == 1 else None

    def on_shutdown(self, close: Callable[[], Awaitable[None]]) -> None:
        """Run ``close`` at shutdown, after the sessions end and before the store closes."""
        self._closers.append(close)

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

    def get(
        self,
        session_id: str,
        principal: str | object | None = ANYONE,
        server: Server | None = None,
    ) -> SessionRunner:
        """The live session ``session_id``; ``SessionNotFound`` also when it belongs to
        another principal than the one given (authentication: never another's session),
        or to another server than the one given (its id was sent to the wrong path)."""
        runner = self._runners.get(session_id)
        if runner is None or runner.session.forgotten:
            raise SessionNotFound("Session not found")
        if principal is not ANYONE and runner.principal != principal:
            raise SessionNotFound("Session not found")
        if server is not None and runner.server is not server:
            raise SessionNotFound("Session not found")
        return runner

    def _check_limits(self, server: Server, principal: str | None) -> None:
        """``Overloaded`` when one more session would pass a limit: the proxy's, the
        server's, or the principal's."""
        limit = self.config.sessions.max_sessions
        if len(self._runners) + len(self._starting) >= limit:
            raise Overloaded(
                f"Too many sessions (sessions.max_sessions={limit}); try again later",
                reason="too_many_sessions",
            )
        own = server.upstream.max_sessions
        if own is not None and server.sessions >= own:
            where = f"servers.{server.name}" if self.config.servers else "upstream"
            raise Overloaded(
                f"Too many sessions of {server.name} ({where}.max_sessions={own}); try again later",
                reason="too_many_sessions",
            )
        mine = self.config.auth.per_principal.max_sessions
        if principal is not None and mine is not None:
            held = sum(
                1 for r in (*self._runners.values(), *self._starting) if r.principal == principal
            )
            if held >= mine:
                raise Overloaded(
                    f"Too many sessions for {principal} (auth.per_principal.max_sessions="
                    f"{mine}); end one first",
                    reason="too_many_sessions",
                )

    async def create(
        self, principal: str | None = None, server: Server | None = None
    ) -> SessionRunner:
        """Start a new session of ``server`` (the only one, if not given) and its upstream;
        ``Overloaded`` past a session limit.

        The slot is taken before the first ``await``: sessions still starting count, so
        concurrent ``initialize`` requests cannot overshoot the limits together.
        """
        if server is None:
            server = self.only_server
            assert server is not None, "several servers: say which"
        self._check_limits(server, principal)
        runner = SessionRunner(
            server,
            self.settings,
            self.budget,
            new_session_id(),
            new_epoch(),
            self._forget,
            self._next_conn_id,
            self.persister,
            self.metrics,
            principal,
        )
        server.sessions += 1
        self._starting.add(runner)
        self._none_starting.clear()
        try:
            await runner.start()
        except BaseException as exc:
            server.sessions -= 1
            if isinstance(exc, UpstreamStartFailed):
                self.metrics.upstream_failures.labels(server.name).inc()
            raise
        finally:
            self._starting.discard(runner)
            if not self._starting:
                self._none_starting.set()
        self._runners[runner.session_id] = runner
        if not self.accepting:  # shutdown began while it started: it must not outlive it
            await runner.end("proxy shutting down")
            raise SessionNotFound("the proxy is shutting down")
        self.metrics.upstream_starts.labels(server.name, "session").inc()
        if self.replicas is not None:  # other replicas find it (and forward to it) by this
            record = SessionRecord(runner.session_id, runner.session.epoch, self.owner)
            record.expires_at = time.time() + SESSION_RECORD_SECONDS
            await self.store.put_session(record)
        runner.log.info(
            "session_created", target=runner.upstream.describe(), upstream_pid=runner.upstream.pid
        )
        return runner

    def _forget(self, runner: SessionRunner) -> None:
        if self._runners.pop(runner.session_id, None) is not None:
            runner.server.sessions -= 1
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
    async def serve_forwarded(self, message: Forwarded) -> Reply:
        """A request another replica received for one of this replica's sessions (or
        tasks): feed it to the session, detach (the asker serves the stream from the
        shared log), and say what it became once the stream is in the store."""
        try:
            match message:
                case TaskUpdate() | TaskCancel():
                    for service in self.task_services:
                        answer = await service.serve_forwarded(message)
                        if not isinstance(answer, UnknownTask):
                            return answer
                    return UnknownTask()
                case ForwardedDelete():
                    await self._forwarded_to(message).end("deleted by client")
                    return Deleted()
                case ForwardedAck():
                    self._forwarded_to(message).acknowledge(message.last_event_id)
                    return Acked()
                case ForwardedPost() | ForwardedGet():
                    return await self._forwarded_to(message).serve_remote(message)
                case _:
                    assert_never(message)
        except ProxyError as exc:
            request_id = message.request_id if isinstance(message, ForwardedPost) else None
            return Refused(exc.http_status, exc.to_jsonrpc(request_id))

    def _forwarded_to(self, message: SessionRequest) -> SessionRunner:
        """The session a forwarded request names, if it is the asking principal's and
        at the server whose path the request came to; else SessionNotFound."""
        server = self.servers.get(message.server)
        if server is None:
            raise SessionNotFound("Session not found")
        return self.get(message.session, message.principal, server)

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
        for close in self._closers:
            await close()
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
