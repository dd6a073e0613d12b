"""``/readyz``: may this proxy be sent traffic? (``/healthz`` only says it is alive.)

Ready means: it is not shutting down, its store takes writes, and its upstream can be
started or reached. The last is known without asking when sessions (client sessions, or
the modern pool's) are up and the transports report no failure (``UpstreamHealth``);
otherwise (no session, or a failure reported) a probe starts an upstream session,
initializes it and stops it; a probe that succeeds clears a reported failure. A probe's
answer is kept for :data:`PROBE_SECONDS`, and probes never overlap, so a readiness check
every second costs at most one server start per interval.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import structlog

from proxy.core.errors import ProxyError

if TYPE_CHECKING:
    from proxy.modern.pool import UpstreamPool
    from proxy.registry import Registry

log = structlog.get_logger("proxy.readiness")

PROBE_SECONDS = 10.0


class Readiness:
    def __init__(self, registry: Registry, pool: UpstreamPool | None) -> None:
        self.registry = registry
        self.pool = pool  # the modern side's, when on: its live sessions count as reached
        self._probe: asyncio.Task[str | None] | None = None
        self._probed_at = -1e9
        self._probe_error: str | None = None

    async def check(self) -> tuple[bool, dict[str, Any]]:
        registry = self.registry
        reasons: list[str] = []
        if not registry.accepting:
            reasons.append("the proxy is shutting down")
        store_error = registry.store_health().get("last_error")
        if store_error:
            reasons.append(f"the store refuses writes: {store_error}")
        loop = registry.health.crash_loop_now()
        if loop is not None:
            reasons.append(f"the upstream is crash-looping: {loop}")
        upstream = await self._upstream() if loop is None else None
        if upstream is not None:
            reasons.append(f"the upstream cannot be started or reached: {upstream}")
        body = {"status": "ready" if not reasons else "not_ready", "reasons": reasons}
        return not reasons, body

    async def _upstream(self) -> str | None:
        live = len(self.registry) > 0 or (self.pool is not None and bool(self.pool.live_sessions()))
        if live and self.registry.health.state != "failing":
            return None
        if time.monotonic() - self._probed_at < PROBE_SECONDS:
            return self._probe_error
        if self._probe is None or self._probe.done():
            self._probe = asyncio.ensure_future(self._run_probe())
        return await asyncio.shield(self._probe)

    async def _run_probe(self) -> str | None:
        from proxy.modern.pool import UpstreamPool

        pool = UpstreamPool(self.registry.config, self.registry.health)
        try:
            await pool.acquire()
            error = None
            self.registry.health.ok()  # it can be had again, whatever failed before
        except ProxyError as exc:
            error = exc.message
            log.warning("readiness_probe_failed", error=error)
        finally:
            await pool.stop()
        self._probed_at = time.monotonic()
        self._probe_error = error
        return error
