"""``/readyz``: may this proxy be sent traffic? (``/healthz`` only says it is alive.)

Ready means: it is not draining (``status: draining`` from SIGTERM on, so that a balancer
stops sending it work at once) nor shutting down, its store takes writes, and every configured
upstream server can be started or reached (the body says which is not). The last is
known without asking when sessions (client sessions, or the modern pool's) are up and
the transports report no failure (``UpstreamHealth``); otherwise (no session, or a
failure reported) a probe starts a plain upstream session, initializes it as the proxy
itself (the one driver, :func:`proxy.upstream.handshake.initialize`) and stops it; a
probe that succeeds clears a reported failure. Probes never overlap. A failed probe's
answer is kept for :data:`PROBE_SECONDS`; a good one too, and then twice as long each
time the next probe is good again, up to :data:`PROBE_MAX_SECONDS`: an idle replica
behind a balancer that checks every second or two would otherwise start its server every
10 s for as long as it idles (~1 s of CPU each for a Python SDK server). A failure (a
probe's, or one a transport reports) goes back to :data:`PROBE_SECONDS` at once, and a
reload that changes the server forgets what was probed.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from proxy import __version__
from proxy.config_upstream import UpstreamConfig
from proxy.core.errors import ProxyError
from proxy.core.handshake import HandshakeStep, proxy_params
from proxy.core.jsonrpc import Message
from proxy.upstream import UpstreamContext, open_upstream
from proxy.upstream.base import Upstream, UpstreamHealth
from proxy.upstream.handshake import INITIALIZE_TIMEOUT_SECONDS, OwnRequests, initialize

if TYPE_CHECKING:
    from proxy.context import ProxyContext
    from proxy.modern.pool import UpstreamPool
    from proxy.servers import Server

log = structlog.get_logger("proxy.readiness")

PROBE_SECONDS = 10.0
PROBE_MAX_SECONDS = 300.0
NOT_PROBED = "not probed yet"  # never an answer: no probe is kept before the first


class Readiness:
    """``/readyz`` over every configured server: ready when each one is."""

    def __init__(self, context: ProxyContext, pools: dict[str, UpstreamPool | None]) -> None:
        self.context = context
        self.parts = [
            ServerReadiness(server, pools.get(name)) for name, server in context.servers.items()
        ]

    def set_servers(self, servers: dict[str, Server], endpoints: dict[str, Any]) -> None:
        """A reload added or removed servers: those kept keep their probe's state; a
        removed one no longer counts."""
        kept = {part.server.name: part for part in self.parts}
        self.parts = []
        for name, server in servers.items():
            if server.removed:
                continue
            modern = endpoints[name].modern if name in endpoints else None
            part = kept.get(name) or ServerReadiness(server, modern.pool if modern else None)
            self.parts.append(part)

    async def check(self) -> tuple[bool, dict[str, Any]]:
        context = self.context
        reasons: list[str] = []
        draining = context.draining and context.accepting
        if not context.accepting:
            reasons.append("the proxy is shutting down")
        elif draining:
            reasons.append("the proxy is draining (SIGTERM): send new work to another replica")
        store_error = context.store_health().get("last_error")
        if store_error:
            reasons.append(f"the store refuses writes: {store_error}")
        found = await asyncio.gather(*(part.check() for part in self.parts))
        named = len(self.parts) > 1 or bool(context.config.servers)
        upstreams = {}
        for part, problem in zip(self.parts, found, strict=True):
            upstreams[part.server.name] = "ready" if problem is None else problem
            if problem is not None:
                reasons.append(f"{part.server.name}: {problem}" if named else problem)
        body = {
            "status": "ready" if not reasons else "draining" if draining else "not_ready",
            "reasons": reasons,
            "upstreams": upstreams,
        }
        return not reasons, body


class ServerReadiness:
    """Can one server be started or reached? (A probe at most every PROBE_SECONDS, less
    often while they keep finding it good.)"""

    def __init__(
        self,
        server: Server,
        pool: UpstreamPool | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.server = server
        self.pool = pool  # the modern side's, when on: its live sessions count as reached
        self.clock = clock
        self._probe: asyncio.Task[str | None] | None = None
        self._probed_at = -1e9
        self._probe_error: str | None = NOT_PROBED
        self._good_for = PROBE_SECONDS  # how long the last good probe's answer is kept
        self._probed_upstream = server.upstream  # what the last probe was of

    async def check(self) -> str | None:
        """None when ready, else why not."""
        loop = self.server.health.crash_loop_now()
        if loop is not None:
            return f"the upstream is crash-looping: {loop}"
        upstream = await self._upstream()
        if upstream is not None:
            return f"the upstream cannot be started or reached: {upstream}"
        return None

    async def _upstream(self) -> str | None:
        live = self.server.sessions > 0 or (
            self.pool is not None and bool(self.pool.live_sessions())
        )
        failing = self.server.health.state == "failing"
        if live and not failing:
            return None
        if self.server.upstream != self._probed_upstream:  # a reload changed the server
            self._probed_at, self._good_for, self._probe_error = -1e9, PROBE_SECONDS, NOT_PROBED
        if failing:
            self._good_for = PROBE_SECONDS  # a transport's failure: look again soon
        kept = PROBE_SECONDS if self._probe_error is not None else self._good_for
        if self.clock() - self._probed_at < kept:
            return self._probe_error
        if self._probe is None or self._probe.done():
            self._probe = asyncio.ensure_future(self._run_probe())
        return await asyncio.shield(self._probe)

    async def _run_probe(self) -> str | None:
        was_good = self._probe_error is None and self.server.health.state != "failing"
        self._probed_upstream = self.server.upstream
        try:
            await probe(self.server.upstream, self.server.health, self.server.name)
            error = None
            self.server.health.ok()  # it can be had again, whatever failed before
        except ProxyError as exc:
            error = exc.message
            log.warning("readiness_probe_failed", upstream=self.server.name, error=error)
        if error is None and was_good:  # good again: keep longer
            self._good_for = min(self._good_for * 2, PROBE_MAX_SECONDS)
        else:
            self._good_for = PROBE_SECONDS
        self._probed_at = self.clock()
        self._probe_error = error
        return error


async def probe(config: UpstreamConfig, health: UpstreamHealth, name: str) -> None:
    """Start one upstream session, initialize it for the proxy itself, stop it; raise
    ``ProxyError`` (``UpstreamStartFailed``) when the server cannot be had."""
    upstream: Upstream | None = None

    def send(payload: bytes, step: HandshakeStep | None) -> None:
        if upstream is not None:
            upstream.send(payload, step)

    own = OwnRequests(send, "mcp-resume-proxy/probe/")

    def on_message(msg: Message, origin: int | None) -> None:
        own.answered(msg)  # the rest (a question of the server's) waits for the stop

    context = UpstreamContext(
        config=config,
        session_id=f"probe-{secrets.token_hex(8)}",
        on_message=on_message,
        on_closed=own.gone,
        health=health,
        server=name,
    )
    upstream = open_upstream(context)
    # Its lines name the probe and the server, never a client's principal.
    with structlog.contextvars.bound_contextvars(session="probe", upstream=name, principal=None):
        await upstream.start()
        try:
            params = proxy_params(__version__)
            await initialize(own.ask, own.notify, params, INITIALIZE_TIMEOUT_SECONDS)
        finally:
            await upstream.stop()
