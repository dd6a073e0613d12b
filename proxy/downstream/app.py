"""The aiohttp application clients reach: for each configured server
``/servers/NAME/mcp`` (Streamable HTTP) and ``/servers/NAME/ws`` (MCP over WebSocket),
plus ``listen.path`` and ``/ws`` when there is exactly one; and the probes ``/healthz``,
``/readyz``, ``/metrics``. Every endpoint shares the process's
:class:`~proxy.context.ProxyContext` and its session registry; each server's modern
(2026-07-28) side is built here, beside its endpoints.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

from proxy import __version__
from proxy.context import ProxyContext
from proxy.core import cors, httprules
from proxy.core.errors import Forbidden, ProxyError, UnknownServer
from proxy.downstream.auth import PRINCIPAL, SCOPES, Authenticator, principal_of
from proxy.downstream.fast_post import FAST_KEY, FastPosts
from proxy.downstream.guard import BodyBudget
from proxy.downstream.handoff import HANDOFFS_KEY
from proxy.downstream.http import StreamableHttp
from proxy.downstream.keys import (
    AUTH_KEY,
    BODIES_KEY,
    CONTEXT_KEY,
    ENDPOINTS_KEY,
    READINESS_KEY,
    REGISTRY_KEY,
    SOCKETS_KEY,
)
from proxy.downstream.resource import add_metadata_routes, resource_server
from proxy.downstream.status import status_json, status_page
from proxy.downstream.websocket import WS_PATH, WebSocketEndpoint
from proxy.downstream.wire import error_response
from proxy.metrics import CONTENT_TYPE
from proxy.modern.endpoint import ModernFacade
from proxy.readiness import Readiness
from proxy.registry import Registry
from proxy.servers import SERVERS_PREFIX, Server

log = structlog.get_logger("proxy.http")


Probe = Callable[[web.Request], Awaitable[web.Response]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _host_checked(probe: Probe, operators_only: bool = False) -> Probe:
    """``probe`` behind the Host and Origin checks of ``/mcp`` (DNS rebinding); for what
    spans every principal (``operators_only``), also behind ``auth.operators``."""

    async def checked(request: web.Request) -> web.Response:
        config = request.app[CONTEXT_KEY].config
        listen = config.listen
        try:
            httprules.check_host(request.headers.get("Host"), listen.allowed_hosts)
            httprules.check_origin(request.headers.get("Origin"), listen.allowed_origins)
            operators = config.auth.operators
            if operators_only and operators and principal_of(request) not in operators:
                raise Forbidden(f"Forbidden: {request.path} is for auth.operators")
        except ProxyError as exc:
            log.info(
                "request_refused", path=request.path, status=exc.http_status, reason=exc.reason
            )
            return error_response(exc)
        return await probe(request)

    return checked


async def _health(request: web.Request) -> web.Response:
    """The proxy process: 200 while it serves ("ok", or "draining" after SIGTERM while
    calls in flight finish), 503 ("stopping") once it shuts down.

    The upstream's state (``ok`` / ``failing``, ``last_error``) is in the body only: one
    crashed server process must not get a proxy whose other sessions work killed by its
    orchestrator. Host and Origin are checked as on ``/mcp`` (DNS rebinding).
    """
    context = request.app[CONTEXT_KEY]
    endpoints = request.app[ENDPOINTS_KEY]
    upstreams = {}
    for name, server in context.servers.items():
        modern = endpoints[name].modern
        upstreams[name] = {
            **server.health_dict(),
            "modern": modern.health() if modern is not None else None,
        }
    ok = context.accepting
    body: dict[str, Any] = {
        "status": ("draining" if context.draining else "ok") if ok else "stopping",
        "version": __version__,
        "sessions": len(request.app[REGISTRY_KEY]),
        "buffered_bytes": context.budget.used,
        "store": context.store_health(),
        "upstreams": upstreams,
    }
    only = context.only_server
    if only is not None:  # one server: its block also where it has always been
        body["upstream"] = {k: v for k, v in upstreams[only.name].items() if k != "modern"}
        body["modern"] = upstreams[only.name]["modern"]
    return web.json_response(body, status=200 if ok else 503)


async def _metrics(request: web.Request) -> web.Response:
    """The process in Prometheus text format (proxy/metrics.py). Host and Origin are
    checked as on ``/healthz``."""
    metrics = request.app[CONTEXT_KEY].metrics
    return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE})


async def _ready(request: web.Request) -> web.Response:
    """200 when the proxy may be sent traffic, else 503 with the reasons
    (proxy/readiness.py). Host and Origin are checked as on ``/healthz``."""
    ready, body = await request.app[READINESS_KEY].check()
    return web.json_response(body, status=200 if ready else 503)


def _unknown_server(context: ProxyContext) -> Probe:
    async def refuse(request: web.Request) -> web.Response:
        known = ", ".join(server.mcp_path for server in context.servers.values())
        error = UnknownServer(f"Not Found: {request.path} names no server; try {known}")
        log.info("request_refused", path=request.path, status=404, reason=error.reason)
        return error_response(error)

    return refuse


def _by_server(
    app: web.Application, unknown: Probe, fixed: str | None = None, ws: bool = False
) -> Handler:
    """The handler of a server's path: the endpoint of the server the path names (or
    ``fixed``: ``/mcp`` and ``/ws`` serve the server that was the only one at start), looked
    up per request so that a reload (proxy/reload.py) adds and removes servers."""

    async def dispatch(request: web.Request) -> web.StreamResponse:
        name = fixed if fixed is not None else request.match_info["name"]
        endpoints = app[SOCKETS_KEY] if ws else app[ENDPOINTS_KEY]
        endpoint = endpoints.get(name)
        if endpoint is None:
            return await unknown(request)
        return await endpoint.handle(request)

    return dispatch


def _mcp_paths(app: web.Application, fixed: str | None) -> Callable[[str], bool]:
    """Whether a path is an MCP endpoint of a server being served now (CORS)."""
    listen_path = app[CONTEXT_KEY].config.listen.path

    def is_mcp(path: str) -> bool:
        if fixed is not None and path == listen_path:
            return fixed in app[ENDPOINTS_KEY]
        name, sep, rest = path.removeprefix(SERVERS_PREFIX).partition("/")
        return (
            path.startswith(SERVERS_PREFIX)
            and sep == "/"
            and rest == "mcp"
            and (name in app[ENDPOINTS_KEY])
        )

    return is_mcp


def _cors_for(
    context: ProxyContext, is_mcp: Callable[[str], bool]
) -> Callable[[web.Request, web.StreamResponse], Awaitable[None]]:
    """Browser clients (e.g. an inspector on localhost) may read responses of allowed origins."""

    async def add_cors_headers(request: web.Request, response: web.StreamResponse) -> None:
        origin = request.headers.get("Origin")
        if not origin or not is_mcp(request.path):
            return
        try:
            httprules.check_origin(origin, context.config.listen.allowed_origins)
        except ProxyError:
            return
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Expose-Headers"] = cors.EXPOSED_HEADERS
        response.headers.add("Vary", "Origin")

    return add_cors_headers


def modern_facade(server: Server, context: ProxyContext) -> ModernFacade | None:
    """``server``'s 2026-07-28 side when ``modern.enabled``, closed with the context."""
    if not server.config.modern.enabled:
        return None
    modern = ModernFacade(server, context)
    context.on_shutdown(modern.close)
    return modern


def server_endpoints(
    app: web.Application, server: Server, context: ProxyContext, registry: Registry
) -> None:
    """Serve ``server`` at its paths (at start, and when a reload adds it): its Streamable
    HTTP and WebSocket endpoints and its modern side."""
    modern = modern_facade(server, context)
    endpoint = StreamableHttp(server, context, registry, modern, app[BODIES_KEY])
    sockets = WebSocketEndpoint(server, registry)  # MCP over WebSocket
    app[ENDPOINTS_KEY][server.name] = endpoint
    app[SOCKETS_KEY][server.name] = sockets


def build_app(context: ProxyContext, registry: Registry) -> web.Application:
    """The application of one process: what it serves is built here, from the root's
    context (:func:`proxy.cli_serve.serve`) and session registry."""
    config = context.config
    auth = Authenticator(config.auth)
    app = web.Application(
        client_max_size=config.sessions.max_message_bytes, middlewares=[current_auth]
    )
    app[AUTH_KEY] = auth
    app.on_startup.append(lambda app: app[AUTH_KEY].start(app))
    app.on_cleanup.append(lambda app: app[AUTH_KEY].close(app))
    app[CONTEXT_KEY] = context
    app[REGISTRY_KEY] = registry
    app[BODIES_KEY] = BodyBudget(config.listen.max_inflight_body_bytes)
    app[ENDPOINTS_KEY] = {}
    app[SOCKETS_KEY] = {}
    for server in context.servers.values():
        server_endpoints(app, server, context, registry)
    app.on_shutdown.append(_close_sockets)  # open sockets get 1001 Going Away
    auth.resource = resource_server(config, context.servers)
    add_metadata_routes(app)  # RFC 9728 documents, open (docs/auth.md)
    unknown = _unknown_server(context)
    only = context.only_server
    fixed = only.name if only is not None else None
    if fixed is not None:  # one server: also where clients have always found it
        app.router.add_route("*", config.listen.path, _by_server(app, unknown, fixed))
        app.router.add_route("*", WS_PATH, _by_server(app, unknown, fixed, ws=True))
    else:  # paths that name no server get a JSON-RPC 404 saying which ones there are
        app.router.add_route("*", config.listen.path, unknown)
        app.router.add_route("*", WS_PATH, unknown)
    app.router.add_route("*", SERVERS_PREFIX + "{name}/mcp", _by_server(app, unknown))
    app.router.add_route("*", SERVERS_PREFIX + "{name}/ws", _by_server(app, unknown, ws=True))
    app.router.add_route("*", SERVERS_PREFIX + "{name}", unknown)
    app.router.add_route("*", SERVERS_PREFIX + "{name}/{rest:.*}", unknown)
    app.on_response_prepare.append(_cors_for(context, _mcp_paths(app, fixed)))
    fast = app[FAST_KEY] = FastPosts(  # the common POST (fast_post.py)
        app[ENDPOINTS_KEY], lambda: app[AUTH_KEY].enabled, fixed, config.listen.path
    )
    app[HANDOFFS_KEY] = fast.handoffs
    pools = {
        n: e.modern.pool if e.modern is not None else None for n, e in app[ENDPOINTS_KEY].items()
    }
    app[READINESS_KEY] = Readiness(context, pools)
    app.router.add_get("/healthz", _host_checked(_health))
    app.router.add_get("/metrics", _host_checked(_metrics, operators_only=True))
    app.router.add_get("/readyz", _host_checked(_ready))
    app.router.add_get("/status", _host_checked(status_page, operators_only=True))
    app.router.add_get("/status.json", _host_checked(status_json, operators_only=True))
    return app


async def _close_sockets(app: web.Application) -> None:
    for sockets in list(app[SOCKETS_KEY].values()):
        await sockets.close_all(app)


@web.middleware
async def current_auth(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Authentication by the app's authenticator of the moment (a reload replaces it).

    With authentication off the request goes straight on (one coroutine frame, not two),
    marked as having no principal and no scopes (so that reading them raises nothing)."""
    auth = request.app[AUTH_KEY]
    if not auth.enabled:
        request[PRINCIPAL] = request[SCOPES] = None
        return await handler(request)
    return await auth.middleware(request, handler)
