"""The resource-server role on HTTP (docs/auth.md): the :class:`ResourceServer` of a
config, and its protected-resource metadata documents (RFC 9728 §3), served open (no
credential: a client reads them to learn how to get one) and readable by any origin
(they hold nothing secret and never depend on the request's ``Host``).
"""

from __future__ import annotations

from aiohttp import web

from proxy.config import Config
from proxy.config_resource import public_base, resource_server_on
from proxy.core.errors import UnknownServer
from proxy.core.protected_resource import WELL_KNOWN, ProtectedServer, ResourceServer
from proxy.downstream.keys import AUTH_KEY
from proxy.downstream.websocket import WS_PATH
from proxy.downstream.wire import error_response
from proxy.servers import Server

_CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET",
    "Access-Control-Allow-Headers": "MCP-Protocol-Version",
}


def resource_server(config: Config, servers: dict[str, Server]) -> ResourceServer | None:
    """The role's decisions for ``config`` (None: the role is off). The base URL is known
    now from ``auth.resource.public_url``, else once the proxy listens (:func:`bind`)."""
    if not resource_server_on(config.auth):
        return None
    only = next(iter(servers.values())) if len(servers) == 1 else None
    protected = {}
    for name, server in servers.items():
        mcp = (server.mcp_path, config.listen.path) if server is only else (server.mcp_path,)
        ws = (server.ws_path, WS_PATH) if server is only else (server.ws_path,)
        up = server.upstream
        named = [
            rule.scope for rules in (up.tools, up.prompts, up.resources) for rule in rules.require
        ]
        protected[name] = ProtectedServer(
            mcp, ws, tuple(up.required_scopes), tuple(dict.fromkeys(named))
        )
    jwt, resource = config.auth.jwt, config.auth.resource
    assert jwt.issuer is not None
    return ResourceServer(
        authorization_servers=tuple(resource.authorization_servers or [jwt.issuer]),
        servers=protected,
        scopes_supported=tuple(resource.scopes_supported),
        required_scopes=tuple(jwt.required_scopes),
        audiences=tuple(resource.audiences) + ((jwt.audience,) if jwt.audience else ()),
        base=public_base(config.auth, config.listen.host, 0) if resource.public_url else None,
    )


def bind(resource: ResourceServer | None, config: Config, port: int) -> None:
    """Once the proxy listens on ``port``: the base URL when no public_url gives it."""
    if resource is not None and resource.base is None:
        resource.base = public_base(config.auth, config.listen.host, port)


def add_metadata_routes(app: web.Application) -> None:
    """``GET`` (and the CORS preflight) of the root document and of each server's, by the
    authenticator of the moment (a reload may turn the role on or off, or add servers);
    404 while the role is off."""

    async def serve(request: web.Request) -> web.Response:
        if request.method == "OPTIONS":
            return web.Response(status=204, headers=_CORS)
        resource = request.app[AUTH_KEY].resource
        if resource is None:
            off = UnknownServer(
                f"Not Found: {request.path}: this proxy is not an OAuth resource server "
                "(auth.jwt.issuer is not set)"
            )
            return error_response(off, _CORS)
        document = resource.metadata(request.path)
        if document is None:
            known = ", ".join(WELL_KNOWN + s.mcp_paths[0] for s in resource.servers.values())
            error = UnknownServer(f"Not Found: no metadata at {request.path}; try {known}")
            return error_response(error, _CORS)
        return web.json_response(
            document, headers={**_CORS, "Cache-Control": "public, max-age=300"}
        )

    app.router.add_route("GET", WELL_KNOWN, serve)
    app.router.add_route("OPTIONS", WELL_KNOWN, serve)
    app.router.add_route("GET", WELL_KNOWN + "/{rest:.*}", serve)
    app.router.add_route("OPTIONS", WELL_KNOWN + "/{rest:.*}", serve)
