"""Draining before a stop: SIGTERM lets the calls in flight finish (issue 19, DESIGN.md §9).

A replica told to stop with SIGTERM first drains, for up to ``listen.drain_seconds``:

- ``/readyz`` turns 503 (``status: draining``) at once, so that a balancer sends it nothing
  new; ``/healthz`` stays 200 (``status: draining``): the process is well, it is leaving;
- new sessions and new calls that still reach it get 503 ``proxy_draining`` with
  ``Retry-After`` (:func:`proxy.core.admission.check_draining`, on ``/mcp``, ``/ws``, POSTs
  forwarded by other replicas, and :func:`~proxy.core.admission.check_modern_draining` for
  2026-07-28 requests), so that they are taken to another replica;
- everything else goes on: the calls in flight run, their events are stored as ever (so a
  client cut from this replica resumes from another one on a shared store, or from this
  one's file after its restart), answers, resumes, polls and task reads are served.

The drain ends when no call is in flight (``idle``), at the deadline (``deadline``), or at
a second SIGTERM or a SIGINT (``signal``); then the shutdown runs as it always has, and
what is still in flight gets ``proxy_shutdown``. SIGINT (Ctrl-C) as the first signal, and
SIGTERM with ``listen.drain_seconds: 0``, stop at once, without a drain.

A call in flight is a legacy session's request awaiting its answer
(:attr:`proxy.core.session.Session.live_requests`), or a modern call not yet ended
(:attr:`proxy.modern.endpoint.ModernFacade.live`: those parked for an MRTR retry and
those run as tasks too). The count is read every :data:`POLL_SECONDS`: calls end in many
places, and one cheap sum is simpler than a hook in each.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

import structlog
from aiohttp import web

from proxy.context import ProxyContext
from proxy.downstream.keys import ENDPOINTS_KEY, REGISTRY_KEY
from proxy.servers import Server

log = structlog.get_logger("proxy.drain")

POLL_SECONDS = 0.1
"""How often a drain counts the calls still in flight."""


def calls_in_flight(app: web.Application, server: Server | None = None) -> Callable[[], int]:
    """How many calls ``app`` runs right now, legacy and modern: every server's, or
    ``server``'s alone (a reload drains it)."""
    registry = app[REGISTRY_KEY]
    endpoints = app[ENDPOINTS_KEY]  # a reload adds and removes servers: read it each time

    def count() -> int:
        runners = registry.sessions()
        legacy = sum(r.session.live_requests for r in runners if server in (None, r.server))
        modern = (
            e.modern
            for name, e in endpoints.items()
            if e.modern is not None and (server is None or name == server.name)
        )
        return legacy + sum(len(facade.live) for facade in modern)

    return count


class Drain:
    """The signals that stop the proxy, and the drain between the first and the stop."""

    def __init__(self, context: ProxyContext, in_flight: Callable[[], int]) -> None:
        self.context = context
        self.seconds = context.config.listen.drain_seconds
        self.in_flight = in_flight
        self.requested = asyncio.Event()  # the first signal came: stop (after a drain)
        self._interrupted = asyncio.Event()  # a later one: end the drain now
        self._drains = False

    def on_signal(self, sig: signal.Signals) -> None:
        """A signal handler: the first SIGTERM starts a drain (when ``drain_seconds`` is
        not 0), the first SIGINT a stop without one; any later one ends the drain."""
        if self.requested.is_set():
            self._interrupted.set()
            return
        self._drains = sig == signal.SIGTERM and self.seconds > 0
        self.requested.set()

    async def run(self) -> str | None:
        """Once :attr:`requested`: drain until idle, the deadline or another signal, and
        say which (``idle``, ``deadline``, ``signal``); None when the stop does not drain.
        """
        await self.requested.wait()
        if not self._drains:
            return None
        self.context.draining = True
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + self.seconds
        log.info("proxy_draining", drain_seconds=self.seconds, calls_in_flight=self.in_flight())
        while True:
            if self._interrupted.is_set():
                reason = "signal"
                break
            if self.in_flight() == 0:
                reason = "idle"
                break
            left = deadline - loop.time()
            if left <= 0:
                reason = "deadline"
                break
            try:
                async with asyncio.timeout(min(POLL_SECONDS, left)):
                    await self._interrupted.wait()
            except TimeoutError:
                pass
        log.info(
            "proxy_drained",
            reason=reason,
            seconds=round(loop.time() - started, 3),
            calls_in_flight=self.in_flight(),
        )
        return reason
