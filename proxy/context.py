"""What every part of the running proxy shares: the :class:`ProxyContext`.

It is built once, by the root (:func:`proxy.cli_serve.serve`), and handed down to whatever needs
one of its parts, so that the composition of the process is visible in one function and
nothing has to reach for a part through another (the session table,
:class:`proxy.registry.Registry`, holds the sessions and nothing else).

Its life: built (the store chosen, not yet opened), :meth:`ProxyContext.open` (the store
opened; a durable store's persister, a shared store's replicas), then, once the sessions
have ended, :meth:`ProxyContext.close`.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from proxy.config import Config
from proxy.config_system import token_secret
from proxy.core.session import SessionSettings
from proxy.core.stream import ByteBudget
from proxy.forwarding import (
    ForwardedPost,
    ForwardedRetry,
    Reply,
    RetryCancel,
    TaskAction,
    TaskReply,
)
from proxy.looplag import LoopLag
from proxy.metrics import Metrics
from proxy.replicas import Relay, Replicas, Serve
from proxy.servers import Server, servers_of
from proxy.store.base import Store, StoreLimits
from proxy.store.fencing import Fence
from proxy.store.log_tail import Tails
from proxy.store.open import end_orphans, make_store
from proxy.store.persist import Persister
from proxy.store.sweeper import Sweeper

if TYPE_CHECKING:
    from proxy.runtime import SessionRunner

log = structlog.get_logger("proxy.context")

STORE_BACKSTOP_FACTOR = 4
"""A store keeps at most this many times ``sessions.stream_max_events`` per stream, of
its own accord (the sessions' own trims are mirrored first)."""

STORE_DRAIN_SECONDS = 2.0
"""How long closing waits for the persister to commit what it gathered (each session's
last answers) before the store closes."""


class TaskService(Protocol):
    """What serves the task requests other replicas forward here (proxy/modern/tasks.py)."""

    async def serve_forwarded(self, message: TaskAction) -> TaskReply: ...


class ModernSide(Protocol):
    """A server's modern side (proxy/modern/endpoint.py), for what other replicas forward
    here: MRTR retries of calls parked here, and the 2025-11-25 task requests of sessions
    held here (None: the session serves it)."""

    @property
    def tasks(self) -> TaskService: ...

    async def serve_forwarded_retry(
        self, message: ForwardedRetry, relay: Relay | None
    ) -> Reply: ...

    def cancel_forwarded_retry(self, message: RetryCancel) -> None: ...

    async def serve_forwarded_post(
        self, runner: SessionRunner, message: ForwardedPost
    ) -> Reply | None: ...


class ProxyContext:
    """The parts of one proxy process that every endpoint and session shares.

    Not a frozen value: the persister and the replicas exist only once the store is open,
    ``draining`` turns true when a drain begins (new sessions and calls are refused with
    503, :mod:`proxy.downstream.drain`), and ``accepting`` turns false when shutdown
    begins (every endpoint refuses new sessions from then on).
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self.settings: SessionSettings = config.session_settings(token_secret(config))
        self.budget = ByteBudget(config.sessions.max_buffered_bytes)
        self.servers: dict[str, Server] = servers_of(config)
        self.owner = secrets.token_hex(4)  # this process, as a store sees it
        self.fence = Fence(self.owner)  # its writes' token (proxy/store/fencing.py)
        sessions = config.sessions
        # The sessions say what they drop (overflow: block keeps what is unacknowledged
        # past the bound); the store's own bound is a backstop well beyond theirs.
        backstop = STORE_BACKSTOP_FACTOR * sessions.stream_max_events
        self.store: Store = make_store(
            config.store, StoreLimits(backstop, sessions.idle_timeout_seconds)
        )
        self.persister: Persister | None = None  # a durable store: set by open()
        self.sweeper = Sweeper(self.store, config.store.sweep_seconds)  # open() to close()
        self.replicas: Replicas | None = None  # a shared store: the other replicas
        self.accepting = True
        self.draining = False  # SIGTERM: no new work, calls in flight finish (drain.py)
        self.task_services: list[TaskService] = []  # each server's modern tasks, if on
        self.modern_sides: dict[str, ModernSide] = {}  # each server's modern side, if on
        self.metrics = Metrics()
        self.last_reload: dict[str, Any] | None = None  # proxy/reload.py, for /status
        metrics = self.metrics
        for server in self.servers.values():
            metrics.watch(metrics.sessions.labels(server.name), self.counter(server))
        metrics.watch(metrics.buffered_bytes, lambda: self.budget.used)
        self.loop_lag = LoopLag()  # sampled from open() to close()
        metrics.watch(metrics.event_loop_lag, self.loop_lag.worst)
        self._closers: list[Callable[[], Awaitable[None]]] = []
        self.tails = Tails()  # the responses following streams from the store

    @staticmethod
    def counter(server: Server) -> Callable[[], float]:
        """``server``'s live sessions, for its gauge."""
        return lambda: server.sessions

    @property
    def only_server(self) -> Server | None:
        """The server when exactly one is configured (it is also at ``/mcp`` and ``/ws``)."""
        return next(iter(self.servers.values())) if len(self.servers) == 1 else None

    def on_shutdown(self, close: Callable[[], Awaitable[None]]) -> None:
        """Run ``close`` at :meth:`close`, after the sessions end and before the store
        closes."""
        self._closers.append(close)

    def forget_server(self, name: str, close: Callable[[], Awaitable[None]] | None) -> None:
        """A reload removed server ``name`` and its drain ended: it is no longer served,
        and its modern side (``close``, run already) is not closed again at shutdown."""
        self.servers.pop(name, None)
        side = self.modern_sides.pop(name, None)
        if side is not None:
            self.task_services = [t for t in self.task_services if t is not side.tasks]
        if close is not None:
            self._closers = [c for c in self._closers if c != close]

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

    async def open(self, serve_forwarded: Serve) -> None:
        """Open the store; a durable one first ends what a dead proxy left live in it, a
        shared one joins the other replicas (``serve_forwarded`` answers what they
        forward to this replica's sessions)."""
        store = self.store
        await store.open()
        retention = self.config.sessions.completed_retention_seconds
        if store.durable:
            self.persister = Persister(store, self.owner, retention, self.fence)
            if not store.shared:  # one proxy per file: every live stream is orphaned
                await end_orphans(store, None, retention, "proxy_restarted", fence=self.fence.token)
        if store.shared:
            lease = self.config.store.lease_seconds
            self.replicas = Replicas(
                store, self.owner, lease, retention, serve_forwarded, self.fence
            )
            await self.replicas.start()
        log.info("store_opened", store=store.kind, epoch=store.epoch, owner=self.owner)
        self.sweeper.start()
        self.loop_lag.start()

    async def close(self) -> None:
        """Once the sessions have ended: end the responses that follow streams from the
        store (their clients resume on another replica), run the closers (each server's
        modern side), leave the other replicas, commit what is gathered, stop sampling
        the loop's lag and sweeping the store, close it."""
        self.tails.stop()
        for close in self._closers:
            await close()
        if self.replicas is not None:
            await self.replicas.stop()
        if self.persister is not None:
            if not await self.persister.drain(STORE_DRAIN_SECONDS):
                log.warning("store_not_drained", error=self.persister.last_error)
            await self.persister.close()
        self.loop_lag.stop()
        await self.sweeper.stop()
        await self.store.close()
