"""Reload: re-read the config without a restart (SIGHUP, or ``listen.watch_config``).

A reload reads the config as a start would (file, environment, command line) and
checks it as a start would. A file that fails, or that changes what only a restart can
apply (:data:`proxy.reload_plan.RESTART_ONLY`: the listen address, the store, ...), is
refused whole: the running config stays, the log says why (key paths, never values),
``/status`` shows the outcome, ``mcp_resume_proxy_config_reloads_total`` counts it.

Otherwise, at once and in this order:

- the new authentication (tokens, tokens file, JWT settings; its JWKS loaded first) takes
  the place of the old for every request from then on;
- servers added start serving at their paths;
- servers whose settings changed serve new sessions (and new modern pool sessions) with the
  new settings; sessions already open keep theirs until they end;
- servers removed take no new session and no new call (``404 server_removed``) while the
  calls in flight finish, for up to ``listen.drain_seconds``; then what is left of their
  sessions ends as at a stop (``proxy_shutdown``) and their paths answer ``unknown_server``;
- limits (``sessions.max_sessions``, per server, per principal), session settings for new
  sessions, the Host and Origin lists and the log level and format apply from then on.

Sessions and streams of servers whose settings did not change are not touched.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from proxy.config import Config, ConfigError
from proxy.downstream.app import server_endpoints
from proxy.downstream.auth import Authenticator
from proxy.downstream.drain import POLL_SECONDS, calls_in_flight
from proxy.downstream.keys import (
    AUTH_KEY,
    CONTEXT_KEY,
    ENDPOINTS_KEY,
    READINESS_KEY,
    REGISTRY_KEY,
    SOCKETS_KEY,
)
from proxy.downstream.resource import bind, resource_server
from proxy.logs import configure_logging
from proxy.registry import end_sessions, session_limits
from proxy.reload_plan import ReloadPlan, plan_reload
from proxy.servers import Server

log = structlog.get_logger("proxy.reload")

WATCH_DEBOUNCE_MS = 500
"""A file watch waits this long for a burst of writes (an editor's) to settle."""

WATCH_POLL_MS = 2000
"""A file watch also compares the watched files' contents this often."""


class Reloader:
    """Reloads of one running app. Owned by :func:`proxy.cli_serve.serve`: :meth:`close` ends
    its watch and the drains of removed servers still running (the shutdown ends their
    sessions anyway)."""

    def __init__(
        self, app: web.Application, reread: Callable[[], Config], watch: list[str] | None = None
    ) -> None:
        self.app = app
        self.reread = reread
        self.port = 0  # the port listened on (set once bound): resource URIs name it
        self.last: dict[str, Any] | None = None  # the last reload, for /status
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._watched = [p for p in (watch or []) if p]
        self._seen = self._digests()  # the watched files as the running config read them
        if self._watched:
            self._own(self._watch())

    def _own(self, work: Any) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def on_signal(self) -> None:
        """The SIGHUP handler: reload soon (reloads never overlap)."""
        self._own(self.reload("sighup"))

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _digests(self) -> tuple[str | None, ...]:
        found: list[str | None] = []
        for path in self._watched:
            try:
                found.append(hashlib.sha256(Path(path).read_bytes()).hexdigest())
            except OSError:
                found.append(None)
        return tuple(found)

    async def _watch(self) -> None:
        """Reload when a watched file's content changes. watchfiles wakes this at once;
        its timeouts (every :data:`WATCH_POLL_MS`) also compare the contents, so a write
        made while the watch was being set up is not missed."""
        from watchfiles import awatch  # only a watching proxy needs it

        paths = sorted({str(Path(p).resolve().parent) for p in self._watched})
        async for _ in awatch(
            *paths,
            debounce=WATCH_DEBOUNCE_MS,
            recursive=False,
            yield_on_timeout=True,
            rust_timeout=WATCH_POLL_MS,
        ):
            if self._digests() != self._seen:
                await self.reload("watch")

    async def reload(self, trigger: str) -> dict[str, Any]:
        """Re-read the config and apply it, or refuse it whole; what happened, also kept
        in :attr:`last`."""
        async with self._lock:
            self._seen = self._digests()  # what this reload reads
            try:
                outcome = await self._reload()
            except ConfigError as exc:
                outcome = {"outcome": "refused", "errors": list(exc.messages)}
            outcome = {**outcome, "trigger": trigger, "at": time.time()}
            self.last = outcome
            context = self.app[CONTEXT_KEY]
            context.last_reload = outcome
            context.metrics.config_reloads.labels(outcome["outcome"]).inc()
            if outcome["outcome"] == "applied":
                log.info("config_reloaded", trigger=trigger, **outcome["changes"])
            else:
                log.warning("config_reload_refused", trigger=trigger, errors=outcome["errors"])
            return outcome

    async def _reload(self) -> dict[str, Any]:
        app = self.app
        context = app[CONTEXT_KEY]
        new = self.reread()  # ConfigError: refused, as at a start
        plan = plan_reload(context.config, new)
        if plan.refused:
            raise ConfigError(
                "these settings change only with a restart (the running config stays): "
                + ", ".join(plan.restart_only)
            )
        auth = Authenticator(new.auth)
        await auth.start()  # tokens file, JWKS: a failure refuses the reload
        self._apply(new, plan)
        auth.resource = resource_server(new, context.servers)  # their metadata, audiences
        bind(auth.resource, new, self.port)
        old_auth, app[AUTH_KEY] = app[AUTH_KEY], auth
        await old_auth.close()
        if new.log != context.config.log:
            configure_logging(new.log.format, new.log.level)
        context.config = new
        return {"outcome": "applied", "changes": plan.summary()}

    def _apply(self, new: Config, plan: ReloadPlan) -> None:
        app = self.app
        context, registry = app[CONTEXT_KEY], app[REGISTRY_KEY]
        context.settings = new.session_settings(context.settings.token_secret)
        upstreams = new.upstreams()
        for name, server in context.servers.items():
            if name not in upstreams:
                continue
            server.config = new.for_server(upstreams[name])
            app[ENDPOINTS_KEY][name].config = server.config
            app[SOCKETS_KEY][name].config = server.config
            modern = app[ENDPOINTS_KEY][name].modern
            if name in plan.changed and modern is not None:
                modern.pool.retarget(server.config)
                modern.tools.invalidate()  # the new server may list other tools
            if server.removed:  # removed by an earlier reload, back before its drain ended
                server.removed = False
        for name in plan.added:
            server = context.servers[name] = Server(name, new.for_server(upstreams[name]))
            context.metrics.watch(context.metrics.sessions.labels(name), context.counter(server))
            server_endpoints(app, server, context, registry)
            log.info("server_added", server=name, **server.eras())
        for name in plan.removed:
            server = context.servers[name]
            if not server.removed:
                server.removed = True
                log.info("server_removed", server=name, sessions=server.sessions)
                self._own(self._drain(server, new.listen.drain_seconds))
        registry.set_limits(session_limits(new, context.servers))
        app[READINESS_KEY].set_servers(context.servers, app[ENDPOINTS_KEY])

    async def _drain(self, server: Server, seconds: float) -> None:
        """Let a removed server's calls in flight finish (up to ``seconds``), then end
        what is left of it and stop serving its paths."""
        app = self.app
        context, registry = app[CONTEXT_KEY], app[REGISTRY_KEY]
        name = server.name
        endpoint = app[ENDPOINTS_KEY][name]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        in_flight = calls_in_flight(app, server)
        while in_flight() and loop.time() < deadline:
            await asyncio.sleep(POLL_SECONDS)
            if not server.removed:
                return  # a later reload put it back
        await end_sessions([r for r in registry.sessions() if r.server is server])
        if not server.removed:
            return
        if endpoint.modern is not None:
            await endpoint.modern.close()
            context.forget_server(name, endpoint.modern.close)
        else:
            context.forget_server(name, None)
        del app[ENDPOINTS_KEY][name]
        sockets = app[SOCKETS_KEY].pop(name)
        await sockets.close_all(app)
        app[READINESS_KEY].set_servers(context.servers, app[ENDPOINTS_KEY])
        log.info("server_drained", server=name)
