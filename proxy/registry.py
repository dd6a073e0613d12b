"""Every session of this process: the :class:`Registry` creates them, finds them by id,
serves what other replicas forward to them, and ends them all on shutdown.

It is the asyncio adapter of :class:`proxy.core.session_table.SessionTable`, which decides
(limits, lookups); what the sessions share (config, store, metrics, servers, ...) is the
:class:`proxy.context.ProxyContext` it is given.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Coroutine, Iterator
from typing import Any, assert_never

import structlog

from proxy.config import Config
from proxy.config_system import token_secret
from proxy.context import ProxyContext
from proxy.core import jsonrpc
from proxy.core.admission import check_draining
from proxy.core.errors import ProxyError, SessionNotFound, UpstreamStartFailed
from proxy.core.events import ConnId
from proxy.core.session_table import (
    ANYONE,
    Anyone,
    Reservation,
    ServerLimit,
    SessionLimits,
    SessionTable,
)
from proxy.forwarding import (
    Acked,
    Deleted,
    Forwarded,
    ForwardedAck,
    ForwardedDelete,
    ForwardedGet,
    ForwardedPost,
    ForwardedRetry,
    NoStream,
    Refused,
    Reply,
    RetryCancel,
    SessionRequest,
    StreamOpened,
    TaskCancel,
    TaskUpdate,
    UnknownTask,
)
from proxy.forwarding_seat import StandaloneRelease, StandaloneStopped, StandaloneTakeover
from proxy.metrics import counts
from proxy.replicas import Follower, Relay
from proxy.runner_remote import acknowledge, serve_remote
from proxy.runtime import SessionRunner
from proxy.servers import Server
from proxy.store.base import SessionRecord, StoreError
from proxy.store.unavailable import patiently

__all__ = ["ANYONE", "Registry", "session_limits", "token_secret"]

log = structlog.get_logger("proxy.registry")

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


def session_limits(config: Config, servers: dict[str, Server]) -> SessionLimits:
    """The limits a new session must fit under, as the config sets them."""
    where = "servers.{}" if config.servers else "upstream"
    return SessionLimits(
        max_sessions=config.sessions.max_sessions,
        servers={
            name: ServerLimit(server.upstream.max_sessions, where.format(name))
            for name, server in servers.items()
        },
        per_principal=config.auth.per_principal.max_sessions,
    )


async def end_sessions(runners: list[SessionRunner]) -> None:
    """End ``runners`` as a stop does: each request in flight answered with
    ``proxy_shutdown``, up to :data:`SHUTDOWN_DRAIN_SECONDS` for the connections to write
    those answers out, then every process gone (shutdown; a server a reload removed)."""
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


class Registry:
    """Every live session of this process, by id."""

    def __init__(self, context: ProxyContext) -> None:
        self.context = context
        self._table: SessionTable[SessionRunner] = SessionTable(
            session_limits(context.config, context.servers)
        )
        self._none_starting = asyncio.Event()  # set while no session is starting
        self._none_starting.set()
        self._conn_counter = 0
        self._reaper: set[asyncio.Task[Any]] = set()
        context.fence.on_lost(self._lose_all)
        metrics = context.metrics
        metrics.watch(metrics.live_streams, lambda: counts(self._table.entries())[0])
        metrics.watch(metrics.buffered_events, lambda: counts(self._table.entries())[1])

    def __len__(self) -> int:
        return len(self._table)

    def set_limits(self, limits: SessionLimits) -> None:
        """New sessions must fit under these from now on (a reload); those open stay."""
        self._table.limits = limits

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._table

    def sessions(self) -> Iterator[SessionRunner]:
        """The live sessions, oldest first (a snapshot: safe to end them meanwhile)."""
        return self._table.entries()

    def _next_conn_id(self) -> ConnId:
        self._conn_counter += 1
        return ConnId(self._conn_counter)

    def get(
        self,
        session_id: str,
        principal: str | Anyone | None = ANYONE,
        server: Server | None = None,
    ) -> SessionRunner:
        """The live session ``session_id``; ``SessionNotFound`` also when it belongs to
        another principal than the one given (authentication: never another's session),
        or to another server than the one given (its id was sent to the wrong path)."""
        runner = self._table.lookup(
            session_id, principal, server.name if server is not None else None
        )
        if runner.session.forgotten:
            raise SessionNotFound("Session not found")
        return runner

    def _slots_changed(self, server: Server) -> None:
        """Mirror the table into what others read: the server's count, and whether any
        session is still starting (shutdown waits for none)."""
        server.sessions = self._table.held_by_server(server.name)
        if self._table.starting:
            self._none_starting.clear()
        else:
            self._none_starting.set()

    async def create(
        self,
        principal: str | None = None,
        server: Server | None = None,
        scopes: frozenset[str] | None = None,
    ) -> SessionRunner:
        """Start a new session of ``server`` (the only one, if not given) and its upstream;
        ``Overloaded`` past a session limit.

        The slot is taken before the first ``await``: sessions still starting count, so
        concurrent ``initialize`` requests cannot overshoot the limits together.
        """
        context = self.context
        if server is None:
            server = context.only_server
            assert server is not None, "several servers: say which"
        slot: Reservation = self._table.reserve(server.name, principal)
        self._slots_changed(server)
        try:
            runner = SessionRunner(
                server,
                context.settings,
                context.budget,
                new_session_id(),
                new_epoch(),
                self._forget,
                self._next_conn_id,
                context.persister,
                context.metrics,
                principal,
                scopes,
            )
            await runner.start()
        except BaseException as exc:
            self._table.release(slot)
            self._slots_changed(server)
            if isinstance(exc, UpstreamStartFailed):
                context.metrics.upstream_failures.labels(server.name).inc()
            raise
        self._table.admit(slot, runner.session_id, runner)
        self._slots_changed(server)
        if not context.accepting:  # shutdown began while it started: it must not outlive it
            await runner.end("proxy shutting down")
            raise SessionNotFound("the proxy is shutting down")
        context.metrics.upstream_starts.labels(server.name, "session").inc()
        if context.replicas is not None:  # other replicas find it (and forward to it) by this
            record = SessionRecord(runner.session_id, runner.session.epoch, context.owner)
            record.expires_at = time.time() + SESSION_RECORD_SECONDS
            store = context.store
            try:
                await patiently(store, "record a session", lambda: store.put_session(record))
            except ProxyError:  # the others could not find it: it must not run
                await runner.end("store unavailable")
                raise
        runner.log.info(
            "session_created", target=runner.upstream.describe(), upstream_pid=runner.upstream.pid
        )
        return runner

    def _forget(self, runner: SessionRunner) -> None:
        if self._table.remove(runner.session_id) is not None:
            self._slots_changed(runner.server)
        # Make sure the process is reaped even if nobody awaits the runner.
        self._own(runner.wait_stopped())
        if self.context.replicas is not None:
            self._own(self._drop_record(runner.session_id))

    def _lose_all(self, stale: str) -> None:
        """This replica's fencing token went stale (its lease lapsed, or the store refused
        a write): every session is lost (:meth:`SessionRunner.lose`)."""
        runners = list(self._table.entries())
        for runner in runners:
            try:
                runner.lose()
            except Exception:  # a bug in one session must not keep the others writing
                runner.log.exception("session_lose_failed")
        log.warning("sessions_lost", sessions=len(runners))

    def _own(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._reaper.add(task)
        task.add_done_callback(self._reaper.discard)

    async def _drop_record(self, session_id: str) -> None:
        try:
            await self.context.store.drop_session(session_id)
        except StoreError as exc:  # it expires by itself (SESSION_RECORD_SECONDS)
            log.warning("session_record_not_dropped", error=str(exc))

    # ------------------------------------------------------------------ forwarded requests
    async def serve_forwarded(self, message: Forwarded, relay: Relay | None = None) -> Reply:
        """A request another replica received for one of this replica's sessions (or
        tasks): feed it to the session, detach (the asker serves the stream from the
        shared log), and say what it became once the stream is in the store. ``relay``
        sends the asker parts of the reply ahead of it (an MRTR retry's notes)."""
        try:
            match message:
                case TaskUpdate() | TaskCancel():
                    for service in self.context.task_services:
                        answer = await service.serve_forwarded(message)
                        if not isinstance(answer, UnknownTask):
                            return answer
                    return UnknownTask()
                case ForwardedRetry():
                    modern = self.context.modern_sides.get(message.server)
                    if modern is None:
                        raise SessionNotFound("no 2026-07-28 side at that server")
                    return await modern.serve_forwarded_retry(
                        message, relay if message.ahead else None
                    )
                case RetryCancel():
                    side = self.context.modern_sides.get(message.server)
                    if side is not None:
                        side.cancel_forwarded_retry(message)
                    return Acked()
                case ForwardedDelete():
                    await self._forwarded_to(message).end("deleted by client")
                    return Deleted()
                case ForwardedAck():
                    acknowledge(self._forwarded_to(message), message.last_event_id)
                    return Acked()
                case StandaloneRelease(token=token, upto=upto):
                    self._forwarded_to(message).seat.released(token, upto)
                    return Acked()
                case StandaloneTakeover(token=token):
                    stop = self._followers().get(token)
                    return StandaloneStopped(await stop() if stop is not None else None)
                case ForwardedGet(socket=socket) if socket is not None:
                    runner = self._forwarded_to(message)

                    async def attach() -> tuple[int | None, StreamOpened | NoStream]:
                        opened = await serve_remote(runner, message)
                        return (opened.after if isinstance(opened, StreamOpened) else None), opened

                    return await runner.seat.take(socket, self.context.replicas, attach)
                case ForwardedPost() | ForwardedGet():
                    runner = self._forwarded_to(message)
                    if isinstance(message, ForwardedPost) and self.context.draining:
                        check_draining(jsonrpc.parse_body(message.body)[0], draining=True)
                    side = self.context.modern_sides.get(message.server)
                    if isinstance(message, ForwardedPost) and side is not None:
                        served = await side.serve_forwarded_post(runner, message)
                        if served is not None:  # a 2025-11-25 task request the proxy serves
                            return served
                    return await serve_remote(runner, message)
                case _:
                    assert_never(message)
        except ProxyError as exc:
            request_id = message.request_id if isinstance(message, ForwardedPost) else None
            return Refused(exc.http_status, exc.to_jsonrpc(request_id))

    def _followers(self) -> dict[str, Follower]:
        replicas = self.context.replicas
        return replicas.standalone_followers if replicas is not None else {}

    def _forwarded_to(self, message: SessionRequest) -> SessionRunner:
        """The session a forwarded request names, if it is the asking principal's and
        at the server whose path the request came to; else SessionNotFound."""
        server = self.context.servers.get(message.server)
        if server is None:
            raise SessionNotFound("Session not found")
        return self.get(message.session, message.principal, server)

    async def shutdown(self) -> None:
        """End every session and wait for every child process to be gone (the context,
        with the store, is closed after this: :meth:`ProxyContext.close`).

        Each request in flight gets an error answer (``data.reason: proxy_shutdown``), and
        this waits (up to :data:`SHUTDOWN_DRAIN_SECONDS`) for the connections to write
        those answers out: the HTTP server's cleanup, which comes next, tears them down.
        """
        self.context.accepting = False
        await self._none_starting.wait()  # each ends itself once started (see above)
        await end_sessions(list(self._table.entries()))
        if self._reaper:
            await asyncio.gather(*self._reaper, return_exceptions=True)
