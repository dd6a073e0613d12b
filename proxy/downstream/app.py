"""The aiohttp application clients reach: ``/mcp`` (Streamable HTTP), ``/ws`` (MCP over
WebSocket) and ``/healthz``, sharing one session registry.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web

from proxy import __version__
from proxy.config import Config
from proxy.core import httprules
from proxy.core.errors import ProxyError
from proxy.core.protocol import SESSION_HEADER
from proxy.downstream.auth import Authenticator
from proxy.downstream.http import StreamableHttp
from proxy.downstream.websocket import WS_PATH, WebSocketEndpoint
from proxy.downstream.wire import error_response
from proxy.metrics import CONTENT_TYPE
from proxy.readiness import Readiness
from proxy.registry import Registry

log = structlog.get_logger("proxy.http")

REGISTRY_KEY = web.AppKey("registry", Registry)
ENDPOINT_KEY = web.AppKey("endpoint", StreamableHttp)
READINESS_KEY = web.AppKey("readiness", Readiness)
AUTH_KEY = web.AppKey("auth", Authenticator)


Probe = Callable[[web.Request], Awaitable[web.Response]]


def _host_checked(probe: Probe) -> Probe:
    """``probe`` behind the Host and Origin checks of ``/mcp`` (DNS rebinding)."""

    async def checked(request: web.Request) -> web.Response:
        listen = request.app[REGISTRY_KEY].config.listen
        try:
            httprules.check_host(request.headers.get("Host"), listen.allowed_hosts)
            httprules.check_origin(request.headers.get("Origin"), listen.allowed_origins)
        except ProxyError as exc:
            log.info(
                "request_refused", path=request.path, status=exc.http_status, reason=exc.reason
            )
            return error_response(exc)
        return await probe(request)

    return checked


async def _health(request: web.Request) -> web.Response:
    """The proxy process: 200 while it serves, 503 ("stopping") once it shuts down.

    The upstream's state (``ok`` / ``failing``, ``last_error``) is in the body only: one
    crashed server process must not get a proxy whose other sessions work killed by its
    orchestrator. Host and Origin are checked as on ``/mcp`` (DNS rebinding).
    """
    registry = request.app[REGISTRY_KEY]
    upstream = registry.health.as_dict()
    modern = request.app[ENDPOINT_KEY].modern
    ok = registry.accepting
    return web.json_response(
        {
            "status": "ok" if ok else "stopping",
            "version": __version__,
            "sessions": len(registry),
            "buffered_bytes": registry.budget.used,
            "upstream": {"transport": registry.config.upstream.kind, **upstream},
            "store": registry.store_health(),
            "modern": modern.health() if modern is not None else None,
        },
        status=200 if ok else 503,
    )


async def _metrics(request: web.Request) -> web.Response:
    """The process in Prometheus text format (proxy/metrics.py). Host and Origin are
    checked as on ``/healthz``."""
    registry = request.app[REGISTRY_KEY]
    return web.Response(body=registry.metrics.render(), headers={"Content-Type": CONTENT_TYPE})


async def _ready(request: web.Request) -> web.Response:
    """200 when the proxy may be sent traffic, else 503 with the reasons
    (proxy/readiness.py). Host and Origin are checked as on ``/healthz``."""
    ready, body = await request.app[READINESS_KEY].check()
    return web.json_response(body, status=200 if ready else 503)


def _cors_for(
    config: Config,
) -> Callable[[web.Request, web.StreamResponse], Awaitable[None]]:
    """Browser clients (e.g. an inspector on localhost) may read responses of allowed origins."""

    async def add_cors_headers(request: web.Request, response: web.StreamResponse) -> None:
        origin = request.headers.get("Origin")
        if not origin or request.path != config.listen.path:
            return
        try:
            httprules.check_origin(origin, config.listen.allowed_origins)
        except ProxyError:
            return
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Expose-Headers"] = SESSION_HEADER
        response.headers.add("Vary", "Origin")

    return add_cors_headers


def build_app(config: Config, registry: Registry) -> web.Application:
    auth = Authenticator(config.auth)
    app = web.Application(
        client_max_size=config.sessions.max_message_bytes, middlewares=[auth.middleware]
    )
    app[AUTH_KEY] = auth
    app.on_startup.append(auth.start)
    app.on_cleanup.append(auth.close)
    app.on_response_prepare.append(_cors_for(config))
    app[REGISTRY_KEY] = registry
    endpoint = StreamableHttp(config, registry)
    app[ENDPOINT_KEY] = endpoint
    pool = endpoint.modern.pool if endpoint.modern is not None else None
    app[READINESS_KEY] = Readiness(registry, pool)
    app.router.add_route("*", config.listen.path, endpoint.handle)
    sockets = WebSocketEndpoint(config, registry)  # MCP over WebSocket (D2 over WebSocket)
    app.router.add_route("*", WS_PATH, sockets.handle)
    app.on_shutdown.append(sockets.close_all)  # open sockets get 1001 Going Away
    app.router.add_get("/healthz", _host_checked(_health))
    app.router.add_get("/metrics", _host_checked(_metrics))
    app.router.add_get("/readyz", _host_checked(_ready))
    return app
