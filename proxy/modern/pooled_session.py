"""One initialized upstream session of the modern pool (:mod:`proxy.modern.pool`).

A :class:`PooledSession` starts its upstream, initializes it as the proxy's own client
(docs/modern.md §The pool), and carries out the commands of its
:class:`~proxy.core.calltable.CallTable`: which call what the server sends belongs to, and
how ids and progress tokens are rewritten, is the table's to decide (DESIGN.md §5).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from typing import Any, Protocol, assert_never

import structlog

from proxy import __version__
from proxy.config import Config
from proxy.core import jsonrpc
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
from proxy.core.errors import ProxyError, UpstreamStartFailed
from proxy.core.events import SendUpstream
from proxy.core.handshake import HandshakeStep, proxy_params
from proxy.core.jsonrpc import Message
from proxy.modern.call import CallRun
from proxy.upstream import UpstreamContext, open_upstream
from proxy.upstream.base import Upstream, UpstreamHealth
from proxy.upstream.handshake import INITIALIZE_TIMEOUT_SECONDS, answer_within, initialize

log = structlog.get_logger("proxy.modern")


class SessionOwner(Protocol):
    """What a session needs of its pool (:class:`proxy.modern.pool.UpstreamPool`)."""

    config: Config
    health: UpstreamHealth
    name: str
    ties_by_stream: bool

    def idle(self, session: PooledSession) -> None: ...

    def broadcast(self, msg: Message) -> None: ...

    def lost(self, session: PooledSession) -> None: ...


SETTLE_SECONDS = 0.05


class PooledSession:
    """One initialized upstream session, shared by the calls that run on it."""

    def __init__(self, pool: SessionOwner, number: int) -> None:
        self.pool = pool
        self.number = number
        self.generation = 0  # the pool's settings it was started with (a reload: retarget)
        self.label = f"pool-{number}"
        context = UpstreamContext(
            config=pool.config.upstream,
            session_id=f"{self.label}-{secrets.token_hex(8)}",
            on_message=self._on_message,
            on_closed=self._on_closed,
            health=pool.health,
            server=pool.name,
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
